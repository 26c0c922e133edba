//! Distributed training equals single-process training.
//!
//! For every sharding type alone and for mixed plans, on topologies 1×1, 1×4, 2×2, 4×1
//! and 2×3 (hosts × ranks per host), 20 steps of training on an in-process cluster give
//! the same losses, dense parameters and embedding tables (gathered whole) as one
//! process trained on the same global batches.
//!
//! Tolerance: the cluster adds the same numbers in a different order (gradients summed
//! per rank then over ranks, row-wise partial sums per shard), so results agree to float
//! rounding, not bit for bit. After 20 steps the largest difference observed is printed;
//! the test allows `TOL = 1e-5` absolute on parameters of magnitude ≤ ~0.5 and 1e-6
//! relative on losses.

use crate::common;

use std::path::Path;
use towerrec_comm::{Comm, Topology};
use towerrec_core::Batch;
use towerrec_data::{next_batch, open, schema, Part};
use towerrec_plan::oper::{self, Mode};
use towerrec_plan::{planners, Plan, Shard, ShardingType, TablePlan};
use towerrec_train::cluster::{run_ranks, table_specs};
use towerrec_train::sharded::WholeTable;
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

const STEPS: usize = 20;
const TOL: f32 = 1e-5;

fn config(sparse_opt: &str, pooling: &str) -> Config {
    config_of("dlrm", sparse_opt, pooling)
}

/// [`config`] for a model `kind` (DLRM or DCN).
fn config_of(kind: &str, sparse_opt: &str, pooling: &str) -> Config {
    let text = format!(
        r#"
[model]
kind = "{kind}"
cross_layers = 2
embedding_dim = 8
bottom_mlp = [16, 8]
top_mlp = [16, 1]
pooling = "{pooling}"

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "{sparse_opt}" }}
sparse_lr = 0.1

[train]
batch_size = 30
seed = 3

[data]
format = "synthetic"
train_samples = 620
eval_samples = 60
num_dense = 4
seed = 5
tables = [
  {{ rows = 50, pooling = 1, count = 2 }},
  {{ rows = 97, pooling = {{ mean = 3.0 }}, count = 2 }},
  {{ rows = 7, pooling = 2 }},
]
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// The first `STEPS` global batches (the last one short: 620 = 20·30 + 20, so batch 20
/// would be the partial one; use a batch size that leaves a partial batch inside).
fn batches(cfg: &Config) -> Vec<Batch> {
    let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir).unwrap();
    let mut out = Vec::new();
    while out.len() < STEPS {
        // Vary the global batch size (including sizes not divisible by the world and
        // smaller than it) so that uneven slices and empty ranks are exercised.
        let size = [30, 29, 7, 3, 1][out.len() % 5];
        match next_batch(stream.as_mut(), size).unwrap() {
            Some(b) => out.push(b),
            None => break,
        }
    }
    assert_eq!(out.len(), STEPS);
    out
}

/// Losses, dense parameters and whole tables after training.
struct Outcome {
    /// Whether the steps ran in halves.
    in_halves: bool,
    losses: Vec<f64>,
    dense: Vec<Vec<f32>>,
    tables: Vec<WholeTable>,
}

fn run(model: &mut Model, cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Vec<Vec<f32>>) {
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let mut losses = Vec::new();
    for b in batches {
        let mine = train_step(model, b, lrs, &mut logits, &mut grad).unwrap();
        losses.push(towerrec_train::cluster::global_sum(model, mine).unwrap());
    }
    let dense = model
        .dense_params()
        .iter()
        .map(|p| p.value.to_vec())
        .collect();
    (losses, dense)
}

