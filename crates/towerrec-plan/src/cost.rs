//! A first-order cost model of one training step's embedding work, per rank.
//!
//! For a block of a table (rows `f` of the table's rows, `c` of its `dim` columns) on
//! one rank, with a global batch of `B` samples and `p` ids per sample on average:
//!
//! - lookup: the rank gathers `B · p · f · c · 4` bytes of weights, at
//!   `gather_bytes_per_s` (ids spread evenly over rows);
//! - communication: it receives `B · p · f` ids of 8 bytes (a column block receives
//!   every id), sends `B · c · 4` bytes of pooled output (row blocks send partial sums)
//!   and receives as many bytes of gradients in the backward pass. The samples are
//!   spread evenly over the `W` ranks, so of these bytes `1/W` stay on the rank,
//!   `(L−1)/W` cross the links inside its host (`intra_host_bytes_per_s`) and `(W−L)/W`
//!   cross hosts (`cross_host_bytes_per_s`), `L` being ranks per host.
//!
//! A table-row-wise block on a cluster of several hosts sends its partial sums as
//! towerrec's runtime does (and TorchRec's TWRW): summed within its host first (a
//! reduce-scatter: `(L−1)/L` of its `B · c · 4` bytes over links inside the host), then
//! each of its `B/L` sums to the samples' owners, spread like any rank's output.
//!
//! A data-parallel table costs every rank the lookup of its own `B/W` samples plus a
//! ring AllReduce of the table's weight gradients, `2·(W−1)/W · rows · dim · 4` bytes
//! at the slowest link the ring crosses. The model ignores overlap, latency and skew;
//! it ranks placements, it does not predict step times (the analytical performance
//! model of `towerrec-sim` will).

use crate::error::{Error, Result};
use crate::plan::{world_size_or_zero, Plan, Shard, ShardingType, TableSpec};
use crate::rating::{CostModel, PlanCost};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use towerrec_comm::Topology;

/// What the cost model and the greedy planner assume about the workload and the
/// machines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostParams {
    /// Samples per step over the whole cluster (each rank reads `batch_size / W`).
    pub batch_size: usize,
    /// Rate of random row gathers from embedding memory, bytes/s.
    pub gather_bytes_per_s: f64,
    /// Link bandwidth between two ranks of one host, bytes/s.
    pub intra_host_bytes_per_s: f64,
    /// Link bandwidth between ranks of different hosts, bytes/s.
    pub cross_host_bytes_per_s: f64,
    /// Tables smaller than this (`rows · bytes_per_row`) go data-parallel in the greedy
    /// planner.
    pub data_parallel_max_bytes: u64,
}

impl Default for CostParams {
    /// A global batch of 4096 on GPU-class hosts: 500 GB/s of gathers from HBM,
    /// 150 GB/s NVLink-class links inside a host, 12.5 GB/s (100 Gb/s) between hosts,
    /// and tables under 64 KiB replicated.
    fn default() -> Self {
        Self {
            batch_size: 4096,
            gather_bytes_per_s: 500e9,
            intra_host_bytes_per_s: 150e9,
            cross_host_bytes_per_s: 12.5e9,
            data_parallel_max_bytes: 64 << 10,
        }
    }
}

