//! The flat output distribution (the scale-in paper's Appendix, Algorithms 1 and 2):
//! one AlltoAllv of the pooled vectors from every shard to the sample owners, who place
//! table-wise blocks, concatenate column-wise blocks and sum row-wise partial sums (a
//! ReduceScatter done as a direct exchange and a sum in owner-rank order; mean pooling
//! divides after the sum). Backward sends each shard its columns of the pooled
//! gradient for the whole batch. A row-partitioned store (OPER) exchanges only the
//! bags that read it, both ways. Table-row-wise tables, on a cluster of several hosts,
//! go through [`super::trw`] instead: summed within their host, then across hosts once.

use super::own::add_partial;
use super::route::bag_of;
use super::ShardedEmbeddings;
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_comm::Phase;
use towerrec_core::embedding::Pooling;
use towerrec_core::simd::{prefetch, prefetch_for_write, ROWS_APART_AHEAD};
use towerrec_core::Batch;

/// Writes the rows of `block` (`cols` wide) into columns `off..off + cols` of the rows
/// of `rows` (`width` wide): copied, or added to the partial sums already there
/// (row-wise shards after the first, summed in the order the blocks arrive, the same
/// order on every path).
pub(super) fn place_block(
    rows: &mut [f32],
    width: usize,
    off: usize,
    block: &[f32],
    cols: usize,
    add: bool,
) {
    let n = block.len() / cols.max(1);
    for b in 0..n.min(rows.len() / width.max(1)) {
        if b + ROWS_APART_AHEAD < n {
            prefetch_for_write(rows, (b + ROWS_APART_AHEAD) * width + off, cols);
        }
        let (dst, part) = (
            &mut rows[b * width + off..b * width + off + cols],
            &block[b * cols..(b + 1) * cols],
        );
        if add {
            dst.iter_mut().zip(part).for_each(|(d, &v)| *d += v);
        } else {
            dst.copy_from_slice(part);
        }
    }
}

/// Where one shard's rows go in this rank's feature rows: columns `off..off + cols` of
/// rows `width` wide.
struct Placement {
    width: usize,
    off: usize,
    cols: usize,
}

impl Placement {
    /// Places one shard's rows for this rank, read from `rows` at `*cursor` (moved past
    /// them): a row per bag that read a row-partitioned store (`bags`: the bags this
    /// rank sent it, packed as [`bag_of`] reads them), else a row for each of the
    /// `b_local` samples; a row-split slot's first partial sum is copied and later ones
    /// added (`written`).
    fn rows(
        &self,
        out: &mut [f32],
        written: &mut [bool],
        bags: Option<&[u64]>,
        rows: &[f32],
        cursor: &mut usize,
        b_local: usize,
    ) {
        let (width, off, cols) = (self.width, self.off, self.cols);
        if let Some(bags) = bags {
            for (i, &packed) in bags.iter().enumerate() {
                if let Some(&ahead) = bags.get(i + ROWS_APART_AHEAD) {
                    prefetch_for_write(out, bag_of(ahead).0 * width + off, cols);
                }
                let b = bag_of(packed).0;
                let row = &mut out[b * width + off..b * width + off + cols];
                add_partial(row, &rows[*cursor..*cursor + cols], &mut written[b]);
                *cursor += cols;
            }
            return;
        }
        // A whole, column or row shard sends a row for every sample.
        let block = &rows[*cursor..*cursor + b_local * cols];
        *cursor += b_local * cols;
        place_block(out, width, off, block, cols, written.first() == Some(&true));
        written.fill(true);
    }
}