fn single(cfg: &Config, batches: &[Batch]) -> Outcome {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    let initial = model.whole_tables().unwrap().unwrap();
    let (losses, dense) = run(&mut model, cfg, batches);
    let tables = model.whole_tables().unwrap().unwrap();
    // The comparison means something only if training moved the parameters far beyond
    // the tolerance.
    let moved = initial
        .iter()
        .zip(&tables)
        .map(|(a, b)| max_diff(&a.weights, &b.weights))
        .fold(0.0, f32::max);
    assert!(
        moved > 1000.0 * TOL,
        "training moved the tables by only {moved}"
    );
    Outcome {
        in_halves: false,
        losses,
        dense,
        tables,
    }
}

fn cluster(cfg: &Config, batches: &[Batch], topology: Topology, plan: &Plan) -> Outcome {
    cluster_with(cfg, batches, topology, plan, false)
}

/// [`cluster`], with steps in halves or not.
fn cluster_with(
    cfg: &Config,
    batches: &[Batch],
    topology: Topology,
    plan: &Plan,
    halves: bool,
) -> Outcome {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    plan.validate(&table_specs(cfg, &s), topology, None)
        .unwrap_or_else(|e| panic!("plan does not validate: {e}\n{}", plan.to_json_pretty()));
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        model.set_replica_sync(cfg.cluster.replica_sync);
        model.set_overlap_halves(halves);
        let in_halves = model.steps_in_halves();
        let (losses, dense) = run(&mut model, cfg, batches);
        let tables = model.whole_tables()?;
        Ok(tables.map(|tables| Outcome {
            in_halves,
            losses,
            dense,
            tables,
        }))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    outs.into_iter()
        .next()
        .unwrap()
        .expect("rank 0 has the tables")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Compares and returns the largest parameter difference.
fn compare(what: &str, want: &Outcome, got: &Outcome) -> f32 {
    for (step, (w, g)) in want.losses.iter().zip(&got.losses).enumerate() {
        assert!(
            (w - g).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}: loss at step {step}: single {w}, cluster {g}"
        );
    }
    let mut worst = 0.0f32;
    for (w, g) in want.dense.iter().zip(&got.dense) {
        worst = worst.max(max_diff(w, g));
    }
    for (w, g) in want.tables.iter().zip(&got.tables) {
        assert_eq!(w.name, g.name);
        assert_eq!(w.step, g.step, "{what}: table {} step", w.name);
        worst = worst.max(max_diff(&w.weights, &g.weights));
        for ((wn, wv), (gn, gv)) in w.state.iter().zip(&g.state) {
            assert_eq!(wn, gn);
            worst = worst.max(max_diff(wv, gv));
        }
    }
    assert!(
        worst <= TOL,
        "{what}: parameters differ by up to {worst} (> {TOL})"
    );
    worst
}

/// A plan mixing every sharding type over `topology`.
fn mixed(cfg: &Config, topology: Topology) -> Plan {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(cfg, &s);
    let w = topology.world_size();
    let last = w - 1;
    let full = |rank, t: &towerrec_plan::TableSpec| Shard {
        rank,
        rows: (0, t.rows),
        columns: (0, t.dim),
    };
    let row_split = |ranks: &[usize], t: &towerrec_plan::TableSpec| {
        let n = ranks.len();
        let mut start = 0;
        ranks
            .iter()
            .enumerate()
            .map(|(i, &rank)| {
                let rows = t.rows / n + usize::from(i < t.rows % n);
                let shard = Shard {
                    rank,
                    rows: (start, start + rows),
                    columns: (0, t.dim),
                };
                start += rows;
                shard
            })
            .collect::<Vec<_>>()
    };
    let host_ranks: Vec<usize> = topology.host_ranks(topology.hosts - 1).collect();
    let all: Vec<usize> = (0..w).rev().collect();
    let tables = vec![
        TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: specs[0].name.clone(),
            sharding: ShardingType::TableWise,
            shards: vec![full(last, &specs[0])],
        },
        TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: specs[1].name.clone(),
            sharding: ShardingType::ColumnWise,
            shards: {
                let cuts = [0, 3, 5, 8];
                (0..3)
                    .map(|i| Shard {
                        rank: (i + w - 1) % w,
                        rows: (0, specs[1].rows),
                        columns: (cuts[i], cuts[i + 1]),
                    })
                    .collect::<Vec<_>>()
            },
        },
        TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: specs[2].name.clone(),
            sharding: ShardingType::RowWise,
            shards: row_split(&all, &specs[2]),
        },
        TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: specs[3].name.clone(),
            sharding: ShardingType::TableRowWise,
            shards: row_split(&host_ranks, &specs[3]),
        },
        TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: specs[4].name.clone(),
            sharding: ShardingType::DataParallel,
            shards: vec![],
        },
    ];
    // Column-wise shards need distinct ranks: on small worlds fall back to one shard.
    let mut plan = Plan {
        topology,
        tables,
        towers: Vec::new(),
    };
    if w < 3 {
        plan.tables[1].shards = vec![full(0, &specs[1])];
        plan.tables[1].sharding = ShardingType::TableWise;
    }
    plan
}

