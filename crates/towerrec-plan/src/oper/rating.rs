//! OPER's cost model (§3.2, Eq. 1–3) of any plan under an access profile: per rank,
//! the bytes it holds (Eq. 1), the lookups it serves (Eq. 2), and per pair of ranks
//! the embedding bytes one sends the other per iteration (Eq. 3), priced by the
//! gather and link rates of [`CostParams`] (which `towerrec plan --hardware` reads
//! from the hardware file the simulator and `calibrate` use).
//!
//! Every rank reads `B / W` samples per iteration; a row read `n` times in a profile
//! of `S` samples is read `n / S · B / W` times per iteration by each rank, from the
//! nearest copy (the rank itself, a replica on its host, else the owner: the address
//! map's rule). A read moves the row's columns held there (`4 · columns` bytes) from
//! that copy to the reader, as the forward pass of the runtime does for single-id
//! bags; the backward sends as many bytes of gradients back. A row-wise or
//! table-row-wise shard is the exception, priced as the runtime (and TorchRec) runs it:
//! it sends each rank one partial sum per sample of its batch, read or not.

use super::partition::{order_reads, order_sums};
use crate::cost::CostParams;
use crate::error::{Error, Result};
use crate::plan::{Plan, ShardingType, TableSpec};
use crate::rating::{self, CostModel, PhaseCost, PlanCost};
use towerrec_comm::Topology;
use towerrec_data::{AccessProfile, RowCounts};

/// A block of a table as the model sees it: who holds it, how often it is read.
struct Piece {
    holders: Vec<usize>,
    /// Reads per iteration over the whole cluster.
    reads: f64,
    /// Bytes one read moves.
    read_bytes: f64,
    bytes: u64,
    /// Rows of the piece read at least once per iteration (expected), counted only
    /// where the piece has copies: the rows whose gradients the copies must sum.
    touched_copied: f64,
    /// A row-wise or table-row-wise shard: the runtime sends every sample's partial
    /// sum from it, read or not (a reduce-scatter), not one per read.
    every_sample: bool,
    /// A table-row-wise shard, one of this many of its table: on several hosts the
    /// runtime sums the shards' partial sums within their host first, and each sum
    /// crosses hosts once (`towerrec-train`'s `sharded/trw.rs`).
    host_sum: Option<usize>,
}

/// The model's figures for one plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Rating {
    /// Eq. 1: bytes each rank holds, owned and replicated.
    pub memory: Vec<u64>,
    /// Eq. 2: seconds of lookups each rank serves per iteration.
    pub lookup_seconds: Vec<f64>,
    /// Eq. 3: `comm[i][j]`, embedding bytes rank `j` sends rank `i` per iteration.
    pub comm: Vec<Vec<f64>>,
    /// Seconds per iteration of each rank: its lookups, plus what it sends and receives
    /// at the rates of the links used.
    pub rank_seconds: Vec<f64>,
    /// Gradient bytes per iteration of the rows held on more than one rank (whole
    /// data-parallel tables, partitions with replicas) that some rank read: what a
    /// sparse AllReduce of the copies (§5.3) sums each iteration. Outside Eq. 1–3.
    pub copy_sync_bytes: f64,
}

impl Rating {
    /// Degree of balance: the least loaded rank's seconds over the most loaded's.
    pub fn balance(&self) -> f64 {
        rating::balance(&self.rank_seconds)
    }

    pub fn max_seconds(&self) -> f64 {
        self.rank_seconds.iter().copied().fold(0.0, f64::max)
    }

    /// Embedding bytes `rank` sends to the other ranks per iteration.
    pub fn sent(&self, rank: usize) -> f64 {
        rating::sent(&self.comm, rank)
    }

    /// Embedding bytes `rank` receives from the other ranks per iteration.
    pub fn received(&self, rank: usize) -> f64 {
        self.comm[rank].iter().sum()
    }

    /// Embedding bytes sent between ranks per iteration, all pairs.
    pub fn total_bytes(&self) -> f64 {
        self.comm.iter().flatten().sum()
    }

    /// Of [`Rating::total_bytes`], those crossing hosts.
    pub fn cross_host_bytes(&self, topology: Topology) -> f64 {
        rating::cross_host_bytes(&self.comm, topology)
    }

    /// Mean and variance of the bytes per ordered pair of distinct ranks (the paper's
    /// Table 2 reports both, per GPU–GPU interconnection).
    pub fn link_mean_variance(&self) -> (f64, f64) {
        rating::link_mean_variance(&self.comm)
    }

