//! No setting is ignored in silence, and what cannot be honoured is refused at start-up
//! (docs/RELIABILITY.md, "Settings"): a path that is not UTF-8, `train.bad_rows` in
//! `profile`, `[cluster.drift]` in one process, towers in the plan but not the model
//! (or the reverse), `simulate` options that do not apply, hardware figures beyond any
//! hardware.

use crate::common;

use crate::common::{assert_fails_with, csv_config, describe, text, towerrec, TINY};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    common::tmp("settings", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[cfg(unix)]
#[test]
fn a_path_that_is_not_utf8_is_refused_before_the_run_starts() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tmp("utf8");
    let good = dir.join("e.bin");
    let mut args = vec!["datagen", "--out", s(&good), "--part", "eval"];
    args.extend(&TINY[..6]);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let mut name = dir.as_os_str().as_bytes().to_vec();
    name.extend(b"/e-\xff.bin");
    let bad = PathBuf::from(std::ffi::OsStr::from_bytes(&name));
    std::fs::copy(&good, &bad).unwrap();
    let out = dir.join("run");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(["train", "-q", "--out", s(&out)])
        .args(TINY)
        .arg("--eval-data")
        .arg(&bad)
        .output()
        .unwrap();
    assert_fails_with(&o, &["not valid UTF-8"]);
    assert!(!out.exists(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn profile_reads_malformed_rows_as_the_config_says() {
    let dir = tmp("profile");
    let config = csv_config(&dir, 300, Some(10));
    let out = dir.join("p.st");
    let args = [
        "profile",
        "--config",
        s(&config),
        "--out",
        s(&out),
        "--quiet",
    ];
    // bad_rows = "fail" (the default): the row is an error.
    let o = towerrec(&args);
    assert_fails_with(&o, &["d.csv:10"]);
    let skip = ["--set", "train.bad_rows=\"skip\""];
    let o = towerrec(&[&args[..], &skip].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o).1.contains("skipped 1 malformed rows"),
        "{}",
        describe(&o)
    );
    // And train.max_bad_fraction with it.
    let strict = ["--set", "train.max_bad_fraction=0.001"];
    let o = towerrec(&[&args[..], &skip, &strict].concat());
    assert_fails_with(&o, &["were malformed and skipped", "--max-bad-fraction"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn drift_in_one_process_and_towers_on_one_side_only_are_said() {
    let dir = tmp("notes");
    let out = dir.join("run");
    let mut args = vec!["train", "-q", "--out", s(&out), "--max-steps", "2"];
    args.extend(TINY);
    let o = towerrec(&[&args[..], &["--set", "cluster.drift={check_every=2}"]].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o)
            .1
            .contains("[cluster.drift] is ignored: this run is one process"),
        "{}",
        describe(&o)
    );
    // Quantized communication: ignored by one process, said on a cluster.
    let q = [
        "--set",
        "cluster.qcomms={forward=\"fp16\",backward=\"bf16\"}",
    ];
    let o = towerrec(&[&args[..], &q, &["--overwrite"]].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o)
            .1
            .contains("[cluster.qcomms] is ignored: this run is one process, which sends nothing"),
        "{}",
        describe(&o)
    );
    let cluster = ["--hosts", "2", "--overwrite"];
    let o = towerrec(&[&args[..], &q, &cluster].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o).1.contains(
            "note: quantized communication: pooled embeddings travel as fp16, their gradients as bf16 (output_dist, tower_intra, tower_peer), dense gradients as fp32"
        ),
        "{}",
        describe(&o)
    );
    // bf16 dense layers: the portable path, said.
    let bf16 = ["--set", "model.dense_precision=\"bf16\"", "--overwrite"];
    let o = towerrec(&[&args[..], &bf16].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o).1.contains(
            "note: model.dense_precision = \"bf16\": the dense layers' products take bf16 operands and sum in f32 (f32 master weights), computed by the portable path"
        ),
        "{}",
        describe(&o)
    );
    // "auto": on a build without oneDNN (the README's test command) fp32, and why,
    // said; with the feature, what it chose on this CPU.
    let auto = ["--set", "model.dense_precision=\"auto\"", "--overwrite"];
    let o = towerrec(&[&args[..], &auto].concat());
    assert!(o.status.success(), "{}", describe(&o));
    let said = text(&o).1;
    match cfg!(feature = "onednn") {
        false => assert!(
            said.contains(
                "note: model.dense_precision = \"auto\" chose \"fp32\": bf16 would be computed by the portable path"
            ) && said.contains("this build has no oneDNN: build with --features onednn"),
            "{}",
            describe(&o)
        ),
        true => assert!(
            said.contains("note: model.dense_precision = \"auto\" chose"),
            "{}",
            describe(&o)
        ),
    }
    // A DMT model on a plan without towers, and a tower plan for a model without.
    let towers = [
        "--set",
        "model.towers={module=\"dlrm\",count=2,d=4,c=1,p=0}",
        "--set",
        "model.bottom_mlp=[8,4]",
    ];
    let (flat, tower) = (dir.join("flat.json"), dir.join("towers.json"));
    for (plan, extra) in [
        (&flat, &[][..]),
        (&tower, &["--towers", "2", "--strategy", "table-wise"][..]),
    ] {
        let mut a = vec![
            "plan",
            "--hosts",
            "2",
            "--ranks-per-host",
            "1",
            "--output",
            s(plan),
        ];
        a.extend(&TINY[..6]);
        a.extend(extra);
        let o = towerrec(&a);
        assert!(o.status.success(), "{}", describe(&o));
    }
    let cluster = ["--hosts", "2", "--ranks-per-host", "1", "--overwrite"];
    let o = towerrec(&[&args[..], &cluster, &towers, &["--plan", s(&flat)]].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o).1.contains("has no towers: the model's towers"),
        "{}",
        describe(&o)
    );
    let o = towerrec(&[&args[..], &cluster, &["--plan", s(&tower)]].concat());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(text(&o).1.contains("SPTT alone"), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn simulate_refuses_options_it_would_not_use_and_hardware_beyond_any() {
    let o = towerrec(&["simulate", "--reproduce", "dmt", "--hardware", "dgx2"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(
        text(&o).1.contains("cannot be used with"),
        "{}",
        describe(&o)
    );
    let o = towerrec(&["simulate", "--towers", "2"]);
    assert_fails_with(&o, &["--towers applies to the sptt and dmt exchanges"]);
    let dir = tmp("hardware");
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../towerrec-sim/presets/recspeed.toml"
    );
    let text_in = std::fs::read_to_string(preset).unwrap();
    for (from, to, key, why) in [
        (
            "peak_tflops = 200.0",
            "peak_tflops = 2e30",
            "compute.peak_tflops",
            "no hardware comes near it",
        ),
        (
            "peak_tflops = 200.0",
            "peak_tflops = 200.0\nefficiency = 1e-300",
            "compute.efficiency",
            "in [1e-6, 1]",
        ),
    ] {
        assert!(text_in.contains(from));
        let hw = dir.join("hw.toml");
        std::fs::write(&hw, text_in.replace(from, to)).unwrap();
        let o = towerrec(&["simulate", "--hardware", s(&hw)]);
        assert_fails_with(&o, &[key, why]);
    }
    std::fs::remove_dir_all(dir).ok();
}
