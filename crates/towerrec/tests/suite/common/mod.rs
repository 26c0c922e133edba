//! Helpers shared by the binary's end-to-end tests: run `towerrec`, read what it
//! printed, and make a fresh scratch directory.
#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the built `towerrec` with `args` from the repository root, so that paths such
/// as `bench/kaggle.toml` resolve.
pub fn towerrec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("the binary runs")
}

/// (stdout, stderr) as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Status, stdout and stderr, for assertion messages.
pub fn describe(o: &Output) -> String {
    let (out, err) = text(o);
    format!("status {}\n--- stdout\n{out}--- stderr\n{err}", o.status)
}

/// An empty directory `towerrec-<suite>-<pid>-<name>` under the system's temp dir. A
/// test's directory stays after it (to read when it failed); the first call of a
/// process removes those of its suite whose process has ended.
pub fn tmp(suite: &str, name: &str) -> PathBuf {
    static SWEPT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut swept) = SWEPT.lock() {
        if !swept.iter().any(|s| s == suite) {
            remove_ended(suite);
            swept.push(suite.to_string());
        }
    }
    let dir = std::env::temp_dir().join(format!("towerrec-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes the `towerrec-<suite>-<pid>-…` directories of processes that have ended,
/// where `/proc` says which are running (elsewhere nothing is removed).
fn remove_ended(suite: &str) {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let prefix = format!("towerrec-{suite}-");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Runs the built `towerrec` with `args` from `dir`.
pub fn towerrec_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

/// The quickstart shrunk to about a second: 2,000 training and 500 evaluation samples
/// of small tables, one process (`--hosts` and `--ranks-per-host` override it).
pub const TINY: [&str; 12] = [
    "--set",
    "data.train_samples=2000",
    "--set",
    "data.eval_samples=500",
    "--set",
    "data.tables=[{ rows = 200, zipf_exponent = 1.05, pooling = 1, count = 8 }]",
    "--set",
    "train.eval_every=0",
    "--set",
    "cluster.hosts=1",
    "--set",
    "cluster.ranks_per_host=1",
];

/// Asserts that `o` failed with status 1 and that its stderr holds every one of
/// `needles` and reads well (no doubled prefixes); returns stderr.
pub fn assert_fails_with(o: &Output, needles: &[&str]) -> String {
    let (_, err) = text(o);
    assert_eq!(o.status.code(), Some(1), "{}", describe(o));
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in:\n{}", describe(o));
    }
    for double in ["error: error:", "config config", "Error: error"] {
        assert!(!err.contains(double), "{double:?} in:\n{err}");
    }
    err
}

/// `[model]`, `[optimizer]` and `[train]` of a tiny DLRM (dimension 4, batch 16) for
/// tests that bring their own `[data]`.
pub const TINY_MODEL: &str = r#"
[model]
kind = "dlrm"
embedding_dim = 4
bottom_mlp = [8, 4]
top_mlp = [8, 1]
[optimizer]
dense = { kind = "sgd" }
dense_lr = 0.1
sparse = { kind = "sgd" }
sparse_lr = 0.1
[train]
batch_size = 16
"#;

/// A CSV config (`dir/c.toml`, [`TINY_MODEL`]) over `rows` rows it writes to
/// `dir/d.csv` (a dense column, two categorical ones; the last 20 rows evaluate), whose
/// line `bad_line` (1-based, header included) holds a label that is not one.
pub fn csv_config(dir: &std::path::Path, rows: usize, bad_line: Option<usize>) -> PathBuf {
    let mut csv = String::from("y,d,a,b\n");
    for i in 0..rows {
        let label = if Some(i + 2) == bad_line {
            "x"
        } else {
            ["0", "1"][i % 2]
        };
        csv += &format!("{label},{},{},{}\n", i % 3, i % 7, i % 5);
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "{TINY_MODEL}[data]\nformat = \"csv\"\npath = \"d.csv\"\n\
             split = {{ kind = \"tail\", eval_rows = 20 }}\n[data.schema]\n\
             label = {{ column = \"y\" }}\ndense = [{{ column = \"d\" }}]\n\
             sparse = [{{ column = \"a\", rows = 10 }}, {{ column = \"b\", rows = 10 }}]\n"
        ),
    )
    .unwrap();
    config
}
