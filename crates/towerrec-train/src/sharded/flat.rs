//! The flat output distribution (the scale-in paper's Appendix, Algorithms 1 and 2):
//! one AlltoAllv of the pooled vectors from every shard to the sample owners, who place
//! table-wise blocks, concatenate column-wise blocks and sum row-wise partial sums (a
//! ReduceScatter done as a direct exchange and a sum in owner-rank order; mean pooling
//! divides after the sum); a step in parts exchanges each part of the samples on its
//! own ([`Part`]). The backward is in [`super::flat_grad`]. A row-partitioned store
//! (OPER) exchanges only the bags that read it, both ways. Table-row-wise tables, on a
//! cluster of several hosts, go through [`super::trw`] instead: summed within their
//! host, then across hosts once.

use super::output::{GradWork, OutputDist, RowsWork, StepPart};
use super::own::{add_partial, own_pass, OwnSplit};
use super::route::{bag_of, Part};
use super::spread::Spread;
use crate::error::Result;
use towerrec_comm::Phase;
use towerrec_core::simd::{prefetch_for_write, ROWS_APART_AHEAD};

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

/// The flat output distribution over the tables it carries (all but table-row-wise
/// tables summed in two steps), with its exchange buffers.
pub(super) struct Flat {
    /// Per table, whether this distribution carries it.
    pub(super) carries: Vec<bool>,
    pub(super) send: Vec<f32>,
    pub(super) recv: Vec<f32>,
    /// The first half's gradient rows, when the exchange runs in halves.
    pub(super) recv_first: Vec<f32>,
    /// Per table, which of this rank's rows hold a partial sum.
    written: Vec<Vec<bool>>,
    /// Per local shard that pools into the rows, its bags with partial sums elsewhere.
    own_split: Vec<OwnSplit>,
}

impl OutputDist for Flat {
    fn max_parts(&self) -> usize {
        2
    }

    /// Sends every sample owner its rows of every local shard and assembles this
    /// rank's feature rows in `out`, after [`Spread::pool`]. This rank's own rows do
    /// not go through the exchange: the own pass pools most of them into place while
    /// the first part's exchange runs, the rest are placed from where they were pooled.
    /// The exchange's time in its phase includes the own pass's.
    fn forward_part(
        &mut self,
        sp: &mut Spread,
        step: StepPart<'_>,
        out: &mut [f32],
        work: Option<RowsWork<'_>>,
    ) -> Result<()> {
        if step.part() == Part::Second {
            let work = work.expect("a later part runs the previous part's work");
            return self.output_second_half(sp, step, out, work);
        }
        self.output_part_with_own_pass(sp, step, out)?;
        self.scale_mean_row_split(sp, step, out);
        Ok(())
    }

    fn backward_part(
        &mut self,
        sp: &mut Spread,
        step: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()> {
        self.grads_first_half(sp, step, grad, work)
    }

    fn backward_last(&mut self, sp: &mut Spread, step: StepPart<'_>, grad: &[f32]) -> Result<()> {
        self.grads_last(sp, step, grad)
    }
}

impl Flat {
    pub(super) fn new(carries: Vec<bool>) -> Self {
        Self {
            carries,
            send: Vec::new(),
            recv: Vec::new(),
            recv_first: Vec::new(),
            written: Vec::new(),
            own_split: Vec::new(),
        }
    }

    /// The output exchange of `step`'s part (whole or first half) with the own pass
    /// during it, and the part's rows placed; the own pass pools every own bag, of both
    /// halves.
    fn output_part_with_own_pass(
        &mut self,
        sp: &mut Spread,
        step: StepPart<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let StepPart { batch, slots, .. } = step;
        let (send, counts, own_firsts) = self.pack_rows(sp, step.part());
        let mut recv = std::mem::take(&mut self.recv);
        let mut own_split = std::mem::take(&mut self.own_split);
        let wire = (Phase::OutputDist, sp.wire.forward);
        let (comm, pass) = own_pass(sp, &mut own_split);
        let exchanged =
            comm.all_to_all_v_wire_during(&send, &counts, &mut recv, wire, |progress| {
                pass.run(batch, out, slots, progress)
            });
        self.send = send;
        self.own_split = own_split;
        let placed = exchanged.map_err(Into::into).and_then(|(_, pass)| pass);
        if placed.is_ok() {
            self.start_written(sp, batch.batch_size());
            self.place_part(sp, step, out, &recv, own_firsts);
        }
        self.recv = recv;
        placed
    }

