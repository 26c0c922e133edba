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

/// A 2 hosts × 2 ranks CPU cluster, written as `towerrec calibrate` would.
const TWO_BY_TWO: &str = r#"name = "2 x 2"
hosts = 2
chips_per_host = 2
[compute]
peak_tflops = 0.05
efficiency = 0.5
[memory]
model = "measured"
stream_gbs = 5.0
random_read = [[64, 1.0], [256, 2.0]]
[network.intra_host]
all_to_all = { latency_us = 20.0, bandwidth_gbs = 2.0 }
[network.cross_host]
all_to_all = { latency_us = 100.0, bandwidth_gbs = 0.06 }
[system]
on_chip_buffers = false
lookup_comm_overlap = 0.0
allreduce_overlap = 0.0
"#;

#[test]
fn the_dmt_speed_run_is_predicted_per_exchange() {
    let dir = tmp_dir("speed");
    let hw = dir.join("hw.toml");
    std::fs::write(&hw, TWO_BY_TWO).unwrap();
    let step = |compression: &str| -> Vec<(String, f64)> {
        let out = towerrec(&[
            "simulate",
            "--config",
            "bench/dmt/speed.toml",
            "--hardware",
            hw.to_str().unwrap(),
            "--compare",
            "flat,sptt,dmt",
            "--compression",
            compression,
            "--json",
        ]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        stdout
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["plan"].as_str().unwrap().to_string(),
                    v["step_seconds"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let c2 = step("2");
    let c8 = step("8");
    let names: Vec<&str> = c2.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["flat", "sptt", "dmt"]);
    // Two towers on two hosts move what flat moves across hosts plus an intra-host
    // step; their modules halve (then eighth) step f, on a link this slow a win.
    assert!(c2[1].1 > c2[0].1, "{c2:?}");
    assert!(c2[2].1 < c2[1].1 && c8[2].1 < c2[2].1, "{c2:?} {c8:?}");
    assert_eq!(c2[0], c8[0]);
}

#[test]
fn a_config_with_towers_is_simulated_with_its_towers() {
    let out = towerrec(&[
        "simulate",
        "--config",
        "examples/dmt_dlrm.toml",
        "--hardware",
        "h100-cluster",
        "--gpus",
        "16,32",
        "--compare",
        "flat,sptt,dmt",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    // [model.towers] count = 2: on 2 hosts one tower each; on 4 hosts, as `towerrec
    // train` places them without a plan, each on a group of 2 hosts (§3.1.3).
    assert!(
        stdout.contains("16  towers: 2 in 2 group(s) of 1 host(s), compression 2.00"),
        "{stdout}"
    );
    assert!(
        stdout.contains("32  towers: 2 in 2 group(s) of 2 host(s), compression 2.00"),
        "{stdout}"
    );
    let out = towerrec(&[
        "simulate",
        "--config",
        "examples/dmt_dlrm.toml",
        "--hardware",
        "h100-cluster",
        "--gpus",
        "32",
        "--compare",
        "flat,dmt",
        "--towers",
        "4",
        "--compression",
        "4",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("32  towers: 4 in 4 group(s) of 1 host(s), compression 4.00"),
        "{stdout}"
    );
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let cases: [(&[&str], &str); 11] = [
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
            &[
                "simulate",
                "--hardware",
                "h100-cluster",
                "--gpus",
                "32",
                "--compare",
                "dmt",
                "--towers",
                "4",
                "--hosts-per-tower",
                "3",
            ],
            "the hosts per tower must divide the hosts",
        ),
        (
            &[
                "simulate",
                "--config",
                "rm2-small",
                "--compare",
                "dmt",
                "--towers",
                "41",
            ],
            "41 towers for 40 tables",
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
