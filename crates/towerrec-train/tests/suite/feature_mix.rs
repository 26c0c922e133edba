//! Any feature mix (docs/CONFIG.md, "Any feature mix"): models on data without dense
//! features (DLRM with `bottom_mlp = []`, DCN), flat and DMT, in one process and on an
//! in-process 2 × 2 cluster; dense-only models in one process; the errors of a model
//! that does not fit its data's mix.
//!
//! Tolerances as in `distributed.rs` and `dmt.rs`: a cluster sums the same numbers in
//! another order, so its losses agree with one process's to 1e-6 relative and its
//! parameters to 1e-5 absolute; a single pass-through tower is the flat model bit for
//! bit, as in `dmt.rs`.

use crate::common;

use std::path::{Path, PathBuf};
use towerrec_comm::{Comm, Topology};
use towerrec_core::Batch;
use towerrec_data::{schema, Schema};
use towerrec_plan::{planners, Plan};
use towerrec_train::cluster::{resolve_plan, run_ranks, table_specs};
use towerrec_train::sharded::WholeTable;
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model, Silent, TrainOptions};

const STEPS: usize = 20;

/// Which features the synthetic data has.
#[derive(Clone, Copy, PartialEq)]
enum Mix {
    /// Sparse features only: 5 tables, one-hot and multi-hot.
    Sparse,
    /// Dense features only: 6 of them, no tables.
    Dense,
}

/// A `[model]` section of `kind` with `bottom_mlp` and the extra lines `towers`.
fn model(kind: &str, bottom_mlp: &str, towers: &str) -> String {
    format!(
        r#"[model]
kind = "{kind}"
embedding_dim = 8
bottom_mlp = {bottom_mlp}
top_mlp = [16, 1]
cross_layers = 2
{towers}"#
    )
}

/// The synthetic tables of [`Mix::Sparse`].
const TABLES: &str = r#"[
  { rows = 50, pooling = 1, count = 2 },
  { rows = 97, pooling = { mean = 3.0 }, count = 2 },
  { rows = 7, pooling = 2 },
]"#;

fn config_text(model: &str, mix: Mix, train_samples: usize) -> String {
    match mix {
        Mix::Sparse => data_text(model, 0, TABLES, train_samples),
        Mix::Dense => data_text(model, 6, "[]", train_samples),
    }
}

/// A whole config: `model`, then synthetic data of `num_dense` dense features and
/// `tables`.
fn data_text(model: &str, num_dense: usize, tables: &str, train_samples: usize) -> String {
    format!(
        r#"
{model}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

[train]
batch_size = 30
seed = 3

[data]
format = "synthetic"
train_samples = {train_samples}
eval_samples = 300
num_dense = {num_dense}
seed = 5
tables = {tables}
"#
    )
}

fn config(model: &str, mix: Mix) -> Config {
    Config::from_toml(&config_text(model, mix, 3000), "test", Path::new(".")).expect("test config")
}

const DCN_TOWERS: &str = r#"[model.towers]
module = "dcn"
count = 2
d = 3
cross_layers = 1"#;

/// The models without dense features this file trains: name, kind, towers.
const WITHOUT_DENSE: [(&str, &str, &str); 5] = [
    ("flat DLRM", "dlrm", ""),
    ("flat DCN", "dcn", ""),
    ("DMT-DLRM", "dlrm", common::DLRM_TOWERS),
    (
        "DMT-DLRM, per-feature maps",
        "dlrm",
        common::PER_FEATURE_TOWERS,
    ),
    ("DMT-DCN", "dcn", DCN_TOWERS),
];

fn without_dense(kind: &str, towers: &str) -> Config {
    config(&model(kind, "[]", towers), Mix::Sparse)
}

fn data_schema(cfg: &Config) -> Schema {
    schema(&cfg.data, &cfg.base_dir).expect("schema")
}

/// Losses, dense parameters (named) and, where this rank has them, whole tables after
/// training on `batches`.
struct Outcome {
    losses: Vec<f64>,
    dense: Vec<(String, Vec<f32>)>,
    tables: Option<Vec<WholeTable>>,
}

