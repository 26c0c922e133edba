//! A rank's own bags, pooled straight into its feature rows (the flat path; OPER §5's
//! local lookups in the same pass as the rest).
//!
//! Of the bags a local shard pools, this rank's own need no exchange. Placed through
//! the output distribution they were copied three times (into the send buffer, through
//! the exchange, into the feature rows); here the kernel writes them where they go.
//! That is every own bag of a table-wise or column-wise shard, and of a row-partitioned
//! store (which then receives a bag for every own sample, empty or not). Nothing the
//! other ranks send is needed for it, so it runs during the output exchange
//! ([`OwnPass`]; on MPI a non-blocking AlltoAllv, in-process after it).
//!
//! A row-split slot sums its partial sums in rank order from the first, and SPTT and
//! the two-step table-row-wise path sum in the same order, bit for bit. So a
//! row-partitioned bag whose rows lie on this rank and elsewhere too keeps its own
//! partial sum aside, to be added at this rank's turn ([`OwnSplit`]); a bag read only
//! here is final as pooled. Row-wise shards, where most bags have several partial sums,
//! go the usual way.

use super::lookup::LocalShard;
use super::route::{bag_of, Router};
use super::spread::Spread;
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_comm::Comm;
use towerrec_core::Batch;

/// Adds one partial sum of a row-split bag to its slot `row`: copied if it is the first
/// (`written` false, then set), else added; what adding it to zero gives, bit for bit.
pub(super) fn add_partial(row: &mut [f32], part: &[f32], written: &mut bool) {
    if std::mem::replace(written, true) {
        row.iter_mut().zip(part).for_each(|(d, &v)| *d += v);
    } else {
        row.copy_from_slice(part);
    }
}

/// This rank's bags of one row-partitioned table that its own store pooled into the
/// feature rows: which hold the only partial sum, and the own partial sums of the bags
/// that have others too.
#[derive(Default)]
pub(super) struct OwnSplit {
    /// Per own bag: whether this rank's store holds every id of it (and at least one).
    only_own: Vec<bool>,
    /// Bags with ids here and elsewhere, in order, and their partial sums from here.
    bags: Vec<usize>,
    partials: Vec<f32>,
    /// The table's columns in the feature rows.
    off: usize,
    cols: usize,
}

impl OwnSplit {
    /// Per own bag, whether the feature row holds its whole sum already.
    pub(super) fn only_own(&self) -> &[bool] {
        &self.only_own
    }

    /// Adds the kept partial sums of the bags of `samples` at this rank's turn: copied
    /// into a slot no partial sum reached yet, else added (`written`, updated).
    pub(super) fn place(
        &self,
        out: &mut [f32],
        width: usize,
        written: &mut [bool],
        samples: &std::ops::Range<usize>,
    ) {
        let (off, cols) = (self.off, self.cols);
        let first = self.bags.partition_point(|&b| b < samples.start);
        let end = self.bags.partition_point(|&b| b < samples.end);
        let partials = self.partials[first * cols..end * cols].chunks_exact(cols.max(1));
        for (&b, part) in self.bags[first..end].iter().zip(partials) {
            add_partial(
                &mut out[b * width + off..b * width + off + cols],
                part,
                &mut written[b],
            );
        }
    }

    /// Sorts the own bags of a store that pooled them into `out`: of the `count` bags,
    /// those listed in `own` (by sample, as [`bag_of`] reads them) had ids here, bag
    /// `b` `n` of its `total(b)`; the others none.
    fn sort(
        &mut self,
        count: usize,
        own: &[u64],
        total: impl Fn(usize) -> usize,
        out: &[f32],
        width: usize,
    ) {
        self.only_own.clear();
        self.only_own.resize(count, false);
        self.bags.clear();
        self.partials.clear();
        for &packed in own {
            let (b, n) = bag_of(packed);
            let whole = n as usize == total(b);
            self.only_own[b] = whole;
            if !whole {
                self.bags.push(b);
                let at = b * width + self.off;
                self.partials.extend_from_slice(&out[at..at + self.cols]);
            }
        }
    }
}

/// The own pass of the last forward, borrowing the parts of `sp` it needs apart from
/// the communicator (it runs inside the output exchange); it fills `splits`.
pub(super) fn own_pass<'a>(
    sp: &'a mut Spread,
    splits: &'a mut Vec<OwnSplit>,
) -> (&'a Comm, OwnPass<'a>) {
    let pass = OwnPass {
        local: &mut sp.local,
        direct: &sp.direct,
        router: &sp.router,
        samples: &sp.samples,
        splits,
        me: sp.comm.rank(),
    };
    (&sp.comm, pass)
}

