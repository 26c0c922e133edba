//! `towerrec simulate` end to end: the paper reproductions print their tables and write
//! their figures, a towerrec config simulates at several sizes, and bad requests fail
//! with a message that says why.

use std::path::Path;

mod common;

use common::{text, towerrec};

/// A fresh scratch directory for this file's tests.
fn tmp_dir(name: &str) -> std::path::PathBuf {
    common::tmp("sim-cli", name)
}

fn svg(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(s.starts_with("<svg"), "{}", path.display());
    s
}

#[test]
fn scale_in_reproduction_prints_both_tables_and_draws_the_figures() {
    let dir = tmp_dir("scale-in");
    let out = towerrec(&[
        "simulate",
        "--reproduce",
        "scale-in",
        "--plots",
        dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.matches("| XVI |").count(), 8, "{stdout}");
    assert_eq!(stdout.matches("| XVII |").count(), 8, "{stdout}");
    svg(&dir.join("fig6_memory_random_access.svg"));
    for f in [
        "fig8_inference_qps.svg",
        "fig11_training_qps.svg",
        "fig12b_training_breakdown.svg",
        "fig13b_training_breakdown.svg",
    ] {
        let s = svg(&dir.join(f));
        assert!(s.contains("1000 GB/s"), "{f}");
    }
}

#[test]
fn dmt_reproduction_compares_three_exchanges_at_six_sizes() {
    let dir = tmp_dir("dmt");
    let out = towerrec(&[
        "simulate",
        "--reproduce",
        "dmt",
        "--plots",
        dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for n in ["16", "512"] {
        for plan in ["flat", "sptt", "dmt"] {
            let row = format!(" {n}  {plan}");
            assert!(stdout.contains(&row), "missing {row:?} in {stdout}");
        }
    }
    let s = svg(&dir.join("fig10_dmt_speedup.svg"));
    assert!(s.contains("dmt") && s.contains("sptt"));
}

#[test]
fn a_towerrec_config_simulates_at_several_sizes() {
    let dir = tmp_dir("config");
    let out = towerrec(&[
        "simulate",
        "--config",
        "bench/multihot.toml",
        "--hardware",
        "dgx-a100",
        "--gpus",
        "8,16,32",
        "--compare",
        "flat,dmt",
        "--plots",
        dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    // bench/multihot.toml: 26 tables × 20 ids, dim 64.
    assert!(
        stdout.contains("26 tables, 520.0 lookups per sample, dim 64"),
        "{stdout}"
    );
    for row in ["     8  flat", "    16  dmt", "    32  dmt"] {
        assert!(stdout.contains(row), "missing {row:?} in {stdout}");
    }
    for f in ["qps_vs_collectives.svg", "breakdown.svg", "speedup.svg"] {
        svg(&dir.join(f));
    }
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["simulate", "--hardware", "cray-1"],
            "unknown hardware preset 'cray-1'",
        ),
        (&["simulate", "--config", "rm9"], "neither a model preset"),
        (
            &["simulate", "--hardware", "h100-cluster", "--gpus", "12"],
            "not a whole number of 8-chip hosts",
        ),
        (
            &["simulate", "--compare", "flat,towers"],
            "'towers' is not one of flat, sptt, dmt",
        ),
        (
            &["simulate", "--sharding", "sharded", "--compare", "dmt"],
            "unsharded tables only",
        ),
        (
            &["simulate", "--compare", "dmt", "--compression", "NaN"],
            "--compression: must be a finite number ≥ 1",
        ),
        (
            &["simulate", "--compare", "dmt", "--compression", "inf"],
            "--compression: must be a finite number ≥ 1",
        ),
        (
            &["simulate", "--compare", "dmt", "--compression", "0.5"],
            "--compression: must be a finite number ≥ 1",
        ),
        (
            &["simulate", "--gpus", "4294967296"],
            "--gpus: a system needs 1 to 1048576 chips",
        ),
    ];
    for (args, expect) in cases {
        let out = towerrec(args);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}