fn train(model: &mut Model, cfg: &Config, batches: &[Batch]) -> towerrec_train::Result<Outcome> {
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let mut losses = Vec::new();
    for b in batches {
        let mine = train_step(model, b, lrs, &mut logits, &mut grad)?;
        losses.push(towerrec_train::cluster::global_sum(model, mine)?);
    }
    model.refresh_tower_replicas()?;
    let dense = model
        .dense_params()
        .iter()
        .map(|p| (p.name.clone(), p.value.to_vec()))
        .collect();
    let tables = model.whole_tables()?;
    Ok(Outcome {
        losses,
        dense,
        tables,
    })
}

fn single(cfg: &Config, batches: &[Batch]) -> Outcome {
    let s = data_schema(cfg);
    cfg.validate_against(&s).expect("the config fits the data");
    let mut model = common::single(cfg, &s, cfg.train.seed).expect("the model builds");
    train(&mut model, cfg, batches).expect("training runs")
}

/// The global batches of 30 samples of `cfg`'s training data, `n` of them.
fn even_batches(cfg: &Config, n: usize) -> Vec<Batch> {
    let mut stream = towerrec_data::open(
        &cfg.data,
        towerrec_data::Part::Train,
        cfg.train.bad_rows,
        &cfg.base_dir,
    )
    .expect("training data");
    (0..n)
        .map(|_| {
            towerrec_data::next_batch(stream.as_mut(), 30)
                .expect("a batch")
                .expect("data left")
        })
        .collect()
}

/// Mean of the first and of the last `k` losses.
fn first_and_last(losses: &[f64], k: usize) -> (f64, f64) {
    let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len() as f64;
    (mean(&losses[..k]), mean(&losses[losses.len() - k..]))
}

/// Trains `cfg` in one process for 100 steps (one pass over its 3,000 samples) and
/// checks that the loss falls: the last 20 steps' mean loss at least 5% below the first
/// 20 steps', and below the loss of the best constant prediction on those steps' labels
/// (the labels' entropy), so the model learned more than the positive rate.
fn assert_loss_falls(what: &str, cfg: &Config) -> Outcome {
    let batches = even_batches(cfg, 100);
    let out = single(cfg, &batches);
    assert!(
        out.losses.iter().all(|l| l.is_finite()),
        "{what}: {:?}",
        out.losses
    );
    let (first, last) = first_and_last(&out.losses, 20);
    let labels: Vec<f32> = batches[80..]
        .iter()
        .flat_map(|b| b.labels.clone())
        .collect();
    let p = labels.iter().map(|&y| f64::from(y)).sum::<f64>() / labels.len() as f64;
    let entropy = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln());
    eprintln!(
        "{what}: mean loss of the first 20 steps {first:.4}, of the last 20 {last:.4} \
         (constant prediction {entropy:.4})"
    );
    assert!(last < 0.95 * first, "{what}: loss {first} → {last}");
    assert!(
        last < 0.97 * entropy,
        "{what}: loss {last}, constant prediction {entropy}"
    );
    out
}

#[test]
fn models_without_dense_features_train_and_their_loss_falls() {
    for (what, kind, towers) in WITHOUT_DENSE {
        let cfg = without_dense(kind, towers);
        let out = assert_loss_falls(what, &cfg);
        let names: Vec<&str> = out.dense.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            !names.iter().any(|n| n.starts_with("bottom.")),
            "{what}: no bottom MLP: {names:?}"
        );
        assert_eq!(
            !towers.is_empty(),
            names.iter().any(|n| n.starts_with("tower.")),
            "{what}: {names:?}"
        );
    }
}

/// DLRM without dense features: the interaction's output is the pairwise dots of the
/// embedding (or tower output) vectors alone, so the top MLP reads exactly that many
/// columns; DCN's CrossNet reads the embeddings alone.
#[test]
fn without_dense_features_the_interaction_reads_the_embeddings_alone() {
    // (config, top MLP inputs): 5 tables give 10 pairs (15 with self-dots); DLRM towers
    // of tables {0, 2, 4} and {1, 3} give c·F + p = 4 and 3 vectors, 21 pairs; DCN's
    // CrossNet is 5 × 8 wide, or 5 × 3 with its towers.
    for (cfg, top_in) in [
        (without_dense("dlrm", ""), 10),
        (
            config(&model("dlrm", "[]", "self_interaction = true"), Mix::Sparse),
            15,
        ),
        (without_dense("dlrm", common::DLRM_TOWERS), 21),
        (without_dense("dcn", ""), 40),
        (without_dense("dcn", DCN_TOWERS), 15),
    ] {
        let s = data_schema(&cfg);
        let mut m = common::single(&cfg, &s, 0).unwrap();
        let params = m.dense_params();
        let top = params
            .iter()
            .find(|p| p.name == "top.0.weight")
            .expect("the top MLP's first weights");
        assert_eq!(top.value.len(), top_in * 16, "{:?}", cfg.model);
        if cfg.model.kind == towerrec_train::config::ModelKind::Dcn {
            let cross = params
                .iter()
                .find(|p| p.name.starts_with("cross.0."))
                .expect("the first cross layer");
            assert!(cross.value.len() >= top_in, "{}", cross.name);
        }
    }
}

