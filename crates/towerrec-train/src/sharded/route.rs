//! Routing of ids to the shards that hold their rows: the first stage of the sharded
//! forward (the scale-in paper's input distribution; DMT §3.1 step a).
//!
//! Which shards each group rank holds is worked out once, when the collection is
//! built. A table-wise or column-wise shard receives every id of a bag; a row-wise
//! table's ids are bucketed by shard with one binary search per id over the shards'
//! first rows (the plan validator guarantees they tile `0..rows` in order), so routing
//! never scans every shard per id.

use crate::error::{Error, Result};
use towerrec_comm::Comm;
use towerrec_core::batch::JaggedView;
use towerrec_plan::Shard;

/// Where every shard of every sharded table lives, by group rank.
pub(super) struct Router {
    /// Every shard of every sharded table, `(table, shard)` in table then shard order:
    /// the order of the segments on the wire.
    wire: Vec<(usize, usize)>,
    /// For each rank of the group, the indices into `wire` of the shards it holds.
    by_rank: Vec<Vec<usize>>,
    /// For each row-split table, its shards' first rows, in shard order.
    row_starts: Vec<Option<Vec<u64>>>,
    /// Ids of the last batch bucketed by shard, per row-split table:
    /// `buckets[t][s]` holds lengths (one per sample) and values.
    buckets: Vec<Vec<Bucket>>,
}

/// One row-wise shard's part of a batch: its ids renumbered from its first row.
#[derive(Default)]
struct Bucket {
    lengths: Vec<u64>,
    values: Vec<u64>,
}

impl Router {
    /// `shards[t]` and whether table `t` is split by rows; shards name world ranks, which
    /// must all be members of `comm`.
    pub(super) fn new(comm: &Comm, shards: &[(&[Shard], bool)]) -> Result<Self> {
        let p = comm.size();
        let group_of: std::collections::HashMap<usize, usize> =
            (0..p).map(|g| (comm.world_rank_of(g), g)).collect();
        let mut wire = Vec::new();
        let mut by_rank = vec![Vec::new(); p];
        let mut row_starts = Vec::with_capacity(shards.len());
        let mut buckets = Vec::with_capacity(shards.len());
        for (t, &(table_shards, row_split)) in shards.iter().enumerate() {
            for (s, shard) in table_shards.iter().enumerate() {
                let g = *group_of.get(&shard.rank).ok_or_else(|| {
                    Error::Plan(format!(
                        "table {t} shard {s} is on rank {}, which is not in this group of {p}",
                        shard.rank
                    ))
                })?;
                by_rank[g].push(wire.len());
                wire.push((t, s));
            }
            if row_split {
                row_starts.push(Some(table_shards.iter().map(|s| s.rows.0 as u64).collect()));
                buckets.push(table_shards.iter().map(|_| Bucket::default()).collect());
            } else {
                row_starts.push(None);
                buckets.push(Vec::new());
            }
        }
        Ok(Self {
            wire,
            by_rank,
            row_starts,
            buckets,
        })
    }

    /// The `(table, shard)`s held by group rank `g`, in wire order.
    pub(super) fn held_by(&self, g: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.by_rank[g].iter().map(|&w| self.wire[w])
    }

    /// Buckets the ids of every row-split table of `feature(t)` by shard.
    pub(super) fn bucket<'a>(&mut self, feature: impl Fn(usize) -> JaggedView<'a>) {
        for (t, starts) in self.row_starts.iter().enumerate() {
            let Some(starts) = starts else { continue };
            let ids = feature(t);
            let buckets = &mut self.buckets[t];
            for b in buckets.iter_mut() {
                b.lengths.clear();
                b.lengths.resize(ids.batch_size(), 0);
                b.values.clear();
            }
            for s in 0..ids.batch_size() {
                for &id in ids.ids(s) {
                    // The last shard whose first row is ≤ id; ids are checked against
                    // the table's rows when the batch is read.
                    let k = starts.partition_point(|&r0| r0 <= id).saturating_sub(1);
                    let bucket = &mut buckets[k];
                    bucket.lengths[s] += 1;
                    bucket.values.push(id - starts[k]);
                }
            }
        }
    }

    /// Appends the lengths and ids that shard `s` of table `t` receives from this rank:
    /// its bucket for a row-split table (after [`Router::bucket`]), else the whole bags.
    pub(super) fn pack(&self, t: usize, s: usize, ids: JaggedView<'_>, send: &mut Vec<u64>) {
        if self.row_starts[t].is_some() {
            let bucket = &self.buckets[t][s];
            send.extend_from_slice(&bucket.lengths);
            send.extend_from_slice(&bucket.values);
        } else {
            send.extend((0..ids.batch_size()).map(|b| ids.ids(b).len() as u64));
            send.extend_from_slice(ids.values);
        }
    }
}
