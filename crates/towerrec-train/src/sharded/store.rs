//! A row-partitioned table's store on one rank (OPER): which table row each offset
//! holds and which offsets are shared with other ranks; and what the backward hands the
//! sparse AllReduce. The stages (`lookup`, `partitioned`) both use it.

use std::ops::Range;

/// What a row-partitioned table's store on this rank needs beyond a shard's.
pub(super) struct Store {
    /// The table row at each offset.
    rows: Vec<usize>,
    /// Whether the row at each offset has copies elsewhere.
    shared: Vec<bool>,
    /// `(table row, offset)` of those rows, by row.
    shared_by_row: Vec<(u64, usize)>,
}

impl Store {
    /// The store of `rows` (the table row at each offset) whose `shared` offsets (sorted
    /// ranges) have copies on other ranks.
    pub(super) fn new(rows: Vec<usize>, shared: Vec<Range<usize>>) -> Self {
        let mut shared_by_row: Vec<(u64, usize)> = shared
            .iter()
            .flat_map(|r| r.clone())
            .map(|offset| (rows[offset] as u64, offset))
            .collect();
        shared_by_row.sort_unstable();
        let mut flags = vec![false; rows.len()];
        for r in &shared {
            flags[r.clone()].fill(true);
        }
        Store {
            rows,
            shared: flags,
            shared_by_row,
        }
    }

    /// The table row at `offset`.
    pub(super) fn row(&self, offset: usize) -> usize {
        self.rows[offset]
    }

    pub(super) fn is_shared(&self, offset: usize) -> bool {
        self.shared[offset]
    }

    /// `(table row, offset)` of the shared rows, by row.
    pub(super) fn shared_by_row(&self) -> &[(u64, usize)] {
        &self.shared_by_row
    }
}

/// Per table, the rows of shared copies this rank's reads touched and their summed
/// gradients: `(table, rows, grads)`.
pub(super) type Touched = Vec<(usize, Vec<u64>, Vec<f32>)>;
