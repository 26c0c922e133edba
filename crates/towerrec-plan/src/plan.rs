//! Sharding plans: which rank holds which rows and columns of every embedding table.
//!
//! The vocabulary is TorchRec's: table-wise (a whole table on one rank), row-wise (rows
//! split over ranks), column-wise (columns split over ranks), table-row-wise (row-wise
//! over the ranks of one host) and data-parallel (a replica on every rank). A plan is
//! JSON, readable and hand-editable:
//!
//! ```json
//! { "topology": { "hosts": 2, "ranks_per_host": 2 },
//!   "tables": [
//!     { "table": "C1", "sharding": "table_wise", "shards": [ { "rank": 3, "rows": [0, 1000], "columns": [0, 16] } ] },
//!     { "table": "C2", "sharding": "data_parallel" } ] }
//! ```
//!
//! A DMT plan adds `"towers": [ { "features": ["C1", "C3"], "hosts": [0] }, … ]`.
//!
//! Here are the types and what a plan says about itself (an entry by name, its
//! row-partitioned entries, its towers' host groups, bytes per rank); reading and
//! writing the JSON is in `json.rs`, checking a plan against a model and a cluster in
//! `validate.rs`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use towerrec_comm::Topology;

/// How one table is spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardingType {
    TableWise,
    RowWise,
    ColumnWise,
    TableRowWise,
    DataParallel,
    /// OPER (§4): the table's rows, in an order that puts the hot rows first, cut into
    /// partitions, each owned by one rank and replicated on others
    /// ([`TablePlan::partitions`]).
    RowPartitioned,
}

impl ShardingType {
    pub fn name(self) -> &'static str {
        match self {
            ShardingType::TableWise => "table_wise",
            ShardingType::RowWise => "row_wise",
            ShardingType::ColumnWise => "column_wise",
            ShardingType::TableRowWise => "table_row_wise",
            ShardingType::DataParallel => "data_parallel",
            ShardingType::RowPartitioned => "row_partitioned",
        }
    }

    /// Whether its shards send every sample's partial sum, read or not (row-wise and
    /// table-row-wise, as the runtime and TorchRec run them), rather than a row per read.
    pub fn sends_every_sample(self) -> bool {
        matches!(self, ShardingType::RowWise | ShardingType::TableRowWise)
    }
}

/// A block of a table on one rank: rows `rows.0..rows.1`, columns
/// `columns.0..columns.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    pub rank: usize,
    pub rows: (usize, usize),
    pub columns: (usize, usize),
}

impl Shard {
    pub fn num_rows(&self) -> usize {
        self.rows.1 - self.rows.0
    }
    pub fn num_columns(&self) -> usize {
        self.columns.1 - self.columns.0
    }
}

/// Where one table lives. Data-parallel tables have no shards (every rank holds all);
/// row-partitioned tables have partitions instead of shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablePlan {
    pub table: String,
    pub sharding: ShardingType,
    #[serde(default)]
    pub shards: Vec<Shard>,
    /// `row_partitioned` only: the rows that come first in the table's order, in that
    /// order (hottest first); every other row follows them by increasing id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot_rows: Vec<usize>,
    /// `row_partitioned` only: consecutive ranges of the table's order, each owned by
    /// one rank and replicated on others (see [`crate::partitioned`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
}

impl TablePlan {
    /// An entry of `shards` (none for data-parallel tables).
    pub fn new(table: impl Into<String>, sharding: ShardingType, shards: Vec<Shard>) -> Self {
        TablePlan {
            table: table.into(),
            sharding,
            shards,
            hot_rows: Vec::new(),
            partitions: Vec::new(),
        }
    }

    /// Moves every shard, partition and replica `by` ranks up: a plan made on a
    /// sub-cluster placed on the hosts that start at rank `by`.
    pub fn shift_ranks(&mut self, by: usize) {
        for s in &mut self.shards {
            s.rank += by;
        }
        for p in &mut self.partitions {
            p.rank += by;
            p.replicas.iter_mut().for_each(|r| *r += by);
        }
    }
}

/// A partition of a row-partitioned table: positions `order.0..order.1` of the
/// table's order, owned (stored and updated) by `rank`, with read copies on `replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    pub order: (usize, usize),
    pub rank: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<usize>,
}

impl Partition {
    pub fn num_rows(&self) -> usize {
        self.order.1.saturating_sub(self.order.0)
    }

    /// The ranks that store the partition: its owner, then its replicas.
    pub fn holders(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.rank).chain(self.replicas.iter().copied())
    }
}

/// A DMT tower (paper §3.1): a group of features, the dense layers that consume their
/// embeddings (its Tower Module), and the hosts whose ranks hold the features' tables.
/// A tower spans one host or K hosts (§3.1.3); towers sharing hosts share them whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TowerPlan {
    /// The tower's features, by table name, in the order its module sees them.
    pub features: Vec<String>,
    /// The hosts whose ranks hold the tower's tables.
    pub hosts: Vec<usize>,
}

/// A whole plan: one entry per table of the model, in any order, and optionally the
/// towers of a DMT model (every table in exactly one tower).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub topology: Topology,
    pub tables: Vec<TablePlan>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub towers: Vec<TowerPlan>,
}

