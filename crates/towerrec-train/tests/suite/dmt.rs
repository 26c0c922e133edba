//! DMT models (`[model.towers]`): Tower Modules between the tables and the interaction.
//!
//! - one pass-through tower holding every table is the flat model, bit for bit;
//! - DMT-DLRM and DMT-DCN train on an in-process cluster (SPTT tower plan, modules
//!   replicated) as in one process, to float rounding;
//! - a checkpoint of a DMT model resumes it exactly.

use crate::common;

use std::path::Path;
use towerrec_comm::{Bytes, Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_train::cluster::{resolve_plan, run_ranks};
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

const STEPS: usize = 20;

fn config(kind: &str, towers: &str) -> Config {
    Config::from_toml(&config_text(kind, towers), "test", Path::new(".")).expect("test config")
}

fn config_text(kind: &str, towers: &str) -> String {
    // DLRM's bottom MLP ends in the towers' D (the embedding width without modules).
    let bottom: usize = towers
        .lines()
        .find_map(|l| l.strip_prefix("d = "))
        .filter(|_| !towers.contains("identity"))
        .map_or(8, |d| d.parse().expect("d"));
    let data = common::SYNTHETIC;
    format!(
        r#"
[model]
kind = "{kind}"
embedding_dim = 8
bottom_mlp = [16, {bottom}]
top_mlp = [16, 1]
cross_layers = 2
{towers}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

{data}
"#
    )
}

/// Losses and dense parameters after training `model` on `batches`.
fn train(model: &mut Model, cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Vec<Vec<f32>>) {
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let losses = batches
        .iter()
        .map(|b| {
            let mine = train_step(model, b, lrs, &mut logits, &mut grad).unwrap();
            towerrec_train::cluster::global_sum(model, mine).unwrap()
        })
        .collect();
    // Each module's copies outside its tower group are refreshed as for a checkpoint.
    model.refresh_tower_replicas().unwrap();
    let dense = model
        .dense_params()
        .iter()
        .map(|p| p.value.to_vec())
        .collect();
    (losses, dense)
}

fn single(cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Vec<Vec<f32>>) {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    cfg.validate_against(&s).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    train(&mut model, cfg, batches)
}

const DCN_TOWERS: &str = r#"[model.towers]
module = "dcn"
features = [["C1", "C3", "C5"], ["C2", "C4"]]
d = 3
cross_layers = 1"#;

#[test]
fn one_pass_through_tower_is_the_flat_model_bit_for_bit() {
    for kind in ["dlrm", "dcn"] {
        let flat = config(kind, "");
        let towers = config(kind, "[model.towers]\nmodule = \"identity\"\ncount = 1");
        let b = common::uneven_batches(&flat, STEPS);
        let (lf, df) = single(&flat, &b);
        let (lt, dt) = single(&towers, &b);
        let bits = |l: &[f64]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&lf), bits(&lt), "{kind}: losses");
        assert_eq!(df, dt, "{kind}: dense parameters");
    }
}

#[test]
fn dmt_models_train_and_their_modules_learn() {
    for (kind, towers) in [("dlrm", common::DLRM_TOWERS), ("dcn", DCN_TOWERS)] {
        let cfg = config(kind, towers);
        let s = schema(&cfg.data, &cfg.base_dir).unwrap();
        let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
        let (params, flops) = model.tower_counts().expect("a DMT model has towers");
        assert!(
            params > 0 && flops > 0,
            "{kind}: {params} parameters, {flops} FLOPs"
        );
        let before: Vec<Vec<f32>> = model
            .dense_params()
            .iter()
            .filter(|p| p.name.starts_with("tower."))
            .map(|p| p.value.to_vec())
            .collect();
        assert!(
            !before.is_empty(),
            "{kind}: tower parameters are dense parameters"
        );
        let (losses, _) = train(&mut model, &cfg, &common::uneven_batches(&cfg, STEPS));
        assert!(losses.iter().all(|l| l.is_finite()), "{kind}: {losses:?}");
        let after: Vec<Vec<f32>> = model
            .dense_params()
            .iter()
            .filter(|p| p.name.starts_with("tower."))
            .map(|p| p.value.to_vec())
            .collect();
        assert_ne!(before, after, "{kind}: the tower modules did not move");
    }
}