const TOPOLOGIES: [(usize, usize); 5] = [(1, 1), (1, 4), (2, 2), (4, 1), (2, 3)];

fn every_plan(cfg: &Config, topology: Topology) -> Vec<(&'static str, Plan)> {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(cfg, &s);
    vec![
        (
            "table_wise",
            planners::table_wise(&specs, topology).unwrap(),
        ),
        ("row_wise", planners::row_wise(&specs, topology).unwrap()),
        (
            "column_wise",
            planners::column_wise(&specs, topology, 2).unwrap(),
        ),
        (
            "table_row_wise",
            planners::table_row_wise(&specs, topology).unwrap(),
        ),
        (
            "data_parallel",
            planners::data_parallel(&specs, topology).unwrap(),
        ),
        ("mixed", mixed(cfg, topology)),
        ("oper_training", oper_plan(cfg, topology, Mode::Training)),
        ("oper_inference", oper_plan(cfg, topology, Mode::Inference)),
    ]
}

/// An OPER plan from an exact profile of the training data, with replicas (20% extra
/// memory; the tables are tiny) for training (on every rank) or inference (where
/// Algorithm 1 puts them).
fn oper_plan(cfg: &Config, topology: Topology, mode: Mode) -> Plan {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(cfg, &s);
    let profile = common::training_profile(cfg);
    let p = common::oper_params(cfg, mode);
    let plan = oper::plan(&specs, &profile, topology, &p).unwrap().plan;
    if topology.world_size() > 1 {
        assert!(
            plan.tables
                .iter()
                .any(|t| t.partitions.iter().any(|q| !q.replicas.is_empty())),
            "no replicas in the {mode:?} plan on {topology}"
        );
    }
    plan
}

#[test]
fn every_sharding_type_matches_single_process_sgd_sum_pooling() {
    check_all(&config("sgd", "sum"));
}

#[test]
fn every_sharding_type_matches_single_process_adam_mean_pooling() {
    check_all(&config("adam", "mean"));
}

fn check_all(cfg: &Config) {
    let batches = batches(cfg);
    let want = single(cfg, &batches);
    let mut worst = 0.0f32;
    for (hosts, ranks) in TOPOLOGIES {
        let topology = Topology::new(hosts, ranks).unwrap();
        for (name, plan) in every_plan(cfg, topology) {
            let got = cluster(cfg, &batches, topology, &plan);
            let d = compare(&format!("{name} on {topology}"), &want, &got);
            println!("{name:>15} on {topology}: max |Δparam| after {STEPS} steps = {d:e}");
            worst = worst.max(d);
        }
    }
    println!("largest difference over all plans and topologies: {worst:e}");
}

