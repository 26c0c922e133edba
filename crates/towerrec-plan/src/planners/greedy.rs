//! The default planner: greedy, cost-balanced placement under a memory budget.
//!
//! 1. Tables smaller than [`CostParams::data_parallel_max_bytes`] go data-parallel
//!    while every rank has room for another copy.
//! 2. The others, from the highest estimated cost per step down, go table-wise to the
//!    rank with the least accumulated cost among those with room for the whole table.
//! 3. A table no rank has room for is split row-wise over the ranks of one host
//!    (`table_row_wise`), hosts tried from the least accumulated cost; if no host can
//!    hold it, over all ranks (`row_wise`). Splits fill ranks to an even level of bytes
//!    ("water-filling"), so they stay within the budget whenever the free room allows.
//! 4. If the budget still cannot be met this way but splitting every table evenly over
//!    all ranks ([`super::row_wise`]) meets it, that plan is returned; otherwise an
//!    error reports the bytes needed and the bytes the cluster holds.

use super::{entry, prepare, whole};
use crate::cost::CostParams;
use crate::error::{Error, Result};
use crate::plan::{Plan, Shard, ShardingType, TablePlan, TableSpec};
use crate::validate::mib;
use towerrec_comm::Topology;

/// The default planner (see the module documentation).
pub fn greedy(
    tables: &[TableSpec],
    topology: Topology,
    cost: &CostParams,
    memory_budget_bytes: Option<u64>,
) -> Result<Plan> {
    let world = prepare(tables, topology)?;
    cost.check()?;
    let mut g = Greedy {
        topology,
        cost,
        budget: memory_budget_bytes.unwrap_or(u64::MAX),
        bytes: vec![0; world],
        secs: vec![0.0; world],
    };
    let mut entries: Vec<Option<TablePlan>> = vec![None; tables.len()];
    let mut rest = Vec::new();
    for i in super::by_size_desc(tables) {
        let t = &tables[i];
        if t.bytes() < cost.data_parallel_max_bytes && g.bytes.iter().all(|&b| g.fits(b, t.bytes()))
        {
            let s = cost.data_parallel_seconds(t, topology);
            for r in 0..world {
                g.add(r, t.bytes(), s);
            }
            entries[i] = Some(entry(t, ShardingType::DataParallel, vec![]));
        } else {
            rest.push(i);
        }
    }
    let table_cost: Vec<f64> = tables
        .iter()
        .map(|t| cost.table_wise_seconds(t, topology))
        .collect();
    rest.sort_by(|&a, &b| {
        table_cost[b]
            .total_cmp(&table_cost[a])
            .then(tables[b].bytes().cmp(&tables[a].bytes()))
            .then(a.cmp(&b))
    });
    let mut complete = true;
    for i in rest {
        match g.place(&tables[i]) {
            Some(e) => entries[i] = Some(e),
            None => {
                complete = false;
                break;
            }
        }
    }
    if complete {
        let plan = Plan {
            topology,
            towers: Vec::new(),
            tables: entries.into_iter().flatten().collect(),
        };
        if plan.validate(tables, topology, memory_budget_bytes).is_ok() {
            return Ok(plan);
        }
    }
    let even = super::row_wise(tables, topology)?;
    let need = even.rank_bytes(tables);
    let (worst, &most) = need
        .iter()
        .enumerate()
        .max_by_key(|&(r, b)| (*b, std::cmp::Reverse(r)))
        .unwrap_or((0, &0));
    if most <= g.budget {
        return Ok(even);
    }
    let total = tables
        .iter()
        .map(TableSpec::bytes)
        .fold(0, u64::saturating_add);
    Err(Error::Plan(format!(
        "no placement fits the memory budget of {} bytes ({}) per rank: the {} tables \
         hold {total} bytes ({}) in all, and split evenly row-wise over all {world} ranks, \
         rank {worst} would still need {most} bytes ({})",
        g.budget,
        mib(g.budget),
        tables.len(),
        mib(total),
        mib(most)
    )))
}

