//! `towerrec serve` over real HTTP (docs/SERVING.md): scores equal `towerrec eval`'s for
//! the same rows (lines and JSON rows, trained and int8-quantized tables, with a
//! vocabulary); malformed, oversized, slow and unauthorized requests get 4xx while the
//! server keeps serving; a burst past the concurrency limit gets 503; SIGTERM lets an
//! in-flight request finish. The client is a plain socket, so that the tests see the
//! exact status and can be slow on purpose.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common;

use crate::common::{describe, towerrec, TINY_MODEL};

/// A Criteo TSV of `n` rows (seeded by `salt`): some empty fields, labels that follow
/// the first count and categorical.
fn criteo_rows(n: u64, salt: u64) -> String {
    let mut s = String::new();
    for i in 0..n {
        let x = i.wrapping_mul(2654435761).wrapping_add(salt * 97);
        let ints: Vec<String> = (0..13u64)
            .map(|j| match (x + j) % 7 {
                0 => String::new(),
                k => ((x >> j) % (k * 20)).to_string(),
            })
            .collect();
        let cats: Vec<String> = (0..26u64)
            .map(|j| match (x + 3 * j) % 11 {
                0 => String::new(),
                _ => format!("{:x}", (x >> (j % 16)) % (7 + j * 5)),
            })
            .collect();
        let label = u8::from((x >> 3) % 3 == 0 || ints[0].len() > 1);
        s += &format!("{label}\t{}\t{}\n", ints.join("\t"), cats.join("\t"));
    }
    s
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A trained Criteo run (hashing), its quantized checkpoint and a vocabulary run, made
/// once per test binary: (run dir, int8 checkpoint, vocab run dir, rows file).
struct Trained {
    dir: PathBuf,
    run: PathBuf,
    int8: PathBuf,
    vocab_run: PathBuf,
    rows: PathBuf,
}

fn trained() -> &'static Trained {
    static T: OnceLock<Trained> = OnceLock::new();
    T.get_or_init(|| {
        let dir = common::tmp("serve", "trained");
        std::fs::write(dir.join("train.tsv"), criteo_rows(1200, 1)).unwrap();
        std::fs::write(dir.join("rows.tsv"), criteo_rows(300, 2)).unwrap();
        let data = "[data]\nformat = \"criteo\"\npath = \"train.tsv\"\n\
                    split = { kind = \"tail\", eval_rows = 200 }\n";
        std::fs::write(
            dir.join("hash.toml"),
            format!("{TINY_MODEL}{data}table_rows = [61]\n"),
        )
        .unwrap();
        let run = dir.join("run");
        let o = towerrec(&[
            "train",
            "--config",
            s(&dir.join("hash.toml")),
            "--out",
            s(&run),
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", describe(&o));
        let int8 = dir.join("int8.safetensors");
        let o = towerrec(&["quantize", "--checkpoint", s(&run), "--out", s(&int8)]);
        assert!(o.status.success(), "{}", describe(&o));
        let vocab = dir.join("v.vocab");
        let o = towerrec(&[
            "vocab",
            "--config",
            s(&dir.join("hash.toml")),
            "--min-count",
            "2",
            "--out",
            s(&vocab),
        ]);
        assert!(o.status.success(), "{}", describe(&o));
        std::fs::write(
            dir.join("vocab.toml"),
            format!("{TINY_MODEL}{data}vocab = \"v.vocab\"\n"),
        )
        .unwrap();
        let vocab_run = dir.join("vocab-run");
        let o = towerrec(&[
            "train",
            "--config",
            s(&dir.join("vocab.toml")),
            "--out",
            s(&vocab_run),
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", describe(&o));
        Trained {
            dir: dir.clone(),
            run,
            int8,
            vocab_run,
            rows: dir.join("rows.tsv"),
        }
    })
}

/// `towerrec eval`'s probabilities for `rows` under `checkpoint`.
fn eval_probs(checkpoint: &Path, rows: &Path) -> Vec<f32> {
    let out = rows.with_extension(format!(
        "{}.pred",
        checkpoint.file_name().unwrap().to_str().unwrap()
    ));
    let o = towerrec(&[
        "eval",
        "--checkpoint",
        s(checkpoint),
        "--data",
        s(rows),
        "--predictions",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// A running `towerrec serve`, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(checkpoint: &Path, extra: &[&str], token: Option<&str>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_towerrec"));
        cmd.args([
            "serve",
            "--checkpoint",
            s(checkpoint),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--threads", "1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("TOWERREC_SERVE_TOKEN");
        if let Some(t) = token {
            cmd.env("TOWERREC_SERVE_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("towerrec serve starts");
        let mut first = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        let Some(addr) = first
            .trim()
            .rsplit("http://")
            .next()
            .filter(|_| first.contains("listening on"))
        else {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("no address in {first:?}:\n{}", describe(&out));
        };
        Server {
            addr: addr.parse().unwrap(),
            child,
        }
    }

    fn score(&self, content_type: &str, body: &[u8]) -> Response {
        self.request("POST", "/score", &[("Content-Type", content_type)], body)
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        request(self.addr, method, path, headers, body)
    }

    /// Sends SIGTERM and waits: (exit code, stdout after the first line, stderr).
    fn terminate(mut self) -> (Option<i32>, String, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = self.child.wait().unwrap();
        (status.code(), out, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.1 request on its own connection, read to the end.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) and close before reading all of a large body.
    let _ = stream.write_all(body);
    read_response(&mut stream)
}

fn read_response(stream: &mut TcpStream) -> Response {
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Response {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// The `scores` of a 200 response.
fn scores(r: &Response) -> Vec<f32> {
    assert_eq!(r.status, 200, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Criteo lines as JSON rows by column name (empty fields as null).
fn json_rows(lines: &[&str]) -> String {
    let rows: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            let mut row = serde_json::Map::new();
            for (i, f) in fields[1..].iter().enumerate() {
                let name = if i < 13 {
                    format!("I{}", i + 1)
                } else {
                    format!("C{}", i - 12)
                };
                let v = match (*f, i < 13) {
                    ("", _) => serde_json::Value::Null,
                    (f, true) => serde_json::Value::from(f.parse::<i64>().unwrap()),
                    (f, false) => serde_json::Value::from(f),
                };
                row.insert(name, v);
            }
            serde_json::Value::Object(row)
        })
        .collect();
    serde_json::json!({ "rows": rows }).to_string()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / w.abs().max(1e-30);
        assert!(rel <= 1e-6, "{what}: row {i}: served {g}, eval {w}");
    }
}

/// Scores `rows` through `server` three ways: one text request, JSON requests of 37
/// rows, and single-row text requests from 4 threads at once (batched together).
fn check_against_eval(server: &Server, rows: &str, want: &[f32], what: &str) {
    let got = scores(&server.score("text/plain", rows.as_bytes()));
    assert_close(&got, want, &format!("{what}, lines"));
    let lines: Vec<&str> = rows.lines().collect();
    let mut got = Vec::new();
    for chunk in lines.chunks(37) {
        got.extend(scores(
            &server.score("application/json", json_rows(chunk).as_bytes()),
        ));
    }
    assert_close(&got, want, &format!("{what}, JSON rows"));
    let first: Vec<(usize, &str)> = lines.iter().copied().enumerate().take(40).collect();
    let got: Vec<(usize, f32)> = std::thread::scope(|scope| {
        let handles: Vec<_> = first
            .chunks(10)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|&(i, l)| {
                            (
                                i,
                                scores(&server.score("text/plain", format!("{l}\n").as_bytes()))[0],
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    for (i, g) in got {
        assert_close(
            &[g],
            &want[i..i + 1],
            &format!("{what}, concurrent single rows"),
        );
    }
}

#[test]
fn scores_equal_evals_for_the_same_rows() {
    let t = trained();
    let rows = std::fs::read_to_string(&t.rows).unwrap();
    for (checkpoint, what) in [
        (&t.run, "fp32 tables"),
        (&t.int8, "int8 tables"),
        (&t.vocab_run, "vocabulary"),
    ] {
        let want = eval_probs(checkpoint, &t.rows);
        assert_eq!(want.len(), 300);
        let server = Server::start(checkpoint, &["--max-wait-ms", "5"], None);
        check_against_eval(&server, &rows, &want, what);
        let (code, out, err) = server.terminate();
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(out.contains("stopped after scoring"), "{out}");
    }
}

#[test]
fn sharded_serving_scores_as_eval_on_table_wise_and_oper_inference_plans() {
    let t = trained();
    let rows = std::fs::read_to_string(&t.rows).unwrap();
    let want = eval_probs(&t.run, &t.rows);
    let config = t.dir.join("hash.toml");
    let profile = t.dir.join("p.safetensors");
    let o = towerrec(&["profile", "--config", s(&config), "--out", s(&profile)]);
    assert!(o.status.success(), "{}", describe(&o));
    let topo = ["--hosts", "2", "--ranks-per-host", "2"];
    let plans = [
        ("table-wise", vec!["--strategy", "table-wise"]),
        (
            "oper",
            vec![
                "--strategy",
                "oper",
                "--profile",
                s(&profile),
                "--mode",
                "inference",
            ],
        ),
    ];
    let mut lookup = Vec::new();
    for (name, args) in plans {
        let plan = t.dir.join(format!("{name}.json"));
        let mut cmd = vec!["plan", "--config", s(&config), "--output", s(&plan)];
        cmd.extend(topo);
        cmd.extend(args);
        let o = towerrec(&cmd);
        assert!(o.status.success(), "{}", describe(&o));
        let mut extra = vec!["--plan", s(&plan)];
        extra.extend(topo);
        let server = Server::start(&t.run, &extra, None);
        // 1e-5: the ranks score slices of each batch (the tolerance of sharded runs).
        let got = scores(&server.score("text/plain", rows.as_bytes()));
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs(),
                "{name}: row {i}: served {g}, eval {w}"
            );
        }
        // A request smaller than the cluster: some ranks score no rows.
        let one = format!("{}\n", rows.lines().next().unwrap());
        let got = scores(&server.score("text/plain", one.as_bytes()));
        assert!(
            (got[0] - want[0]).abs() <= 1e-5 * want[0].abs(),
            "{name}: {got:?}"
        );
        let m = server.request("GET", "/metrics", &[], b"");
        let bytes = |link: &str| -> f64 {
            let key = format!("towerrec_serve_bytes_total{{link=\"{link}\",what=\"lookup\"}} ");
            m.body
                .lines()
                .find_map(|l| l.strip_prefix(&key))
                .unwrap_or_else(|| panic!("{key} not in\n{}", m.body))
                .trim()
                .parse()
                .unwrap()
        };
        let (intra, cross) = (bytes("intra_host"), bytes("cross_host"));
        assert!(cross > 0.0, "{name}: 2 hosts and no cross-host bytes");
        lookup.push((name, intra, cross));
        let (code, out, err) = server.terminate();
        assert_eq!(code, Some(0), "{out}\n{err}");
    }
    // Both plans served the same rows; their bytes differ (OPER places by access).
    assert_ne!(
        lookup[0].1 + lookup[0].2,
        lookup[1].1 + lookup[1].2,
        "{lookup:?}"
    );
}

#[test]
fn bad_requests_get_4xx_with_a_reason_and_the_server_keeps_serving() {
    let t = trained();
    let rows = std::fs::read_to_string(&t.rows).unwrap();
    let one: Vec<&str> = rows.lines().take(2).collect();
    let good = json_rows(&one);
    let server = Server::start(
        &t.run,
        &[
            "--max-body-bytes",
            "20000",
            "--max-request-rows",
            "50",
            "--read-timeout-ms",
            "500",
        ],
        None,
    );
    let ok = |server: &Server| {
        assert_eq!(
            scores(&server.score("application/json", good.as_bytes())).len(),
            2
        )
    };
    ok(&server);
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("application/json", "{\"rows\": [".into(), 400, "not JSON"),
        (
            "application/json",
            "[1, 2]".into(),
            400,
            "expected a JSON object",
        ),
        ("application/json", "{\"rows\": []}".into(), 400, "no rows"),
        (
            "application/json",
            "{\"rows\": [], \"x\": 1}".into(),
            400,
            "unknown key",
        ),
        (
            "application/json",
            good.replace("\"C26\"", "\"C27\""),
            400,
            "unknown column \\\"C27\\\"",
        ),
        (
            "application/json",
            good.replacen("\"C26\"", "\"I1\"", 2),
            400,
            "missing column \\\"C26\\\"",
        ),
        (
            "application/json",
            good.replacen("\"C3\":", "\"C3\": {},\"x\":", 1),
            400,
            "C3",
        ),
        ("text/plain", "1\t2\n".into(), 400, "request:1"),
        (
            "text/plain",
            rows.lines().take(51).map(|l| format!("{l}\n")).collect(),
            413,
            "more than 50 rows",
        ),
        (
            "text/plain",
            "x".repeat(30_000),
            413,
            "larger than 20000 bytes",
        ),
        ("application/xml", good.clone(), 415, "Content-Type"),
    ];
    for (ct, body, status, reason) in cases {
        let r = server.score(ct, body.as_bytes());
        assert_eq!(
            r.status,
            status,
            "{ct} {:?}: {r:?}",
            &body[..body.len().min(80)]
        );
        assert!(r.body.contains(reason), "{reason:?} not in {r:?}");
        ok(&server);
    }
    // A chunked body over the limit (no Content-Length to refuse it by).
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let chunk = "y".repeat(15_000);
    let req = format!(
        "POST /score HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/plain\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    let _ = stream.write_all(req.as_bytes());
    assert_eq!(read_response(&mut stream).status, 413);
    // A slow client: headers, then half the body, then nothing.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let head = format!(
        "POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        good.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .write_all(&good.as_bytes()[..good.len() / 2])
        .unwrap();
    let started = Instant::now();
    let r = read_response(&mut stream);
    assert_eq!(r.status, 408, "{r:?}");
    assert!(r.body.contains("--read-timeout-ms"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Slower still: headers never finished. The connection is closed; others go on.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"POST /score HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    ok(&server);
    let r = read_response(&mut stream);
    assert!(r.status == 0 || r.status == 408, "{r:?}");
    // Other endpoints.
    assert_eq!(server.request("GET", "/health", &[], b"").status, 200);
    assert_eq!(server.request("GET", "/nope", &[], b"").status, 404);
    assert_eq!(server.request("GET", "/score", &[], b"").status, 405);
    ok(&server);
    let m = server.request("GET", "/metrics", &[], b"");
    assert_eq!(m.status, 200);
    for needle in [
        "towerrec_serve_requests_total{endpoint=\"/score\",status=\"200\"}",
        "towerrec_serve_request_errors_total{reason=\"bad_request\"}",
        "towerrec_serve_request_errors_total{reason=\"too_large\"}",
        "towerrec_serve_request_errors_total{reason=\"timeout\"}",
        "towerrec_serve_request_errors_total{reason=\"media_type\"}",
        "towerrec_serve_request_duration_seconds_bucket",
        "towerrec_serve_batch_rows_bucket",
    ] {
        assert!(m.body.contains(needle), "{needle} not in\n{}", m.body);
    }
}

#[test]
fn a_token_guards_every_endpoint_but_health() {
    let t = trained();
    let dir = common::tmp("serve", "token");
    let rows = std::fs::read_to_string(&t.rows).unwrap();
    let line = format!("{}\n", rows.lines().next().unwrap());
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    for (extra, env) in [
        (vec!["--token-file", s(&token_file)], None),
        (vec![], Some("s3cret-token")),
    ] {
        let server = Server::start(&t.run, &extra, env);
        let score = |auth: Option<&str>| {
            let mut h = vec![("Content-Type", "text/plain")];
            if let Some(a) = auth {
                h.push(("Authorization", a));
            }
            server.request("POST", "/score", &h, line.as_bytes())
        };
        for bad in [
            None,
            Some("Bearer wrong"),
            Some("Bearer s3cret-toke"),
            Some("s3cret-token"),
        ] {
            let r = score(bad);
            assert_eq!(r.status, 401, "{bad:?}: {r:?}");
            assert!(
                r.head
                    .to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
                "{r:?}"
            );
        }
        assert_eq!(scores(&score(Some("Bearer s3cret-token"))).len(), 1);
        assert_eq!(server.request("GET", "/health", &[], b"").status, 200);
        assert_eq!(server.request("GET", "/metrics", &[], b"").status, 401);
        let m = server.request(
            "GET",
            "/metrics",
            &[("Authorization", "Bearer s3cret-token")],
            b"",
        );
        assert_eq!(m.status, 200);
        assert!(m.body.contains("reason=\"unauthorized\""), "{}", m.body);
    }
    // An empty token file is refused at start.
    std::fs::write(&token_file, "\n").unwrap();
    let o = towerrec(&[
        "serve",
        "--checkpoint",
        s(&t.run),
        "--token-file",
        s(&token_file),
    ]);
    common::assert_fails_with(&o, &["--token-file", "the token is empty"]);
}

#[test]
fn a_burst_past_the_concurrency_limit_gets_503_and_sigterm_drains() {
    let t = trained();
    let rows = std::fs::read_to_string(&t.rows).unwrap();
    let line = format!("{}\n", rows.lines().next().unwrap());
    // Each request waits 400 ms for others to batch with: 12 at once hold the 2 slots.
    let server = Server::start(
        &t.run,
        &["--max-concurrency", "2", "--max-wait-ms", "400"],
        None,
    );
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| server.score("text/plain", line.as_bytes())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().status)
            .collect()
    });
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let busy = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!(ok + busy, 12, "{statuses:?}");
    assert!(ok >= 1 && busy >= 1, "{statuses:?}");
    let r = server.score("text/plain", line.as_bytes());
    assert_eq!(scores(&r).len(), 1);
    // SIGTERM while a request waits in the batcher: it still gets its scores.
    let addr = server.addr;
    let in_flight = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/score",
            &[("Content-Type", "text/plain")],
            line.as_bytes(),
        )
    });
    std::thread::sleep(Duration::from_millis(150));
    let (code, out, err) = server.terminate();
    let r = in_flight.join().unwrap();
    assert_eq!(scores(&r).len(), 1, "{r:?}");
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("stopped after scoring"), "{out}");
    // Gone: new connections are refused.
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn models_of_preprocessed_data_are_refused_with_the_reason() {
    let dir = common::tmp("serve", "synthetic");
    let run = dir.join("run");
    let mut args = vec!["train", "--out", s(&run), "--quiet"];
    args.extend(common::TINY);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let o = towerrec(&["serve", "--checkpoint", s(&run)]);
    common::assert_fails_with(&o, &["synthetic data", "Criteo or CSV"]);
}
