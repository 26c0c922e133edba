//! towerrec-serve: `towerrec serve`, an HTTP scoring service over a trained model
//! (docs/SERVING.md).
//!
//! - [`request`]: a `POST /score` body (JSON rows by column name, or lines of the
//!   training file's format) into a batch, encoded as the training data were.
//! - [`batcher`]: dynamic micro-batching onto one scoring thread that owns the
//!   [`batcher::Scorer`].
//! - [`scorer`]: one process's model; [`sharded`]: the ranks of an in-process cluster
//!   scoring together under a sharding plan.
//! - [`http`]: the routes (`/score`, `/health`, `/metrics`), limits, the bearer token,
//!   and graceful shutdown.
//! - [`metrics`]: the Prometheus metrics.
//!
//! Safe by default: the CLI listens on 127.0.0.1 unless told otherwise, and no request
//! names a file.

pub mod batcher;
pub mod error;
pub mod http;
pub mod metrics;
pub mod request;
pub mod scorer;
pub mod sharded;

pub use batcher::{BatchLimits, Batcher, Scorer};
pub use error::{Error, Result};
pub use http::Limits;
pub use request::RequestParser;
pub use scorer::ModelScorer;
pub use sharded::{BatchBytes, ShardedScorer};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub batch: BatchLimits,
    pub limits: Limits,
    /// The bearer token every endpoint but `/health` requires; `None`: no token.
    pub token: Option<String>,
    /// Threads handling connections (parsing requests); scoring has its own.
    pub http_threads: usize,
}

/// What a finished server did.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Requests scored, and their rows.
    pub requests: u64,
    pub rows: u64,
    /// Whether every in-flight request finished within the drain timeout.
    pub drained: bool,
}

/// Serves `listener` (already bound) with `parser` and `scorer` until SIGTERM or
/// SIGINT, or until `stop` fires; then drains in-flight requests and stops scoring.
pub fn serve(
    listener: std::net::TcpListener,
    parser: RequestParser,
    scorer: Box<dyn Scorer>,
    opts: &Options,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<Summary> {
    let metrics = metrics::handle()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.http_threads.max(1))
        .thread_name("towerrec-http")
        .enable_all()
        .build()
        .map_err(|e| Error::Server(format!("starting the HTTP runtime: {e}")))?;
    let app = Arc::new(http::App {
        parser,
        batcher: Batcher::start(scorer, opts.batch)?,
        limits: opts.limits,
        token: opts.token.as_ref().map(|t| t.as_bytes().to_vec()),
        permits: Arc::new(Semaphore::new(opts.limits.max_concurrency.max(1))),
        metrics,
        scored: AtomicU64::new(0),
        rows: AtomicU64::new(0),
    });
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Server(format!("the listening socket: {e}")))?;
    let drained = runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::Server(format!("the listening socket: {e}")))?;
        let shutdown = shutdown_signal(stop)?;
        Ok::<_, Error>(http::run(listener, app.clone(), shutdown).await)
    })?;
    // In-flight requests have their scores; score what is queued and stop.
    app.batcher.stop();
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(Summary {
        requests: app.scored.load(Ordering::Relaxed),
        rows: app.rows.load(Ordering::Relaxed),
        drained,
    })
}

/// Resolves on SIGTERM, SIGINT or `stop`.
fn shutdown_signal(
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::Server(format!("listening for SIGTERM: {e}")))?;
    Ok(async move {
        let stop = async {
            match stop {
                Some(rx) => {
                    let _ = rx.await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        let term = term.recv();
        #[cfg(not(unix))]
        let term = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = term => {}
            _ = tokio::signal::ctrl_c() => {}
            () = stop => {}
        }
    })
}