impl CostParams {
    /// Checks that every rate is a positive number.
    pub fn check(&self) -> Result<()> {
        for (key, v) in [
            ("gather_bytes_per_s", self.gather_bytes_per_s),
            ("intra_host_bytes_per_s", self.intra_host_bytes_per_s),
            ("cross_host_bytes_per_s", self.cross_host_bytes_per_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::Request(format!(
                    "cost parameter {key} must be a positive number, got {v}"
                )));
            }
        }
        Ok(())
    }

    /// Seconds per step that `shard` of `spec` costs the rank holding it.
    pub(crate) fn shard_seconds(&self, spec: &TableSpec, shard: &Shard, topo: Topology) -> f64 {
        self.shard_cost(spec, shard, topo).total
    }

    /// [`CostParams::shard_seconds`] by phase.
    fn shard_cost(&self, spec: &TableSpec, shard: &Shard, topo: Topology) -> BlockCost {
        let b = self.batch_size as f64;
        let p = spec.pooling_factor;
        let f = shard.rows.1.saturating_sub(shard.rows.0) as f64 / spec.rows.max(1) as f64;
        let c = shard.columns.1.saturating_sub(shard.columns.0) as f64;
        let lookup = b * p * f * c * 4.0 / self.gather_bytes_per_s;
        let comm_bytes = b * (p * f * 8.0 + 2.0 * c * 4.0);
        let exchange = comm_bytes * self.seconds_per_exchanged_byte(topo);
        BlockCost {
            lookup,
            exchange,
            total: lookup + exchange,
        }
    }

    /// Seconds per step that a table-row-wise `shard` of `spec` costs the rank holding
    /// it when its table's shards fill its host: its partial sums meet within the host
    /// before each sum goes to its sample's owner.
    #[cfg(test)]
    pub(crate) fn host_summed_shard_seconds(
        &self,
        spec: &TableSpec,
        shard: &Shard,
        topo: Topology,
    ) -> f64 {
        self.host_summed_shard_cost(spec, shard, topo).total
    }

    /// [`CostParams::host_summed_shard_seconds`] by phase.
    fn host_summed_shard_cost(&self, spec: &TableSpec, shard: &Shard, topo: Topology) -> BlockCost {
        let l = topo.ranks_per_host.max(1) as f64;
        if topo.hosts <= 1 {
            return self.shard_cost(spec, shard, topo);
        }
        let b = self.batch_size as f64;
        let p = spec.pooling_factor;
        let f = shard.rows.1.saturating_sub(shard.rows.0) as f64 / spec.rows.max(1) as f64;
        let c = shard.columns.1.saturating_sub(shard.columns.0) as f64;
        let lookup = b * p * f * c * 4.0 / self.gather_bytes_per_s;
        let per_byte = self.seconds_per_exchanged_byte(topo);
        let ids = b * p * f * 8.0 * per_byte;
        let sums = 2.0 * b * c * 4.0;
        let within = sums * (l - 1.0) / l / self.intra_host_bytes_per_s;
        let crossing = sums / l * per_byte;
        BlockCost {
            lookup,
            exchange: ids + within + crossing,
            total: lookup + ids + within + crossing,
        }
    }

    /// Seconds per step `spec` costs when one rank holds all of it (table-wise).
    pub(crate) fn table_wise_seconds(&self, spec: &TableSpec, topo: Topology) -> f64 {
        let whole = Shard {
            rank: 0,
            rows: (0, spec.rows),
            columns: (0, spec.dim),
        };
        self.shard_seconds(spec, &whole, topo)
    }

    /// Seconds per step a data-parallel `spec` costs every rank.
    pub(crate) fn data_parallel_seconds(&self, spec: &TableSpec, topo: Topology) -> f64 {
        let (lookup, sync) = self.data_parallel_cost(spec, topo);
        lookup + sync
    }

    /// [`CostParams::data_parallel_seconds`]: its lookup and its all-reduce.
    fn data_parallel_cost(&self, spec: &TableSpec, topo: Topology) -> (f64, f64) {
        let w = world_size_or_zero(topo).max(1) as f64;
        let weights = spec.rows as f64 * spec.dim as f64 * 4.0;
        let lookup = self.batch_size as f64 / w * spec.pooling_factor * spec.dim as f64 * 4.0
            / self.gather_bytes_per_s;
        (
            lookup,
            2.0 * (w - 1.0) / w * weights / self.allreduce_bytes_per_s(topo),
        )
    }

    /// The rate of a ring all-reduce over every rank: its slowest link's.
    pub(crate) fn allreduce_bytes_per_s(&self, topo: Topology) -> f64 {
        if topo.hosts > 1 {
            self.cross_host_bytes_per_s
        } else {
            self.intra_host_bytes_per_s
        }
    }

    /// Seconds per byte from rank `j` to rank `i` (0 on the rank itself).
    pub(crate) fn seconds_per_byte(&self, topo: Topology, i: usize, j: usize) -> f64 {
        if i == j {
            0.0
        } else if topo.is_cross_host(i, j) {
            1.0 / self.cross_host_bytes_per_s
        } else {
            1.0 / self.intra_host_bytes_per_s
        }
    }

    /// Mean seconds per byte a rank exchanges with the senders of a batch spread evenly
    /// over all ranks (its own share costs nothing).
    pub(crate) fn seconds_per_exchanged_byte(&self, topo: Topology) -> f64 {
        let w = world_size_or_zero(topo);
        if w <= 1 {
            return 0.0;
        }
        let l = topo.ranks_per_host as f64;
        let w = w as f64;
        (l - 1.0) / w / self.intra_host_bytes_per_s + (w - l) / w / self.cross_host_bytes_per_s
    }
}