/// This rank's own bags of the shards that pool into rows, pooled straight into its
/// feature rows: local work that needs nothing from the other ranks, so it runs while
/// the output exchange moves the others' rows (OPER §5: local lookups overlapped with
/// the remote fetches).
pub(super) struct OwnPass<'a> {
    local: &'a mut [LocalShard],
    direct: &'a [bool],
    router: &'a Router,
    samples: &'a [usize],
    splits: &'a mut Vec<OwnSplit>,
    me: usize,
}

impl OwnPass<'_> {
    /// Pools the own bags into this rank's feature rows `out` and keeps aside the own
    /// partial sums of bags with rows elsewhere too; calls `progress` between shards
    /// (the exchange moves on MPI only inside MPI calls).
    pub(super) fn run(
        self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        progress: &mut dyn FnMut(),
    ) -> Result<()> {
        let width = slots.width();
        let out = &mut out[..batch.batch_size() * width];
        self.splits.resize_with(self.local.len(), OwnSplit::default);
        for (k, (t, s)) in self.router.held_by(self.me).enumerate() {
            let l = &mut self.local[k];
            debug_assert_eq!(l.table, t, "local shards in wire order");
            if !self.direct[k] {
                continue;
            }
            let own = l.bags_of_source(self.me, self.samples);
            debug_assert_eq!(own.len(), batch.batch_size(), "a bag per own sample");
            let split = &mut self.splits[k];
            split.off = slots.slot(t).offset + l.shard.columns.0;
            split.cols = l.columns();
            l.pool_own_into(own, out, width, split.off)?;
            if let Some(bags) = self.router.addressed_bags(t, s) {
                let ids = batch.sparse.feature(t);
                split.sort(ids.batch_size(), bags, |b| ids.ids(b).len(), out, width);
            }
            progress();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partial sums added in rank order from the first: what the output distribution
    /// does without an own pass.
    fn in_rank_order(parts: &[Option<f32>]) -> Option<f32> {
        parts
            .iter()
            .flatten()
            .fold(None, |sum, &p| Some(sum.map_or(p, |s| s + p)))
    }

    #[test]
    fn kept_partial_sums_are_added_at_this_ranks_turn() {
        // 4 bags of this rank (rank 2 of 4), one column at offset 1 of rows 2 wide: the
        // own store read all of bag 0, part of bags 1 and 3, none of bag 2. Bag 1's sum
        // is 1 in rank order, 0 if this rank's part were added first.
        // Listed as the router lists a store's bags: those with ids here, `b << 32 | n`.
        let own_ids = [2u64, 1 << 32 | 1, 3 << 32 | 1];
        let total_ids = [2usize, 3, 1, 2];
        let ranks_0_1 = [
            [None, Some(1e8f32), Some(0.5), Some(1e8)],
            [None, Some(-1e8f32), None, None],
        ];
        let own = [Some(1e8f32), Some(1.0), None, Some(-1e8)];
        let rank_3 = [None, None, None, Some(3.0f32)];
        let width = 2;
        // The own pass: the kernel wrote every own bag, zero where it read nothing.
        let mut out: Vec<f32> = own.iter().flat_map(|p| [7.0, p.unwrap_or(0.0)]).collect();
        let mut split = OwnSplit {
            off: 1,
            cols: 1,
            ..OwnSplit::default()
        };
        split.sort(4, &own_ids, |b| total_ids[b], &out, width);
        assert_eq!(split.only_own(), &[true, false, false, false]);
        let mut written = split.only_own().to_vec();
        let place = |from: &[Option<f32>], out: &mut [f32], written: &mut [bool]| {
            for (b, p) in from.iter().enumerate() {
                if let Some(p) = p {
                    add_partial(
                        &mut out[b * width + 1..b * width + 2],
                        &[*p],
                        &mut written[b],
                    );
                }
            }
        };
        for from in &ranks_0_1 {
            place(from, &mut out, &mut written);
        }
        split.place(&mut out, width, &mut written, &(0..4));
        place(&rank_3, &mut out, &mut written);
        for b in 0..4 {
            let parts = [ranks_0_1[0][b], ranks_0_1[1][b], own[b], rank_3[b]];
            let want = in_rank_order(&parts).unwrap_or(0.0);
            assert_eq!(out[b * width + 1].to_bits(), want.to_bits(), "bag {b}");
            assert_eq!(out[b * width], 7.0, "bag {b}: other columns untouched");
        }
        assert_eq!(out[3], 1.0, "bag 1 summed in rank order");
    }
}
