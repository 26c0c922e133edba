//! Checking a plan against a model's tables and a cluster, before anything runs it.
//!
//! A valid plan has exactly one entry per table of the model, on the cluster's
//! topology, and every non-data-parallel entry's shards tile its table exactly as its
//! sharding type says (TorchRec's meanings):
//!
//! - `table_wise`: one shard holding every row and column;
//! - `row_wise`: shards holding every column, with row ranges in increasing order that
//!   cover `0..rows` with no gap and no overlap, on distinct ranks;
//! - `table_row_wise`: as `row_wise`, with every shard on the ranks of one host;
//! - `column_wise`: shards holding every row, with column ranges in increasing order
//!   that cover `0..dim`, on distinct ranks;
//! - `data_parallel`: no shards (every rank holds the whole table).
//!
//! With a memory budget, no rank may hold more bytes than it (see [`Plan::rank_bytes`]).
//! Every error names the table entry (or the rank) and says what is wrong.

use crate::error::{Error, Result};
use crate::plan::{Plan, Shard, ShardingType, TablePlan, TableSpec, MAX_WORLD_SIZE};
use std::collections::{HashMap, HashSet};
use towerrec_comm::Topology;

impl Plan {
    /// Checks the plan against the model's `tables` and the cluster's `topology`, and,
    /// if given, that no rank holds more than `memory_budget_bytes`.
    pub fn validate(
        &self,
        tables: &[TableSpec],
        topology: Topology,
        memory_budget_bytes: Option<u64>,
    ) -> Result<()> {
        let world = check_topology(topology)?;
        if self.topology != topology {
            return Err(Error::Plan(format!(
                "the plan is for {} hosts × {} ranks per host, the cluster is {} × {}",
                self.topology.hosts,
                self.topology.ranks_per_host,
                topology.hosts,
                topology.ranks_per_host
            )));
        }
        let specs = check_tables(tables)?;
        let mut seen = HashSet::new();
        for entry in &self.tables {
            if !seen.insert(entry.table.as_str()) {
                return Err(entry_error(entry, "listed twice in the plan".into()));
            }
            let Some(spec) = specs.get(entry.table.as_str()) else {
                return Err(entry_error(
                    entry,
                    "the model has no table of this name".into(),
                ));
            };
            check_entry(entry, spec, topology, world)?;
        }
        if let Some(t) = tables.iter().find(|t| !seen.contains(t.name.as_str())) {
            return Err(Error::Plan(format!(
                "table '{}' of the model has no entry; every table needs one \
                 (data_parallel for a copy on every rank)",
                t.name
            )));
        }
        towers::check_towers(self, topology)?;
        if let Some(budget) = memory_budget_bytes {
            for (rank, &bytes) in self.rank_bytes(tables).iter().enumerate() {
                if bytes > budget {
                    return Err(Error::Plan(format!(
                        "rank {rank} (host {}) holds {bytes} bytes ({}), over the memory \
                         budget of {budget} bytes ({})",
                        topology.host_of(rank),
                        mib(bytes),
                        mib(budget)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// `bytes` as MiB with two decimals, for messages.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The number of ranks of a topology that can exist: at least one host and one rank
/// per host, at most [`MAX_WORLD_SIZE`] ranks.
pub(crate) fn check_topology(topology: Topology) -> Result<usize> {
    let (h, l) = (topology.hosts, topology.ranks_per_host);
    if h == 0 || l == 0 {
        return Err(Error::Request(format!(
            "topology of {h} hosts × {l} ranks per host: both must be at least 1"
        )));
    }
    match h.checked_mul(l) {
        Some(w) if w <= MAX_WORLD_SIZE => Ok(w),
        _ => Err(Error::Request(format!(
            "topology of {h} hosts × {l} ranks per host: more than {MAX_WORLD_SIZE} ranks"
        ))),
    }
}

/// The model's tables by name, after checking each can be planned at all.
pub(crate) fn check_tables(tables: &[TableSpec]) -> Result<HashMap<&str, &TableSpec>> {
    let mut by_name = HashMap::with_capacity(tables.len());
    for t in tables {
        let fail = |reason: &str| {
            Err(Error::Table {
                table: t.name.clone(),
                reason: reason.into(),
            })
        };
        if t.name.is_empty() {
            return fail("a table needs a name");
        }
        if t.rows == 0 {
            return fail("has 0 rows");
        }
        if t.dim == 0 {
            return fail("has dim 0 (no columns)");
        }
        if !(t.pooling_factor.is_finite() && t.pooling_factor >= 0.0) {
            return fail("pooling factor must be a number ≥ 0");
        }
        if by_name.insert(t.name.as_str(), t).is_some() {
            return fail("the model lists this name twice");
        }
    }
    Ok(by_name)
}

fn entry_error(entry: &TablePlan, reason: String) -> Error {
    Error::Entry {
        table: entry.table.clone(),
        reason,
    }
}

fn check_entry(
    entry: &TablePlan,
    spec: &TableSpec,
    topology: Topology,
    world: usize,
) -> Result<()> {
    let fail = |reason: String| Err(entry_error(entry, reason));
    let kind = entry.sharding.name();
    let shards = &entry.shards;
    if entry.sharding == ShardingType::RowPartitioned {
        return partitioned::check_entry(entry, spec.rows, world).or_else(fail);
    }
    if !entry.hot_rows.is_empty() || !entry.partitions.is_empty() {
        return fail(format!(
            "{kind} tables have shards; hot_rows and partitions belong to row_partitioned tables"
        ));
    }
    if entry.sharding == ShardingType::DataParallel {
        if !shards.is_empty() {
            return fail(format!(
                "data_parallel tables have no shards (every rank holds the whole table), found {}",
                shards.len()
            ));
        }
        return Ok(());
    }
    if shards.is_empty() {
        return fail(format!("{kind} needs at least one shard, found none"));
    }
    for (i, s) in shards.iter().enumerate() {
        if s.rank >= world {
            return fail(format!(
                "shard {i}: rank {} does not exist; the topology {}×{} has ranks 0..{world}",
                s.rank, topology.hosts, topology.ranks_per_host
            ));
        }
        for (what, (a, b), size) in [
            ("rows", s.rows, spec.rows),
            ("columns", s.columns, spec.dim),
        ] {
            if a >= b {
                return fail(format!("shard {i}: {what} [{a}, {b}) are empty"));
            }
            if b > size {
                return fail(format!(
                    "shard {i}: {what} [{a}, {b}) go past the table's {size} {what}"
                ));
            }
        }
    }
    let (all_rows, all_cols) = ((0, spec.rows), (0, spec.dim));
    match entry.sharding {
        ShardingType::TableWise => {
            if shards.len() != 1 {
                return fail(format!(
                    "table_wise needs exactly one shard, found {}",
                    shards.len()
                ));
            }
            let s = &shards[0];
            if s.rows != all_rows || s.columns != all_cols {
                return fail(format!(
                    "table_wise: the shard holds rows [{}, {}) and columns [{}, {}), \
                     not the whole table (rows [0, {}), columns [0, {}))",
                    s.rows.0, s.rows.1, s.columns.0, s.columns.1, spec.rows, spec.dim
                ));
            }
        }
        ShardingType::RowWise | ShardingType::TableRowWise => {
            if let Some((i, s)) = shards
                .iter()
                .enumerate()
                .find(|(_, s)| s.columns != all_cols)
            {
                return fail(format!(
                    "shard {i}: columns [{}, {}); {kind} shards hold all {} columns",
                    s.columns.0, s.columns.1, spec.dim
                ));
            }
            tile(shards.iter().map(|s| s.rows), spec.rows, "row", "shard").or_else(fail)?;
            distinct_ranks(shards, kind).or_else(fail)?;
            if entry.sharding == ShardingType::TableRowWise {
                let host = topology.host_of(shards[0].rank);
                if let Some((i, s)) = shards
                    .iter()
                    .enumerate()
                    .find(|(_, s)| topology.host_of(s.rank) != host)
                {
                    return fail(format!(
                        "shard {i} is on rank {} (host {}) but shard 0 is on rank {} (host {host}); \
                         table_row_wise shards must all be on one host",
                        s.rank,
                        topology.host_of(s.rank),
                        shards[0].rank
                    ));
                }
            }
        }
        ShardingType::ColumnWise => {
            if let Some((i, s)) = shards.iter().enumerate().find(|(_, s)| s.rows != all_rows) {
                return fail(format!(
                    "shard {i}: rows [{}, {}); column_wise shards hold all {} rows",
                    s.rows.0, s.rows.1, spec.rows
                ));
            }
            tile(
                shards.iter().map(|s| s.columns),
                spec.dim,
                "column",
                "shard",
            )
            .or_else(fail)?;
            distinct_ranks(shards, kind).or_else(fail)?;
        }
        ShardingType::DataParallel | ShardingType::RowPartitioned => {}
    }
    Ok(())
}

/// Whether `ranges`, in order, cover `0..total` with no gap and no overlap; `what` is
/// the unit of the ranges ("row"), `unit` what holds one ("shard").
pub(crate) fn tile(
    ranges: impl Iterator<Item = (usize, usize)>,
    total: usize,
    what: &str,
    unit: &str,
) -> std::result::Result<(), String> {
    let ranges: Vec<(usize, usize)> = ranges.collect();
    let mut end = 0;
    for (i, &(a, b)) in ranges.iter().enumerate() {
        if a >= b {
            return Err(format!("{unit} {i}: {what}s [{a}, {b}) are empty"));
        }
        if a > end && ranges[i + 1..].iter().any(|r| r.0 == end) {
            return Err(format!(
                "{what} splits do not add up: {unit} {i} starts at {what} {a}, but a later \
                 {unit} starts at {what} {end}; the {unit}s are out of order (list them by \
                 increasing {what})"
            ));
        }
        if a > end {
            return Err(format!(
                "{what} splits do not add up: {unit} {i} starts at {what} {a} but the {unit}s \
                 before it end at {end}, so {what}s [{end}, {a}) are in no {unit}"
            ));
        }
        if a < end {
            return Err(format!(
                "{what} splits do not add up: {unit} {i} starts at {what} {a}, inside the \
                 {unit}s before it (which end at {end}); the ranges overlap or are out of order"
            ));
        }
        end = b;
    }
    if end != total {
        return Err(format!(
            "{what} splits do not add up: the {unit}s end at {what} {end} but the table has \
             {total} {what}s"
        ));
    }
    Ok(())
}

fn distinct_ranks(shards: &[Shard], kind: &str) -> std::result::Result<(), String> {
    let mut first = HashMap::new();
    for (i, s) in shards.iter().enumerate() {
        if let Some(j) = first.insert(s.rank, i) {
            return Err(format!(
                "shards {j} and {i} are both on rank {}; {kind} puts each shard on its own rank",
                s.rank
            ));
        }
    }
    Ok(())
}

mod partitioned;
#[cfg(test)]
mod tests;
mod towers;
