//! A load generator for `towerrec serve` (docs/SERVING.md, "Speed"), loopback only and
//! bounded in requests and time. Built as an example of towerrec-serve:
//!
//! ```text
//! cargo run --release -p towerrec-serve --example loadgen -- \
//!     --addr 127.0.0.1:8080 --rows rows.tsv --rows-per-request 256 closed --connections 8
//! cargo run --release -p towerrec-serve --example loadgen -- \
//!     --addr 127.0.0.1:8080 --rows rows.tsv --rows-per-request 256 open --rate 100
//! ```
//!
//! - `closed --connections C`: C connections, each sending its next request when the
//!   last is answered (throughput at saturation).
//! - `open --rate R`: requests sent at R per second on a fixed schedule, whatever the
//!   answers; latency counts from the scheduled time, so a slow server is not hidden
//!   by requests waiting to be sent (no coordinated omission). Up to 256 connections.
//!
//! Requests are lines of the rows file (text/plain), `--rows-per-request` each, taken
//! round-robin. Prints one JSON line: requests, statuses, throughput (requests and rows
//! per second), latency percentiles (ms), and the CPU seconds this process used (its
//! share of the machine), and with `--server-pid` the server's.
//! The token, where the server wants one, comes from TOWERREC_SERVE_TOKEN.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

struct Args {
    addr: SocketAddr,
    rows: String,
    rows_per_request: usize,
    duration: Duration,
    max_requests: u64,
    server_pid: Option<u32>,
    mode: Mode,
}

enum Mode {
    Closed { connections: usize },
    Open { rate: f64 },
}

const USAGE: &str = "usage: loadgen --addr 127.0.0.1:PORT --rows FILE [--rows-per-request N] \
    [--duration-s S (<= 120)] [--max-requests N (<= 10^7)] [--server-pid PID] \
    (closed --connections C | open --rate R)";

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut addr, mut rows, mut per, mut dur, mut max, mut pid, mut mode) =
        (None, None, 1usize, 10.0f64, 1_000_000u64, None, None);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--addr" => {
                addr = Some(
                    val("--addr")?
                        .parse::<SocketAddr>()
                        .map_err(|e| e.to_string())?,
                )
            }
            "--rows" => rows = Some(val("--rows")?),
            "--rows-per-request" => {
                per = val("--rows-per-request")?
                    .parse()
                    .map_err(|e| format!("--rows-per-request: {e}"))?
            }
            "--duration-s" => {
                dur = val("--duration-s")?
                    .parse()
                    .map_err(|e| format!("--duration-s: {e}"))?
            }
            "--max-requests" => {
                max = val("--max-requests")?
                    .parse()
                    .map_err(|e| format!("--max-requests: {e}"))?
            }
            "--server-pid" => {
                pid = Some(
                    val("--server-pid")?
                        .parse()
                        .map_err(|e| format!("--server-pid: {e}"))?,
                )
            }
            "closed" => {
                let flag = it.next();
                let n = it.next();
                match (flag.as_deref(), n.and_then(|n| n.parse().ok())) {
                    (Some("--connections"), Some(c)) if (1..=256).contains(&c) => {
                        mode = Some(Mode::Closed { connections: c })
                    }
                    _ => return Err("closed --connections C (1 to 256)".into()),
                }
            }
            "open" => {
                let flag = it.next();
                let r = it.next();
                match (flag.as_deref(), r.and_then(|r| r.parse::<f64>().ok())) {
                    (Some("--rate"), Some(r)) if r > 0.0 && r <= 1e6 => {
                        mode = Some(Mode::Open { rate: r })
                    }
                    _ => return Err("open --rate R (requests per second, up to 10^6)".into()),
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let addr = addr.ok_or("--addr is required")?;
    if !addr.ip().is_loopback() {
        return Err(format!("--addr {addr}: loopback only (127.0.0.1 or ::1)"));
    }
    if !(dur > 0.0 && dur <= 120.0) || max == 0 || max > 10_000_000 || per == 0 {
        return Err(
            "--duration-s must be in (0, 120], --max-requests in 1..=10^7, --rows-per-request >= 1"
                .into(),
        );
    }
    let path = rows.ok_or("--rows is required")?;
    let rows = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok(Args {
        addr,
        rows,
        rows_per_request: per,
        duration: Duration::from_secs_f64(dur),
        max_requests: max,
        server_pid: pid,
        mode: mode.ok_or("closed or open is required")?,
    })
}

/// The request bodies: `per` lines each, round-robin over the file.
fn bodies(rows: &str, per: usize) -> Vec<Bytes> {
    let lines: Vec<&str> = rows.lines().filter(|l| !l.trim().is_empty()).collect();
    let n = (lines.len() / per).clamp(1, 1024);
    (0..n)
        .map(|i| {
            let mut s = String::new();
            for k in 0..per {
                s += lines[(i * per + k) % lines.len()];
                s.push('\n');
            }
            Bytes::from(s)
        })
        .collect()
}

async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One request; its status (0: the connection failed).
async fn send(sender: &mut Sender, addr: SocketAddr, body: Bytes, token: &Option<String>) -> u16 {
    let mut req = Request::post("/score")
        .header("Host", addr.to_string())
        .header("Content-Type", "text/plain");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let Ok(req) = req.body(Full::new(body)) else {
        return 0;
    };
    if sender.ready().await.is_err() {
        return 0;
    }
    match sender.send_request(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            // Read the body: the answer is complete only then.
            match resp.into_body().collect().await {
                Ok(_) => status,
                Err(_) => 0,
            }
        }
        Err(_) => 0,
    }
}

