//! The server's metrics (docs/SERVING.md, "Metrics"), recorded through the `metrics`
//! facade and rendered as Prometheus text by `metrics-exporter-prometheus`.

use crate::error::{Error, Result};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Requests answered, by endpoint and status.
pub const REQUESTS: &str = "towerrec_serve_requests_total";
/// Requests refused or failed, by reason ([`Error::reason`]).
pub const ERRORS: &str = "towerrec_serve_request_errors_total";
/// Seconds from a `/score` request's arrival to its answer.
pub const LATENCY: &str = "towerrec_serve_request_duration_seconds";
/// Rows per scored request.
pub const REQUEST_ROWS: &str = "towerrec_serve_request_rows";
/// Rows per scored micro-batch.
pub const BATCH_ROWS: &str = "towerrec_serve_batch_rows";
/// Requests per scored micro-batch.
pub const BATCH_REQUESTS: &str = "towerrec_serve_batch_requests";
/// Sharded serving: bytes a micro-batch's embedding exchange moved, by `link`.
pub const BATCH_LOOKUP_BYTES: &str = "towerrec_serve_batch_lookup_bytes";
/// Sharded serving: bytes moved between ranks, by `link` and `what` (lookup, gather).
pub const BATCH_BYTES: &str = "towerrec_serve_bytes_total";
/// `/score` requests being handled now.
pub const IN_FLIGHT: &str = "towerrec_serve_in_flight_requests";

/// Latency buckets, seconds: 0.25 ms to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];
/// Row-count buckets: powers of two to 64k.
const ROW_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0,
];

/// Byte buckets: powers of four from 1 KiB to 1 GiB.
const BYTE_BUCKETS: &[f64] = &[
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
];

/// The process's Prometheus recorder, installed on first use (the `metrics` facade has
/// one recorder per process).
pub fn handle() -> Result<PrometheusHandle> {
    static HANDLE: OnceLock<std::result::Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let rows = Matcher::Suffix("_rows".into());
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(LATENCY.into()), LATENCY_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(rows, ROW_BUCKETS))
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(BATCH_REQUESTS.into()), ROW_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(BATCH_LOOKUP_BYTES.into()), BYTE_BUCKETS)
                })
                .map_err(|e| e.to_string())?
                .install_recorder()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| Error::Server(format!("installing the metrics recorder: {e}")))
}
