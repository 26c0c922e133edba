//! `towerrec profile` end to end: counts, the summary, the files, and loud failure.

mod common;

use common::{text, towerrec};
use towerrec_data::AccessProfile;

#[test]
fn profiles_synthetic_data_with_its_zipf_exponent() {
    let dir = common::tmp("profile_cli", "zipf");
    let out = dir.join("p.profile");
    let o = towerrec(&[
        "profile",
        "--set",
        "data.tables=[{rows=5000,zipf_exponent=1.05,count=2}]",
        "--set",
        "data.train_samples=30000",
        "--max-samples",
        "20000",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("| table | rows | reads |"), "{stdout}");
    let p = AccessProfile::load(&out).unwrap();
    assert_eq!(p.samples, 20_000);
    assert_eq!(p.tables.len(), 2);
    for t in &p.tables {
        assert_eq!(t.reads, 20_000);
        let s = t.ranking().zipf_exponent().unwrap();
        assert!((s - 1.05).abs() < 0.1, "{s}");
        assert!(
            stdout.contains(&format!("| {} | 5000 | 20000 |", t.name)),
            "{stdout}"
        );
    }
    let svg = std::fs::read_to_string(dir.join("p.cdf.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("access CDF"),
        "{svg:.200}"
    );
}

#[test]
fn no_data_is_an_error() {
    let dir = common::tmp("profile_cli", "empty");
    let out = dir.join("p.profile");
    let o = towerrec(&[
        "profile",
        "--max-samples",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("no samples to profile"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn oper_plans_from_a_profile_and_rates_any_plan() {
    let dir = common::tmp("profile_cli", "oper");
    let prof = dir.join("p.profile");
    let data = [
        "--set",
        "data.tables=[{rows=4000,zipf_exponent=1.05,count=4}]",
        "--set",
        "data.train_samples=20000",
    ];
    let mut args = vec!["profile", "--quiet", "--out", prof.to_str().unwrap()];
    args.extend(data);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", text(&o).1);
    let plan = dir.join("oper.json");
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "oper",
        "--profile",
        prof.to_str().unwrap(),
        "--extra-memory",
        "1%",
        "--output",
        plan.to_str().unwrap(),
    ];
    args.extend(data);
    let o = towerrec(&args);
    let (_, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("degree of balance"), "{stderr}");
    let p = towerrec_plan::Plan::load(&plan).unwrap();
    assert!(p
        .tables
        .iter()
        .all(|t| t.sharding == towerrec_plan::ShardingType::RowPartitioned));
    assert!(p
        .tables
        .iter()
        .any(|t| t.partitions.iter().any(|q| !q.replicas.is_empty())));
    assert!(std::fs::read_to_string(dir.join("oper.comm.svg"))
        .unwrap()
        .starts_with("<svg"));
    // Any strategy is rated by the model when a profile is given; oper needs one.
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "table-wise",
        "--profile",
        prof.to_str().unwrap(),
    ];
    args.extend(data);
    let o = towerrec(&args);
    assert!(
        o.status.success() && text(&o).1.contains("embedding traffic"),
        "{}",
        text(&o).1
    );
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "oper",
    ];
    args.extend(data);
    let o = towerrec(&args);
    assert!(
        !o.status.success() && text(&o).1.contains("needs --profile"),
        "{}",
        text(&o).1
    );
}

/// `[cluster.drift]`: the first check's window is the profile the plan was made from
/// (ratio 1), a check after the hot rows moved writes a fresh plan, and watching leaves
/// training as it was, bit for bit.
#[test]
fn a_run_watches_its_profile_drift_without_changing_training() {
    let dir = common::tmp("profile_cli", "drift");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    // 4 tables Zipf(1.05), hot rows moving every 4 steps of 1024.
    let data = [
        "--set",
        "data.tables=[{rows=2000,zipf_exponent=1.05,count=4}]",
        "--set",
        "data.zipf_rotate_every=4096",
        "--set",
        "data.train_samples=16384",
        "--set",
        "train.batch_size=1024",
        "--set",
        "train.log_every=4",
    ];
    let run = |args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(&data);
        let o = towerrec(&a);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{args:?}: {stderr}");
        format!("{stdout}{stderr}")
    };
    let prof = p("w0.profile");
    run(&[
        "profile",
        "--max-samples",
        "4096",
        "--quiet",
        "--out",
        &prof,
    ]);
    let plan = p("p0.json");
    let topo = ["--hosts", "2", "--ranks-per-host", "2"];
    let mut a = vec![
        "plan",
        "--strategy",
        "oper",
        "--profile",
        &prof,
        "--output",
        &plan,
    ];
    a.extend_from_slice(&topo);
    run(&a);
    let train = |out: &str, extra: &[&str]| {
        let mut a = vec!["train", "--plan", &plan, "--out", out, "--max-steps", "12"];
        a.extend_from_slice(&topo);
        a.extend_from_slice(extra);
        run(&a)
    };
    let (watched, plain) = (p("watched"), p("plain"));
    let said = train(&watched, &["--set", "cluster.drift={check_every=4}"]);
    train(&plain, &[]);

    let log = std::fs::read_to_string(dir.join("watched/metrics.jsonl")).unwrap();
    let checks: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("drift").is_some())
        .collect();
    assert_eq!(checks.len(), 3, "{log}");
    let d = |i: usize, k: &str| checks[i]["drift"][k].clone();
    assert_eq!(d(0, "window_samples"), 4096);
    assert!(
        (d(0, "ratio").as_f64().unwrap() - 1.0).abs() < 1e-12,
        "{log}"
    );
    assert!(d(0, "replan").is_null());
    assert!(d(1, "ratio").as_f64().unwrap() > 1.1, "{log}");
    let fresh = d(1, "replan");
    assert!(
        fresh.as_str().unwrap().ends_with("replan-step-8.json"),
        "{log}"
    );
    assert!(dir.join("watched/replan-step-8.json").exists());
    assert!(said.contains("drift at step 8"), "{said}");
    // The fresh plan moves the rows: a resume with it trains on.
    let moved = p("watched/replan-step-8.json");
    let resumed = p("resumed");
    let copy = std::process::Command::new("cp")
        .args(["-r", &watched, &resumed])
        .status()
        .unwrap();
    assert!(copy.success());
    let mut a = vec![
        "train",
        "--resume",
        &resumed,
        "--plan",
        &moved,
        "--max-steps",
        "16",
    ];
    a.extend_from_slice(&topo);
    let o = towerrec(&a);
    assert!(o.status.success(), "{}", common::describe(&o));

    // Training is the same bit for bit: the checkpoint, and every line but the checks.
    // (The tensors, past the header, whose metadata holds the config.)
    let tensors = |run: &str| {
        let bytes = std::fs::read(dir.join(run).join("checkpoint.safetensors")).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + n..].to_vec()
    };
    assert!(tensors("watched") == tensors("plain"));
    let losses = |run: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(run).join("metrics.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"loss\""))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!("{} {}", v["step"], v["loss"])
            })
            .collect()
    };
    assert_eq!(losses("watched"), losses("plain"));
    assert!(!losses("plain").is_empty());
}

