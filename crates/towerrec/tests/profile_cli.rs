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
