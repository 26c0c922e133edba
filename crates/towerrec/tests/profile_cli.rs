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