/// `[cluster.drift] move = true`: the rows move to the fresh plan inside the run, and a
/// run stopped before the move (mid-window) or after it (the checkpoint names the plan
/// moved to) and resumed ends bit for bit as the run never stopped.
#[test]
fn rows_move_inside_the_run_and_resume_exactly() {
    let dir = common::tmp("profile_cli", "drift-move");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let data = [
        "--set",
        "data.tables=[{rows=2000,zipf_exponent=1.05,count=4}]",
        "--set",
        "data.zipf_rotate_every=4096",
        "--set",
        "data.train_samples=16384",
        "--set",
        "train.batch_size=1024",
        "--set",
        "train.log_every=2",
        "--set",
        "cluster.drift={check_every=4, move=true}",
    ];
    let run = |args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(&data);
        let o = towerrec(&a);
        assert!(o.status.success(), "{args:?}: {}", common::describe(&o));
    };
    let prof = p("w0.profile");
    run(&[
        "profile",
        "--max-samples",
        "4096",
        "--quiet",
        "--out",
        &prof,
    ]);
    let plan = p("p0.json");
    let topo = ["--hosts", "2", "--ranks-per-host", "2"];
    let mut a = vec![
        "plan",
        "--strategy",
        "oper",
        "--profile",
        &prof,
        "--output",
        &plan,
    ];
    a.extend_from_slice(&topo);
    run(&a);
    let train = |out: &str, extra: &[&str]| {
        let mut a = vec!["train", "--plan", &plan, "--out", out, "--max-steps", "12"];
        a.extend_from_slice(&topo);
        a.extend_from_slice(extra);
        run(&a);
    };
    let resume = |out: &str| {
        let mut a = vec!["train", "--resume", out];
        a.extend_from_slice(&topo);
        let o = towerrec(&a);
        assert!(o.status.success(), "{}", common::describe(&o));
    };
    let whole = p("whole");
    train(&whole, &[]);
    let log = std::fs::read_to_string(dir.join("whole/metrics.jsonl")).unwrap();
    assert!(log.contains("\"moved\":true"), "{log}");
    assert!(log.contains("replan-step-8.json"), "{log}");
    // What a run leaves that must not depend on where it stopped.
    let tensors = |run: &str| {
        let bytes = std::fs::read(dir.join(run).join("checkpoint.safetensors")).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + n..].to_vec()
    };
    let records = |run: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(run).join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                for k in ["samples_per_sec", "eval_seconds"] {
                    if let Some(o) = v.as_object_mut() {
                        o.remove(k);
                    }
                }
                if let Some(d) = v.get_mut("drift").and_then(|d| d.as_object_mut()) {
                    d.remove("replan");
                }
                v.to_string()
            })
            .collect()
    };
    for stop in ["6", "10"] {
        let name = format!("stop{stop}");
        let out = p(&name);
        train(&out, &["--stop-after", stop]);
        resume(&out);
        assert!(tensors(&name) == tensors("whole"), "stopped at {stop}");
        assert_eq!(records(&name), records("whole"), "stopped at {stop}");
    }
}
