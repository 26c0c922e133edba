//! The HTTP side (docs/SERVING.md, "Endpoints" and "Limits"): axum routes served by
//! hyper's HTTP/1.1 connections on tokio, each connection watched so that a shutdown
//! lets in-flight requests finish.

use crate::batcher::Batcher;
use crate::error::{Error, Result};
use crate::metrics::{ERRORS, IN_FLIGHT, LATENCY, REQUESTS, REQUEST_ROWS};
use crate::request::{BodyKind, RequestParser};
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use towerrec_core::layers::activation::sigmoid;

/// What one request may ask of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest body, bytes (larger: 413).
    pub max_body_bytes: usize,
    /// The most rows one request may score (more: 413).
    pub max_request_rows: usize,
    /// `/score` requests handled at once; one more gets 503.
    pub max_concurrency: usize,
    /// How long a client may take to send its headers, and then its body (else 408,
    /// or the connection closed while headers are still incomplete).
    pub read_timeout: Duration,
    /// How long a shutdown waits for in-flight requests before closing their
    /// connections.
    pub drain_timeout: Duration,
}

/// What every request handler shares.
pub struct App {
    pub(crate) parser: RequestParser,
    pub(crate) batcher: Batcher,
    pub(crate) limits: Limits,
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) metrics: PrometheusHandle,
    /// Requests scored, and their rows.
    pub(crate) scored: AtomicU64,
    pub(crate) rows: AtomicU64,
}

impl App {
    /// Ok where no token is set or the request carries it.
    fn authorize(&self, headers: &HeaderMap) -> Result<()> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        match given {
            Some(g) if same(g, token) => Ok(()),
            _ => Err(Error::Unauthorized),
        }
    }

    /// A `/score` request's probabilities.
    async fn score(&self, headers: &HeaderMap, body: Body) -> Result<Vec<f32>> {
        self.authorize(headers)?;
        let _permit = self.permits.clone().try_acquire_owned().map_err(|_| {
            Error::Overloaded(format!(
                "{} requests are being scored (--max-concurrency); retry later",
                self.limits.max_concurrency
            ))
        })?;
        let kind = BodyKind::of(headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()))?;
        let limit = self.limits.max_body_bytes;
        let declared = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large(limit));
        }
        let timeout = self.limits.read_timeout;
        let body = tokio::time::timeout(timeout, Limited::new(body, limit).collect())
            .await
            .map_err(|_| {
                Error::Timeout(format!(
                    "the body did not arrive within {} ms (--read-timeout-ms)",
                    timeout.as_millis()
                ))
            })?
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    too_large(limit)
                } else {
                    Error::BadRequest(format!("reading the body: {e}"))
                }
            })?
            .to_bytes();
        let batch = self
            .parser
            .parse(kind, &body, self.limits.max_request_rows)?;
        let n = batch.batch_size();
        let logits = self.batcher.score(batch).await?;
        metrics::histogram!(REQUEST_ROWS).record(n as f64);
        self.scored.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(n as u64, Ordering::Relaxed);
        Ok(logits.into_iter().map(sigmoid).collect())
    }
}

fn too_large(limit: usize) -> Error {
    Error::TooLarge(format!(
        "the body is larger than {limit} bytes (--max-body-bytes)"
    ))
}

/// Equal bytes, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `{"error": message}` with the error's status (and `Retry-After` on 503, the
/// challenge on 401).
fn error_response(e: &Error) -> Response {
    let body = serde_json::json!({ "error": e.to_string() }).to_string();
    let mut r = (e.status(), [(CONTENT_TYPE, "application/json")], body).into_response();
    match e {
        Error::Overloaded(_) => {
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        Error::Unauthorized => {
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        _ => {}
    }
    r
}

fn counted(endpoint: &'static str, r: Response) -> Response {
    metrics::counter!(REQUESTS, "endpoint" => endpoint, "status" => r.status().as_str().to_string())
        .increment(1);
    r
}

fn failed(endpoint: &'static str, e: &Error) -> Response {
    metrics::counter!(ERRORS, "reason" => e.reason()).increment(1);
    counted(endpoint, error_response(e))
}

async fn score(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let start = Instant::now();
    metrics::gauge!(IN_FLIGHT).increment(1.0);
    let result = app.score(&headers, body).await;
    metrics::gauge!(IN_FLIGHT).decrement(1.0);
    match result {
        Ok(probs) => {
            metrics::histogram!(LATENCY).record(start.elapsed().as_secs_f64());
            let body = serde_json::json!({ "scores": probs }).to_string();
            counted(
                "/score",
                ([(CONTENT_TYPE, "application/json")], body).into_response(),
            )
        }
        Err(e) => failed("/score", &e),
    }
}

async fn health() -> Response {
    counted(
        "/health",
        ([(CONTENT_TYPE, "application/json")], "{\"status\":\"ok\"}").into_response(),
    )
}

async fn metrics_text(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return failed("/metrics", &e);
    }
    let text = app.metrics.render();
    counted(
        "/metrics",
        ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
    )
}

async fn not_found() -> Response {
    let e = Error::BadRequest("no such endpoint: POST /score, GET /health, GET /metrics".into());
    let mut r = error_response(&e);
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// The routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/score", post(score))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .with_state(app)
}

/// Serves `listener` until `shutdown` resolves, then stops accepting and waits up to
/// the drain timeout for the open connections' requests to finish. Returns whether
/// they all finished in time.
pub async fn run(listener: TcpListener, app: Arc<App>, shutdown: impl Future<Output = ()>) -> bool {
    let routes = router(app.clone());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(app.limits.read_timeout);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: say so, go on.
                        eprintln!("serve: accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(routes.clone());
                let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(app.limits.drain_timeout) => false,
    }
}
