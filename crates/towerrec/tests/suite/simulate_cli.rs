//! `towerrec simulate` end to end: the paper reproductions print their tables and write
//! their figures, a towerrec config simulates at several sizes, and bad requests fail
//! with a message that says why.

use std::path::Path;

use crate::common;

use crate::common::{text, towerrec};

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
fn table_precisions_are_priced_by_the_bytes_of_a_row() {
    let dir = tmp_dir("precision");
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string("../../bench/multihot.toml")
        .or_else(|_| std::fs::read_to_string("bench/multihot.toml"))
        .unwrap();
    for (precision, bytes) in [("fp32", 256), ("fp16", 128), ("bf16", 128), ("int8", 72)] {
        let cfg = dir.join(format!("{precision}.toml"));
        let toml = base.replace(
            "[model]\n",
            &format!("[model]\ntable_precision = \"{precision}\"\n"),
        );
        std::fs::write(&cfg, toml).unwrap();
        let args = |mode| {
            vec![
                "simulate".to_string(),
                "--config".into(),
                cfg.to_str().unwrap().into(),
                "--hardware".into(),
                "dgx-a100".into(),
                "--gpus".into(),
                "8".into(),
                "--mode".into(),
                mode,
            ]
        };
        let infer = args("infer".into());
        let out = towerrec(&infer.iter().map(String::as_str).collect::<Vec<_>>());
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let want = format!("for random {bytes}-byte rows");
        assert!(
            stdout.contains(&want),
            "{precision}: {want:?} not in {stdout}"
        );
        let train = args("train".into());
        let out = towerrec(&train.iter().map(String::as_str).collect::<Vec<_>>());
        if precision == "int8" {
            assert!(!out.status.success());
            assert!(
                text(&out).1.contains("training needs fp32"),
                "{}",
                text(&out).1
            );
        } else {
            assert!(out.status.success(), "{}", text(&out).1);
        }
    }
}