#[test]
fn dmt_on_a_cluster_is_dmt_in_one_process() {
    for (kind, towers) in [
        ("dlrm", common::DLRM_TOWERS),
        ("dlrm", common::PER_FEATURE_TOWERS),
        ("dcn", DCN_TOWERS),
    ] {
        assert_cluster_matches_one_process(kind, towers, None, false);
    }
}

/// Steps in halves (`cluster.overlap_halves`): with the maps before step d, SPTT's
/// chunks are cut from the halves of every slice (any chunk count; 7 leaves parts
/// empty, and the uneven batches give slices whose first half is empty) and train as
/// one process does; towers whose modules run between steps e and f run whole steps.
#[test]
fn dmt_in_halves_is_dmt_in_one_process() {
    for chunks in [None, Some(1), Some(3), Some(7)] {
        assert_cluster_matches_one_process("dlrm", common::PER_FEATURE_TOWERS, chunks, true);
    }
    for (kind, towers) in [("dlrm", common::DLRM_TOWERS), ("dcn", DCN_TOWERS)] {
        assert_cluster_matches_one_process(kind, towers, None, true);
    }
}

#[test]
fn any_chunk_count_of_the_exchange_is_dmt_in_one_process() {
    // Per-feature modules run before step d, where the exchange is cut into chunks of
    // samples; 7 chunks leave some ranks' parts empty in the uneven batches.
    for chunks in [1, 3, 7] {
        assert_cluster_matches_one_process("dlrm", common::PER_FEATURE_TOWERS, Some(chunks), false);
    }
}

/// Trains `kind` with `towers` on 2 hosts × 2 ranks (SPTT's exchange in `chunks`, or
/// the default; steps in halves where they can split if `halves`) and in one process,
/// and compares losses and dense parameters.
fn assert_cluster_matches_one_process(
    kind: &str,
    towers: &str,
    chunks: Option<usize>,
    halves: bool,
) {
    let cfg = config(kind, towers);
    let b = common::uneven_batches(&cfg, STEPS);
    let (want_l, want_d) = single(&cfg, &b);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    let plan = resolve_plan(&cfg, &s, topology, None, None).unwrap();
    assert_eq!(
        plan.towers.len(),
        2,
        "{kind}: the default plan has the model's towers"
    );
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        if let Some(c) = chunks {
            model.set_tower_chunks(c);
        }
        model.set_overlap_halves(halves);
        let split = model.steps_in_halves();
        Ok((train(&mut model, &cfg, &b), split))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // Only the maps before step d split.
    let splits = halves && towers == common::PER_FEATURE_TOWERS;
    for (rank, ((got_l, got_d), split)) in outs.iter().enumerate() {
        assert_eq!(*split, splits, "{kind} rank {rank}: in halves");
        for (w, g) in want_l.iter().zip(got_l) {
            assert!(
                (w - g).abs() <= 1e-6 * w.abs().max(1.0),
                "{kind} ({chunks:?} chunks) rank {rank}: loss {w} vs {g}\n{want_l:?}\n{got_l:?}"
            );
        }
        for (w, g) in want_d.iter().zip(got_d) {
            let worst = w
                .iter()
                .zip(g)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                worst <= 1e-5,
                "{kind} ({chunks:?} chunks) rank {rank}: dense parameters differ by {worst}"
            );
        }
    }
}

