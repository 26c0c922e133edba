//! `towerrec serve`: an HTTP scoring service over a checkpoint (docs/SERVING.md).

use crate::commands::{check_threads, recover_run_dir, set_threads};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use towerrec_comm::Topology;
use towerrec_data::RowEncoder;
use towerrec_plan::Plan;
use towerrec_serve::{
    BatchLimits, Limits, ModelScorer, Options, RequestParser, Scorer, ShardedScorer,
};
use towerrec_train::checkpoint::Checkpoint;
use towerrec_train::cluster::resolve_plan;

/// The environment variable a bearer token may come from (never a flag: command lines
/// are visible to every user of the machine).
pub const TOKEN_ENV: &str = "TOWERREC_SERVE_TOKEN";

#[derive(Args)]
pub struct ServeArgs {
    /// A checkpoint file, or a run directory holding checkpoint.safetensors.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Address and port to listen on; port 0 takes a free port (printed at start).
    /// Another host than 127.0.0.1 exposes the service beyond this machine.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Micro-batching: the most rows scored together.
    #[arg(long, default_value_t = 1024)]
    max_batch_rows: usize,
    /// Micro-batching: how long (ms) the first request of a batch waits for others.
    #[arg(long, default_value_t = 1.0)]
    max_wait_ms: f64,
    /// Requests waiting to be scored before new ones get 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// The most rows one request may score (more: 413).
    #[arg(long, default_value_t = 4096)]
    max_request_rows: usize,
    /// The largest request body, bytes (larger: 413).
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// `/score` requests handled at once; one more gets 503.
    #[arg(long, default_value_t = 64)]
    max_concurrency: usize,
    /// How long (ms) a client may take to send its headers, and then its body (408).
    #[arg(long, default_value_t = 10_000)]
    read_timeout_ms: u64,
    /// On SIGTERM or SIGINT: how long (s) in-flight requests may take to finish.
    #[arg(long, default_value_t = 30)]
    drain_timeout_s: u64,
    /// A file holding the bearer token every endpoint but /health requires [default:
    /// the environment's TOWERREC_SERVE_TOKEN, else no token].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Scoring threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Threads that read and parse requests.
    #[arg(long, default_value_t = 1)]
    http_threads: usize,
    /// Sharded serving: hosts of an in-process cluster (with --ranks-per-host; default
    /// 1: one process's model).
    #[arg(long)]
    hosts: Option<usize>,
    /// Sharded serving: ranks per host.
    #[arg(long)]
    ranks_per_host: Option<usize>,
    /// Sharded serving: the sharding plan (JSON from `towerrec plan`, OPER's inference
    /// plans included) [default: the run's towers on the default planner, else greedy].
    #[arg(long)]
    plan: Option<PathBuf>,
}

/// The token from `--token-file` or the environment.
fn token(a: &ServeArgs) -> Result<Option<String>> {
    let (token, from) = match &a.token_file {
        Some(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("--token-file {}", path.display()))?,
            format!("--token-file {}", path.display()),
        ),
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) => (t, TOKEN_ENV.to_string()),
            Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(e) => bail!("{TOKEN_ENV}: {e}"),
        },
    };
    let token = token.trim_end_matches(['\n', '\r']).to_string();
    if token.is_empty() {
        bail!("{from}: the token is empty");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("{from}: a token is printable ASCII without spaces (it travels in a header)");
    }
    Ok(Some(token))
}

pub fn run(a: ServeArgs) -> Result<()> {
    set_threads(check_threads(a.threads.unwrap_or(0), "--threads")?)?;
    check_threads(a.http_threads, "--http-threads")?;
    if a.max_batch_rows == 0 || a.max_request_rows == 0 || a.max_concurrency == 0 || a.queue == 0 {
        bail!("--max-batch-rows, --max-request-rows, --max-concurrency and --queue must be at least 1");
    }
    if !(a.max_wait_ms.is_finite() && (0.0..=10_000.0).contains(&a.max_wait_ms)) {
        bail!(
            "--max-wait-ms: must be between 0 and 10000, got {}",
            a.max_wait_ms
        );
    }
    let token = token(&a)?;
    recover_run_dir(&a.checkpoint)?;
    let ckpt_path = towerrec_train::checkpoint::resolve(&a.checkpoint);
    let ckpt = Checkpoint::read(&ckpt_path)?;
    let cfg = ckpt.config()?;
    let encoder = RowEncoder::new(&cfg.data, &cfg.base_dir)
        .with_context(|| format!("serving {}", ckpt_path.display()))?;
    let threads = match a.threads {
        Some(t) if t > 0 => t,
        _ => crate::commands::num_cores(),
    };
    let (scorer, kind): (Box<dyn Scorer>, String) = match (a.hosts, a.ranks_per_host) {
        (None, None) if a.plan.is_none() => {
            let model = ckpt.restore(&cfg, encoder.schema())?;
            let kind = format!("{:?}", model.kind());
            (Box::new(ModelScorer::new(model)), kind)
        }
        (hosts, ranks) => {
            let topology = Topology::new(hosts.unwrap_or(1), ranks.unwrap_or(1))?;
            cfg.refuse_int8("sharded serving")?;
            let plan = a
                .plan
                .as_ref()
                .map(|p| Plan::load(p).with_context(|| format!("--plan {}", p.display())))
                .transpose()?;
            let recorded = ckpt.towers()?;
            let schema = encoder.schema().clone();
            let plan = resolve_plan(&cfg, &schema, topology, plan, recorded.as_deref())?;
            let kind = format!(
                "{:?} on {} hosts × {} ranks",
                cfg.model.kind, topology.hosts, topology.ranks_per_host
            );
            let per_rank = (threads / topology.world_size()).max(1);
            let scorer = ShardedScorer::start(
                cfg.clone(),
                Arc::new(ckpt),
                schema,
                topology,
                plan,
                per_rank,
            )?;
            (Box::new(scorer), kind)
        }
    };
    let listener =
        std::net::TcpListener::bind(a.listen).with_context(|| format!("--listen {}", a.listen))?;
    let addr = listener.local_addr().context("the listening address")?;
    if !addr.ip().is_loopback() && token.is_none() {
        eprintln!(
            "warning: listening on {addr}, beyond this machine, without a token \
             (--token-file or {TOKEN_ENV})"
        );
    }
    let opts = Options {
        batch: BatchLimits {
            max_rows: a.max_batch_rows,
            max_wait: Duration::from_secs_f64(a.max_wait_ms / 1e3),
            queue: a.queue,
        },
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_request_rows: a.max_request_rows,
            max_concurrency: a.max_concurrency,
            read_timeout: Duration::from_millis(a.read_timeout_ms),
            drain_timeout: Duration::from_secs(a.drain_timeout_s),
        },
        token,
        http_threads: a.http_threads,
    };
    let columns = encoder.columns().len();
    println!(
        "towerrec serve: {kind} from {} ({columns} columns; micro-batches of up to {} rows, \
         {} ms wait); listening on http://{addr}",
        ckpt_path.display(),
        a.max_batch_rows,
        a.max_wait_ms
    );
    std::io::stdout().flush().ok();
    let parser = RequestParser::new(encoder);
    let summary = towerrec_serve::serve(listener, parser, scorer, &opts, None)?;
    println!(
        "towerrec serve: stopped after scoring {} requests ({} rows)",
        summary.requests, summary.rows
    );
    if !summary.drained {
        bail!(
            "in-flight requests did not finish within --drain-timeout-s {}; their connections \
             were closed",
            a.drain_timeout_s
        );
    }
    Ok(())
}