    /// These figures as a [`PlanCost`] of `topology`'s ranks: per rank its lookups and
    /// the rest of its seconds (what it sends and receives) as an `exchange` phase; a
    /// rank's traffic measured against every read's row spread evenly over the ranks
    /// (the `(W − 1) / W` of each rank's reads that an even spread fetches from others),
    /// the reads' bytes being the lookups' seconds at `gather_bytes_per_s`.
    pub fn into_plan_cost(self, topology: Topology, gather_bytes_per_s: f64) -> PlanCost {
        let w = self.lookup_seconds.len() as f64;
        let total_reads_bytes: f64 = self.lookup_seconds.iter().sum::<f64>() * gather_bytes_per_s;
        let phases = self
            .lookup_seconds
            .iter()
            .zip(&self.rank_seconds)
            .map(|(&lookup, &all)| {
                vec![
                    PhaseCost {
                        name: "lookup",
                        seconds: lookup,
                    },
                    PhaseCost {
                        name: "exchange",
                        seconds: all - lookup,
                    },
                ]
            })
            .collect();
        PlanCost {
            topology,
            memory: self.memory,
            phases,
            seconds: self.rank_seconds,
            lookup_seconds: self.lookup_seconds,
            traffic: self.comm,
            even_rank_bytes: total_reads_bytes / w * (w - 1.0) / w,
            copy_sync_bytes: self.copy_sync_bytes,
        }
    }
}

/// OPER's cost model (§3.2, Eq. 1–3) as a [`CostModel`]: any plan priced under an
/// access profile, at the gather and link rates of `cost`.
#[derive(Debug, Clone, Copy)]
pub struct OperModel<'a> {
    pub profile: &'a AccessProfile,
    pub cost: CostParams,
}

impl CostModel for OperModel<'_> {
    fn price(&self, plan: &Plan, tables: &[TableSpec]) -> Result<PlanCost> {
        let r = rate(plan, tables, self.profile, &self.cost)?;
        Ok(r.into_plan_cost(plan.topology, self.cost.gather_bytes_per_s))
    }
}

/// [`OperModel`] over counts already checked ([`exact_counts`]): what OPER's planner
/// rates each placement of its back-off with.
pub(crate) struct CountsModel<'a> {
    pub counts: &'a [&'a [u32]],
    pub samples: u64,
    pub cost: &'a CostParams,
}

impl CostModel for CountsModel<'_> {
    fn price(&self, plan: &Plan, tables: &[TableSpec]) -> Result<PlanCost> {
        let r = rate_counts(plan, tables, self.counts, self.samples, self.cost);
        Ok(r.into_plan_cost(plan.topology, self.cost.gather_bytes_per_s))
    }
}

/// Every table's exact counts, by the plan's table order; errors name what is missing.
pub(crate) fn exact_counts<'a>(
    tables: &[TableSpec],
    profile: &'a AccessProfile,
) -> Result<Vec<&'a [u32]>> {
    tables
        .iter()
        .map(|t| {
            let bad = |reason: String| Error::Table {
                table: t.name.clone(),
                reason,
            };
            let a = profile
                .table(&t.name)
                .ok_or_else(|| bad("the access profile has no such table".into()))?;
            if a.rows != t.rows as u64 {
                return Err(bad(format!(
                    "the profile counts {} rows, the model has {}",
                    a.rows, t.rows
                )));
            }
            match &a.counts {
                RowCounts::Exact(c) => Ok(c.as_slice()),
                RowCounts::Sketch { .. } => Err(bad(
                    "the profile keeps only its hot rows (a sketch); OPER plans need every row's \
                     count: profile with a larger --exact-max-rows"
                        .into(),
                )),
            }
        })
        .collect()
}