#[test]
fn bad_tower_configs_are_named() {
    let text = config_text(
        "dlrm",
        "[model.towers]\nmodule = \"dlrm\"\ncount = 2\nd = 4",
    );
    let err = Config::from_toml(&text, "test", Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs c or p"), "{err}");
    let text = "[model.towers]\nmodule = \"dcn\"\nfeatures = [[\"C1\"], [\"C1\", \"C2\", \"C3\", \"C4\", \"C5\"]]\nd = 3";
    let cfg = config("dcn", text);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let err = cfg.validate_against(&s).unwrap_err().to_string();
    assert!(err.contains("table 'C1' is in towers 0 and 1"), "{err}");
}

#[test]
fn dmt_with_modules_at_the_sample_owner_is_dmt_in_one_process() {
    let cfg = config("dlrm", common::DLRM_TOWERS);
    let b = common::uneven_batches(&cfg, STEPS);
    let (want_l, _) = single(&cfg, &b);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    // A plan without towers: the flat exchange, the modules where the samples live.
    let specs = towerrec_train::cluster::table_specs(&cfg, &s);
    let plan = towerrec_plan::planners::table_wise(&specs, topology).unwrap();
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        Ok(train(&mut model, &cfg, &b).0)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for got in outs {
        for (w, g) in want_l.iter().zip(&got) {
            assert!((w - g).abs() <= 1e-6 * w.abs().max(1.0), "loss {w} vs {g}");
        }
    }
}

/// Cross-host bytes of SPTT's step f per step, summed over the ranks.
fn peer_bytes(towers: &str) -> u64 {
    step_bytes(towers, Phase::TowerPeer).cross_host
}

/// Bytes of `phase` in one step, summed over the ranks.
fn step_bytes(towers: &str, phase: Phase) -> Bytes {
    let cfg = config("dlrm", towers);
    let b = common::uneven_batches(&cfg, STEPS);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    let plan = resolve_plan(&cfg, &s, topology, None, None).unwrap();
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        train(&mut model, &cfg, &b[..1]);
        Ok(model.comm().expect("sharded").traffic().phase(phase))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    outs.into_iter().fold(Bytes::default(), |mut sum, b| {
        sum += b;
        sum
    })
}

#[test]
fn tower_modules_compress_what_crosses_hosts() {
    // N = 8 per table; the DLRM module with c = 1, p = 0 and D = 4, 2 and 1 sends
    // 4, 2 and 1 per table: compression 2, 4 and 8.
    let identity = peer_bytes("[model.towers]\nmodule = \"identity\"\ncount = 2");
    for (d, ratio) in [(4, 2), (2, 4), (1, 8)] {
        let towers = format!("[model.towers]\nmodule = \"dlrm\"\ncount = 2\nd = {d}\nc = 1\np = 0");
        let compressed = peer_bytes(&towers);
        assert_eq!(compressed * ratio, identity, "D = {d}");
    }
}

#[test]
fn per_feature_modules_also_compress_the_intra_host_step() {
    // Run where the tables are looked up, before step d, the per-feature map (c = 1,
    // p = 0) shrinks step d's bytes as it does step f's; a module with a flat part
    // (p = 1) runs after step e and leaves step d at the tables' width.
    let intra = |towers: &str| step_bytes(towers, Phase::TowerIntra).intra_host;
    let identity = intra("[model.towers]\nmodule = \"identity\"\ncount = 2");
    for (d, ratio) in [(4, 2), (2, 4)] {
        let towers = format!("[model.towers]\nmodule = \"dlrm\"\ncount = 2\nd = {d}\nc = 1\np = 0");
        assert_eq!(intra(&towers) * ratio, identity, "D = {d}");
    }
    assert_eq!(intra(common::DLRM_TOWERS), identity);
}

#[test]
fn module_gradients_stay_inside_their_tower() {
    let cfg = config("dlrm", common::DLRM_TOWERS);
    let b = common::uneven_batches(&cfg, STEPS);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    let plan = resolve_plan(&cfg, &s, topology, None, None).unwrap();
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        let (mut logits, mut grad) = (Vec::new(), Vec::new());
        for batch in &b[..3] {
            train_step(&mut model, batch, lrs, &mut logits, &mut grad)?;
        }
        let traffic = |m: &Model| {
            m.comm()
                .expect("sharded")
                .traffic()
                .phase(Phase::TowerGradSync)
        };
        let training = traffic(&model);
        model.refresh_tower_replicas()?;
        Ok((training, traffic(&model)))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, (training, refreshed)) in outs.iter().enumerate() {
        // One tower per host: its module's gradients are summed over its host's ranks.
        assert!(training.intra_host > 0, "rank {rank}: {training:?}");
        assert_eq!(
            training.cross_host, 0,
            "rank {rank}: module gradients crossed hosts"
        );
        // The refresh before a checkpoint copies each module from its group's first
        // rank (0 and 2) to every rank; the others send nothing.
        if rank % 2 == 0 {
            assert!(refreshed.cross_host > 0, "rank {rank}: {refreshed:?}");
        } else {
            assert_eq!(refreshed.cross_host, 0, "rank {rank}: {refreshed:?}");
        }
    }
}