    /// The second half's output exchange (`step`'s second part), with `work` run during
    /// it on the first half's finished feature rows; then the second half's rows placed.
    fn output_second_half(
        &mut self,
        sp: &Spread,
        step: StepPart<'_>,
        out: &mut [f32],
        work: RowsWork<'_>,
    ) -> Result<()> {
        let (send, counts, own_firsts) = self.pack_rows(sp, Part::Second);
        let mut recv = std::mem::take(&mut self.recv);
        let first = &out[..Part::First.range(step.batch.batch_size()).end * step.slots.width()];
        let wire = (Phase::OutputDist, sp.wire.forward);
        let exchanged =
            sp.comm
                .all_to_all_v_wire_during(&send, &counts, &mut recv, wire, |progress| {
                    work(first, progress)
                });
        self.send = send;
        let placed = exchanged.map(|_| {
            self.place_part(sp, step, out, &recv, own_firsts);
            self.scale_mean_row_split(sp, step, out);
        });
        self.recv = recv;
        Ok(placed?)
    }

    /// The send buffer of `part`'s output exchange (to each owner, every local shard's
    /// pooled rows of the owner's samples in the part), its counts, and where each local
    /// shard's rows of this rank's own part start in its `pooled`.
    fn pack_rows(&mut self, sp: &Spread, part: Part) -> (Vec<f32>, Vec<usize>, Vec<usize>) {
        let (p, me) = (sp.comm.size(), sp.comm.rank());
        let mut send = std::mem::take(&mut self.send);
        send.clear();
        let mut counts = vec![0usize; p];
        let mut own_firsts = vec![0usize; sp.local.len()];
        for (owner, count) in counts.iter_mut().enumerate() {
            let before = send.len();
            for (l, own) in sp.local.iter().zip(&mut own_firsts) {
                if !self.carries[l.table] {
                    continue;
                }
                let cols = l.columns();
                // A row-partitioned store holds only the bags that read it.
                let rows = l.part_of_source(owner, &sp.samples, part);
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
    fn start_written(&mut self, sp: &Spread, b_local: usize) {
        let mut written = std::mem::take(&mut self.written);
        written.resize(sp.tables.len(), Vec::new());
        for (t, w) in written.iter_mut().enumerate() {
            w.clear();
            if sp.tables[t].row_split() && self.carries[t] {
                w.resize(b_local, false);
            }
        }
        for (k, split) in self.own_split.iter().enumerate() {
            if sp.direct[k] && !written[sp.local[k].table].is_empty() {
                written[sp.local[k].table].copy_from_slice(split.only_own());
            }
        }
        self.written = written;
    }

    /// Places the rows of `step`'s part of this rank's samples from `recv` (every other
    /// rank's, in rank order) and from its own shards (`own_firsts`, where each one's
    /// rows of the part start in its `pooled`), then zeroes every slot of the part that
    /// no shard wrote (a bag no store served).
    fn place_part(
        &mut self,
        sp: &Spread,
        step: StepPart<'_>,
        out: &mut [f32],
        recv: &[f32],
        mut own_firsts: Vec<usize>,
    ) {
        let (p, me) = (sp.comm.size(), sp.comm.rank());
        let (slots, b_local, part) = (step.slots, step.batch.batch_size(), step.part());
        let width = slots.width();
        let range = part.range(b_local);
        let out = &mut out[..b_local * width];
        // A row-split table's slot takes its first partial sum as it comes and adds the
        // rest in arrival order (what adding them to zero gives).
        let mut written = std::mem::take(&mut self.written);
        let mut at = 0;
        for src in 0..p {
            for (k, (t, s)) in sp.router.held_by(src).enumerate() {
                if !self.carries[t] {
                    continue;
                }
                let (rows, cursor) = if src == me {
                    debug_assert_eq!(sp.local[k].table, t, "local shards in wire order");
                    if sp.direct[k] {
                        self.own_split[k].place(out, width, &mut written[t], &range);
                        continue;
                    }
                    (&sp.local[k].pooled[..], &mut own_firsts[k])
                } else {
                    (recv, &mut at)
                };
                let place = Placement {
                    width,
                    off: slots.slot(t).offset + sp.tables[t].shards[s].columns.0,
                    cols: sp.tables[t].shards[s].num_columns(),
                };
                let bags = sp
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
        self.written = written;
    }

    /// Divides the summed slots of the mean-pooled row-split tables it carries by each
    /// bag's length, for the samples of `step`'s part.
    fn scale_mean_row_split(&self, sp: &Spread, step: StepPart<'_>, out: &mut [f32]) {
        let (batch, slots) = (step.batch, step.slots);
        sp.scale_mean_rows(batch, (out, slots), |t| self.carries[t], step.samples());
    }
}