fn pieces(
    plan: &Plan,
    tables: &[TableSpec],
    counts: &[&[u32]],
    samples: u64,
    batch: usize,
) -> Vec<Piece> {
    let world = plan.topology.world_size();
    let per_read = batch as f64 / samples as f64;
    // A row read n times in `samples` samples is read at least once in an iteration
    // of `batch` samples with probability 1 − (1 − n / samples)^batch.
    let touched = |n: u32| {
        let p = (f64::from(n) / samples as f64).min(1.0);
        if p >= 1.0 {
            1.0
        } else {
            1.0 - (batch as f64 * (-p).ln_1p()).exp()
        }
    };
    let mut out = Vec::new();
    for (spec, c) in tables.iter().zip(counts) {
        let Some(entry) = plan.table(&spec.name) else {
            continue;
        };
        let row_range = |a: usize, b: usize| c[a..b].iter().map(|&n| u64::from(n)).sum::<u64>();
        match entry.sharding {
            ShardingType::DataParallel => out.push(Piece {
                holders: (0..world).collect(),
                reads: row_range(0, c.len()) as f64 * per_read,
                read_bytes: spec.dim as f64 * 4.0,
                bytes: spec.bytes(),
                touched_copied: if world > 1 {
                    c.iter().map(|&n| touched(n)).sum()
                } else {
                    0.0
                },
                every_sample: false,
                host_sum: None,
            }),
            ShardingType::RowPartitioned => {
                let bounds: Vec<(usize, usize)> =
                    entry.partitions.iter().map(|p| p.order).collect();
                let reads = order_reads(c, &entry.hot_rows, &bounds);
                let copied: Vec<(usize, usize)> = entry
                    .partitions
                    .iter()
                    .map(|p| {
                        if p.replicas.is_empty() {
                            (0, 0)
                        } else {
                            p.order
                        }
                    })
                    .collect();
                let touched = order_sums(c, &entry.hot_rows, &copied, touched);
                for ((p, r), t) in entry.partitions.iter().zip(reads).zip(touched) {
                    out.push(Piece {
                        holders: p.holders().collect(),
                        reads: r as f64 * per_read,
                        read_bytes: spec.dim as f64 * 4.0,
                        bytes: p.num_rows() as u64 * spec.bytes_per_row as u64,
                        touched_copied: t,
                        every_sample: false,
                        host_sum: None,
                    });
                }
            }
            kind => {
                let every_sample = kind.sends_every_sample();
                let host_sum = (kind == ShardingType::TableRowWise).then_some(entry.shards.len());
                for s in &entry.shards {
                    out.push(Piece {
                        holders: vec![s.rank],
                        reads: row_range(s.rows.0, s.rows.1) as f64 * per_read,
                        read_bytes: s.num_columns() as f64 * 4.0,
                        bytes: spec.shard_bytes(s),
                        touched_copied: 0.0,
                        every_sample,
                        host_sum,
                    });
                }
            }
        }
    }
    out
}

/// The rank `from` reads a piece held by `holders` (owner first) from.
fn nearest(holders: &[usize], from: usize, topology: Topology) -> usize {
    if holders.contains(&from) {
        return from;
    }
    let host = topology.host_of(from);
    if topology.host_of(holders[0]) != host {
        if let Some(&r) = holders[1..]
            .iter()
            .filter(|&&r| topology.host_of(r) == host)
            .min()
        {
            return r;
        }
    }
    holders[0]
}

/// Rates `plan` (validated against `tables`) under `profile` with `cost`.
pub fn rate(
    plan: &Plan,
    tables: &[TableSpec],
    profile: &AccessProfile,
    cost: &CostParams,
) -> Result<Rating> {
    cost.check()?;
    if profile.samples == 0 {
        return Err(Error::Request(
            "the access profile counted no samples".into(),
        ));
    }
    let counts = exact_counts(tables, profile)?;
    Ok(rate_counts(plan, tables, &counts, profile.samples, cost))
}

fn rate_counts(
    plan: &Plan,
    tables: &[TableSpec],
    counts: &[&[u32]],
    samples: u64,
    cost: &CostParams,
) -> Rating {
    let topo = plan.topology;
    let w = topo.world_size();
    let mut memory = vec![0u64; w];
    let mut copy_sync_bytes = 0.0;
    let mut lookup = vec![0.0; w];
    let mut comm = vec![vec![0.0; w]; w];
    for p in pieces(plan, tables, counts, samples, cost.batch_size) {
        copy_sync_bytes += p.touched_copied * p.read_bytes;
        for &h in &p.holders {
            memory[h] = memory[h].saturating_add(p.bytes);
        }
        let per_rank = p.reads / w as f64;
        if let (Some(shards), true) = (p.host_sum, topo.hosts > 1) {
            lookup[p.holders[0]] += p.reads * p.read_bytes / cost.gather_bytes_per_s;
            rating::host_summed(
                &mut comm,
                p.holders[0],
                shards,
                p.read_bytes,
                cost.batch_size,
                topo,
            );
            continue;
        }
        // What rank i receives from the copy it reads: one vector per read, or one
        // per sample of its batch from a row-split shard.
        let sent = if p.every_sample {
            cost.batch_size as f64 / w as f64
        } else {
            per_rank
        } * p.read_bytes;
        for (i, row) in comm.iter_mut().enumerate() {
            let j = nearest(&p.holders, i, topo);
            lookup[j] += per_rank * p.read_bytes / cost.gather_bytes_per_s;
            if j != i {
                row[j] += sent;
            }
        }
    }
    let mut rank_seconds = lookup.clone();
    for i in 0..w {
        for j in 0..w {
            let s = comm[i][j] * cost.seconds_per_byte(topo, i, j);
            rank_seconds[i] += s;
            rank_seconds[j] += s;
        }
    }
    Rating {
        memory,
        lookup_seconds: lookup,
        comm,
        rank_seconds,
        copy_sync_bytes,
    }
}
