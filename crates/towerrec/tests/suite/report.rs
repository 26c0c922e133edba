//! Run reports (docs/REPORT.md): `train` writes `report.html` at its end, a failed
//! run's included; the metrics log carries each logged window's phase times and bytes;
//! `towerrec report` compares runs.

use crate::common::{assert_fails_with, describe, text, tmp, towerrec, TINY};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn train_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "-q", "--out", out];
    args.extend(TINY);
    args.extend(["--set", "train.log_every=2"]);
    args.extend(extra);
    args
}

fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("report.html")).expect("report.html written")
}

#[test]
fn a_cluster_run_logs_its_windows_and_writes_its_report() {
    let dir = tmp("report", "cluster");
    let out = dir.join("run");
    let out_s = out.to_str().unwrap();
    let o = towerrec(&train_args(
        out_s,
        &["--hosts", "2", "--ranks-per-host", "2"],
    ));
    assert!(o.status.success(), "{}", describe(&o));
    assert!(text(&o).0.contains("report: "), "{}", describe(&o));
    let steps: Vec<Value> = lines(&out)
        .into_iter()
        .filter(|l| l.get("loss").is_some())
        .collect();
    assert!(steps.len() >= 3, "{steps:?}");
    // Every logged window: each phase's time on each of the 4 ranks, and bytes by phase.
    for s in &steps {
        let phases = s["phase_ms_by_rank"].as_array().unwrap();
        assert_eq!(phases.len(), 10);
        assert!(phases.iter().all(|p| p[1].as_array().unwrap().len() == 4));
        assert!(s["bytes_per_step"].as_array().unwrap().len() >= 4);
    }
    // The windows add up to the summary's bytes per step (all phases but control,
    // which also carries the log lines' own gathers).
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let total_steps = summary["steps"].as_f64().unwrap();
    for phase in summary["cluster"]["bytes_per_step"].as_array().unwrap() {
        let name = phase["phase"].as_str().unwrap();
        if name == "control" {
            continue;
        }
        for side in ["intra_host", "cross_host"] {
            let mut previous = 0.0;
            let mut sum = 0.0;
            for s in &steps {
                let step = s["step"].as_f64().unwrap();
                let bytes = s["bytes_per_step"].as_array().unwrap();
                let b = bytes.iter().find(|b| b["phase"] == name).unwrap();
                sum += b[side].as_f64().unwrap() * (step - previous);
                previous = step;
            }
            let want = phase[side].as_f64().unwrap();
            assert!(
                (sum / total_steps - want).abs() <= 1e-6 * want.max(1.0),
                "{name} {side}: windows {} against the summary's {want}",
                sum / total_steps
            );
        }
    }
    let page = report_of(&out);
    for needle in [
        "<!DOCTYPE html>",
        "finished",
        "2 × 2",
        "rank 3",
        "cross-host",
        "dense_grad_sync",
        "time per step by rank",
        "<svg",
    ] {
        assert!(page.contains(needle), "{needle:?} not in the report");
    }
    let auc = format!("{:.4}", summary["auc"].as_f64().unwrap());
    assert!(
        page.contains(&format!("<td>{auc}</td>")),
        "AUC {auc} not in the report"
    );
    // Self-contained: nothing fetched.
    for fetch in ["<script", "src=\"http", "href=\"http", "<link"] {
        assert!(!page.contains(fetch), "{fetch:?} in the report");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_failed_run_writes_its_report_and_a_start_up_failure_none() {
    let dir = tmp("report", "failed");
    let out = dir.join("run");
    let out_s = out.to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(train_args(out_s, &[]))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env("TOWERREC_FAIL_RANK", "0")
        .env("TOWERREC_FAIL_STEP", "5")
        .output()
        .unwrap();
    let err = assert_fails_with(&o, &["injected failure", "report of the failed run"]);
    assert!(err.contains("report.html"), "{err}");
    let page = report_of(&out);
    assert!(page.contains("failed</span>: "), "no failure status");
    assert!(page.contains("injected failure on rank 0 at step 5"));
    // Its two logged windows are plotted: the single process's phase times by rank.
    assert!(page.contains("ms per step by phase (rank 0)") && page.contains("rank 0"));
    // The reason is in the run's log as well, so a later report still says it.
    let last = lines(&out).pop().unwrap();
    assert!(
        last["failed"]
            .as_str()
            .is_some_and(|w| w.contains("injected failure on rank 0 at step 5")),
        "{last}"
    );
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = towerrec(&["report", out_s]);
    assert!(o.status.success(), "{}", describe(&o));
    let later = report_of(&out);
    assert!(later.contains("failed</span>: ") && later.contains("at step 5"));
    // A run that fails at start-up leaves its directory untouched: no report.
    let fresh = dir.join("fresh");
    let o = towerrec(&train_args(
        fresh.to_str().unwrap(),
        &["--set", "model.embedding_dim=0"],
    ));
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(!fresh.join("report.html").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_compares_runs_and_keeps_to_the_files_rule() {
    let dir = tmp("report", "compare");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for (run, lr) in [(&a, "0.05"), (&b, "0.5")] {
        let lr = format!("optimizer.dense_lr={lr}");
        let o = towerrec(&train_args(run.to_str().unwrap(), &["--set", &lr]));
        assert!(o.status.success(), "{}", describe(&o));
    }
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = towerrec(&["report", a_s, b_s]);
    assert_fails_with(&o, &["2 runs", "--out"]);
    let page_path = dir.join("both.html");
    let o = towerrec(&["report", a_s, b_s, "--out", page_path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(page.contains("2 runs"));
    for run in [&a, &b] {
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        let logloss = format!("<td>{:.5}</td>", summary["logloss"].as_f64().unwrap());
        assert!(page.contains(&logloss), "{logloss} not in the page");
    }
    // One run: its own directory by default, rewritten in place.
    std::fs::remove_file(a.join("report.html")).unwrap();
    let o = towerrec(&["report", a_s]);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(a.join("report.html").exists());
    // A run's other files are not the report's to write, and a missing run is named.
    let o = towerrec(&[
        "report",
        a_s,
        "--out",
        a.join("summary.json").to_str().unwrap(),
    ]);
    assert_fails_with(&o, &["summary.json"]);
    let missing = dir.join("missing");
    let o = towerrec(&["report", missing.to_str().unwrap()]);
    assert_fails_with(&o, &["missing", "not a directory"]);
    std::fs::remove_dir_all(dir).ok();
}