impl Plan {
    /// The entry for `table`, if any.
    pub fn table(&self, table: &str) -> Option<&TablePlan> {
        self.tables.iter().find(|t| t.table == table)
    }

    /// The row-partitioned entries.
    pub fn partitioned(&self) -> impl Iterator<Item = &TablePlan> {
        self.tables
            .iter()
            .filter(|e| e.sharding == ShardingType::RowPartitioned)
    }

    /// The plan's host groups: each distinct set of tower hosts, sorted, in order of first
    /// appearance. Empty for a plan without towers.
    pub fn host_groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for tower in &self.towers {
            let hosts: Vec<usize> = tower
                .hosts
                .iter()
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if !groups.contains(&hosts) {
                groups.push(hosts);
            }
        }
        groups
    }

    /// Bytes of weights and optimizer state each rank holds: the blocks of its shards
    /// (see [`TableSpec::shard_bytes`]), the partitions it owns or replicates, plus
    /// every data-parallel table in full. One
    /// entry per rank of the plan's topology (none if the topology has no ranks or more
    /// than [`MAX_WORLD_SIZE`]). Entries for tables not in `tables` and shards on ranks
    /// outside the topology count nothing; [`Plan::validate`] rejects both.
    pub fn rank_bytes(&self, tables: &[TableSpec]) -> Vec<u64> {
        let world = world_size_or_zero(self.topology);
        let mut bytes = vec![0u64; world];
        for entry in &self.tables {
            let Some(spec) = tables.iter().find(|t| t.name == entry.table) else {
                continue;
            };
            if entry.sharding == ShardingType::DataParallel {
                let full = spec.bytes();
                for b in &mut bytes {
                    *b = b.saturating_add(full);
                }
                continue;
            }
            for shard in &entry.shards {
                if let Some(b) = bytes.get_mut(shard.rank) {
                    *b = b.saturating_add(spec.shard_bytes(shard));
                }
            }
            for p in &entry.partitions {
                let b = (p.num_rows() as u64).saturating_mul(spec.bytes_per_row as u64);
                for rank in p.holders() {
                    if let Some(x) = bytes.get_mut(rank) {
                        *x = x.saturating_add(b);
                    }
                }
            }
        }
        bytes
    }

    /// Rows of row-partitioned tables each rank holds as replicas, in bytes (one entry
    /// per rank): the extra memory OPER's replication spends.
    pub fn replica_bytes(&self, tables: &[TableSpec]) -> Vec<u64> {
        let mut bytes = vec![0u64; world_size_or_zero(self.topology)];
        for entry in self.partitioned() {
            let Some(spec) = tables.iter().find(|t| t.name == entry.table) else {
                continue;
            };
            for p in &entry.partitions {
                let b = (p.num_rows() as u64).saturating_mul(spec.bytes_per_row as u64);
                for &r in &p.replicas {
                    if let Some(x) = bytes.get_mut(r) {
                        *x = x.saturating_add(b);
                    }
                }
            }
        }
        bytes
    }
}

/// The most ranks a topology may have here (2^20), so that per-rank tables stay small.
pub const MAX_WORLD_SIZE: usize = 1 << 20;

/// Ranks of `topology`, or 0 when it has none or more than [`MAX_WORLD_SIZE`].
pub(crate) fn world_size_or_zero(topology: Topology) -> usize {
    topology
        .hosts
        .checked_mul(topology.ranks_per_host)
        .filter(|&w| w <= MAX_WORLD_SIZE)
        .unwrap_or(0)
}

/// What a planner and the validator need to know about one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSpec {
    pub name: String,
    pub rows: usize,
    pub dim: usize,
    /// Bytes of weights and optimizer state per row (4·dim for SGD).
    pub bytes_per_row: usize,
    /// Mean ids per sample.
    pub pooling_factor: f64,
}

impl TableSpec {
    /// Bytes of the whole table: `rows · bytes_per_row` (saturating at `u64::MAX`).
    pub fn bytes(&self) -> u64 {
        let b = self.rows as u128 * self.bytes_per_row as u128;
        u64::try_from(b).unwrap_or(u64::MAX)
    }

    /// Bytes of one block of this table: `num_rows · bytes_per_row · num_columns / dim`,
    /// rounded down, in exact integer arithmetic (saturating at `u64::MAX`). Ranges the
    /// wrong way round count as empty; a table with no columns holds nothing.
    pub fn shard_bytes(&self, shard: &Shard) -> u64 {
        let rows = shard.rows.1.saturating_sub(shard.rows.0) as u128;
        let cols = shard.columns.1.saturating_sub(shard.columns.0) as u128;
        let dim = self.dim as u128;
        if dim == 0 {
            return 0;
        }
        // x·cols/dim = (x/dim)·cols + (x%dim)·cols/dim, each part without overflow
        // (x < 2^128 and (x%dim)·cols < dim·cols < 2^128).
        let x = rows * self.bytes_per_row as u128;
        let b = (x / dim)
            .saturating_mul(cols)
            .saturating_add((x % dim) * cols / dim);
        u64::try_from(b).unwrap_or(u64::MAX)
    }
}
