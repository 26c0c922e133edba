//! One way to price a sharding plan (docs/PLANS.md, "Rating a plan"): a [`CostModel`]
//! turns a [`Plan`] of some tables into a [`PlanCost`], what every rank of the plan's
//! topology holds, looks up and sends per training step, and the seconds of each phase
//! that costs it.
//!
//! Two models implement it here: the table-level model the greedy planner places by
//! ([`CostParams`], module `cost`; docs/PLANS.md "The cost model"), and OPER's model of a
//! plan under an access profile ([`crate::oper::OperModel`], the OPER paper's §3.2,
//! Eq. 1–3), which OPER's planner rates its placements with. `towerrec-sim` prices a
//! plan's whole step from any model's [`PlanCost`] (its `simulate_plan`: each rank's
//! lookups and traffic against an even spread's scale the simulated step), and the
//! command line prints these figures (`towerrec plan`, `towerrec simulate --plans`).

use crate::error::Result;
use crate::plan::{Plan, TableSpec};
use towerrec_comm::Topology;

/// A model of what a plan costs its ranks per training step.
pub trait CostModel {
    /// Prices `plan` (validated against `tables`) on its own topology.
    fn price(&self, plan: &Plan, tables: &[TableSpec]) -> Result<PlanCost>;
}

/// One phase of a rank's step as a model prices it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseCost {
    /// The model's name for it: `lookup`, `exchange`, `copy_sync`.
    pub name: &'static str,
    pub seconds: f64,
}

/// A plan priced rank by rank: one entry per rank of `topology` in every list.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanCost {
    pub topology: Topology,
    /// Bytes of weights and optimizer state each rank holds, copies included (OPER's
    /// Eq. 1; [`Plan::rank_bytes`]).
    pub memory: Vec<u64>,
    /// Seconds per step of each phase the model prices, per rank, in step order.
    pub phases: Vec<Vec<PhaseCost>>,
    /// Seconds per step of each rank, as the model adds its phases up.
    pub seconds: Vec<f64>,
    /// Seconds of the lookups each rank serves (gathers of embedding rows).
    pub lookup_seconds: Vec<f64>,
    /// `traffic[i][j]`: embedding bytes rank `j` sends rank `i` per step in the forward
    /// pass (the backward sends as many bytes of gradients back).
    pub traffic: Vec<Vec<f64>>,
    /// The bytes one rank would receive per step were the same tables' traffic spread
    /// evenly over the ranks, without copies: what a rank's traffic is measured against.
    pub even_rank_bytes: f64,
    /// Gradient bytes per step of the rows held on several ranks (data-parallel
    /// tables, replicated partitions) that the copies must sum.
    pub copy_sync_bytes: f64,
}

