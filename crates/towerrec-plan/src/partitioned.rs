//! Row-partitioned tables (OPER §3.2, §4, §5.1): a table's rows in an order that puts
//! its hot rows first, cut into partitions owned by one rank each and replicated on
//! others, and the all-in-one address map that tells any rank where to read a row.
//!
//! The order is compact: the plan lists only the hot rows (hottest first); every other
//! row follows them by increasing id ([`RowOrder`]: a bit per row says which are hot,
//! so a row's position takes a few memory reads). The map costs memory per hot row,
//! per partition and a bit per row, not a position per row: a 100M-row table with 1%
//! hot rows needs about 28 MB, not the 1.6 GB of a `(rank, offset)` per row.
//!
//! A rank stores a partitioned table as the partitions it owns, in plan order, then the
//! replicas it holds, in plan order; [`Location::offset`] counts rows into that.

use crate::plan::TablePlan;
use towerrec_comm::Topology;

mod order;
pub use order::RowOrder;

/// Where a rank reads a row: the rank that holds it and the row's offset in that
/// rank's storage of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub rank: usize,
    pub offset: usize,
    /// Whether `rank` holds a replica (false: it owns the row).
    pub replica: bool,
}

/// One table's address map.
#[derive(Debug, Clone)]
pub struct TableAddresses {
    order: RowOrder,
    starts: Vec<usize>,
    owners: Vec<(usize, usize)>,
    /// Per partition: `(rank, offset of the partition's first row there)` of each replica.
    replicas: Vec<Vec<(usize, usize)>>,
    /// Rows each rank stores: owned, then replicas.
    stored: Vec<(usize, usize)>,
}

impl TableAddresses {
    /// The map of a valid row-partitioned entry (see [`crate::Plan::validate`]).
    pub fn new(entry: &TablePlan, rows: usize, world: usize) -> Self {
        let order = RowOrder::new(rows, &entry.hot_rows);
        let mut owned = vec![0usize; world];
        let mut owners = Vec::with_capacity(entry.partitions.len());
        for p in &entry.partitions {
            owners.push((p.rank, owned[p.rank]));
            owned[p.rank] += p.num_rows();
        }
        let mut held = owned.clone();
        let replicas = entry
            .partitions
            .iter()
            .map(|p| {
                p.replicas
                    .iter()
                    .map(|&r| {
                        let at = held[r];
                        held[r] += p.num_rows();
                        (r, at)
                    })
                    .collect()
            })
            .collect();
        TableAddresses {
            order,
            starts: entry.partitions.iter().map(|p| p.order.0).collect(),
            owners,
            replicas,
            stored: owned
                .into_iter()
                .zip(held)
                .map(|(o, h)| (o, h - o))
                .collect(),
        }
    }

    /// Where rank `from` reads `row`: its own copy if it has one (owned or replica),
    /// else a replica on its host (the lowest rank), else the owner.
    pub fn locate(&self, row: usize, from: usize, topology: Topology) -> Location {
        let (p, within) = self.partition_at(self.order.position(row));
        let at = self.partition_location(p, from, topology);
        Location {
            offset: at.offset + within,
            ..at
        }
    }

    /// The partition that holds `position` of the order, and the position's place in it.
    pub fn partition_at(&self, position: usize) -> (usize, usize) {
        let p = self.starts.partition_point(|&s| s <= position) - 1;
        (p, position - self.starts[p])
    }

    /// Where rank `from` reads partition `p`'s first row, as [`TableAddresses::locate`]
    /// chooses; its `i`-th row is `i` rows further on the same rank.
    pub fn partition_location(&self, p: usize, from: usize, topology: Topology) -> Location {
        let (owner, base) = self.owners[p];
        let at = |rank, offset, replica| Location {
            rank,
            offset,
            replica,
        };
        if owner == from {
            return at(owner, base, false);
        }
        let reps = &self.replicas[p];
        if let Some(&(r, b)) = reps.iter().find(|&&(r, _)| r == from) {
            return at(r, b, true);
        }
        let host = topology.host_of(from);
        if topology.host_of(owner) != host {
            if let Some(&(r, b)) = reps
                .iter()
                .filter(|&&(r, _)| topology.host_of(r) == host)
                .min_by_key(|&&(r, _)| r)
            {
                return at(r, b, true);
            }
        }
        at(owner, base, false)
    }

    /// The number of partitions.
    pub fn partitions(&self) -> usize {
        self.starts.len()
    }

    /// The table's rows that `rank` stores, by offset: its own partitions, then its
    /// replicas, each in plan order.
    pub fn stored_rows(&self, rank: usize) -> Vec<usize> {
        let mut rows = Vec::with_capacity(self.stored[rank].0 + self.stored[rank].1);
        let bounds = self.bounds();
        for (p, &(owner, _)) in self.owners.iter().enumerate() {
            if owner == rank {
                rows.extend(bounds[p].clone().map(|pos| self.order.row_at(pos)));
            }
        }
        for (p, reps) in self.replicas.iter().enumerate() {
            if reps.iter().any(|&(r, _)| r == rank) {
                rows.extend(bounds[p].clone().map(|pos| self.order.row_at(pos)));
            }
        }
        rows
    }

    /// The offsets on `rank` of rows that have copies on other ranks too (owned
    /// partitions with replicas, and every replica), as ranges.
    pub fn shared_offsets(&self, rank: usize) -> Vec<std::ops::Range<usize>> {
        let bounds = self.bounds();
        let mut out = Vec::new();
        for (p, &(owner, base)) in self.owners.iter().enumerate() {
            if owner == rank && !self.replicas[p].is_empty() {
                out.push(base..base + bounds[p].len());
            }
            for &(r, at) in &self.replicas[p] {
                if r == rank {
                    out.push(at..at + bounds[p].len());
                }
            }
        }
        out.sort_by_key(|r| r.start);
        out
    }

    /// Every partition's positions.
    fn bounds(&self) -> Vec<std::ops::Range<usize>> {
        let ends = self.starts[1..].iter().copied().chain([self.order.rows()]);
        self.starts.iter().zip(ends).map(|(&a, b)| a..b).collect()
    }

    /// The table's order.
    pub fn order(&self) -> &RowOrder {
        &self.order
    }

    /// `(owned, replica)` rows rank `rank` stores.
    pub fn stored(&self, rank: usize) -> (usize, usize) {
        self.stored[rank]
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.order.heap_bytes()
            + self.starts.capacity() * size_of::<usize>()
            + self.owners.capacity() * size_of::<(usize, usize)>()
            + self
                .replicas
                .iter()
                .map(|r| (r.capacity() + 3) * size_of::<(usize, usize)>())
                .sum::<usize>()
            + self.stored.capacity() * size_of::<(usize, usize)>()
    }
}

#[cfg(test)]
mod tests;
