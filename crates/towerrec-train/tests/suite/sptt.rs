//! DMT's Table 3 analogue: with pass-through towers, SPTT training is bit for bit the
//! flat path's training with the same table placement (paper §5.2.1: SPTT only
//! orchestrates the data flow and leaves the computation intact).
//!
//! On 2×2, 2×4 and 4×2 (hosts × ranks per host), with table-wise, column-wise,
//! row-wise, mixed and OPER row-partitioned tables (with hot-row replicas on the
//! tower's hosts) inside the towers, and with towers on one host or spanning two, 20
//! steps give the same losses, dense parameters and whole tables (and optimizer
//! state), compared as bits.

use crate::common;

use std::path::Path;
use towerrec_comm::{Bytes, ClusterTraffic, Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_plan::oper::{self, Mode};
use towerrec_plan::{planners, Plan, Shard, ShardingType, TablePlan, TableSpec, TowerPlan};
use towerrec_train::cluster::{run_ranks, table_specs};
use towerrec_train::sharded::WholeTable;
use towerrec_train::trainer::train_step;
use towerrec_train::Config;

const STEPS: usize = 20;
const DIM: usize = 8;

fn config(kind: &str) -> Config {
    pooled(kind, "sum")
}

fn pooled(kind: &str, pooling: &str) -> Config {
    let data = common::SYNTHETIC;
    let text = format!(
        r#"
[model]
kind = "{kind}"
embedding_dim = {DIM}
bottom_mlp = [16, {DIM}]
top_mlp = [16, 1]
pooling = "{pooling}"
cross_layers = 2

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

{data}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Loss bits of every step, dense parameters and whole tables after training, and the
/// bytes every rank sent to sum the gradients of rows with copies on several ranks.
#[derive(PartialEq, Debug)]
struct Outcome {
    losses: Vec<u64>,
    dense: Vec<Vec<u32>>,
    tables: Vec<WholeTable>,
    copy_sync: Bytes,
}

fn train(cfg: &Config, batches: &[Batch], topology: Topology, plan: &Plan) -> Outcome {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    plan.validate(&table_specs(cfg, &s), topology, None)
        .unwrap_or_else(|e| panic!("plan does not validate: {e}\n{}", plan.to_json_pretty()));
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        let before = model.comm().expect("sharded").traffic();
        let (mut logits, mut grad) = (Vec::new(), Vec::new());
        let mut losses = Vec::new();
        for b in batches {
            let mine = train_step(&mut model, b, lrs, &mut logits, &mut grad)?;
            losses.push(towerrec_train::cluster::global_sum(&model, mine)?.to_bits());
        }
        let dense = model
            .dense_params()
            .iter()
            .map(|p| p.value.iter().map(|v| v.to_bits()).collect())
            .collect();
        let sent = model.comm().expect("sharded").traffic().since(&before);
        let tables = model.whole_tables()?;
        Ok((tables, sent.to_flat(), losses, dense))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let flats: Vec<u64> = outs.iter().flat_map(|o| o.1.iter().copied()).collect();
    let copy_sync = ClusterTraffic::from_flat(topology, &flats).phase(Phase::SparseGradSync);
    let (tables, _, losses, dense) = outs.into_iter().next().unwrap();
    Outcome {
        losses,
        dense,
        tables: tables.expect("rank 0 has the tables"),
        copy_sync,
    }
}

#[derive(Clone, Copy, Debug)]
enum Inside {
    TableWise,
    ColumnWise,
    RowWise,
    Mixed,
    /// OPER's plan of each host group's tables on its hosts, with hot-row replicas
    /// there (for training: on every rank of the group).
    Oper,
    /// Row-wise over one host's ranks, typed table-row-wise: the flat path then sums
    /// within the host before crossing hosts (`sharded/trw.rs`).
    TableRowWise,
}

/// Tables spread over towers (table `i` in tower `i % towers`, tower `t` on host group
/// `t % groups`, groups of `k` consecutive hosts), each table sharded over its group's
/// ranks as `inside` says. Returns the plan with its towers.
fn tower_plan(cfg: &Config, topology: Topology, k: usize, towers: usize, inside: Inside) -> Plan {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(cfg, &s);
    if let Inside::Oper = inside {
        return oper_towers(cfg, &specs, topology, k, towers);
    }
    let groups = topology.hosts / k;
    let ranks_of = |g: usize| -> Vec<usize> {
        (g * k..(g + 1) * k)
            .flat_map(|h| topology.host_ranks(h))
            .collect()
    };
    let mut tables = Vec::new();
    let mut tower_features = vec![Vec::new(); towers];
    for (i, spec) in specs.iter().enumerate() {
        let tower = i % towers;
        tower_features[tower].push(spec.name.clone());
        let ranks = ranks_of(tower % groups);
        let m = ranks.len();
        let kind = match inside {
            Inside::Mixed => [Inside::TableWise, Inside::ColumnWise, Inside::RowWise][i % 3],
            other => other,
        };
        let (sharding, shards) = match kind {
            Inside::TableWise | Inside::Mixed | Inside::Oper => (
                ShardingType::TableWise,
                vec![Shard {
                    rank: ranks[i % m],
                    rows: (0, spec.rows),
                    columns: (0, DIM),
                }],
            ),
            Inside::ColumnWise => (
                ShardingType::ColumnWise,
                vec![
                    Shard {
                        rank: ranks[i % m],
                        rows: (0, spec.rows),
                        columns: (0, 3),
                    },
                    Shard {
                        rank: ranks[(i + 1) % m],
                        rows: (0, spec.rows),
                        columns: (3, DIM),
                    },
                ],
            ),
            Inside::RowWise | Inside::TableRowWise => {
                let n = m.min(spec.rows);
                let shards = (0..n)
                    .map(|j| Shard {
                        rank: ranks[(i + j) % m],
                        rows: (spec.rows * j / n, spec.rows * (j + 1) / n),
                        columns: (0, DIM),
                    })
                    .collect();
                let kind = match inside {
                    Inside::TableRowWise => ShardingType::TableRowWise,
                    _ => ShardingType::RowWise,
                };
                (kind, shards)
            }
        };
        tables.push(TablePlan {
            hot_rows: Vec::new(),
            partitions: Vec::new(),
            table: spec.name.clone(),
            sharding,
            shards,
        });
    }
    let towers = tower_features
        .into_iter()
        .enumerate()
        .map(|(t, features)| {
            let g = t % groups;
            TowerPlan {
                features,
                hosts: (g * k..(g + 1) * k).collect(),
            }
        })
        .collect();
    Plan {
        topology,
        tables,
        towers,
    }
}

/// The tables in towers as [`tower_plan`] groups them (the same strided assignment),
/// each host group's planned by OPER on its own hosts from an exact profile of the
/// training data, with replicas (20% extra memory: the tables are tiny).
fn oper_towers(
    cfg: &Config,
    specs: &[TableSpec],
    topology: Topology,
    k: usize,
    towers: usize,
) -> Plan {
    let profile = common::training_profile(cfg);
    let p = common::oper_params(cfg, Mode::Training);
    let groups = planners::strided_towers(specs.len(), towers);
    let plan = planners::with_towers(specs, topology, &groups, k, |t, sub| {
        oper::plan(t, &profile, sub, &p).map(|o| o.plan)
    })
    .unwrap();
    assert!(
        plan.tables
            .iter()
            .any(|t| t.partitions.iter().any(|q| !q.replicas.is_empty())),
        "no replicas in the plan"
    );
    plan
}

fn check(kind: &str, topology: Topology, k: usize, towers: usize, inside: Inside) {
    check_config(config(kind), topology, k, towers, inside);
}

fn check_config(cfg: Config, topology: Topology, k: usize, towers: usize, inside: Inside) {
    let kind = format!("{:?} pooling {:?}", cfg.model.kind, cfg.model.pooling);
    let batches = common::uneven_batches(&cfg, STEPS);
    let sptt = tower_plan(&cfg, topology, k, towers, inside);
    let flat = Plan {
        towers: Vec::new(),
        ..sptt.clone()
    };
    let want = train(&cfg, &batches, topology, &flat);
    let got = train(&cfg, &batches, topology, &sptt);
    let what = format!(
        "{kind} on {}×{}, towers of {k} host(s), {towers} towers, {inside:?}",
        topology.hosts, topology.ranks_per_host
    );
    assert_eq!(want.losses, got.losses, "{what}: losses");
    assert_eq!(want.dense, got.dense, "{what}: dense parameters");
    assert_eq!(want.tables, got.tables, "{what}: tables");
    if let Inside::Oper = inside {
        // The copies of a tower's rows sum their gradients among its hosts only: on
        // one-host towers nothing crosses hosts, where the flat path's world-wide sync
        // of the same rows does.
        assert!(got.copy_sync.total() > 0, "{what}: no copy sync");
        if k == 1 {
            assert_eq!(got.copy_sync.cross_host, 0, "{what}: {:?}", got.copy_sync);
            assert!(
                want.copy_sync.cross_host > 0,
                "{what}: {:?}",
                want.copy_sync
            );
        }
    }
}

/// The flat path's two-step table-row-wise exchange (within the host, then across)
/// gives SPTT's bits, which are the one-step flat exchange's (the tests above).
#[test]
fn table_row_wise_in_two_steps_is_sptt_bit_for_bit() {
    check(
        "dlrm",
        Topology::new(2, 2).unwrap(),
        1,
        2,
        Inside::TableRowWise,
    );
    check(
        "dlrm",
        Topology::new(2, 4).unwrap(),
        1,
        4,
        Inside::TableRowWise,
    );
    check(
        "dcn",
        Topology::new(4, 2).unwrap(),
        1,
        4,
        Inside::TableRowWise,
    );
    check_config(
        pooled("dlrm", "mean"),
        Topology::new(2, 2).unwrap(),
        1,
        2,
        Inside::TableRowWise,
    );
}

#[test]
fn sptt_with_oper_tables_is_the_flat_path_bit_for_bit() {
    check("dlrm", Topology::new(2, 2).unwrap(), 1, 2, Inside::Oper);
    check("dlrm", Topology::new(2, 2).unwrap(), 2, 2, Inside::Oper);
    check("dcn", Topology::new(4, 2).unwrap(), 1, 4, Inside::Oper);
    check_config(
        pooled("dlrm", "mean"),
        Topology::new(2, 4).unwrap(),
        1,
        4,
        Inside::Oper,
    );
}

const INSIDE: [Inside; 4] = [
    Inside::TableWise,
    Inside::ColumnWise,
    Inside::RowWise,
    Inside::Mixed,
];

#[test]
fn sptt_is_the_flat_path_bit_for_bit_on_2x2() {
    let t = Topology::new(2, 2).unwrap();
    for inside in INSIDE {
        check("dlrm", t, 1, 2, inside);
        check("dlrm", t, 2, 2, inside);
    }
}

#[test]
fn sptt_is_the_flat_path_bit_for_bit_on_2x4() {
    let t = Topology::new(2, 4).unwrap();
    for inside in INSIDE {
        check("dlrm", t, 1, 4, inside);
    }
    check("dlrm", t, 2, 3, Inside::Mixed);
}

#[test]
fn sptt_is_the_flat_path_bit_for_bit_on_4x2() {
    let t = Topology::new(4, 2).unwrap();
    for inside in INSIDE {
        check("dlrm", t, 1, 4, inside);
        check("dlrm", t, 2, 2, inside);
    }
}

#[test]
fn sptt_is_the_flat_path_bit_for_bit_for_dcn() {
    check("dcn", Topology::new(2, 2).unwrap(), 1, 2, Inside::Mixed);
    check("dcn", Topology::new(4, 2).unwrap(), 2, 4, Inside::RowWise);
}

/// Mean-pooled row-wise tables: summed inside the tower, then divided by bag lengths
/// the peers share, as the flat path divides at the sample owner.
#[test]
fn sptt_is_the_flat_path_bit_for_bit_with_mean_pooling() {
    let t = Topology::new(2, 2).unwrap();
    for inside in [Inside::RowWise, Inside::Mixed] {
        check_config(pooled("dlrm", "mean"), t, 1, 2, inside);
        check_config(pooled("dlrm", "mean"), t, 2, 2, inside);
    }
    check_config(
        pooled("dcn", "mean"),
        Topology::new(4, 2).unwrap(),
        2,
        4,
        Inside::RowWise,
    );
    check_config(
        pooled("dlrm", "mean"),
        Topology::new(2, 4).unwrap(),
        1,
        4,
        Inside::RowWise,
    );
}