/// Estimated embedding seconds per training step of each rank of `plan` (one entry per
/// rank of its topology): [`CostParams::rate`]'s seconds. Entries for tables not in
/// `tables` and shards on ranks outside the topology count nothing; validate the plan
/// first for a meaningful answer.
pub fn estimate(plan: &Plan, tables: &[TableSpec], cost: &CostParams) -> Vec<f64> {
    cost.rate(plan, tables).seconds
}

/// One block's seconds by phase, and their sum as the planner adds them.
struct BlockCost {
    lookup: f64,
    exchange: f64,
    total: f64,
}

impl CostParams {
    /// This model's [`PlanCost`] of `plan` (see the module documentation): per rank the
    /// phases `lookup`, `exchange` (ids in, pooled outputs out, their gradients in) and
    /// `copy_sync` (data-parallel tables' all-reduce), the seconds the greedy planner
    /// adds up, and the pooled outputs each rank sends every other (a row block sends a
    /// partial sum per sample; a table-row-wise table's sums meet within its host
    /// first). Partitions count as blocks of whole rows (this model knows no access
    /// counts); replicas are not priced. Entries for tables not in `tables` and blocks
    /// on ranks outside the topology count nothing.
    pub fn rate(&self, plan: &Plan, tables: &[TableSpec]) -> PlanCost {
        let topo = plan.topology;
        let mut out = PlanCost::zero(topo, &["lookup", "exchange", "copy_sync"]);
        let w = out.seconds.len();
        out.memory = plan.rank_bytes(tables);
        let specs: HashMap<&str, &TableSpec> =
            tables.iter().map(|t| (t.name.as_str(), t)).collect();
        let per_rank = self.batch_size as f64 / w.max(1) as f64;
        for spec in tables {
            out.even_rank_bytes +=
                per_rank * spec.dim as f64 * 4.0 * w.saturating_sub(1) as f64 / w.max(1) as f64;
        }
        let add = |out: &mut PlanCost, rank: usize, block: BlockCost, row_bytes: f64| {
            out.seconds[rank] += block.total;
            out.lookup_seconds[rank] += block.lookup;
            out.add(rank, "lookup", block.lookup);
            out.add(rank, "exchange", block.exchange);
            for (i, row) in out.traffic.iter_mut().enumerate() {
                if i != rank {
                    row[rank] += per_rank * row_bytes;
                }
            }
        };
        for entry in &plan.tables {
            let Some(spec) = specs.get(entry.table.as_str()) else {
                continue;
            };
            if entry.sharding == ShardingType::DataParallel {
                let (lookup, sync) = self.data_parallel_cost(spec, topo);
                let s = lookup + sync;
                for r in 0..w {
                    out.seconds[r] += s;
                    out.lookup_seconds[r] += lookup;
                    out.add(r, "lookup", lookup);
                    out.add(r, "copy_sync", sync);
                }
                out.copy_sync_bytes += spec.rows as f64 * spec.dim as f64 * 4.0;
                continue;
            }
            let host_summed = entry.sharding == ShardingType::TableRowWise && topo.hosts > 1;
            for shard in entry.shards.iter().filter(|s| s.rank < w) {
                let row_bytes = shard.num_columns() as f64 * 4.0;
                if host_summed {
                    let block = self.host_summed_shard_cost(spec, shard, topo);
                    add(&mut out, shard.rank, block, 0.0);
                    let shards = entry.shards.len();
                    crate::rating::host_summed(
                        &mut out.traffic,
                        shard.rank,
                        shards,
                        row_bytes,
                        self.batch_size,
                        topo,
                    );
                } else {
                    add(
                        &mut out,
                        shard.rank,
                        self.shard_cost(spec, shard, topo),
                        row_bytes,
                    );
                }
            }
            // Partitions as blocks of whole rows: this model knows no access counts.
            for p in entry.partitions.iter().filter(|p| p.rank < w) {
                let block = crate::Shard {
                    rank: p.rank,
                    rows: p.order,
                    columns: (0, spec.dim),
                };
                let row_bytes = spec.dim as f64 * 4.0;
                add(
                    &mut out,
                    p.rank,
                    self.shard_cost(spec, &block, topo),
                    row_bytes,
                );
            }
        }
        out
    }
}

impl CostModel for CostParams {
    fn price(&self, plan: &Plan, tables: &[TableSpec]) -> Result<PlanCost> {
        self.check()?;
        Ok(self.rate(plan, tables))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rows: usize, dim: usize, pooling_factor: f64) -> TableSpec {
        TableSpec {
            name: "t".into(),
            rows,
            dim,
            bytes_per_row: 4 * dim,
            pooling_factor,
        }
    }

