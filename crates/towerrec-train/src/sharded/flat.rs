//! The flat output distribution (the scale-in paper's Appendix, Algorithms 1 and 2):
//! one AlltoAllv of the pooled vectors from every shard to the sample owners, who place
//! table-wise blocks, concatenate column-wise blocks and sum row-wise partial sums (a
//! ReduceScatter done as a direct exchange and a sum in owner-rank order; mean pooling
//! divides after the sum); a step in halves exchanges each half of the samples on its
//! own ([`Part`]). The backward is in [`super::flat_grad`]. A row-partitioned store
//! (OPER) exchanges only the bags that read it, both ways. Table-row-wise tables, on a cluster of several hosts,
//! go through [`super::trw`] instead: summed within their host, then across hosts once.

use super::own::add_partial;
use super::route::bag_of;
use super::{Part, ShardedEmbeddings};
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_comm::Phase;
use towerrec_core::embedding::Pooling;
use towerrec_core::simd::{prefetch_for_write, ROWS_APART_AHEAD};
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
    /// them): a row per bag that read a row-partitioned store (`bags`: the bags of
    /// `samples` this rank sent it, packed as [`bag_of`] reads them), else a row for
    /// each of `samples`; a row-split slot's first partial sum is copied and later ones
    /// added (`written`).
    fn rows(
        &self,
        out: &mut [f32],
        written: &mut [bool],
        bags: Option<&[u64]>,
        rows: &[f32],
        cursor: &mut usize,
        samples: std::ops::Range<usize>,
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
        let n = samples.len();
        let block = &rows[*cursor..*cursor + n * cols];
        *cursor += n * cols;
        let out = &mut out[samples.start * width..samples.end * width];
        let written = written.get_mut(samples).unwrap_or_default();
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
        self.output_part_with_own_pass(batch, out, slots, Part::Whole)?;
        let width = slots.width();
        self.trw_output_dist(&mut out[..batch.batch_size() * width], slots)?;
        self.scale_mean_row_split(batch, out, slots, Part::Whole);
        Ok(())
    }

    /// The output exchange of `part` (whole or first half) with the own pass during
    /// it, and the part's rows placed; the own pass pools every own bag, of both halves.
    pub(super) fn output_part_with_own_pass(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        part: Part,
    ) -> Result<()> {
        let (send, counts, own_firsts) = self.pack_rows(part);
        let mut recv = std::mem::take(&mut self.bufs.vec_recv);
        let mut own_split = std::mem::take(&mut self.bufs.own_split);
        let (comm, pass) = self.own_pass(&mut own_split);
        let exchanged =
            comm.all_to_all_v_during(&send, &counts, &mut recv, Phase::OutputDist, |progress| {
                pass.run(batch, out, slots, progress)
            });
        self.bufs.vec_send = send;
        self.bufs.own_split = own_split;
        let placed = exchanged.map_err(Into::into).and_then(|(_, pass)| pass);
        if placed.is_ok() {
            self.start_written(batch.batch_size());
            self.place_part(out, slots, part, &recv, own_firsts, batch.batch_size());
        }
        self.bufs.vec_recv = recv;
        placed
    }

    /// The second half's output exchange, with `work` run during it on the first half's
    /// finished feature rows; then the second half's rows placed. Returns what `work`
    /// returns.
    pub(super) fn output_second_half<R>(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        work: impl FnOnce(&[f32], &mut dyn FnMut()) -> R,
    ) -> Result<R> {
        let b_local = batch.batch_size();
        let (send, counts, own_firsts) = self.pack_rows(Part::Second);
        let mut recv = std::mem::take(&mut self.bufs.vec_recv);
        let first = &out[..Part::First.range(b_local).end * slots.width()];
        let exchanged = self.comm.all_to_all_v_during(
            &send,
            &counts,
            &mut recv,
            Phase::OutputDist,
            |progress| work(first, progress),
        );
        self.bufs.vec_send = send;
        let placed = exchanged.map(|(_, done)| {
            self.place_part(out, slots, Part::Second, &recv, own_firsts, b_local);
            self.scale_mean_row_split(batch, out, slots, Part::Second);
            done
        });
        self.bufs.vec_recv = recv;
        Ok(placed?)
    }

    /// The send buffer of `part`'s output exchange (to each owner, every local shard's
    /// pooled rows of the owner's samples in the part), its counts, and where each local
    /// shard's rows of this rank's own part start in its `pooled`.
    fn pack_rows(&mut self, part: Part) -> (Vec<f32>, Vec<usize>, Vec<usize>) {
        let (p, me) = (self.comm.size(), self.comm.rank());
        let mut send = std::mem::take(&mut self.bufs.vec_send);
        send.clear();
        let mut counts = vec![0usize; p];
        let mut own_firsts = vec![0usize; self.local.len()];
        for (owner, count) in counts.iter_mut().enumerate() {
            let before = send.len();
            for (l, own) in self.local.iter().zip(&mut own_firsts) {
                if self.hierarchical(l.table) {
                    continue;
                }
                let cols = l.columns();
                // A row-partitioned store holds only the bags that read it.
                let rows = l.part_of_source(owner, &self.samples, part);
                if owner == me {
                    *own = rows.start * cols;
                } else {
                    send.extend_from_slice(&l.pooled[rows.start * cols..rows.end * cols]);
                }
            }
            *count = send.len() - before;
        }
        (send, counts, own_firsts)
    }

    /// Which of this rank's rows hold a partial sum per row-split table, before a
    /// forward's first placement: the rows the own pass finished.
    fn start_written(&mut self, b_local: usize) {
        let mut written = std::mem::take(&mut self.bufs.written);
        written.resize(self.tables.len(), Vec::new());
        for (t, w) in written.iter_mut().enumerate() {
            w.clear();
            if self.tables[t].row_split() && !self.hierarchical(t) {
                w.resize(b_local, false);
            }
        }
        for (k, split) in self.bufs.own_split.iter().enumerate() {
            if self.direct[k] && !written[self.local[k].table].is_empty() {
                written[self.local[k].table].copy_from_slice(split.only_own());
            }
        }
        self.bufs.written = written;
    }

    /// Places the rows of `part` of this rank's samples from `recv` (every other rank's,
    /// in rank order) and from its own shards (`own_firsts`, where each one's rows of the
    /// part start in its `pooled`), then zeroes every slot of the part that no shard
    /// wrote (a bag no store served).
    fn place_part(
        &mut self,
        out: &mut [f32],
        slots: &FeatureSlots,
        part: Part,
        recv: &[f32],
        mut own_firsts: Vec<usize>,
        b_local: usize,
    ) {
        let (p, me) = (self.comm.size(), self.comm.rank());
        let width = slots.width();
        let range = part.range(b_local);
        let out = &mut out[..b_local * width];
        // A row-split table's slot takes its first partial sum as it comes and adds the
        // rest in arrival order (what adding them to zero gives).
        let mut written = std::mem::take(&mut self.bufs.written);
        let mut at = 0;
        for src in 0..p {
            for (k, (t, s)) in self.router.held_by(src).enumerate() {
                if self.hierarchical(t) {
                    continue;
                }
                let (rows, cursor) = if src == me {
                    debug_assert_eq!(self.local[k].table, t, "local shards in wire order");
                    if self.direct[k] {
                        self.bufs.own_split[k].place(out, width, &mut written[t], &range);
                        continue;
                    }
                    (&self.local[k].pooled[..], &mut own_firsts[k])
                } else {
                    (recv, &mut at)
                };
                let place = Placement {
                    width,
                    off: slots.slot(t).offset + self.tables[t].shards[s].columns.0,
                    cols: self.tables[t].shards[s].num_columns(),
                };
                let bags = self
                    .router
                    .addressed_bags(t, s)
                    .map(|bags| part.bags_in(bags, b_local));
                place.rows(out, &mut written[t], bags, rows, cursor, range.clone());
            }
        }
        for (t, written) in written.iter().enumerate() {
            let cols = slots.slot(t).range();
            for (row, _) in out
                .chunks_exact_mut(width)
                .zip(written)
                .skip(range.start)
                .take(range.len())
                .filter(|(_, &w)| !w)
            {
                row[cols.clone()].fill(0.0);
            }
        }
        self.bufs.written = written;
    }

    /// Divides the summed slots of mean-pooled row-split tables by each bag's length, for
    /// the samples of `part`.
    pub(super) fn scale_mean_row_split(
        &self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        part: Part,
    ) {
        let samples = part.range(batch.batch_size());
        for t in 0..self.tables.len() {
            let Some(scale) = self.mean_scales(batch, t) else {
                continue;
            };
            let range = slots.slot(t).range();
            let rows = out.chunks_exact_mut(slots.width()).enumerate();
            for (b, row) in rows.skip(samples.start).take(samples.len()) {
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