#[derive(Default)]
struct Record {
    latencies: Vec<f64>,
    statuses: std::collections::BTreeMap<u16, u64>,
}

fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".into(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = stat.rsplit(')').next()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf with a valid name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run(a: Args) -> Result<String, String> {
    let token = std::env::var("TOWERREC_SERVE_TOKEN").ok();
    let bodies = Arc::new(bodies(&a.rows, a.rows_per_request));
    let record = Arc::new(Mutex::new(Record::default()));
    let (cpu0, server0) = (cpu_seconds(None), cpu_seconds(a.server_pid));
    let start = Instant::now();
    let deadline = start + a.duration;
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    match a.mode {
        Mode::Closed { connections } => {
            let mut tasks = Vec::new();
            for c in 0..connections {
                let (bodies, record, token, sent) =
                    (bodies.clone(), record.clone(), token.clone(), sent.clone());
                let mut sender = connect(a.addr).await?;
                let (addr, max) = (a.addr, a.max_requests);
                tasks.push(tokio::spawn(async move {
                    let mut i = c;
                    while Instant::now() < deadline
                        && sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < max
                    {
                        let t = Instant::now();
                        let status =
                            send(&mut sender, addr, bodies[i % bodies.len()].clone(), &token).await;
                        if status == 0 {
                            // The connection failed: reconnect for the next request.
                            if let Ok(s) = connect(addr).await {
                                sender = s;
                            }
                        }
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        let mut r = record.lock().await;
                        if status == 200 {
                            r.latencies.push(ms);
                        }
                        *r.statuses.entry(status).or_default() += 1;
                        i += connections;
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        }
        Mode::Open { rate } => {
            let pool: Arc<Mutex<Vec<Sender>>> = Arc::new(Mutex::new(Vec::new()));
            let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tasks = Vec::new();
            let mut i: u64 = 0;
            loop {
                let at = start + Duration::from_secs_f64(i as f64 / rate);
                if at >= deadline || i >= a.max_requests {
                    break;
                }
                tokio::time::sleep_until(at.into()).await;
                let (bodies, record, token, pool, open) = (
                    bodies.clone(),
                    record.clone(),
                    token.clone(),
                    pool.clone(),
                    open.clone(),
                );
                let addr = a.addr;
                tasks.push(tokio::spawn(async move {
                    let taken = pool.lock().await.pop();
                    let sender = match taken {
                        Some(s) => Some(s),
                        None if open.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 256 => {
                            connect(addr).await.ok()
                        }
                        None => {
                            open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                            None
                        }
                    };
                    let status = match sender {
                        Some(mut s) => {
                            let status = send(
                                &mut s,
                                addr,
                                bodies[i as usize % bodies.len()].clone(),
                                &token,
                            )
                            .await;
                            if status != 0 {
                                pool.lock().await.push(s);
                            } else {
                                open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            status
                        }
                        None => 0,
                    };
                    let ms = at.elapsed().as_secs_f64() * 1e3;
                    let mut r = record.lock().await;
                    if status == 200 {
                        r.latencies.push(ms);
                    }
                    *r.statuses.entry(status).or_default() += 1;
                }));
                i += 1;
            }
            for t in tasks {
                let _ = t.await;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = record.lock().await;
    r.latencies.sort_by(f64::total_cmp);
    let ok = r.latencies.len() as f64;
    let total: u64 = r.statuses.values().sum();
    let statuses: serde_json::Map<String, serde_json::Value> = r
        .statuses
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    let cpu = |now: Option<f64>, then: Option<f64>| now.zip(then).map(|(a, b)| a - b);
    let out = serde_json::json!({
        "mode": match a.mode { Mode::Closed { .. } => "closed", Mode::Open { .. } => "open" },
        "connections": match a.mode { Mode::Closed { connections } => connections as f64, Mode::Open { .. } => f64::NAN },
        "rate_asked": match a.mode { Mode::Open { rate } => rate, Mode::Closed { .. } => f64::NAN },
        "rows_per_request": a.rows_per_request,
        "requests": total,
        "statuses": statuses,
        "seconds": elapsed,
        "ok_requests_per_s": ok / elapsed,
        "ok_rows_per_s": ok * a.rows_per_request as f64 / elapsed,
        "p50_ms": percentile(&r.latencies, 50.0),
        "p95_ms": percentile(&r.latencies, 95.0),
        "p99_ms": percentile(&r.latencies, 99.0),
        "max_ms": r.latencies.last().copied().unwrap_or(f64::NAN),
        "loadgen_cpu_s": cpu(cpu_seconds(None), cpu0),
        "server_cpu_s": cpu(cpu_seconds(a.server_pid), server0),
    });
    Ok(out.to_string())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadgen: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // One thread: the load generator's CPU share stays at most one core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(args)) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(1);
        }
    }
}
