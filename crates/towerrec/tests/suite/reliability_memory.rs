//! The memory check counts what a run holds (issue "Trustworthy runs, round 2", item 6;
//! docs/RELIABILITY.md, section 5): a run that fits is not refused, and its peak
//! resident memory stays within the estimate it prints at its start; a run that would
//! not fit, were it only while writing its checkpoint, is refused before anything is
//! allocated.

use crate::common::{assert_fails_with, tmp};
use std::path::Path;
use std::process::{Command, Stdio};

const GIB: f64 = (1u64 << 30) as f64;

/// `towerrec train` with `args` from the repository root: its exit status, what it
/// printed (stdout, then stderr) and its peak resident set size in bytes (the kernel's
/// `ru_maxrss`, the process with all its threads).
// The child is waited for by `wait4`, which also gives its resource use.
#[allow(clippy::zombie_processes)]
fn train_measured(dir: &Path, args: &[&str]) -> (i32, String, u64) {
    let (out, err) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let child = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .arg("train")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("the binary runs");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the child is ours and not yet waited for; both pointers are valid.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as i32, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let text = std::fs::read_to_string(out).unwrap() + &std::fs::read_to_string(err).unwrap();
    // Linux reports ru_maxrss in KiB.
    (code, text, usage.ru_maxrss as u64 * 1024)
}

/// The estimate in a run's start-up line "memory estimate: 2.576 GiB for …", in bytes.
fn estimate(text: &str) -> Option<f64> {
    let rest = text.split("memory estimate: ").nth(1)?;
    let gib: f64 = rest.split(" GiB").next()?.parse().ok()?;
    Some(gib * GIB)
}

/// Bytes the machine has available now (`MemAvailable`), where Linux says.
fn available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_wide_top_layer_runs_within_its_estimate() {
    // Before: refused on a machine with less than 19 GiB available ("an estimate from
    // above" of every layer's output for two scoring groups of 8192 samples), though
    // the run peaks at about 2.3 GB; and no estimate was printed.
    if cfg!(not(target_os = "linux")) {
        return;
    }
    let dir = tmp("memory", "wide");
    let run = dir.join("run");
    let (code, text, peak) = train_measured(
        &dir,
        &[
            "--out",
            run.to_str().unwrap(),
            "--hosts",
            "1",
            "--ranks-per-host",
            "1",
            "--max-steps",
            "1",
            "--set",
            "model.top_mlp=[100000, 1]",
            "--set",
            "data.eval_samples=1024",
        ],
    );
    assert_eq!(code, 0, "{text}");
    let est = estimate(&text).unwrap_or_else(|| panic!("no memory estimate in:\n{text}"));
    assert!(
        est >= peak as f64,
        "estimate {:.3} GiB below the run's peak RSS {:.3} GiB:\n{text}",
        est / GIB,
        peak as f64 / GIB
    );
    // What the wide layer alone needs, from its size: 36.9M parameters with gradients,
    // Adam's moments and a checkpoint's two copies of weights and moments; a packed
    // copy of its weights; its output for a scoring batch of 1024, its dz and two
    // gradient buffers for a training batch of 256.
    let top = 367.0 * 100_000.0 + 100_000.0 + 100_001.0;
    let params = top + 13.0 * 64.0 + 64.0 + 64.0 * 16.0 + 16.0;
    let wide = params * 4.0 * 10.0 + top * 4.0 + 100_000.0 * 4.0 * (1024.0 + 3.0 * 256.0);
    assert!(
        est <= 1.5 * wide,
        "estimate {:.2} GiB for a layer that needs {:.2} GiB:\n{text}",
        est / GIB,
        wide / GIB
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn tables_that_fit_once_but_not_through_a_checkpoint_are_refused_before_allocating() {
    // A checkpoint copies every table, then its bytes, then writes them out: tables of
    // 45% of the available memory fit, their checkpoint does not. Before, the check
    // counted the tables once, and such a run was killed at its first checkpoint.
    let Some(avail) = available() else {
        return;
    };
    let dir = tmp("memory", "checkpoint");
    let run = dir.join("run");
    // SGD: 64 bytes a row of 16 floats.
    let rows = (avail as f64 * 0.45 / 64.0) as u64;
    let tables = format!("data.tables=[{{ rows = {rows}, pooling = 1 }}]");
    let o = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args([
            "train",
            "-q",
            "--out",
            run.to_str().unwrap(),
            "--hosts",
            "1",
            "--ranks-per-host",
            "1",
            "--max-steps",
            "1",
            "--set",
            &tables,
            "--set",
            "optimizer.sparse={ kind = \"sgd\" }",
            "--set",
            "data.train_samples=256",
            "--set",
            "data.eval_samples=256",
        ])
        .output()
        .expect("the binary runs");
    let err = assert_fails_with(
        &o,
        &[
            "not enough memory for the run (embedding tables",
            "checkpoint",
        ],
    );
    let tables_gib: f64 = err
        .split("embedding tables ")
        .nth(1)
        .and_then(|r| r.split(" GiB").next())
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no table figure in {err}"));
    assert!(tables_gib * GIB < avail as f64, "{err}");
    assert!(!run.exists(), "a refused run leaves no directory");
    std::fs::remove_dir_all(dir).ok();
}