/// One pass-through tower holding every table is the flat model without dense
/// features, bit for bit (as `dmt.rs` checks with them).
#[test]
fn one_pass_through_tower_without_dense_is_the_flat_model_bit_for_bit() {
    for kind in ["dlrm", "dcn"] {
        let flat = without_dense(kind, "");
        let towers = without_dense(kind, "[model.towers]\nmodule = \"identity\"\ncount = 1");
        let b = common::uneven_batches(&flat, STEPS);
        let (f, t) = (single(&flat, &b), single(&towers, &b));
        let bits = |l: &[f64]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&f.losses), bits(&t.losses), "{kind}: losses");
        assert_eq!(f.dense, t.dense, "{kind}: dense parameters");
    }
}

/// Trains `cfg` on 2 hosts × 2 ranks on `plan` (steps in halves where the plan allows
/// if `halves`) and in one process on the same uneven global batches, and compares
/// losses, dense parameters and tables.
fn assert_cluster_is_one_process(what: &str, cfg: &Config, plan: &Plan, halves: bool) {
    let b = common::uneven_batches(cfg, STEPS);
    let want = single(cfg, &b);
    let s = data_schema(cfg);
    let topology = Topology::new(2, 2).unwrap();
    plan.validate(&table_specs(cfg, &s), topology, None)
        .unwrap_or_else(|e| panic!("{what}: plan does not validate: {e}"));
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        model.set_overlap_halves(halves);
        train(&mut model, cfg, &b)
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let moved = want
        .dense
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.abs()).fold(0.0, f32::max))
        .fold(0.0, f32::max);
    assert!(moved > 0.0, "{what}: no parameters");
    for (rank, got) in outs.iter().enumerate() {
        for (step, (w, g)) in want.losses.iter().zip(&got.losses).enumerate() {
            assert!(
                (w - g).abs() <= 1e-6 * w.abs().max(1.0),
                "{what} (halves {halves}) rank {rank}: loss at step {step}: {w} vs {g}"
            );
        }
        assert_eq!(want.dense.len(), got.dense.len(), "{what}");
        for ((name, w), (gname, g)) in want.dense.iter().zip(&got.dense) {
            assert_eq!(name, gname, "{what}");
            let worst = max_diff(w, g);
            assert!(
                worst <= 1e-5,
                "{what} (halves {halves}) rank {rank}: {name} differs by {worst}"
            );
        }
    }
    let tables = outs[0].tables.as_ref().expect("rank 0 gathers the tables");
    let want_tables = want.tables.as_ref().expect("one process has its tables");
    assert_eq!(tables.len(), want_tables.len());
    for (w, g) in want_tables.iter().zip(tables) {
        assert_eq!((&w.name, w.step), (&g.name, g.step), "{what}");
        let worst = max_diff(&w.weights, &g.weights);
        assert!(worst <= 1e-5, "{what}: table {} differs by {worst}", w.name);
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Models without dense features on an in-process 2 × 2 cluster train as in one
/// process: flat models on the default (greedy) plan and on row-wise tables, DMT models
/// on their default tower plans; whole steps and steps in halves.
#[test]
fn without_dense_a_cluster_is_one_process() {
    let topology = Topology::new(2, 2).unwrap();
    for (what, kind, towers) in WITHOUT_DENSE {
        let cfg = without_dense(kind, towers);
        let s = data_schema(&cfg);
        let default = resolve_plan(&cfg, &s, topology, None, None).unwrap();
        assert_eq!(
            default.towers.len(),
            if towers.is_empty() { 0 } else { 2 },
            "{what}"
        );
        for halves in [false, true] {
            assert_cluster_is_one_process(what, &cfg, &default, halves);
        }
        if towers.is_empty() {
            let rows = planners::row_wise(&table_specs(&cfg, &s), topology).unwrap();
            assert_cluster_is_one_process(&format!("{what}, row-wise"), &cfg, &rows, true);
        }
    }
}

/// A DMT model without dense features on a plan without towers: the modules run where
/// the samples live, as in one process.
#[test]
fn without_dense_dmt_on_a_flat_plan_is_one_process() {
    let topology = Topology::new(2, 2).unwrap();
    for (kind, towers) in [("dlrm", common::DLRM_TOWERS), ("dcn", DCN_TOWERS)] {
        let cfg = without_dense(kind, towers);
        let s = data_schema(&cfg);
        let plan = planners::table_wise(&table_specs(&cfg, &s), topology).unwrap();
        assert_cluster_is_one_process(&format!("{kind} towers, flat plan"), &cfg, &plan, true);
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "towerrec-feature-mix-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Whole runs (training, evaluation, checkpoint) without dense features, in one process
/// and on a 2 × 2 cluster: the same AUC, above chance.
#[test]
fn whole_runs_without_dense_features_learn_in_one_process_and_on_a_cluster() {
    for (what, kind, towers) in [("flat DLRM", "dlrm", ""), ("DMT-DCN", "dcn", DCN_TOWERS)] {
        let text = config_text(&model(kind, "[]", towers), Mix::Sparse, 3000);
        let mut aucs = Vec::new();
        for cluster in ["", "[cluster]\nhosts = 2\nranks_per_host = 2"] {
            let cfg =
                Config::from_toml(&format!("{text}\n{cluster}\n"), "test", Path::new(".")).unwrap();
            let out = tmp(&format!("{kind}-{}", cluster.len()));
            let opts = TrainOptions {
                out_dir: out.clone(),
                ..Default::default()
            };
            let summary = towerrec_train::cluster::train_configured(&cfg, &opts, 2, &mut Silent)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let auc = summary.auc.expect("both classes");
            eprintln!("{what} ({} ranks): AUC {auc:.4}", cfg.cluster.world_size());
            assert!(auc > 0.6, "{what} ({cluster:?}): AUC {auc}");
            assert!(out
                .join(towerrec_train::checkpoint::CHECKPOINT_FILE)
                .exists());
            aucs.push(auc);
            let _ = std::fs::remove_dir_all(&out);
        }
        assert!((aucs[0] - aucs[1]).abs() < 1e-4, "{what}: AUCs {aucs:?}");
    }
}

/// The error of `cfg` against its data, or "" when it fits; the model build gives the
/// same message.
fn mix_error(cfg: &Config) -> String {
    let s = data_schema(cfg);
    let checked = cfg.validate_against(&s).err().map(|e| e.to_string());
    let built = common::single(cfg, &s, 0).err().map(|e| e.to_string());
    match (checked, built) {
        (None, None) => String::new(),
        (Some(c), Some(b)) => {
            let message = c.split_once(": ").map_or(c.as_str(), |(_, m)| m);
            assert!(b.contains(message), "validate: {c}\nbuild: {b}");
            c
        }
        (c, b) => panic!("validate and build disagree: {c:?} / {b:?}"),
    }
}

#[test]
fn a_bottom_mlp_that_does_not_fit_the_data_is_named_with_the_fix() {
    // Data without dense features, a bottom MLP.
    let e = mix_error(&config(&model("dlrm", "[16, 8]", ""), Mix::Sparse));
    assert!(
        e.contains("model.bottom_mlp")
            && e.contains("no dense features")
            && e.contains("write bottom_mlp = []"),
        "{e}"
    );
    // Data with dense features, no bottom MLP: the width it must end in.
    let e = mix_error(&config(&model("dlrm", "[]", ""), Mix::Dense));
    assert!(
        e.contains("model.bottom_mlp")
            && e.contains("6 dense features")
            && e.contains("model.embedding_dim (8)")
            && e.contains("bottom_mlp = [32, 8]"),
        "{e}"
    );
    // With towers of D = 4 it must end in D.
    let text = data_text(&model("dlrm", "[]", common::DLRM_TOWERS), 3, TABLES, 300);
    let cfg = Config::from_toml(&text, "test", Path::new(".")).unwrap();
    let e = mix_error(&cfg);
    assert!(
        e.contains("3 dense features") && e.contains("model.towers.d (4)"),
        "{e}"
    );
    // The fixes load.
    assert_eq!(mix_error(&without_dense("dlrm", "")), "");
    assert_eq!(
        mix_error(&config(&model("dlrm", "[16, 8]", ""), Mix::Dense)),
        ""
    );
    // DCN takes either mix as it is.
    assert_eq!(mix_error(&without_dense("dcn", "")), "");
    assert_eq!(mix_error(&config(&model("dcn", "[]", ""), Mix::Dense)), "");
}

/// DLRM without dense features and with one table has no pair to interact: an error
/// saying what to set; with self-interaction it trains.
#[test]
fn dlrm_without_dense_features_needs_a_pair() {
    let cfg = |extra: &str| {
        let text = data_text(&model("dlrm", "[]", extra), 0, "[{ rows = 50 }]", 300);
        Config::from_toml(&text, "test", Path::new(".")).unwrap()
    };
    let bare = cfg("");
    assert_eq!(data_schema(&bare).sparse.len(), 1);
    let e = mix_error(&bare);
    assert!(
        e.contains("one table") && e.contains("model.self_interaction = true"),
        "{e}"
    );
    // A single tower of one output vector (c = 1, p = 0 over one table): the same,
    // found when the model is built.
    let tower = cfg("[model.towers]\nmodule = \"dlrm\"\ncount = 1\nd = 8\nc = 1");
    let s = data_schema(&tower);
    tower
        .validate_against(&s)
        .expect("counted when the model is built");
    let e = common::single(&tower, &s, 0)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("1 vector (the towers' outputs)") && e.contains("model.self_interaction = true"),
        "{e}"
    );
    let with_self = cfg("self_interaction = true");
    let b = common::uneven_batches(&with_self, 3);
    let out = single(&with_self, &b);
    assert!(out.losses.iter().all(|l| l.is_finite()));
}

/// Dense-only models in one process: DLRM is its bottom MLP then its top MLP (the
/// interaction of one vector is that vector), DCN a CrossNet over the dense features;
/// both learn.
#[test]
fn dense_only_models_train_in_one_process() {
    for (what, kind, bottom) in [("DLRM", "dlrm", "[16, 8]"), ("DCN", "dcn", "[]")] {
        let cfg = config(&model(kind, bottom, ""), Mix::Dense);
        let out = assert_loss_falls(&format!("dense-only {what}"), &cfg);
        assert_eq!(out.tables.as_deref().map(<[_]>::len), Some(0), "{what}");
        let top = out
            .dense
            .iter()
            .find(|(n, _)| n == "top.0.weight")
            .expect("a top MLP");
        // DLRM's top MLP reads the bottom MLP's 8 outputs; DCN's the 6 crossed features.
        let width = if kind == "dlrm" { 8 } else { 6 };
        assert_eq!(top.1.len(), width * 16, "{what}");
    }
}

/// On a cluster, a dense-only model has nothing to shard: a clear error, for the
/// default plan and for a run's cluster alike; towers have nothing to group.
#[test]
fn dense_only_on_a_cluster_says_nothing_to_shard() {
    let text = config_text(&model("dlrm", "[16, 8]", ""), Mix::Dense, 300);
    let cfg = Config::from_toml(
        &format!("{text}\n[cluster]\nhosts = 2\nranks_per_host = 2\n"),
        "test",
        Path::new("."),
    )
    .unwrap();
    let s = data_schema(&cfg);
    let topology = Topology::new(2, 2).unwrap();
    let e = resolve_plan(&cfg, &s, topology, None, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nothing to shard") && e.contains("cluster.hosts = 1"),
        "{e}"
    );
    let out = tmp("dense-only-cluster");
    let opts = TrainOptions {
        out_dir: out.clone(),
        ..Default::default()
    };
    let e = towerrec_train::cluster::train_configured(&cfg, &opts, 2, &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nothing to shard"), "{e}");
    let _ = std::fs::remove_dir_all(&out);

    // (Checked with the data, before the run's towers are looked for.)
    let towers = config(&model("dcn", "[]", DCN_TOWERS), Mix::Dense);
    let e = towers
        .validate_against(&data_schema(&towers))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.towers") && e.contains("no sparse features"),
        "{e}"
    );
}

/// Data with no features at all is refused naming what to describe.
#[test]
fn data_without_any_feature_is_refused() {
    let text = data_text(&model("dcn", "[]", ""), 0, "[]", 300);
    let cfg = Config::from_toml(&text, "test", Path::new(".")).unwrap();
    let e = mix_error(&cfg);
    assert!(e.contains("neither dense nor sparse features"), "{e}");
}