impl PlanCost {
    /// All zero, for `topology`'s ranks, each with the phases `names`.
    pub(crate) fn zero(topology: Topology, names: &[&'static str]) -> Self {
        let w = crate::plan::world_size_or_zero(topology);
        let phases = names
            .iter()
            .map(|&name| PhaseCost { name, seconds: 0.0 })
            .collect();
        PlanCost {
            topology,
            memory: vec![0; w],
            phases: vec![phases; w],
            seconds: vec![0.0; w],
            lookup_seconds: vec![0.0; w],
            traffic: vec![vec![0.0; w]; w],
            even_rank_bytes: 0.0,
            copy_sync_bytes: 0.0,
        }
    }

    /// Adds `seconds` to phase `name` of `rank` (a phase the model was made with).
    pub(crate) fn add(&mut self, rank: usize, name: &str, seconds: f64) {
        if let Some(p) = self.phases[rank].iter_mut().find(|p| p.name == name) {
            p.seconds += seconds;
        }
    }

    /// The seconds of phase `name` of `rank` (0 if the model has no such phase).
    pub fn phase(&self, rank: usize, name: &str) -> f64 {
        self.phases[rank]
            .iter()
            .find(|p| p.name == name)
            .map_or(0.0, |p| p.seconds)
    }

    /// The slowest rank's seconds: the plan's step as the model sees it.
    pub fn max_seconds(&self) -> f64 {
        self.seconds.iter().copied().fold(0.0, f64::max)
    }

    /// Degree of balance: the least loaded rank's seconds over the most loaded's.
    pub fn balance(&self) -> f64 {
        balance(&self.seconds)
    }

    /// Embedding bytes `rank` sends to the other ranks per step.
    pub fn sent(&self, rank: usize) -> f64 {
        sent(&self.traffic, rank)
    }

    /// Embedding bytes `rank` receives from the other ranks per step.
    pub fn received(&self, rank: usize) -> f64 {
        self.traffic[rank].iter().sum()
    }

    /// Embedding bytes sent between ranks per step, all pairs.
    pub fn total_bytes(&self) -> f64 {
        self.traffic.iter().flatten().sum()
    }

    /// Of [`PlanCost::total_bytes`], those crossing hosts.
    pub fn cross_host_bytes(&self) -> f64 {
        cross_host_bytes(&self.traffic, self.topology)
    }

    /// Mean and variance of the bytes per ordered pair of distinct ranks.
    pub fn link_mean_variance(&self) -> (f64, f64) {
        link_mean_variance(&self.traffic)
    }

    /// `rank`'s bytes within its host and across hosts, each the larger of what it
    /// sends and receives there.
    pub fn level_bytes(&self, rank: usize) -> (f64, f64) {
        let (mut within, mut across) = ([0.0f64; 2], [0.0f64; 2]);
        for other in (0..self.traffic.len()).filter(|&o| o != rank) {
            let level = if self.topology.is_cross_host(rank, other) {
                &mut across
            } else {
                &mut within
            };
            level[0] += self.traffic[other][rank];
            level[1] += self.traffic[rank][other];
        }
        let larger = |[sent, received]: [f64; 2]| sent.max(received);
        (larger(within), larger(across))
    }
}

/// The least of `seconds` over the most (1 when all are 0).
pub(crate) fn balance(seconds: &[f64]) -> f64 {
    let max = seconds.iter().copied().fold(0.0, f64::max);
    let min = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    if max > 0.0 {
        min / max
    } else {
        1.0
    }
}

/// Bytes `rank` sends under `traffic` (`traffic[i][j]`: from `j` to `i`).
pub(crate) fn sent(traffic: &[Vec<f64>], rank: usize) -> f64 {
    traffic.iter().map(|row| row[rank]).sum()
}

/// Bytes of `traffic` between ranks of different hosts.
pub(crate) fn cross_host_bytes(traffic: &[Vec<f64>], topology: Topology) -> f64 {
    let mut sum = 0.0;
    for (i, row) in traffic.iter().enumerate() {
        for (j, b) in row.iter().enumerate() {
            if topology.is_cross_host(i, j) {
                sum += b;
            }
        }
    }
    sum
}

/// Mean and variance of `traffic` over ordered pairs of distinct ranks.
pub(crate) fn link_mean_variance(traffic: &[Vec<f64>]) -> (f64, f64) {
    let w = traffic.len();
    let links: Vec<f64> = (0..w)
        .flat_map(|i| (0..w).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| traffic[i][j])
        .collect();
    if links.is_empty() {
        return (0.0, 0.0);
    }
    let n = links.len() as f64;
    let mean = links.iter().sum::<f64>() / n;
    let var = links.iter().map(|b| (b - mean) * (b - mean)).sum::<f64>() / n;
    (mean, var)
}

/// The forward bytes of one of a table-row-wise table's `shards` shards on rank `s`,
/// summed within its host and then crossing hosts once, into `traffic`: `s` sends
/// every other rank `k` of its host its partial sums of the samples of `k`'s peers
/// (one per host, `batch / W` samples each); each rank `j` of the host sends each remote
/// peer the sums of that peer's samples, a `1 / shards` part of which is this shard's.
pub(crate) fn host_summed(
    traffic: &mut [Vec<f64>],
    s: usize,
    shards: usize,
    row_bytes: f64,
    batch: usize,
    topo: Topology,
) {
    let rows = batch as f64 / topo.world_size() as f64;
    let host = topo.host_of(s);
    for k in topo.host_ranks(host).filter(|&k| k != s) {
        traffic[k][s] += topo.hosts as f64 * rows * row_bytes;
    }
    for j in topo.host_ranks(host) {
        let local = topo.local_rank(j);
        for h in (0..topo.hosts).filter(|&h| h != host) {
            traffic[h * topo.ranks_per_host + local][j] += rows * row_bytes / shards as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oper::OperModel;
    use crate::{estimate, planners, CostParams, Shard, ShardingType, TablePlan};
    use towerrec_data::{AccessProfile, RowCounts, TableAccess};

    fn tables(n: usize) -> Vec<TableSpec> {
        (0..n)
            .map(|i| TableSpec {
                name: format!("t{i}"),
                rows: 100,
                dim: 16,
                bytes_per_row: 64,
                pooling_factor: 1.0,
            })
            .collect()
    }

    /// Every row read equally, each table once per sample.
    fn uniform(tables: &[TableSpec], samples: u64) -> AccessProfile {
        AccessProfile {
            samples,
            source: "test".into(),
            tables: tables
                .iter()
                .map(|t| TableAccess {
                    name: t.name.clone(),
                    rows: t.rows as u64,
                    reads: samples,
                    counts: RowCounts::Exact(vec![(samples / t.rows as u64) as u32; t.rows]),
                })
                .collect(),
        }
    }

    fn cost() -> CostParams {
        CostParams {
            batch_size: 4096,
            ..CostParams::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
    }

    #[test]
    fn both_models_see_the_same_bytes_of_whole_one_id_tables() {
        // Four tables, one per rank of 2 × 2, each read once per sample: every rank
        // sends each other rank its 1024 samples' rows of its table (64 bytes each), in
        // the table-level model and in OPER's alike, and receives an even spread's.
        let t = tables(4);
        let topo = Topology::new(2, 2).unwrap();
        let plan = planners::table_wise(&t, topo).unwrap();
        let profile = uniform(&t, 1000);
        let flat = cost().price(&plan, &t).unwrap();
        let oper = OperModel {
            profile: &profile,
            cost: cost(),
        }
        .price(&plan, &t)
        .unwrap();
        for c in [&flat, &oper] {
            for i in 0..4 {
                for j in 0..4 {
                    let want = if i == j { 0.0 } else { 1024.0 * 64.0 };
                    assert!(close(c.traffic[i][j], want), "{i} {j}: {:?}", c.traffic);
                }
                assert!(close(c.received(i), c.even_rank_bytes));
                // One peer within the host, two across.
                let (within, across) = c.level_bytes(i);
                assert!(close(within, 1024.0 * 64.0) && close(across, 2.0 * 1024.0 * 64.0));
            }
            assert!(close(c.cross_host_bytes(), 8.0 * 1024.0 * 64.0));
            assert_eq!(c.memory, plan.rank_bytes(&t));
        }
    }

    #[test]
    fn table_row_wise_sums_cross_hosts_once_in_both_models() {
        // One table row-wise over host 0's two ranks of 2 × 2: each shard sends its
        // host-mate the partial sums of half the batch (2 · 1024 samples · 64 bytes);
        // the sums cross hosts once, 1024 samples' rows to each remote rank.
        let t = tables(1);
        let topo = Topology::new(2, 2).unwrap();
        let shard = |rank, rows| Shard {
            rank,
            rows,
            columns: (0, 16),
        };
        let plan = Plan {
            topology: topo,
            towers: Vec::new(),
            tables: vec![TablePlan::new(
                "t0",
                ShardingType::TableRowWise,
                vec![shard(0, (0, 50)), shard(1, (50, 100))],
            )],
        };
        let profile = uniform(&t, 1000);
        let oper = OperModel {
            profile: &profile,
            cost: cost(),
        };
        for c in [
            cost().price(&plan, &t).unwrap(),
            oper.price(&plan, &t).unwrap(),
        ] {
            let row = 1024.0 * 64.0;
            assert!(close(c.traffic[1][0], 2.0 * row) && close(c.traffic[0][1], 2.0 * row));
            assert!(close(c.traffic[2][0], row) && close(c.traffic[3][1], row));
            assert!(close(c.cross_host_bytes(), 2.0 * row));
            assert!(close(c.total_bytes(), 6.0 * row));
        }
    }

    #[test]
    fn the_table_level_model_adds_up_its_phases_as_the_planner_does() {
        // A greedy plan with a data-parallel table: per rank, the phases add up to the
        // seconds `estimate` gives (the figures `towerrec plan` prints), and the copies'
        // gradient is the data-parallel table's.
        let mut t = tables(5);
        t[4].rows = 10;
        let topo = Topology::new(2, 2).unwrap();
        let c = CostParams {
            data_parallel_max_bytes: 1000,
            ..cost()
        };
        let plan = planners::greedy(&t, topo, &c, None).unwrap();
        assert_eq!(plan.tables[4].sharding, ShardingType::DataParallel);
        let priced = c.price(&plan, &t).unwrap();
        assert_eq!(priced.seconds, estimate(&plan, &t, &c));
        for r in 0..4 {
            let phases: f64 = priced.phases[r].iter().map(|p| p.seconds).sum();
            assert!(
                close(phases, priced.seconds[r]),
                "{r}: {:?}",
                priced.phases[r]
            );
            assert!(priced.phase(r, "copy_sync") > 0.0);
            assert_eq!(priced.lookup_seconds[r], priced.phase(r, "lookup"));
        }
        assert_eq!(priced.copy_sync_bytes, 10.0 * 16.0 * 4.0);
        let bad = CostParams {
            gather_bytes_per_s: 0.0,
            ..c
        };
        assert!(bad.price(&plan, &t).is_err());
    }

    #[test]
    fn oper_s_model_prices_as_its_rating() {
        let t = tables(3);
        let topo = Topology::new(1, 2).unwrap();
        let plan = planners::row_wise(&t, topo).unwrap();
        let profile = uniform(&t, 1000);
        let r = crate::oper::rate(&plan, &t, &profile, &cost()).unwrap();
        let p = OperModel {
            profile: &profile,
            cost: cost(),
        }
        .price(&plan, &t)
        .unwrap();
        assert_eq!(p.seconds, r.rank_seconds);
        assert_eq!(p.balance(), r.balance());
        assert_eq!(p.max_seconds(), r.max_seconds());
        assert_eq!(p.total_bytes(), r.total_bytes());
        assert_eq!(p.link_mean_variance(), r.link_mean_variance());
        assert_eq!((p.sent(1), p.received(1)), (r.sent(1), r.received(1)));
        assert_eq!(p.lookup_seconds, r.lookup_seconds);
        assert!(close(
            p.phase(0, "lookup") + p.phase(0, "exchange"),
            p.seconds[0]
        ));
    }
}