#[test]
fn flops_per_sample_are_counted_as_the_paper_counts_them() {
    let count = |towers: &str| {
        let cfg = config("dlrm", towers);
        let s = schema(&cfg.data, &cfg.base_dir).unwrap();
        let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
        model.forward_flops_per_sample()
    };
    // Flat: bottom 4→16→8 (384), dot of 6 vectors of 8 (2·36·8 = 576), top 23→16→1 (768).
    assert_eq!(count(""), 384 + 576 + 768);
    // DMT-DLRM, c = p = 1, D = 4, towers of 3 and 2 tables of N = 8: bottom 4→16→4
    // (256); modules 2·F·N·D·(c + p) = 384 and 256; 1 + 4 + 3 vectors of 4 (2·64·4 =
    // 512); top 32→16→1 (1056).
    assert_eq!(count(common::DLRM_TOWERS), 256 + 384 + 256 + 512 + 1056);
}

#[test]
fn towers_can_come_from_a_partition_file() {
    let dir = std::env::temp_dir().join(format!("towerrec-dmt-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("partition.json");
    let json = r#"{"mode":"coherent","towers":[["C2","C5"],["C1","C3","C4"]]}"#;
    std::fs::write(&file, json).unwrap();
    let towers = format!(
        "[model.towers]\nmodule = \"dlrm\"\nfile = {:?}\nd = 4\nc = 1\np = 1",
        file.display().to_string()
    );
    let cfg = config("dlrm", &towers);
    let t = cfg.model.towers.as_ref().expect("towers");
    let want: Vec<Vec<String>> = vec![
        vec!["C2".into(), "C5".into()],
        vec!["C1".into(), "C3".into(), "C4".into()],
    ];
    assert_eq!(t.features.as_ref(), Some(&want));
    let missing = towers.replace("partition.json", "nowhere.json");
    let err = Config::from_toml(&config_text("dlrm", &missing), "test", Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.towers.file") && err.contains("nowhere.json"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// A relative `model.towers.file` is read from the config file's directory, not from
/// the working directory (docs/CONFIG.md), so a config and its partition travel together.
#[test]
fn a_relative_towers_file_is_relative_to_the_config() {
    let dir = std::env::temp_dir().join(format!("towerrec-dmt-relfile-{}", std::process::id()));
    let conf = dir.join("conf");
    std::fs::create_dir_all(conf.join("parts")).unwrap();
    let json = r#"{"mode":"coherent","towers":[["C2","C5"],["C1","C3","C4"]]}"#;
    std::fs::write(conf.join("parts/partition.json"), json).unwrap();
    let towers =
        "[model.towers]\nmodule = \"dlrm\"\nfile = \"parts/partition.json\"\nd = 4\nc = 1\np = 1";
    let path = conf.join("c.toml");
    std::fs::write(&path, config_text("dlrm", towers)).unwrap();
    // The tests run in the crate's directory, which holds no parts/partition.json.
    assert!(!Path::new("parts/partition.json").exists());
    let cfg = Config::load(&path, &[]).expect("the partition beside the config");
    let want: Vec<Vec<String>> = vec![
        vec!["C2".into(), "C5".into()],
        vec!["C1".into(), "C3".into(), "C4".into()],
    ];
    assert_eq!(
        cfg.model.towers.as_ref().unwrap().features.as_ref(),
        Some(&want)
    );
    // A missing one is named where it was looked for: beside the config.
    std::fs::remove_file(conf.join("parts/partition.json")).unwrap();
    let err = Config::load(&path, &[]).unwrap_err().to_string();
    let looked = conf.join("parts/partition.json");
    assert!(err.contains(&looked.display().to_string()), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_summary_counts_dense_and_embedding_parameters() {
    // Tables of 50, 50, 97, 97 and 7 rows of width 8.
    let embedding = (50 + 50 + 97 + 97 + 7) * 8;
    // Flat: bottom 4→16→8 (80 + 136); 6 vectors, 15 pairs: top 23→16→1 (384 + 17).
    let flat = 80 + 136 + 384 + 17;
    // DMT-DLRM, c = p = 1, D = 4, towers of 3 and 2 tables: bottom 4→16→4 (80 + 68);
    // modules F·N → p·D and N → c·D with biases (3·8·4 + 4 + 8·4 + 4 = 136, and
    // 2·8·4 + 4 + 36 = 104); 1 + 4 + 3 vectors, 28 pairs: top 32→16→1 (528 + 17).
    let dmt = 80 + 68 + 136 + 104 + 528 + 17;
    let dir = std::env::temp_dir().join(format!("towerrec-dmt-params-{}", std::process::id()));
    let summary = |towers: &str, topology: Option<Topology>, name: &str| {
        let mut cfg = config("dlrm", towers);
        cfg.train.max_steps = Some(1);
        let opts = towerrec_train::TrainOptions {
            out_dir: dir.join(name),
            ..Default::default()
        };
        match topology {
            None => towerrec_train::train(&cfg, &opts, &mut towerrec_train::Silent),
            Some(t) => towerrec_train::cluster::train_in_process(
                &cfg,
                &opts,
                t,
                None,
                1,
                &mut towerrec_train::Silent,
            ),
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = std::fs::read_to_string(dir.join(name).join("summary.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let get = |key: &str| {
            json[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {key}"))
        };
        (get("dense_params"), get("embedding_params"), get("params"))
    };
    let two_by_two = Topology::new(2, 2).unwrap();
    for (towers, topology, dense, name) in [
        ("", None, flat, "flat"),
        (common::DLRM_TOWERS, None, dmt, "dmt"),
        // Modules inside SPTT: every rank holds every module; counted once.
        (common::DLRM_TOWERS, Some(two_by_two), dmt, "dmt-2x2"),
    ] {
        let (d, e, all) = summary(towers, topology, name);
        assert_eq!(d, dense as u64, "{name}: dense parameters");
        assert_eq!(e, embedding as u64, "{name}: embedding parameters");
        assert_eq!(all, d + e, "{name}: params");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// `bias_init = "zero"` starts every Tower Module's linear biases at zero and leaves
/// everything else as drawn; `"normal"` draws them. The DLRM module's default is zero,
/// the DCN module's drawn.
#[test]
fn tower_module_biases_can_start_at_zero() {
    let biases_of = |kind: &str, towers: &str| -> Vec<(String, Vec<f32>)> {
        let cfg = config(kind, towers);
        let s = schema(&cfg.data, &cfg.base_dir).unwrap();
        let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
        model
            .dense_params()
            .into_iter()
            .filter(|p| p.name.starts_with("tower."))
            .map(|p| (p.name.clone(), p.value.to_vec()))
            .collect()
    };
    let tower_biases = |towers: &str| biases_of("dlrm", towers);
    let drawn = tower_biases(&format!("{}\nbias_init = \"normal\"", common::DLRM_TOWERS));
    let zero = tower_biases(&format!("{}\nbias_init = \"zero\"", common::DLRM_TOWERS));
    assert_eq!(
        tower_biases(common::DLRM_TOWERS),
        zero,
        "DLRM modules start at zero"
    );
    assert_eq!(drawn.len(), zero.len());
    let mut biases = 0;
    for ((name, a), (name_z, z)) in drawn.iter().zip(&zero) {
        assert_eq!(name, name_z);
        if name.ends_with("bias") {
            biases += 1;
            assert!(a.iter().any(|&v| v != 0.0), "{name} is drawn by default");
            assert!(z.iter().all(|&v| v == 0.0), "{name} starts at zero");
        } else {
            assert_eq!(a, z, "{name}: only the biases change");
        }
    }
    // Two towers, each with a flat (p = 1) and a per-feature (c = 1) map.
    assert_eq!(biases, 4);
    let dcn = biases_of("dcn", DCN_TOWERS);
    let drawn_dcn = biases_of("dcn", &format!("{DCN_TOWERS}\nbias_init = \"normal\""));
    assert_eq!(dcn, drawn_dcn, "DCN modules draw their biases by default");
    assert!(dcn
        .iter()
        .any(|(n, v)| n.ends_with("bias") && v.iter().any(|&x| x != 0.0)));
}
