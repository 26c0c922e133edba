//! Planners: from a model's tables and a cluster to a [`Plan`].
//!
//! One baseline per TorchRec sharding type, each putting every table the same way, and
//! [`greedy`], the default, which mixes them: cost-balanced table-wise placement under a
//! memory budget, row-wise splits for tables too big for one rank, data-parallel copies
//! of tiny tables. Every planner returns a plan that [`Plan::validate`] accepts, or an
//! error saying why it cannot (a topology without ranks, a table without rows, a budget
//! nothing fits in). Balancing is by bytes for the baselines and by the estimated cost
//! of [`crate::CostParams`] for [`greedy`]; ties go to the lowest rank, so plans are
//! deterministic. The OPER paper's access-aware planner will join these later.

mod greedy;
mod towers;

pub use greedy::greedy;
pub use towers::{default_hosts_per_tower, strided_towers, with_towers};

use crate::error::{Error, Result};
use crate::plan::{Plan, Shard, ShardingType, TablePlan, TableSpec};
use crate::validate::{check_tables, check_topology};
use towerrec_comm::{even_split, Topology};

/// Every table whole on one rank: tables from the biggest down, each to the rank
/// holding the fewest bytes so far.
pub fn table_wise(tables: &[TableSpec], topology: Topology) -> Result<Plan> {
    let world = prepare(tables, topology)?;
    let mut bytes = vec![0u64; world];
    let mut entries = vec![None; tables.len()];
    for i in by_size_desc(tables) {
        let t = &tables[i];
        let r = least_loaded(&bytes, 0..world);
        bytes[r] = bytes[r].saturating_add(t.bytes());
        entries[i] = Some(entry(t, ShardingType::TableWise, vec![whole(t, r)]));
    }
    finish(entries, tables, topology)
}

/// Every table's rows split evenly over all ranks in rank order; the first
/// `rows % world` ranks take one row more (ranks left without rows get no shard).
pub fn row_wise(tables: &[TableSpec], topology: Topology) -> Result<Plan> {
    let world = prepare(tables, topology)?;
    let ranks: Vec<usize> = (0..world).collect();
    let entries = tables
        .iter()
        .map(|t| {
            let shards = row_blocks(t, &ranks, &even_split(t.rows, world));
            Some(entry(t, ShardingType::RowWise, shards))
        })
        .collect();
    finish(entries, tables, topology)
}

/// Every table's columns split into `min(shards_per_table, dim, world)` near-equal
/// blocks (the first `dim % k` one column wider), each block on its own rank: tables
/// from the biggest down, blocks from the widest, each to the rank holding the fewest
/// bytes that has no block of the table yet.
pub fn column_wise(
    tables: &[TableSpec],
    topology: Topology,
    shards_per_table: usize,
) -> Result<Plan> {
    let world = prepare(tables, topology)?;
    if shards_per_table == 0 {
        return Err(Error::Request(
            "column-wise sharding needs at least 1 shard per table, got 0".into(),
        ));
    }
    let mut bytes = vec![0u64; world];
    let mut entries = vec![None; tables.len()];
    for i in by_size_desc(tables) {
        let t = &tables[i];
        let k = shards_per_table.min(t.dim).min(world);
        let mut used = vec![false; world];
        let mut shards = Vec::with_capacity(k);
        let mut start = 0;
        for width in even_split(t.dim, k) {
            let r = least_loaded(&bytes, (0..world).filter(|&r| !used[r]));
            used[r] = true;
            let s = Shard {
                rank: r,
                rows: (0, t.rows),
                columns: (start, start + width),
            };
            bytes[r] = bytes[r].saturating_add(t.shard_bytes(&s));
            shards.push(s);
            start += width;
        }
        entries[i] = Some(entry(t, ShardingType::ColumnWise, shards));
    }
    finish(entries, tables, topology)
}

/// Every table row-wise over the ranks of one host: tables from the biggest down, each
/// to the host holding the fewest bytes, its rows split evenly over that host's ranks
/// with the bigger blocks on the emptier ranks.
pub fn table_row_wise(tables: &[TableSpec], topology: Topology) -> Result<Plan> {
    let world = prepare(tables, topology)?;
    let mut bytes = vec![0u64; world];
    let mut entries = vec![None; tables.len()];
    let host_bytes = |bytes: &[u64], h: usize| -> u64 {
        topology
            .host_ranks(h)
            .map(|r| bytes[r])
            .fold(0, u64::saturating_add)
    };
    for i in by_size_desc(tables) {
        let t = &tables[i];
        let h = (0..topology.hosts)
            .min_by_key(|&h| (host_bytes(&bytes, h), h))
            .unwrap_or(0);
        let mut ranks: Vec<usize> = topology.host_ranks(h).collect();
        ranks.sort_by_key(|&r| (bytes[r], r));
        let counts = even_split(t.rows, ranks.len());
        let shards = row_blocks(t, &ranks, &counts);
        for s in &shards {
            bytes[s.rank] = bytes[s.rank].saturating_add(t.shard_bytes(s));
        }
        entries[i] = Some(entry(t, ShardingType::TableRowWise, shards));
    }
    finish(entries, tables, topology)
}

/// Every table data-parallel: a whole copy on every rank.
pub fn data_parallel(tables: &[TableSpec], topology: Topology) -> Result<Plan> {
    prepare(tables, topology)?;
    let entries = tables
        .iter()
        .map(|t| Some(entry(t, ShardingType::DataParallel, vec![])))
        .collect();
    finish(entries, tables, topology)
}

/// Checks the request; the number of ranks.
fn prepare(tables: &[TableSpec], topology: Topology) -> Result<usize> {
    let world = check_topology(topology)?;
    check_tables(tables)?;
    Ok(world)
}

/// The plan of `entries` (one per table, in the model's order), validated.
fn finish(
    entries: Vec<Option<TablePlan>>,
    tables: &[TableSpec],
    topology: Topology,
) -> Result<Plan> {
    let plan = Plan {
        topology,
        towers: Vec::new(),
        tables: entries.into_iter().flatten().collect(),
    };
    plan.validate(tables, topology, None)?;
    Ok(plan)
}

fn entry(t: &TableSpec, sharding: ShardingType, shards: Vec<Shard>) -> TablePlan {
    TablePlan {
        hot_rows: Vec::new(),
        partitions: Vec::new(),
        table: t.name.clone(),
        sharding,
        shards,
    }
}

fn whole(t: &TableSpec, rank: usize) -> Shard {
    Shard {
        rank,
        rows: (0, t.rows),
        columns: (0, t.dim),
    }
}

/// Consecutive row blocks of `counts[j]` rows on `ranks[j]`, all columns; no shard
/// where the count is 0.
fn row_blocks(t: &TableSpec, ranks: &[usize], counts: &[usize]) -> Vec<Shard> {
    let mut start = 0;
    let mut shards = Vec::new();
    for (&rank, &n) in ranks.iter().zip(counts) {
        if n > 0 {
            shards.push(Shard {
                rank,
                rows: (start, start + n),
                columns: (0, t.dim),
            });
            start += n;
        }
    }
    shards
}

/// Table indices from the most bytes to the fewest (ties in the model's order).
fn by_size_desc(tables: &[TableSpec]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tables.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(tables[i].bytes()));
    order
}

/// The rank among `candidates` holding the fewest bytes (ties: the lowest rank; rank 0
/// when there are no candidates, which callers rule out).
fn least_loaded(bytes: &[u64], candidates: impl Iterator<Item = usize>) -> usize {
    candidates.min_by_key(|&r| (bytes[r], r)).unwrap_or(0)
}

#[cfg(test)]
mod tests;