/// What the greedy placement has given each rank so far.
struct Greedy<'a> {
    topology: Topology,
    cost: &'a CostParams,
    budget: u64,
    bytes: Vec<u64>,
    secs: Vec<f64>,
}

impl Greedy<'_> {
    fn fits(&self, held: u64, more: u64) -> bool {
        held.checked_add(more).is_some_and(|b| b <= self.budget)
    }

    fn add(&mut self, rank: usize, bytes: u64, secs: f64) {
        self.bytes[rank] = self.bytes[rank].saturating_add(bytes);
        self.secs[rank] += secs;
    }

    /// Places `t` table-wise, else row-wise over one host, else over all ranks.
    fn place(&mut self, t: &TableSpec) -> Option<TablePlan> {
        let world = self.bytes.len();
        let tb = t.bytes();
        let best = (0..world)
            .filter(|&r| self.fits(self.bytes[r], tb))
            .min_by(|&a, &b| {
                self.secs[a]
                    .total_cmp(&self.secs[b])
                    .then(self.bytes[a].cmp(&self.bytes[b]))
                    .then(a.cmp(&b))
            });
        if let Some(r) = best {
            let s = whole(t, r);
            self.add(r, tb, self.cost.shard_seconds(t, &s, self.topology));
            return Some(entry(t, ShardingType::TableWise, vec![s]));
        }
        let topo = self.topology;
        if topo.ranks_per_host > 1 {
            let host_load = |h: usize| -> f64 { topo.host_ranks(h).map(|r| self.secs[r]).sum() };
            let mut hosts: Vec<usize> = (0..topo.hosts).collect();
            hosts.sort_by(|&a, &b| host_load(a).total_cmp(&host_load(b)).then(a.cmp(&b)));
            for h in hosts {
                let ranks: Vec<usize> = topo.host_ranks(h).collect();
                if let Some(shards) = self.split(t, &ranks) {
                    return Some(entry(t, ShardingType::TableRowWise, shards));
                }
            }
        }
        if topo.hosts > 1 {
            let ranks: Vec<usize> = (0..world).collect();
            if let Some(shards) = self.split(t, &ranks) {
                return Some(entry(t, ShardingType::RowWise, shards));
            }
        }
        None
    }

    /// Splits `t`'s rows over `ranks` so that the fullest of them ends as empty as
    /// possible, within the budget; records the shards. `None` if they cannot hold it.
    fn split(&mut self, t: &TableSpec, ranks: &[usize]) -> Option<Vec<Shard>> {
        let bpr = t.bytes_per_row as u64;
        let rows = t.rows as u64;
        if bpr == 0 {
            return None; // a table of 0 bytes fits table-wise anywhere
        }
        let rows_below =
            |level: u64, r: usize| -> u64 { level.saturating_sub(self.bytes[r]) / bpr };
        let total = |level: u64| -> u64 {
            ranks
                .iter()
                .map(|&r| rows_below(level, r).min(rows))
                .fold(0, u64::saturating_add)
        };
        if total(self.budget) < rows {
            return None;
        }
        // The lowest level of bytes at which the ranks hold every row.
        let (mut lo, mut hi) = (0u64, self.budget);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if total(mid) >= rows {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut counts: Vec<u64> = ranks.iter().map(|&r| rows_below(lo, r).min(rows)).collect();
        // One level below held fewer rows than needed, so fewer than `ranks.len()` rows
        // are too many: take them back from the ranks that end fullest.
        let mut excess = counts.iter().sum::<u64>().saturating_sub(rows);
        while excess > 0 {
            let fullest = (0..ranks.len())
                .filter(|&j| counts[j] > 0)
                .max_by_key(|&j| {
                    (
                        self.bytes[ranks[j]].saturating_add(counts[j] * bpr),
                        std::cmp::Reverse(j),
                    )
                })?;
            counts[fullest] -= 1;
            excess -= 1;
        }
        let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
        let shards = super::row_blocks(t, ranks, &counts);
        for s in &shards {
            let secs = self.cost.shard_seconds(t, s, self.topology);
            self.add(s.rank, t.shard_bytes(s), secs);
        }
        Some(shards)
    }
}
