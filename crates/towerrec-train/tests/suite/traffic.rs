//! Bytes per training step, measured by the traffic accounting, against the closed-form
//! volumes of the scale-in paper's Appendix (Algorithms 1 and 2) for table-wise
//! ("no sharding"), row-wise ("full sharding") and data-parallel tables.
//!
//! Notation: `p` ranks, `B_r` samples on rank `r` (`B` in all), table dim `d`, `n_{r,t}`
//! ids of table `t` in rank `r`'s samples, `n_{r,t,s}` those falling in row shard `s`.
//! Ids, lengths and sample counts are 8 bytes, embeddings and gradients 4. Per step:
//!
//! - input distribution (the indices AlltoAll): every ordered pair `r → s`, `r ≠ s`, a
//!   sample count (8 bytes), then per table-wise table owned by `s`: `8·(B_r + n_{r,t})`;
//!   per row-wise table: `8·(B_r + n_{r,t,s})`;
//! - output distribution (pooled AlltoAll / ReduceScatter forward, and the same volume
//!   of gradients backward): table-wise `2 · 4·d·(B − B_owner)`; row-wise
//!   `2 · 4·d·(p − 1)·B`;
//! - dense gradients (AllReduce of `N` floats as ReduceScatter + AllGather, and one
//!   float more: the ranks' count of non-finite findings in the step, which the step's
//!   check reads): `2·(p − 1)·4·(N + 1)`;
//! - data-parallel tables (AllGather of bags and pooled gradients):
//!   `(p − 1)·(8·(B + n_t) + 4·d·B)`.

use crate::common;

use std::path::Path;
use towerrec_comm::{ClusterTraffic, Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_data::{next_batch, open, schema, Part};
use towerrec_plan::{planners, Plan, ShardingType};
use towerrec_train::cluster::{rank_slice, run_ranks, table_specs};
use towerrec_train::trainer::train_step;
use towerrec_train::Config;

fn config() -> Config {
    let text = r#"
[model]
kind = "dlrm"
embedding_dim = 8
bottom_mlp = [16, 8]
top_mlp = [16, 1]

[optimizer]
dense = { kind = "sgd" }
dense_lr = 0.01
sparse = { kind = "sgd" }
sparse_lr = 0.1

[train]
batch_size = 29

[data]
format = "synthetic"
train_samples = 100
eval_samples = 10
num_dense = 4
tables = [{ rows = 60, pooling = { mean = 3.0 }, count = 3 }]
"#;
    Config::from_toml(text, "test", Path::new(".")).unwrap()
}

/// One training step of `plan` on `topology`: the cluster's traffic, without set-up.
fn one_step(cfg: &Config, batch: &Batch, topology: Topology, plan: &Plan) -> ClusterTraffic {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let flats = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, 0, comm, plan)?;
        let before = model.comm().unwrap().traffic();
        let (mut l, mut g) = (Vec::new(), Vec::new());
        train_step(&mut model, batch, (0.1, 0.1), &mut l, &mut g)?;
        Ok(model.comm().unwrap().traffic().since(&before).to_flat())
    })
    .unwrap();
    ClusterTraffic::from_flat(topology, &flats.concat())
}

fn dense_floats(cfg: &Config) -> u64 {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let mut m = common::single(cfg, &s, 0).unwrap();
    m.dense_params().iter().map(|p| p.value.len() as u64).sum()
}

/// The closed-form bytes of every phase for `plan`.
fn closed_form(cfg: &Config, batch: &Batch, plan: &Plan) -> [u64; 4] {
    let t = plan.topology;
    let p = t.world_size();
    let d = cfg.model.embedding_dim as u64;
    let slices: Vec<Batch> = (0..p)
        .map(|r| rank_slice(batch, r, p).into_owned())
        .collect();
    let b_all = batch.batch_size() as u64;
    let ids = |r: usize, table: usize| slices[r].sparse.feature(table).values.to_vec();
    let (mut input, mut output, mut sparse) = (0u64, 0u64, 0u64);
    // Sample counts on every ordered pair.
    input += 8 * (p * (p - 1)) as u64;
    let names: Vec<&str> = batch.sparse.keys().iter().map(String::as_str).collect();
    for (ti, name) in names.iter().enumerate() {
        let entry = plan.table(name).unwrap();
        match entry.sharding {
            ShardingType::TableWise => {
                let o = entry.shards[0].rank;
                for (r, sl) in slices.iter().enumerate().filter(|&(r, _)| r != o) {
                    input += 8 * (sl.batch_size() as u64 + ids(r, ti).len() as u64);
                }
                output += 2 * 4 * d * (b_all - slices[o].batch_size() as u64);
            }
            ShardingType::RowWise => {
                for (r, sl) in slices.iter().enumerate() {
                    for sh in entry.shards.iter().filter(|sh| sh.rank != r) {
                        let inside = ids(r, ti)
                            .iter()
                            .filter(|&&id| (sh.rows.0 as u64..sh.rows.1 as u64).contains(&id))
                            .count() as u64;
                        input += 8 * (sl.batch_size() as u64 + inside);
                    }
                }
                output += 2 * 4 * d * (p as u64 - 1) * b_all;
            }
            ShardingType::DataParallel => {
                let n: u64 = (0..p).map(|r| ids(r, ti).len() as u64).sum();
                sparse += (p as u64 - 1) * (8 * (b_all + n) + 4 * d * b_all);
            }
            other => panic!("no closed form here for {other:?}"),
        }
    }
    let dense = 2 * (p as u64 - 1) * 4 * (dense_floats(cfg) + 1);
    [input, output, dense, sparse]
}

