//! Run directories, resume, checkpoints and output files are guarded (issue 11, items
//! 6–9; docs/RELIABILITY.md lists each case): another run is never overwritten by
//! accident, a failed start-up changes nothing, a resume holds exactly the history up
//! to its checkpoint and refuses what it cannot honour, a corrupt checkpoint is named,
//! and no command writes over its input or leaves a partial file.

use crate::common;

use crate::common::{assert_fails_with, describe, text, towerrec, TINY};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    common::tmp("rundir", name)
}

/// `train` on the tiny quickstart into `out` with `extra` arguments.
fn train(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["train", "-q", "--out", out.to_str().unwrap()];
    args.extend(TINY);
    args.extend(extra);
    towerrec(&args)
}

/// Every file of `dir` (lock file aside) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != ".towerrec.lock")
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The `step` of every training-loss line of a metrics log.
fn loss_steps(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("loss").is_some())
        .map(|v| v["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn another_run_is_not_overwritten_and_a_failed_start_changes_nothing() {
    let dir = tmp("guard");
    let out = dir.join("run");
    assert!(train(&out, &[]).status.success());
    let before = snapshot(&out);
    let o = train(&out, &[]);
    assert_fails_with(&o, &["holds another run", "--resume", "--overwrite"]);
    assert_eq!(snapshot(&out), before);
    // --overwrite, but the run fails at start-up (its data cannot be read): unchanged.
    let o = train(&out, &["--overwrite", "--data", "/dev/null"]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert_eq!(snapshot(&out), before);
    // --overwrite of a run that starts replaces it.
    let o = train(&out, &["--overwrite", "--max-steps", "3"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(loss_steps(&out), vec![3]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn without_out_a_second_run_goes_to_a_fresh_directory() {
    let dir = tmp("default-out");
    for _ in 0..2 {
        let mut args = vec!["train", "-q"];
        args.extend(TINY);
        let o = common::towerrec_in(&dir, &args);
        assert!(o.status.success(), "{}", describe(&o));
    }
    assert!(dir.join("runs/quickstart/summary.json").exists());
    assert!(dir.join("runs/quickstart-2/summary.json").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn two_runs_cannot_share_a_directory() {
    let dir = tmp("lock");
    let out = dir.join("run");
    let mut first = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(["train", "-q", "--out", out.to_str().unwrap()])
        .args(["--set", "data.train_samples=2000000", "--hosts", "1"])
        .args(["--ranks-per-host", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !out.join("config.toml").exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = train(&out, &["--overwrite"]);
    first.kill().ok();
    first.wait().ok();
    assert_fails_with(&o, &["another towerrec run is using it", "process "]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn resume_after_a_crash_keeps_one_line_per_step_and_a_finished_run_is_left_alone() {
    let dir = tmp("resume");
    let out = dir.join("run");
    let sets = [
        "--set",
        "train.log_every=2",
        "--set",
        "train.checkpoint_every=4",
    ];
    // Dies at step 7, after logging steps 2, 4, 6 and checkpointing step 4.
    let mut args = vec!["train", "-q", "--out", out.to_str().unwrap()];
    args.extend(TINY);
    args.extend(sets);
    let o = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(&args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env("TOWERREC_FAIL_RANK", "0")
        .env("TOWERREC_FAIL_STEP", "7")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert_eq!(loss_steps(&out), vec![2, 4, 6]);
    let failed = |dir: &Path| {
        std::fs::read_to_string(dir.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("{\"failed\""))
            .count()
    };
    assert_eq!(failed(&out), 1, "the failure is logged");
    let resume = ["train", "-q", "--resume", out.to_str().unwrap()];
    let o = towerrec(&resume);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(failed(&out), 0, "the resumed run drops the failure record");
    let steps = loss_steps(&out);
    let mut unique = steps.clone();
    unique.dedup();
    assert_eq!(steps, unique, "one line per step after resume");
    assert_eq!(&steps[..3], &[2, 4, 6]);
    // Resuming the finished run says so and changes nothing.
    let before = snapshot(&out);
    let o = towerrec(&resume);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(text(&o).0.contains("already finished"), "{}", describe(&o));
    assert_eq!(snapshot(&out), before);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn resume_refuses_what_it_cannot_honour_by_name() {
    let dir = tmp("resume-checks");
    let out = dir.join("run");
    assert!(train(&out, &["--stop-after", "3"]).status.success());
    let resume = |extra: &[&str]| {
        let mut args = vec!["train", "-q", "--resume", out.to_str().unwrap()];
        args.extend(extra);
        towerrec(&args)
    };
    let o = resume(&[
        "--set",
        "model.self_interaction=true",
        "--set",
        "optimizer.dense_lr=1",
    ]);
    assert_fails_with(
        &o,
        &["cannot change model.self_interaction, optimizer.dense_lr when resuming"],
    );
    assert_fails_with(
        &resume(&["--bad-rows", "skip"]),
        &["cannot change train.bad_rows when resuming"],
    );
    let o = resume(&["--set", "train.max_steps=5", "--threads", "1"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(loss_steps(&out).last(), Some(&5));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn resume_refuses_changed_data_unless_allowed() {
    let dir = tmp("resume-data");
    let data = dir.join("train.bin");
    let gen = [
        "datagen",
        "--out",
        data.to_str().unwrap(),
        "--set",
        "data.train_samples=3000",
        "--set",
        "data.tables=[{ rows = 200, count = 8 }]",
    ];
    assert!(towerrec(&gen).status.success());
    let out = dir.join("run");
    let d = data.to_str().unwrap();
    let o = train(&out, &["--data", d, "--eval-data", d, "--stop-after", "2"]);
    assert!(o.status.success(), "{}", describe(&o));
    // The same rows drawn from another seed: same size, other content.
    let before = std::fs::metadata(&data).unwrap().len();
    let mut regen = gen.to_vec();
    regen.extend(["--set", "data.seed=2"]);
    assert!(towerrec(&regen).status.success());
    assert_eq!(std::fs::metadata(&data).unwrap().len(), before);
    let resume = ["train", "-q", "--resume", out.to_str().unwrap()];
    assert_fails_with(
        &towerrec(&resume),
        &["train.bin", "content changed", "--allow-data-change"],
    );
    let mut allowed = resume.to_vec();
    allowed.push("--allow-data-change");
    let o = towerrec(&allowed);
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_corrupt_checkpoint_is_refused_naming_the_tensor() {
    let dir = tmp("corrupt");
    let out = dir.join("run");
    assert!(train(&out, &[]).status.success());
    let path = out.join("checkpoint.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    for b in &mut bytes[n / 2..n / 2 + 4] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();
    let o = towerrec(&["eval", "--checkpoint", out.to_str().unwrap()]);
    assert_fails_with(&o, &["tensor '", "does not match its checksum"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn outputs_never_replace_inputs() {
    let dir = tmp("clobber");
    let data = dir.join("d.tsv");
    let row: Vec<String> = std::iter::once("1".to_string())
        .chain((0..13).map(|i| i.to_string()))
        .chain((0..26).map(|i| format!("{:x}", i + 10)))
        .collect();
    let text_rows: String = (0..50).map(|_| row.join("\t") + "\n").collect();
    std::fs::write(&data, &text_rows).unwrap();
    let link = dir.join("link.tsv");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let hard = dir.join("hard.tsv");
    std::fs::hard_link(&data, &hard).unwrap();
    let cfg_path = dir.join("c.toml");
    let criteo = "[data]\nformat = \"criteo\"\npath = \"d.tsv\"\ntable_rows = [100]\n";
    std::fs::write(&cfg_path, format!("{}{criteo}", common::TINY_MODEL)).unwrap();
    let cfg = cfg_path.to_str().unwrap();
    for out in [&data, &link, &hard] {
        let o = towerrec(&[
            "preprocess",
            "--config",
            cfg,
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_fails_with(&o, &["would destroy the input"]);
        assert_eq!(std::fs::read_to_string(&data).unwrap(), text_rows);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn predictions_never_replace_the_data_they_score() {
    let dir = tmp("predictions");
    let out = dir.join("run");
    assert!(train(&out, &[]).status.success());
    let data = dir.join("eval.bin");
    let gen = ["datagen", "--part", "eval", "--out", data.to_str().unwrap()];
    let mut gen = gen.to_vec();
    gen.extend([
        "--set",
        "data.train_samples=2000",
        "--set",
        "data.eval_samples=500",
    ]);
    gen.extend([
        "--set",
        "data.tables=[{ rows = 200, zipf_exponent = 1.05, pooling = 1, count = 8 }]",
    ]);
    assert!(towerrec(&gen).status.success());
    let before = std::fs::read(&data).unwrap();
    let d = data.to_str().unwrap();
    let o = towerrec(&[
        "eval",
        "--checkpoint",
        out.to_str().unwrap(),
        "--data",
        d,
        "--predictions",
        d,
    ]);
    assert_fails_with(&o, &["--predictions", "would destroy the input"]);
    assert_eq!(std::fs::read(&data).unwrap(), before);
    let p = dir.join("p.txt");
    let o = towerrec(&[
        "eval",
        "--checkpoint",
        out.to_str().unwrap(),
        "--data",
        d,
        "--predictions",
        p.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 500);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn datagen_refuses_what_the_disk_cannot_hold_and_cleans_up_when_stopped() {
    let dir = tmp("datagen");
    let out = dir.join("big.bin");
    let o = towerrec(&[
        "datagen",
        "--out",
        out.to_str().unwrap(),
        "--set",
        "data.train_samples=100000000000000",
    ]);
    assert_fails_with(&o, &["GiB free in"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(["datagen", "--out", out.to_str().unwrap()])
        .args(["--set", "data.train_samples=50000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let spooling = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().contains("spool"))
    };
    while !spooling() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(dir).ok();
}