impl ShardedEmbeddings {
    /// Sends every sample owner its rows of every local shard and assembles this rank's
    /// `b_local` feature rows in `out`, after [`ShardedEmbeddings::pool_flat`]. This
    /// rank's own rows do not go through the exchange: the own pass pools most of them
    /// into place while the exchange runs, the rest are placed from where they were
    /// pooled. The exchange's time in its phase includes the own pass's.
    pub(super) fn flat_output_dist(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let (p, me) = (self.comm.size(), self.comm.rank());
        let b_local = batch.batch_size();
        let mut send = std::mem::take(&mut self.bufs.vec_send);
        send.clear();
        let mut counts = vec![0usize; p];
        // Where each local shard's rows for the next owner start; for this rank, where
        // they start in its `pooled`.
        let mut firsts = vec![0usize; self.local.len()];
        let mut own_firsts = vec![0usize; self.local.len()];
        for (owner, &n) in self.samples.iter().enumerate() {
            let before = send.len();
            for ((l, first), own) in self.local.iter().zip(&mut firsts).zip(&mut own_firsts) {
                if self.hierarchical(l.table) {
                    continue;
                }
                let cols = l.columns();
                // A row-partitioned store holds only the bags that read it.
                let rows = l.bags_from().get(owner).copied().unwrap_or(n);
                if owner == me {
                    *own = *first * cols;
                } else {
                    send.extend_from_slice(&l.pooled[*first * cols..(*first + rows) * cols]);
                }
                *first += rows;
            }
            counts[owner] = send.len() - before;
        }
        let mut recv = std::mem::take(&mut self.bufs.vec_recv);
        let mut own_split = std::mem::take(&mut self.bufs.own_split);
        let (comm, pass) = self.own_pass(&mut own_split);
        let exchanged =
            comm.all_to_all_v_during(&send, &counts, &mut recv, Phase::OutputDist, |progress| {
                pass.run(batch, out, slots, progress)
            });
        self.bufs.vec_send = send;
        exchanged?.1?;
        let width = slots.width();
        let out = &mut out[..b_local * width];
        // A row-split table's slot takes its first partial sum as it comes and adds the
        // rest in arrival order (what adding them to zero gives); a slot no shard wrote
        // (a bag no store served) is zeroed after.
        let mut written = std::mem::take(&mut self.bufs.written);
        written.resize(self.tables.len(), Vec::new());
        for (t, w) in written.iter_mut().enumerate() {
            w.clear();
            if self.tables[t].row_split() && !self.hierarchical(t) {
                w.resize(b_local, false);
            }
        }
        for (k, split) in own_split.iter().enumerate() {
            if self.direct[k] && !written[self.local[k].table].is_empty() {
                written[self.local[k].table].copy_from_slice(split.only_own());
            }
        }
        let mut at = 0;
        for src in 0..p {
            for (k, (t, s)) in self.router.held_by(src).enumerate() {
                if self.hierarchical(t) {
                    continue;
                }
                let (rows, cursor) = if src == me {
                    debug_assert_eq!(self.local[k].table, t, "local shards in wire order");
                    if self.direct[k] {
                        own_split[k].place(out, width, &mut written[t]);
                        continue;
                    }
                    (&self.local[k].pooled, &mut own_firsts[k])
                } else {
                    (&recv, &mut at)
                };
                let place = Placement {
                    width,
                    off: slots.slot(t).offset + self.tables[t].shards[s].columns.0,
                    cols: self.tables[t].shards[s].num_columns(),
                };
                let bags = self.router.addressed_bags(t, s);
                place.rows(out, &mut written[t], bags, rows, cursor, b_local);
            }
        }
        self.bufs.vec_recv = recv;
        self.bufs.own_split = own_split;
        for (t, written) in written.iter().enumerate() {
            let range = slots.slot(t).range();
            for (row, _) in out
                .chunks_exact_mut(width)
                .zip(written)
                .filter(|(_, &w)| !w)
            {
                row[range.clone()].fill(0.0);
            }
        }
        self.bufs.written = written;
        self.trw_output_dist(out, slots)?;
        self.scale_mean_row_split(batch, out, slots);
        Ok(())
    }

    /// Sends each shard its columns of the gradient `grad` of this rank's feature rows,
    /// leaving in each local shard's `grad` the gradient of the whole global batch. This
    /// rank's own segment goes straight from `grad` into its shards while the exchange
    /// runs (it needs nothing from the other ranks); the earlier ranks' segments, which
    /// come before it, are written over a zeroed placeholder when they arrive.
    pub(super) fn flat_output_grad(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let (p, me) = (self.comm.size(), self.comm.rank());
        let mut send = std::mem::take(&mut self.bufs.vec_send);
        send.clear();
        let mut counts = vec![0usize; p];
        for (dest, count) in counts.iter_mut().enumerate().filter(|(d, _)| *d != me) {
            let before = send.len();
            for (t, s) in self.router.held_by(dest) {
                if !self.hierarchical(t) {
                    self.push_grad_rows(&mut send, batch, grad, slots, (t, s, false));
                }
            }
            *count = send.len() - before;
        }
        let mut recv = std::mem::take(&mut self.bufs.vec_recv);
        let mut local = std::mem::take(&mut self.local);
        // The length of store `l`'s segment from rank `src` in its `grad`, and of the
        // segments of the ranks before this one.
        let segment = |l: &super::lookup::LocalShard, src: usize| {
            l.bags_from().get(src).copied().unwrap_or(self.samples[src]) * l.columns()
        };
        let before: Vec<usize> = local
            .iter()
            .map(|l| (0..me).map(|src| segment(l, src)).sum())
            .collect();
        let this = &*self;
        let exchanged = this.comm.all_to_all_v_during(
            &send,
            &counts,
            &mut recv,
            Phase::OutputDist,
            |progress| this.push_own_grad_rows(&mut local, &before, batch, grad, slots, progress),
        );
        self.bufs.vec_send = send;
        exchanged?;
        // Where the next earlier rank's segment goes in each store's placeholder.
        let mut cursors = vec![0usize; local.len()];
        let mut at = 0;
        for src in (0..p).filter(|&src| src != me) {
            for (l, cursor) in local.iter_mut().zip(&mut cursors) {
                if self.hierarchical(l.table) {
                    continue;
                }
                let len = segment(l, src);
                let rows = &recv[at..at + len];
                if src < me {
                    l.grad[*cursor..*cursor + len].copy_from_slice(rows);
                    *cursor += len;
                } else {
                    l.grad.extend_from_slice(rows);
                }
                at += len;
            }
        }
        self.local = local;
        self.bufs.vec_recv = recv;
        self.trw_output_grad(batch, grad, slots)
    }

