//! What a command leaves behind and what it reads (docs/RELIABILITY.md, "Run
//! directories", "No data"): `--overwrite` keeps the old run until the new one has
//! finished, also across a kill; the temporaries of interrupted writes are removed by
//! the next command writing there; a named pipe or a device is refused as data at once.

use crate::common;

use crate::common::{assert_fails_with, describe, text, towerrec, TINY};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    common::tmp("outputs", name)
}

/// Every entry of `dir` (lock file aside) with a hash of its bytes (0 for a directory).
fn snapshot(dir: &Path) -> BTreeMap<String, u64> {
    use std::hash::{Hash, Hasher};
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != ".towerrec.lock")
        .map(|e| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::fs::read(e.path()).unwrap_or_default().hash(&mut h);
            (e.file_name().to_string_lossy().into_owned(), h.finish())
        })
        .collect()
}

fn train(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["train", "-q", "--out", out.to_str().unwrap()];
    args.extend(TINY);
    args.extend(extra);
    towerrec(&args)
}

/// Starts `towerrec args` without waiting.
fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `limit` for `child`; kills it (a hang) and fails if it is still running.
fn finish_within(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?} (killed)\n{}",
                describe(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn overwrite_keeps_the_old_run_until_the_new_one_has_finished() {
    let dir = tmp("overwrite");
    let out = dir.join("run");
    assert!(train(&out, &[]).status.success());
    let before = snapshot(&out);
    let kept = |o: &std::process::Output| {
        assert_fails_with(o, &["is kept as it was"]);
        assert_eq!(snapshot(&out), before, "{}", describe(o));
        assert!(!out.join(".towerrec-replaced").exists());
    };

    // A bad row at line 2, found once training has begun.
    let config = common::csv_config(&dir, 200, Some(3));
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--overwrite",
    ]);
    kept(&o);
    assert!(text(&o).1.contains("d.csv:3"), "{}", describe(&o));

    // Divergence.
    let o = train(
        &out,
        &[
            "--overwrite",
            "--set",
            "optimizer.dense={kind=\"sgd\"}",
            "--set",
            "optimizer.sparse={kind=\"sgd\"}",
            "--set",
            "optimizer.dense_lr=1e5",
            "--set",
            "optimizer.sparse_lr=1e5",
        ],
    );
    kept(&o);
    assert!(text(&o).1.contains("non-finite"), "{}", describe(&o));

    // Killed once the new run has begun writing: the next command restores the old one.
    let mut args = vec!["train", "-q", "--out", out.to_str().unwrap(), "--overwrite"];
    args.extend(TINY);
    args.extend([
        "--set",
        "train.epochs=100000",
        "--set",
        "train.checkpoint_every=1",
    ]);
    let mut child = spawn(&args);
    let start = Instant::now();
    while !out.join("metrics.jsonl").exists() || !out.join(".towerrec-replaced").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the new run never began"
        );
        assert!(child.try_wait().unwrap().is_none(), "the new run ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    // As a kill during a checkpoint write leaves it (the restore removes it too).
    std::fs::write(
        out.join(format!("checkpoint.safetensors.tmp.{GONE}")),
        b"half",
    )
    .unwrap();
    assert_ne!(snapshot(&out), before);
    let o = towerrec(&["eval", "--checkpoint", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let err = text(&o).1;
    assert!(
        err.contains("did not finish") && err.contains("is restored"),
        "{}",
        describe(&o)
    );
    assert_eq!(snapshot(&out), before);

    // A new run that finishes replaces the old one, and nothing of the old stays.
    let o = train(&out, &["--overwrite", "--max-steps", "3"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_ne!(snapshot(&out), before);
    assert!(!out.join(".towerrec-replaced").exists());
    std::fs::remove_dir_all(dir).ok();
}

/// A process id that no running process can have (Linux's pid_max is at most 2^22).
const GONE: u32 = 2_000_000_000;

#[test]
fn temporaries_of_interrupted_writes_are_removed_by_the_next_writer() {
    let dir = tmp("temporaries");
    let out = dir.join("run");
    assert!(train(&out, &["--stop-after", "2"]).status.success());
    // What a kill during a checkpoint write leaves, and a write still under way (this
    // test's own process).
    let stale = out.join(format!("checkpoint.safetensors.tmp.{GONE}"));
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    let live = out.join(format!("summary.json.tmp.{}", std::process::id()));
    std::fs::write(&live, b"{").unwrap();
    let o = towerrec(&["train", "-q", "--resume", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let err = text(&o).1;
    assert!(
        err.contains(&format!("removed {}", stale.display())) && err.contains(&GONE.to_string()),
        "{}",
        describe(&o)
    );
    assert!(!stale.exists());
    assert!(live.exists(), "a running process's temporary was removed");
    // Any command writing into a directory: a plan's.
    let plans = dir.join("plans");
    std::fs::create_dir_all(&plans).unwrap();
    let stale = plans.join(format!("plan.json.tmp.{GONE}"));
    std::fs::write(&stale, b"{").unwrap();
    let plan = plans.join("other.json");
    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "2",
        "--output",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(!stale.exists(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

#[cfg(target_os = "linux")]
#[test]
fn a_named_pipe_or_a_device_as_data_is_refused_at_once() {
    let dir = tmp("fifo");
    let fifo = dir.join("pipe");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap();
    // As --eval-data (the binary reader), and as a Criteo file with a tail split (a count
    // before the pass: two opens before).
    let criteo = dir.join("criteo.toml");
    std::fs::write(
        &criteo,
        format!(
            "{}[data]\nformat = \"criteo\"\npath = \"{fifo}\"\ntable_rows = [10]\nsplit = {{ kind = \"tail\", eval_rows = 5 }}\n",
            common::TINY_MODEL
        ),
    )
    .unwrap();
    let out = dir.join("run");
    let converted = dir.join("d.bin");
    let mut quick = vec!["train", "-q", "--out", out.to_str().unwrap()];
    quick.extend(TINY);
    for args in [
        [&quick[..], &["--eval-data", fifo]].concat(),
        vec![
            "train",
            "-q",
            "--config",
            criteo.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        vec![
            "preprocess",
            "--config",
            criteo.to_str().unwrap(),
            "--out",
            converted.to_str().unwrap(),
        ],
    ] {
        let o = finish_within(spawn(&args), Duration::from_secs(20), &format!("{args:?}"));
        assert_fails_with(&o, &[fifo, "named pipe (FIFO)"]);
        assert!(!out.exists() && !converted.exists());
    }
    let o = finish_within(
        spawn(&[&quick[..], &["--eval-data", "/dev/urandom"]].concat()),
        Duration::from_secs(20),
        "/dev/urandom",
    );
    assert_fails_with(&o, &["/dev/urandom", "character device"]);
    std::fs::remove_dir_all(dir).ok();
}