/// Steps in halves (`cluster.overlap_halves`) train as one process does, on every plan
/// and topology, for DLRM (the bottom MLP around the exchanges) and DCN (the CrossNet's
/// gradients summed over the halves); the uneven batches include slices of one sample and none, whose first
/// half is empty. Plans that cannot split (table-row-wise across hosts) run whole.
#[test]
fn steps_in_halves_match_single_process() {
    for cfg in [config("adam", "mean"), config_of("dcn", "sgd", "sum")] {
        let batches = batches(&cfg);
        let want = single(&cfg, &batches);
        let mut split = 0;
        for (hosts, ranks) in TOPOLOGIES {
            let topology = Topology::new(hosts, ranks).unwrap();
            for (name, plan) in every_plan(&cfg, topology) {
                let got = cluster_with(&cfg, &batches, topology, &plan, true);
                let d = compare(&format!("{name} on {topology} in halves"), &want, &got);
                println!("{name:>15} on {topology} in halves: max |Δparam| = {d:e}");
                // Table-row-wise tables across hosts (alone or in the mixed plan) sum in
                // two steps, which do not split.
                let two_step = hosts > 1 && matches!(name, "table_row_wise" | "mixed");
                assert_eq!(got.in_halves, !two_step, "{name} on {topology}: in halves");
                split += usize::from(got.in_halves);
            }
        }
        assert!(split >= 30, "only {split} runs in halves");
    }
}

#[test]
fn row_wise_adagrad_matches_on_row_and_table_sharding() {
    let cfg = config("row_wise_adagrad", "sum");
    let batches = batches(&cfg);
    let want = single(&cfg, &batches);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(&cfg, &s);
    let topology = Topology::new(2, 2).unwrap();
    for plan in [
        planners::row_wise(&specs, topology).unwrap(),
        planners::table_wise(&specs, topology).unwrap(),
        oper_plan(&cfg, topology, Mode::Training),
    ] {
        compare(
            "row-wise adagrad",
            &want,
            &cluster(&cfg, &batches, topology, &plan),
        );
    }
}