    /// This rank's own segment of every local store's gradient (after `before[k]` zeroed
    /// values, the earlier ranks' segments of store `k`), during the gradient exchange.
    fn push_own_grad_rows(
        &self,
        local: &mut [super::lookup::LocalShard],
        before: &[usize],
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        progress: &mut dyn FnMut(),
    ) {
        let own = self.router.held_by(self.comm.rank());
        for (k, (l, (t, s))) in local.iter_mut().zip(own).enumerate() {
            l.grad.clear();
            if self.hierarchical(l.table) {
                continue;
            }
            debug_assert_eq!(l.table, t, "local shards in wire order");
            l.grad.resize(before[k], 0.0);
            // This rank's own store holds every bag of its slice when it pooled them
            // into the rank's rows.
            self.push_grad_rows(&mut l.grad, batch, grad, slots, (t, s, self.direct[k]));
            progress();
        }
    }

    /// Appends to `out` shard `s` of table `t`'s columns of the gradient `grad`, for
    /// each bag this rank sent it ids of (`every_bag`: for every bag), mean-pooled bags
    /// of row-split tables scaled by their length.
    fn push_grad_rows(
        &self,
        out: &mut Vec<f32>,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        (t, s, every_bag): (usize, usize, bool),
    ) {
        let width = slots.width();
        let shard = &self.tables[t].shards[s];
        let off = slots.slot(t).offset + shard.columns.0;
        let cols = shard.num_columns();
        let scales = self.mean_scales(batch, t);
        let rows = grad.len() / width.max(1);
        let push = |out: &mut Vec<f32>, b: usize| {
            let part = &grad[b * width + off..b * width + off + cols];
            match scales.as_ref().map(|f| f(b)) {
                Some(scale) if scale != 1.0 => out.extend(part.iter().map(|&g| g * scale)),
                _ => out.extend_from_slice(part),
            }
        };
        match self.router.addressed_bags(t, s).filter(|_| !every_bag) {
            // Only the bags that sent the store ids.
            Some(bags) => {
                for (i, &packed) in bags.iter().enumerate() {
                    if let Some(&ahead) = bags.get(i + ROWS_APART_AHEAD) {
                        prefetch(grad, bag_of(ahead).0 * width + off, cols);
                    }
                    push(out, bag_of(packed).0);
                }
            }
            None => {
                for b in 0..rows {
                    if b + ROWS_APART_AHEAD < rows {
                        prefetch(grad, (b + ROWS_APART_AHEAD) * width + off, cols);
                    }
                    push(out, b);
                }
            }
        }
    }

    /// Divides the summed slots of mean-pooled row-split tables by each bag's length.
    pub(super) fn scale_mean_row_split(
        &self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) {
        for t in 0..self.tables.len() {
            let Some(scale) = self.mean_scales(batch, t) else {
                continue;
            };
            let range = slots.slot(t).range();
            for (b, row) in out.chunks_exact_mut(slots.width()).enumerate() {
                let s = scale(b);
                if s != 1.0 {
                    row[range.clone()].iter_mut().for_each(|v| *v *= s);
                }
            }
        }
    }

    /// For a mean-pooled row-split table, the factor `1 / bag length` of each sample of
    /// `batch` (1 for empty and single-id bags); `None` for other tables.
    pub(super) fn mean_scales<'a>(
        &self,
        batch: &'a Batch,
        t: usize,
    ) -> Option<impl Fn(usize) -> f32 + 'a> {
        let table = &self.tables[t];
        if !(table.row_split() && table.pooling == Pooling::Mean) {
            return None;
        }
        let ids = batch.sparse.feature(t);
        Some(move |b: usize| mean_scale(ids.ids(b).len()))
    }
}

/// The factor that turns the sum of a bag of `len` rows into their mean (1 for empty
/// and single-id bags); the flat and SPTT paths both scale by it, so they agree bit
/// for bit.
pub(super) fn mean_scale(len: usize) -> f32 {
    if len > 1 {
        1.0 / len as f32
    } else {
        1.0
    }
}