/// `model.dense_precision = "bf16"` prices the dense layers at the hardware's
/// `compute.bf16_peak_tflops` (calibrate measures it), and is refused on hardware that
/// gives none; an fp32 model ignores that figure.
#[test]
fn bf16_dense_layers_are_priced_at_the_bf16_rate() {
    let dir = tmp_dir("dense-bf16");
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string("../../bench/kaggle.toml")
        .or_else(|_| std::fs::read_to_string("bench/kaggle.toml"))
        .unwrap();
    let (fp32, bf16) = (dir.join("fp32.toml"), dir.join("bf16.toml"));
    std::fs::write(&fp32, &base).unwrap();
    let with_bf16 = base.replace("[model]\n", "[model]\ndense_precision = \"bf16\"\n");
    assert_ne!(with_bf16, base);
    std::fs::write(&bf16, with_bf16).unwrap();
    let (plain, fast) = (dir.join("plain.toml"), dir.join("fast.toml"));
    std::fs::write(&plain, TWO_BY_TWO).unwrap();
    let doubled = TWO_BY_TWO.replace(
        "efficiency = 0.5",
        "efficiency = 0.5\nbf16_peak_tflops = 0.1",
    );
    std::fs::write(&fast, doubled).unwrap();
    let simulate = |cfg: &std::path::Path, hw: &std::path::Path| {
        towerrec(&[
            "simulate",
            "--config",
            cfg.to_str().unwrap(),
            "--hardware",
            hw.to_str().unwrap(),
            "--json",
        ])
    };
    let step = |cfg, hw| {
        let out = simulate(cfg, hw);
        assert!(out.status.success(), "{}", text(&out).1);
        let line = text(&out).0.lines().next().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["step_seconds"].as_f64().unwrap()
    };
    let refused = simulate(&bf16, &plain);
    assert!(!refused.status.success());
    assert!(
        text(&refused).1.contains("compute.bf16_peak_tflops"),
        "{}",
        text(&refused).1
    );
    let f32_step = step(&fp32, &plain);
    assert_eq!(step(&fp32, &fast), f32_step, "fp32 ignores the bf16 rate");
    let bf16_step = step(&bf16, &fast);
    assert!(bf16_step < f32_step, "{bf16_step} vs {f32_step}");
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

/// A DMT-DLRM config as examples/dmt_dlrm.toml has it (2 towers of the DLRM module,
/// D = 8 for 16-wide tables: compression 2, on 2 hosts × 2 ranks), over synthetic data
/// of 26 tables rather than the Criteo sample, which tests do not read.
fn dmt_config() -> std::path::PathBuf {
    let dir = tmp_dir("dmt");
    let path = dir.join("dmt.toml");
    std::fs::write(
        &path,
        r#"[model]
kind = "dlrm"
embedding_dim = 16
bottom_mlp = [512, 256, 64, 8]
top_mlp = [512, 256, 1]
[model.towers]
module = "dlrm"
count = 2
d = 8
c = 1
p = 0
[optimizer]
dense = { kind = "adam" }
dense_lr = 0.001
sparse = { kind = "adam" }
sparse_lr = 0.001
[train]
batch_size = 128
[data]
format = "synthetic"
train_samples = 8000
eval_samples = 2000
num_dense = 13
tables = [{ rows = 100000, count = 26 }]
[cluster]
hosts = 2
ranks_per_host = 2
"#,
    )
    .unwrap();
    path
}

#[test]
fn a_config_with_towers_is_simulated_with_its_towers() {
    let config = dmt_config();
    let config = config.to_str().unwrap();
    let out = towerrec(&[
        "simulate",
        "--config",
        config,
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
        config,
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

/// Runs towerrec with `args`, which must succeed; its standard output.
fn run(args: &[&str]) -> String {
    let out = towerrec(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}: {stderr}");
    stdout
}

/// Writes `zipf.toml` (four equal Zipf(1.05) tables) and its profile `z.profile` in
/// `dir`; the config's path.
fn profiled_zipf_config(dir: &Path) -> String {
    let config = dir.join("zipf.toml").to_str().unwrap().to_string();
    std::fs::write(
        &config,
        "[model]\nkind = \"dlrm\"\nembedding_dim = 16\nbottom_mlp = [32, 16]\ntop_mlp = [32, 1]\n\
         [optimizer]\ndense = { kind = \"sgd\" }\ndense_lr = 0.01\nsparse = { kind = \"sgd\" }\nsparse_lr = 0.01\n\
         [train]\nbatch_size = 2048\n\
         [data]\nformat = \"synthetic\"\ntrain_samples = 20000\neval_samples = 1000\nnum_dense = 4\n\
         tables = [{ rows = 5000, zipf_exponent = 1.05, count = 4 }]\n",
    )
    .unwrap();
    let profile = dir.join("z.profile");
    run(&[
        "profile",
        "--config",
        &config,
        "--quiet",
        "--out",
        profile.to_str().unwrap(),
    ]);
    config
}

/// `simulate --plans` on two hosts prices a rank's bytes within its host and across
/// hosts apart: table-row-wise tables, summed within their host before they cross,
/// send more within the host and no more across than whole tables do.
#[test]
fn plans_price_bytes_within_and_across_hosts_apart() {
    let dir = tmp_dir("plans-levels");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let config = profiled_zipf_config(&dir);
    let strategies = ["table-wise", "table-row-wise", "row-wise"];
    for s in strategies {
        run(&[
            "plan",
            "--config",
            &config,
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--strategy",
            s,
            "--output",
            &p(&format!("{s}.json")),
        ]);
    }
    let plans: Vec<String> = strategies.iter().map(|s| p(&format!("{s}.json"))).collect();
    let hardware = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/dmt/cal-emu.toml");
    let lines: Vec<serde_json::Value> = run(&[
        "simulate",
        "--config",
        &config,
        "--json",
        "--profile",
        &p("z.profile"),
        "--hardware",
        hardware.to_str().unwrap(),
        "--plans",
        &plans.join(","),
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let shares = |plan: usize, level: &str| -> Vec<f64> {
        let key = format!("rank_{level}_exchange_share");
        lines[plan][key.as_str()]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    // One equally read table per rank: every rank is an even spread on both levels.
    for level in ["intra", "cross"] {
        assert!(
            shares(0, level).iter().all(|x| (x - 1.0).abs() < 1e-9),
            "{}",
            lines[0]
        );
    }
    let (intra, cross) = (shares(1, "intra"), shares(1, "cross"));
    assert!(intra.iter().all(|&x| x > 1.5), "{}", lines[1]);
    assert!(cross.iter().all(|&x| x < 1.0 + 1e-9), "{}", lines[1]);
    let step = |plan: usize| lines[plan]["step_seconds"].as_f64().unwrap();
    assert!(
        step(1) < step(2),
        "table-row-wise {} ≥ row-wise {}",
        step(1),
        step(2)
    );
}

/// `simulate --plans`: an even plan is the ordinary flat step, a plan that keeps hot
/// rows local is priced faster, the tables file other planners read is written, and a
/// plan for another cluster shape is refused.
#[test]
fn plans_are_priced_rank_by_rank() {
    let dir = tmp_dir("plans");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let config = profiled_zipf_config(&dir);
    let topo = ["--hosts", "1", "--ranks-per-host", "4"];
    let plan = |strategy: &str, extra: &[&str], out: &str| {
        let mut a = vec!["plan", "--config", &config, "--strategy", strategy];
        a.extend_from_slice(&topo);
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--output", out]);
        run(&a);
    };
    let tables = p("tables.json");
    plan("table-wise", &["--tables-out", &tables], &p("tw.json"));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tables).unwrap()).unwrap();
    assert_eq!(t["format"], "towerrec-tables-v1");
    assert_eq!(t["topology"]["ranks_per_host"], 4);
    assert_eq!(t["batch_size"], 2048);
    assert_eq!(t["tables"].as_array().unwrap().len(), 4);
    assert_eq!(t["tables"][0]["rows"], 5000);
    assert_eq!(t["tables"][0]["bytes_per_row"], 64);
    let prof = p("z.profile");
    plan(
        "oper",
        &["--profile", &prof, "--extra-memory", "5%"],
        &p("oper.json"),
    );

    let plans = format!("{},{}", p("tw.json"), p("oper.json"));
    let hw = ["--hardware", "dgx-a100"];
    let mut a = vec![
        "simulate",
        "--config",
        &config,
        "--json",
        "--profile",
        &prof,
        "--plans",
        &plans,
    ];
    a.extend_from_slice(&hw);
    let lines: Vec<serde_json::Value> = run(&a)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    // Four equally read tables, one per rank: every rank does an even share, all of
    // it within the one host.
    for (share, even) in [
        ("rank_lookup_share", 1.0),
        ("rank_intra_exchange_share", 1.0),
        ("rank_cross_exchange_share", 0.0),
    ] {
        for x in lines[0][share].as_array().unwrap() {
            assert!(
                (x.as_f64().unwrap() - even).abs() < 1e-9,
                "{share}: {}",
                lines[0]
            );
        }
    }
    let mut a = vec!["simulate", "--config", &config, "--json", "--gpus", "4"];
    a.extend_from_slice(&hw);
    let flat: serde_json::Value = serde_json::from_str(run(&a).lines().next().unwrap()).unwrap();
    let even = lines[0]["step_seconds"].as_f64().unwrap();
    let want = flat["step_seconds"].as_f64().unwrap();
    assert!((even - want).abs() <= 1e-12 * want, "{even} against {want}");
    // Training: the copies' gradients are all-reduced every step, inside the step.
    let sync = lines[1]["copy_sync_seconds"].as_f64().unwrap();
    assert!(sync > 0.0, "{}", lines[1]);
    assert_eq!(lines[0]["copy_sync_seconds"], 0.0);
    // Inference (no sync): reading hot rows from local copies shortens the step.
    let mut a = vec!["simulate", "--config", &config, "--json", "--mode", "infer"];
    a.extend_from_slice(&["--profile", &prof, "--plans", &plans]);
    a.extend_from_slice(&hw);
    let infer: Vec<serde_json::Value> = run(&a)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (even, oper) = (
        infer[0]["step_seconds"].as_f64().unwrap(),
        infer[1]["step_seconds"].as_f64().unwrap(),
    );
    assert!(
        oper < even,
        "copies of hot rows should shorten the step: {oper} ≥ {even}"
    );
    assert_eq!(infer[1]["copy_sync_seconds"], 0.0);
    assert!(
        lines[1]["model_bytes_per_iteration"].as_f64().unwrap()
            < lines[0]["model_bytes_per_iteration"].as_f64().unwrap()
    );

    let out = towerrec(&[
        "plan",
        "--config",
        &config,
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--output",
        &p("2x2.json"),
    ]);
    assert!(out.status.success());
    let out = towerrec(&[
        "simulate",
        "--config",
        &config,
        "--hardware",
        "dgx-a100",
        "--profile",
        &prof,
        "--plans",
        &p("2x2.json"),
    ]);
    common::assert_fails_with(&out, &["2 host(s) × 2 ranks", "8 chips per host"]);
    let out = towerrec(&["simulate", "--config", &config, "--plans", &p("tw.json")]);
    common::assert_fails_with(&out, &["--plans needs --profile"]);
}

/// `--parts`: a towerrec config's training step is priced in halves by default, as
/// `towerrec train` runs it (`cluster.overlap_halves`), and says what ran beside what;
/// whole on request or where towerrec runs the exchange whole (SPTT alone); refused
/// where it cannot apply.
#[test]
fn training_steps_are_priced_in_parts_as_towerrec_runs_them() {
    let dir = tmp_dir("parts");
    let hw = dir.join("hw.toml");
    std::fs::write(&hw, TWO_BY_TWO).unwrap();
    let hw = hw.to_str().unwrap();
    let json = |config: &str, extra: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec![
            "simulate",
            "--config",
            config,
            "--hardware",
            hw,
            "--compare",
            "flat,sptt,dmt",
            "--json",
        ];
        a.extend_from_slice(extra);
        run(&a)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let config = "bench/dmt/speed.toml";
    let halves = json(config, &[]);
    let whole = json(config, &["--parts", "1"]);
    let parts: Vec<u64> = halves
        .iter()
        .map(|v| v["parts"].as_u64().unwrap())
        .collect();
    assert_eq!(
        parts,
        [2, 1, 2],
        "flat and DMT's early maps split, SPTT alone does not"
    );
    let step = |v: &serde_json::Value| v["step_seconds"].as_f64().unwrap();
    for (h, w) in halves.iter().zip(&whole) {
        assert_eq!(w["parts"], 1);
        assert!(w["overlaps"].as_array().unwrap().is_empty());
        if h["parts"] == 1 {
            assert_eq!(step(h), step(w));
            continue;
        }
        // Each part's dense work beside the other part's exchange: on this slow link
        // all of it hidden, less the second collective's latency each way.
        let overlaps = h["overlaps"].as_array().unwrap();
        assert_eq!(overlaps.len(), 2);
        let hidden: f64 = overlaps
            .iter()
            .map(|o| o["hidden_seconds"].as_f64().unwrap())
            .sum();
        assert!(hidden > 0.0 && step(h) < step(w), "{h} against {w}");
        assert!(step(w) - step(h) <= hidden * (1.0 + 1e-12));
    }
    // The config's own setting is the default.
    let off = dir.join("whole.toml");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(repo.join(config)).unwrap();
    std::fs::write(&off, format!("{text}overlap_halves = false\n")).unwrap();
    let off_steps: Vec<f64> = json(off.to_str().unwrap(), &[]).iter().map(step).collect();
    assert_eq!(off_steps, whole.iter().map(step).collect::<Vec<_>>());
    // The text names the parts beside each other.
    let out = run(&[
        "simulate",
        "--config",
        config,
        "--hardware",
        hw,
        "--compare",
        "flat,sptt,dmt",
    ]);
    for want in [
        "steps in 2 parts where the exchange splits",
        "phases at 4 chips, flat, in 2 parts:",
        "overlapped: part 1 of embedding_exchange",
        "overlapped: part 0 of embedding_grad_exchange",
        "phases at 4 chips, sptt, whole steps",
        "overlapped: the last chunk's step f of embedding_exchange",
        "overlapped: the first chunk's step f of embedding_grad_exchange",
    ] {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
    for (args, expect) in [
        (
            &["--parts", "3"][..],
            "--parts 3: towerrec runs a training step whole (1) or in halves (2)",
        ),
        (&["--parts", "0"][..], "--parts 0"),
        (
            &["--parts", "2", "--mode", "infer"][..],
            "--parts applies to training steps",
        ),
    ] {
        let mut a = vec!["simulate", "--config", config, "--hardware", hw];
        a.extend_from_slice(args);
        common::assert_fails_with(&towerrec(&a), &[expect]);
    }
    let out = towerrec(&["simulate", "--reproduce", "dmt", "--parts", "1"]);
    assert!(!out.status.success());
}

/// `simulate --plans` prices a plan's step in halves where towerrec runs it so, and
/// whole with table-row-wise tables across hosts (their two-step exchange).
#[test]
fn plans_run_in_halves_unless_their_exchange_runs_whole() {
    let dir = tmp_dir("plans-parts");
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let config = profiled_zipf_config(&dir);
    for s in ["table-wise", "table-row-wise"] {
        run(&[
            "plan",
            "--config",
            &config,
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--strategy",
            s,
            "--output",
            &p(&format!("{s}.json")),
        ]);
    }
    let hardware = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/dmt/cal-emu.toml");
    let plans = format!("{},{}", p("table-wise.json"), p("table-row-wise.json"));
    let profile = p("z.profile");
    let priced = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec![
            "simulate",
            "--config",
            &config,
            "--json",
            "--profile",
            &profile,
            "--hardware",
            hardware.to_str().unwrap(),
            "--plans",
            &plans,
        ];
        a.extend_from_slice(extra);
        run(&a)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let halves = priced(&[]);
    let whole = priced(&["--parts", "1"]);
    assert_eq!(
        (halves[0]["parts"].as_u64(), halves[1]["parts"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(halves[1]["step_seconds"], whole[1]["step_seconds"]);
    assert_eq!(halves[0]["overlaps"].as_array().unwrap().len(), 2);
    assert_ne!(halves[0]["step_seconds"], whole[0]["step_seconds"]);
}