#[test]
fn a_failing_rank_stops_the_cluster_promptly_and_is_named() {
    let cfg = config("sgd", "sum");
    let batches = batches(&cfg);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    let plan = planners::row_wise(&table_specs(&cfg, &s), topology).unwrap();
    for panic in [false, true] {
        let started = std::time::Instant::now();
        let err = run_ranks(topology, 1, |comm: Comm| {
            let rank = comm.rank();
            let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
            let (mut l, mut g) = (Vec::new(), Vec::new());
            for (i, b) in batches.iter().enumerate() {
                if rank == 2 && i == 3 {
                    if panic {
                        panic!("injected failure");
                    }
                    return Err(towerrec_train::Error::Plan("injected failure".into()));
                }
                train_step(&mut model, b, (0.1, 0.1), &mut l, &mut g)?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("rank 2") && err.contains("injected failure"),
            "{err}"
        );
        assert!(
            started.elapsed().as_secs() < 10,
            "took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn ranks_with_different_configs_are_refused_at_start() {
    let cfg = config("sgd", "sum");
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(1, 3).unwrap();
    let plan = planners::table_wise(&table_specs(&cfg, &s), topology).unwrap();
    let dir = std::env::temp_dir().join(format!("towerrec-mismatch-{}", std::process::id()));
    let opts = towerrec_train::TrainOptions {
        out_dir: dir.clone(),
        ..Default::default()
    };
    let err = run_ranks(topology, 1, |comm: Comm| {
        let mut mine = cfg.clone();
        if comm.rank() == 1 {
            mine.optimizer.sparse_lr *= 2.0;
        }
        towerrec_train::cluster::train_rank(&mine, &opts, comm, &plan, &mut towerrec_train::Silent)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("the config differs") && err.contains("[1]"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_checkpoint_is_the_whole_model_and_resumes_on_another_topology() {
    use towerrec_train::checkpoint::{save, Checkpoint, Progress};
    let cfg = config("adam", "mean");
    let batches = batches(&cfg);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let path =
        std::env::temp_dir().join(format!("towerrec-ckpt-{}.safetensors", std::process::id()));
    // Train and save on 2×2 with a mixed plan.
    let from = Topology::new(2, 2).unwrap();
    let plan = mixed(&cfg, from);
    let saved = run_ranks(from, 1, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        run(&mut model, &cfg, &batches[..10]);
        save(&path, &mut model, &cfg, Progress::default(), &[])?;
        model.whole_tables()
    })
    .unwrap()
    .remove(0)
    .unwrap();
    // Load on 1×3 row-wise, into OPER's row-partitioned stores with copies on 2×2
    // (every copy loaded), and in one process: the same tables, bit for bit.
    let ckpt = Checkpoint::read(&path).unwrap();
    let load = |topology: Topology, plan: &Plan| {
        run_ranks(topology, 1, |comm: Comm| {
            let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, plan)?;
            ckpt.apply(&mut model)?;
            model.whole_tables()
        })
        .unwrap()
        .remove(0)
        .unwrap()
    };
    let to = Topology::new(1, 3).unwrap();
    assert_eq!(
        saved,
        load(to, &planners::row_wise(&table_specs(&cfg, &s), to).unwrap())
    );
    assert_eq!(saved, load(from, &oper_plan(&cfg, from, Mode::Training)));
    let mut single = common::single(&cfg, &s, cfg.train.seed).unwrap();
    ckpt.apply(&mut single).unwrap();
    assert_eq!(saved, single.whole_tables().unwrap().unwrap());
    let _ = std::fs::remove_file(path);
}

#[test]
fn every_replica_sync_matches_single_process() {
    use towerrec_train::config::ReplicaSync;
    let mut cfg = config("adam", "mean");
    let batches = batches(&cfg);
    let want = single(&cfg, &batches);
    for (hosts, ranks) in [(2, 2), (1, 3)] {
        let topology = Topology::new(hosts, ranks).unwrap();
        for mode in [Mode::Training, Mode::Inference] {
            let plan = oper_plan(&cfg, topology, mode);
            for sync in [
                ReplicaSync::Sparse,
                ReplicaSync::Dense,
                ReplicaSync::AllGather,
            ] {
                cfg.cluster.replica_sync = sync;
                let got = cluster(&cfg, &batches, topology, &plan);
                let d = compare(&format!("{mode:?} {sync:?} on {topology}"), &want, &got);
                println!(
                    "OPER {mode:?} plan, replica_sync {sync:?} on {topology}: max |Δparam| = {d:e}"
                );
            }
        }
    }
}

/// A cluster scores the eval part as one process does: every rank reads its own slice
/// and the scores and labels come back in order.
#[test]
fn cluster_scoring_matches_single_process() {
    use towerrec_train::evaluate::score;
    let cfg = config("sgd", "sum");
    let batches = batches(&cfg);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let eval = || open(&cfg.data, Part::Eval, cfg.train.bad_rows, &cfg.base_dir).unwrap();
    let mut single = common::single(&cfg, &s, cfg.train.seed).unwrap();
    run(&mut single, &cfg, &batches);
    // Batches of 13 leave a short last batch and ranks with uneven slices.
    let want = score(&mut single, eval(), 13).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    for (name, plan) in [
        (
            "table_wise",
            planners::table_wise(&table_specs(&cfg, &s), topology).unwrap(),
        ),
        ("oper_inference", oper_plan(&cfg, topology, Mode::Inference)),
    ] {
        let got = run_ranks(topology, 1, |comm: Comm| {
            let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
            run(&mut model, &cfg, &batches);
            score(&mut model, eval(), 13)
        })
        .unwrap();
        for scored in got {
            assert_eq!(scored.labels, want.labels, "{name}");
            assert_eq!(scored.probs.len(), want.probs.len(), "{name}");
            let d = max_diff(&scored.probs, &want.probs);
            assert!(d < TOL, "{name}: scores differ by {d}");
        }
    }
}