fn check(topology: Topology, strategy: &str) {
    let cfg = config();
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(&cfg, &s);
    let plan = match strategy {
        "table_wise" => planners::table_wise(&specs, topology).unwrap(),
        "row_wise" => planners::row_wise(&specs, topology).unwrap(),
        "data_parallel" => planners::data_parallel(&specs, topology).unwrap(),
        _ => unreachable!(),
    };
    let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir).unwrap();
    let batch = next_batch(stream.as_mut(), cfg.train.batch_size)
        .unwrap()
        .unwrap();
    let got = one_step(&cfg, &batch, topology, &plan);
    let want = closed_form(&cfg, &batch, &plan);
    let phases = [
        Phase::InputDist,
        Phase::OutputDist,
        Phase::DenseGradSync,
        Phase::SparseGradSync,
    ];
    for (phase, want) in phases.iter().zip(want) {
        assert_eq!(
            got.phase(*phase).total(),
            want,
            "{strategy} on {topology}: {} bytes",
            phase.name()
        );
    }
    assert_eq!(
        got.phase(Phase::Control).total(),
        0,
        "no control traffic in a step"
    );
}

#[test]
fn table_wise_bytes_match_closed_form() {
    for (h, l) in [(1, 2), (2, 2), (2, 3), (4, 1)] {
        check(Topology::new(h, l).unwrap(), "table_wise");
    }
}

#[test]
fn row_wise_bytes_match_closed_form() {
    for (h, l) in [(1, 2), (2, 2), (2, 3), (4, 1)] {
        check(Topology::new(h, l).unwrap(), "row_wise");
    }
}

#[test]
fn data_parallel_bytes_match_closed_form() {
    for (h, l) in [(1, 2), (2, 2), (2, 3), (4, 1)] {
        check(Topology::new(h, l).unwrap(), "data_parallel");
    }
}

#[test]
fn cross_host_bytes_follow_the_topology() {
    // Row-wise over 2 hosts × 2 ranks: each rank sends the same volume of pooled partial
    // sums to every other rank, so two thirds of the output distribution crosses hosts.
    let cfg = config();
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = Topology::new(2, 2).unwrap();
    let plan = planners::row_wise(&table_specs(&cfg, &s), topology).unwrap();
    let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir).unwrap();
    // A batch that splits evenly, so every pair carries the same output volume.
    let batch = next_batch(stream.as_mut(), 28).unwrap().unwrap();
    let got = one_step(&cfg, &batch, topology, &plan);
    let out = got.phase(Phase::OutputDist);
    assert_eq!(out.cross_host, 2 * out.intra_host);
    // Every pair's bytes are classified by the hosts of its ends.
    for src in 0..4 {
        for dst in 0..4 {
            let n = got.pair(Phase::OutputDist, src, dst);
            assert_eq!(n == 0, src == dst, "pair {src}→{dst}: {n}");
        }
    }
    // Every rank spent time inside the step's exchanges, and none in phases it never
    // entered.
    for r in &got.ranks {
        assert!(r.collective_seconds(Phase::InputDist) > 0.0);
        assert!(r.collective_seconds(Phase::OutputDist) > 0.0);
        assert_eq!(r.collective_seconds(Phase::TowerPeer), 0.0);
        assert_eq!(r.collective_seconds(Phase::SparseGradSync), 0.0);
    }
}

/// Table-row-wise tables on several hosts: the shards of a table (all on one host) sum
/// their partial sums within the host, and each sum crosses hosts once. Per table `t`
/// on host `h` with `L` shards, forward and backward alike: `4·d·(B − B_h)` bytes
/// across hosts (the flat path would send `L` times that), and within the host every
/// shard's rows of the samples of the host's other ranks' peers, `4·d·(L − 1)·B`.
#[test]
fn table_row_wise_sums_within_the_host_before_crossing() {
    let cfg = config();
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(&cfg, &s);
    for (h, l) in [(2, 2), (2, 3), (3, 2)] {
        let topology = Topology::new(h, l).unwrap();
        let plan = planners::table_row_wise(&specs, topology).unwrap();
        let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir).unwrap();
        let batch = next_batch(stream.as_mut(), cfg.train.batch_size)
            .unwrap()
            .unwrap();
        let got = one_step(&cfg, &batch, topology, &plan).phase(Phase::OutputDist);
        let p = topology.world_size();
        let b: Vec<u64> = (0..p)
            .map(|r| rank_slice(&batch, r, p).batch_size() as u64)
            .collect();
        let d = cfg.model.embedding_dim as u64;
        let (mut cross, mut intra) = (0, 0);
        for entry in &plan.tables {
            let host = topology.host_of(entry.shards[0].rank);
            let on_host: u64 = topology.host_ranks(host).map(|r| b[r]).sum();
            let all: u64 = b.iter().sum();
            let shards = entry.shards.len() as u64;
            cross += 2 * 4 * d * (all - on_host);
            intra += 2 * 4 * d * (shards - 1) * all;
        }
        assert_eq!(got.cross_host, cross, "on {topology}");
        assert_eq!(got.intra_host, intra, "on {topology}");
    }
}
