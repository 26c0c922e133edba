//! One source of towers (docs/DMT.md, "Where the towers come from"), end to end: a
//! plan holds a DMT model's towers, a checkpoint records them, and `eval` and
//! `--resume` read them there; an old config that lists the towers converts once.
//!
//! The towers used are not the naive split's (table `i` in tower `i mod 2`) but have
//! the same sizes, so a reader that fell back on the naive split would load every
//! tensor and score otherwise: only the recorded towers give the same figures.

use std::path::Path;

use crate::common;

use crate::common::{assert_fails_with, describe, text, towerrec, TINY};

/// Two towers of four, not the naive split's ([C1 C3 C5 C7], [C2 C4 C6 C8]).
const TOWERS: &str = r#"[["C8", "C1", "C2", "C3"], ["C4", "C5", "C6", "C7"]]"#;

/// TINY with a DMT-DLRM model (D = 16, the quickstart's bottom MLP output) and `towers`
/// (its `[model.towers]` keys besides the module's).
fn dmt_args(towers: &str) -> Vec<String> {
    let mut args: Vec<String> = TINY.iter().map(|s| s.to_string()).collect();
    args.push("--set".into());
    args.push(format!(
        "model.towers={{ module = \"dlrm\", d = 16, c = 1, {towers} }}"
    ));
    args
}

fn run(args: &[String]) -> std::process::Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    towerrec(&args)
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// `eval` of the run in `dir` on its held-out data.
fn eval(dir: &Path) -> serde_json::Value {
    let o = towerrec(&["eval", "--checkpoint", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    serde_json::from_str(text(&o).0.trim()).unwrap()
}

#[test]
fn an_old_config_listing_towers_converts_once_and_its_checkpoint_keeps_them() {
    let dir = common::tmp("towers-source", "old-config");
    let features = format!("features = {TOWERS}");
    let whole = dir.join("whole");
    let mut args = vec!["train".to_string(), "--quiet".into(), "--out".into()];
    args.push(whole.to_str().unwrap().into());
    args.extend(dmt_args(&features));
    let o = run(&args);
    let (_, stderr) = text(&o);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        stderr.contains("model.towers.features (or file) lists the towers")
            && stderr.contains("these 2 towers are this run's"),
        "{stderr}"
    );
    // The run's own config gives the count, not the tables.
    let saved = std::fs::read_to_string(whole.join("config.toml")).unwrap();
    assert!(
        saved.contains("count = 2") && !saved.contains("features") && !saved.contains("C8"),
        "{saved}"
    );
    // `eval` builds the model on the checkpoint's towers: the final evaluation again.
    let s = summary(&whole);
    let m = eval(&whole);
    assert_eq!(m["auc"], s["auc"]);
    assert_eq!(m["logloss"], s["logloss"]);

    // Stopped and resumed from a config that no longer lists them, the run ends as the
    // whole one did.
    let halves = dir.join("halves");
    let mut args = vec!["train".to_string(), "--quiet".into(), "--out".into()];
    args.push(halves.to_str().unwrap().into());
    args.extend(dmt_args(&features));
    args.extend(["--stop-after".into(), "3".into()]);
    let o = run(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let o = towerrec(&["train", "--quiet", "--resume", halves.to_str().unwrap()]);
    assert!(o.status.success(), "{}", describe(&o));
    let r = summary(&halves);
    assert_eq!(r["auc"], s["auc"]);
    assert_eq!(r["logloss"], s["logloss"]);

    // The naive split of the same sizes scores otherwise: the check above can fail.
    let naive = dir.join("naive");
    let mut args = vec!["train".to_string(), "--quiet".into(), "--out".into()];
    args.push(naive.to_str().unwrap().into());
    args.extend(dmt_args("count = 2"));
    let o = run(&args);
    assert!(o.status.success(), "{}", describe(&o));
    assert_ne!(summary(&naive)["logloss"], s["logloss"]);
}

#[test]
fn a_plan_holds_the_towers_and_eval_reads_them_from_the_checkpoint() {
    let dir = common::tmp("towers-source", "plan");
    let partition = dir.join("partition.json");
    std::fs::write(
        &partition,
        format!(r#"{{ "mode": "coherent", "towers": {TOWERS} }}"#),
    )
    .unwrap();
    let plan = dir.join("plan.json");
    let mut args: Vec<String> = ["plan", "--hosts", "2", "--ranks-per-host", "1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend([
        "--strategy".into(),
        "table-wise".into(),
        "--towers-file".into(),
    ]);
    args.push(partition.to_str().unwrap().into());
    args.extend(["--output".into(), plan.to_str().unwrap().into()]);
    args.extend(dmt_args("count = 2"));
    let o = run(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let towers: Vec<Vec<String>> = p["towers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| serde_json::from_value(t["features"].clone()).unwrap())
        .collect();
    let want: Vec<Vec<String>> = serde_json::from_str(TOWERS).unwrap();
    assert_eq!(towers, want);

    // Trained on 2 hosts with the plan, evaluated in one process without it.
    let out = dir.join("run");
    let mut args = vec!["train".to_string(), "--quiet".into(), "--out".into()];
    args.push(out.to_str().unwrap().into());
    args.extend(dmt_args("count = 2"));
    args.extend(["--plan".into(), plan.to_str().unwrap().into()]);
    args.extend(["--hosts".into(), "2".into()]);
    let o = run(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let s = summary(&out);
    let m = eval(&out);
    assert_eq!(m["auc"], s["auc"]);

    // The plan's towers must number the model's.
    let mut args = vec!["train".to_string(), "--quiet".into(), "--out".into()];
    args.push(dir.join("three").to_str().unwrap().into());
    args.extend(dmt_args("count = 3"));
    args.extend(["--plan".into(), plan.to_str().unwrap().into()]);
    args.extend(["--hosts".into(), "2".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_fails_with(
        &towerrec(&args),
        &["the plan's 2 towers are not the model's 3 (model.towers.count)"],
    );
}