    fn unit() -> CostParams {
        CostParams {
            batch_size: 100,
            gather_bytes_per_s: 1.0,
            intra_host_bytes_per_s: 2.0,
            cross_host_bytes_per_s: 1.0,
            data_parallel_max_bytes: 0,
        }
    }

    #[test]
    fn table_wise_cost_follows_the_formula() {
        let t = spec(1000, 16, 2.0);
        // One rank: lookup only, 100·2·16·4 bytes at 1 B/s.
        assert_eq!(unit().table_wise_seconds(&t, Topology::single()), 12_800.0);
        // 2 hosts × 2 ranks: comm 100·(2·8 + 2·16·4) = 14_400 bytes; 1/4 intra at 2 B/s,
        // 2/4 cross at 1 B/s.
        let topo = Topology::new(2, 2).unwrap();
        let comm = 14_400.0 * (0.25 / 2.0 + 0.5 / 1.0);
        assert_eq!(unit().table_wise_seconds(&t, topo), 12_800.0 + comm);
    }

    #[test]
    fn row_shards_split_lookup_and_ids_but_not_outputs() {
        let t = spec(1000, 16, 2.0);
        let topo = Topology::new(1, 2).unwrap();
        let half = Shard {
            rank: 0,
            rows: (0, 500),
            columns: (0, 16),
        };
        // lookup 6400; comm 100·(1·8 + 128) = 13_600 bytes, half intra at 2 B/s.
        assert_eq!(
            unit().shard_seconds(&t, &half, topo),
            6_400.0 + 13_600.0 / 4.0
        );
    }

    #[test]
    fn table_row_wise_sums_meet_within_the_host_before_crossing() {
        let t = spec(1000, 16, 2.0);
        let topo = Topology::new(2, 2).unwrap();
        let half = Shard {
            rank: 0,
            rows: (0, 500),
            columns: (0, 16),
        };
        let c = unit();
        // Lookup 100·2·½·16·4 = 6400 s; ids 100·2·½·8 = 800 bytes and the 2·100·16·4 =
        // 12800 bytes of sums: half within the host at 2 B/s, the other half (the rank's
        // 50 sums) to the owners at the exchange's mean 1/4·½ + 2/4·1 = 5/8 s per byte.
        let want = 6400.0 + 800.0 * 0.625 + 6400.0 / 2.0 + 6400.0 * 0.625;
        let got = c.host_summed_shard_seconds(&t, &half, topo);
        assert!((got - want).abs() < 1e-6, "{got} against {want}");
        // Sent flat, every sum would cross at the mean rate: dearer.
        assert!(c.shard_seconds(&t, &half, topo) > got);
        // On one host there is nothing to sum first.
        let one = Topology::new(1, 2).unwrap();
        assert_eq!(
            c.host_summed_shard_seconds(&t, &half, one),
            c.shard_seconds(&t, &half, one)
        );
    }

    #[test]
    fn estimate_adds_shards_and_replicas_per_rank() {
        let t = vec![
            spec(1000, 16, 1.0),
            TableSpec {
                name: "d".into(),
                ..spec(10, 4, 1.0)
            },
        ];
        let topo = Topology::new(1, 2).unwrap();
        let plan = Plan::from_json(
            r#"{ "topology": { "hosts": 1, "ranks_per_host": 2 }, "tables": [
                { "table": "t", "sharding": "table_wise", "shards": [ { "rank": 1, "rows": [0, 1000], "columns": [0, 16] } ] },
                { "table": "d", "sharding": "data_parallel" } ] }"#,
        )
        .unwrap();
        let c = unit();
        let dp = c.data_parallel_seconds(&t[1], topo);
        // 50 samples · 16 bytes lookup + 2·½·160 bytes at 2 B/s.
        assert_eq!(dp, 800.0 + 80.0);
        let secs = estimate(&plan, &t, &c);
        assert_eq!(secs, vec![dp, dp + c.table_wise_seconds(&t[0], topo)]);
    }

    #[test]
    fn check_rejects_rates_that_are_not_positive() {
        let mut c = CostParams::default();
        c.check().unwrap();
        c.cross_host_bytes_per_s = 0.0;
        assert!(c
            .check()
            .unwrap_err()
            .to_string()
            .contains("cross_host_bytes_per_s"));
        c.cross_host_bytes_per_s = f64::NAN;
        assert!(c.check().is_err());
    }
}
