//! SPTT's exchange (paper §3.1, Figure 7): steps c–f of the forward and their reverse,
//! as an output distribution (see the parent module for the steps).

use super::{mean_scale_of, peer_order, pipeline, pipeline_back, stores, Sptt};
use crate::error::Result;
use crate::sharded::flat::place_block;
use crate::sharded::output::{GradWork, OutputDist, RowsWork, StepPart};
use crate::sharded::spread::{firsts, Spread};
use crate::slots::FeatureSlots;
use towerrec_comm::Phase;

impl OutputDist for Sptt {
    /// Two where the maps run before step d (the chunks are cut from the halves of
    /// every slice), else one.
    fn max_parts(&self) -> usize {
        if self.early.is_some() {
            2
        } else {
            1
        }
    }

    /// Steps c–f: this rank's feature rows in `out`. In two parts, the chunks all run
    /// in the second, and its work (the first half's dense layers) during the last
    /// chunk's step f.
    fn forward_part(
        &mut self,
        st: &mut Spread,
        part: StepPart<'_>,
        out: &mut [f32],
        work: Option<RowsWork<'_>>,
    ) -> Result<()> {
        let (out, slots) = (&mut out[..part.rows_len()], part.slots);
        let (local, router, samples) = (&st.local, &st.router, &st.samples);
        match (part.k, part.parts) {
            (_, 1) if self.early.is_some() => {
                let step = self.pipeline(local, router, samples, slots, false)?;
                pipeline::forward(step, local, out, slots, None)
            }
            (_, 1) => self.forward_whole(st, part, out),
            (0, _) => Ok(()),
            _ => {
                debug_assert!(work.is_some(), "a later part runs the previous part's work");
                let step = self.pipeline(local, router, samples, slots, true)?;
                pipeline::forward(step, local, out, slots, work)
            }
        }
    }

    /// The chunks' gradient exchange, the first chunk's step f during `work` (the
    /// second half's dense layers).
    fn backward_part(
        &mut self,
        st: &mut Spread,
        part: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()> {
        let (grad, slots) = (&mut grad[..part.rows_len()], part.slots);
        let step = self.pipeline(&st.local, &st.router, &st.samples, slots, true)?;
        pipeline_back::backward_in_halves(step, &mut st.local, grad, slots, work)
    }

    fn backward_last(&mut self, st: &mut Spread, part: StepPart<'_>, grad: &[f32]) -> Result<()> {
        if part.parts > 1 {
            // The chunks ran back in the first part.
            return Ok(());
        }
        let (grad, slots) = (&grad[..part.rows_len()], part.slots);
        if self.early.is_some() {
            let step = self.pipeline(&st.local, &st.router, &st.samples, slots, false)?;
            return pipeline_back::backward(step, &mut st.local, grad, slots);
        }
        self.backward_whole(st, grad, slots)
    }
}

impl Sptt {
    /// Steps c–f of a whole step (`part`: its one part) where no maps run before step
    /// d: this rank's feature rows in `out`, the Tower Modules (if any) between e and f.
    fn forward_whole(
        &mut self,
        st: &mut Spread,
        part: StepPart<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let StepPart { batch, slots, .. } = part;
        let firsts = firsts(&st.samples);
        // c, d: every group-mate gets its peers' rows of every local shard (a store's:
        // only the bags it served, their samples on the index channel).
        self.send.clear();
        self.index_send.clear();
        let mut counts = vec![0; self.group.size()];
        let mut index_counts = vec![0; self.group.size()];
        let order = peer_order(&self.rank_of);
        for (j, dests) in order.chunks(self.rank_of.len()).enumerate() {
            let (before, index_before) = (self.send.len(), self.index_send.len());
            for l in &st.local {
                if l.store().is_some() {
                    stores::send_rows(l, dests, &mut self.send, &mut self.index_send);
                    continue;
                }
                let cols = l.columns();
                for &w in dests {
                    let (f, n) = (firsts[w], st.samples[w]);
                    self.send
                        .extend_from_slice(&l.pooled[f * cols..(f + n) * cols]);
                }
            }
            counts[j] = self.send.len() - before;
            index_counts[j] = self.index_send.len() - index_before;
        }
        if self.addressed {
            self.group.all_to_all_v_into(
                &self.index_send,
                &index_counts,
                &mut self.index_recv,
                Phase::TowerIntra,
            )?;
        }
        let wire = self.wire.forward;
        self.group.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::TowerIntra,
            wire,
        )?;
        // e: the blocks laid out as group rows, peers in group order.
        let peer_rows = self.peer_rows(&st.samples);
        let width = self.widths[self.my_group];
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        // Row-split blocks add into their slots.
        self.rows.clear();
        self.rows.resize(total * width, 0.0);
        let (mut at, mut iat) = (0, 0);
        for j in 0..self.group.size() {
            for (t, s) in st.router.held_by(self.rank_of[self.my_group][j]) {
                let table = &st.tables[t];
                let shard = &table.shards[s];
                let (cols, off) = (shard.num_columns(), self.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if table.addresses.is_some() {
                        let b = stores::Block {
                            first,
                            width,
                            off,
                            cols,
                        };
                        let (index, recv) = (&self.index_recv, &self.recv);
                        stores::add_rows(index, &mut iat, recv, &mut at, &mut self.rows, b);
                        continue;
                    }
                    let block = &self.recv[at..at + n * cols];
                    at += n * cols;
                    let rows = &mut self.rows[first * width..(first + n) * width];
                    place_block(rows, width, off, block, cols, table.row_split());
                }
            }
        }
        self.gather_mean_scales(batch, &peer_rows)?;
        self.scale_mean_rows(total);
        // Between e and f: the Tower Modules, if any.
        let between = self.modules.is_some();
        if between {
            let (rows, modules) = self.group_rows();
            rows.run(modules, total);
        }
        // f: each peer gets the rows of its own samples.
        let sent = self.sent_width(self.my_group);
        let counts: Vec<usize> = peer_rows.iter().map(|&(_, n)| n * sent).collect();
        let rows = if between { &self.outs } else { &self.rows };
        let wire = self.wire.forward;
        self.peers
            .all_to_all_v_wire_into(rows, &counts, &mut self.recv, Phase::TowerPeer, wire)?;
        let b_local = batch.batch_size();
        let out_width = slots.width();
        let mut at = 0;
        for g in 0..self.features.len() {
            let w = self.sent_width(g);
            let placed = self.placed(g, slots);
            let block = &self.recv[at..at + b_local * w];
            at += b_local * w;
            for (row, part) in out
                .chunks_exact_mut(out_width)
                .zip(block.chunks_exact(w.max(1)))
            {
                for &(slot, off) in &placed {
                    row[slot.range()].copy_from_slice(&part[off..off + slot.width]);
                }
            }
        }
        Ok(())
    }

    /// Reverse of [`Sptt::forward_whole`]: leaves in each local shard's `grad` the
    /// gradient of the whole global batch.
    fn backward_whole(
        &mut self,
        st: &mut Spread,
        grad: &[f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        // f reversed: each group's columns of this rank's rows to that group's peer.
        self.send.clear();
        let mut counts = vec![0; self.peers.size()];
        for (g, count) in counts.iter_mut().enumerate() {
            let before = self.send.len();
            let placed = self.placed(g, slots);
            for row in grad.chunks_exact(slots.width()) {
                for (slot, _) in &placed {
                    self.send.extend_from_slice(&row[slot.range()]);
                }
            }
            *count = self.send.len() - before;
        }
        let peer_rows = self.peer_rows(&st.samples);
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        let wire = self.wire.backward;
        if self.modules.is_some() {
            self.peers.all_to_all_v_wire_into(
                &self.send,
                &counts,
                &mut self.outs,
                Phase::TowerPeer,
                wire,
            )?;
            let (rows, modules) = self.group_rows();
            rows.backward(modules, total);
        } else {
            self.peers.all_to_all_v_wire_into(
                &self.send,
                &counts,
                &mut self.rows,
                Phase::TowerPeer,
                wire,
            )?;
        }
        // e, d, c reversed: each shard's columns of its group-mates' peers' rows.
        let width = self.widths[self.my_group];
        self.send.clear();
        let mut counts = vec![0; self.group.size()];
        let mut iat = 0;
        for (j, count) in counts.iter_mut().enumerate() {
            let before = self.send.len();
            for (t, s) in st.router.held_by(self.rank_of[self.my_group][j]) {
                let shard = &st.tables[t].shards[s];
                let (cols, off) = (shard.num_columns(), self.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if st.tables[t].addresses.is_some() {
                        // The gradients of the rows the store sent, in its order.
                        let (index, rows, send) = (&self.index_recv, &self.rows, &mut self.send);
                        stores::for_each_row(index, &mut iat, first, |r| {
                            let part = &rows[r * width + off..r * width + off + cols];
                            match mean_scale_of(&self.mean_split, &self.scales, t, r, total) {
                                1.0 => send.extend_from_slice(part),
                                scale => send.extend(part.iter().map(|&g| g * scale)),
                            }
                        });
                        continue;
                    }
                    let rows = &self.rows[first * width..(first + n) * width];
                    for (k, row) in rows.chunks_exact(width.max(1)).enumerate() {
                        let part = &row[off..off + cols];
                        let scale = self.mean_scale_of(t, first + k, total);
                        if scale != 1.0 {
                            self.send.extend(part.iter().map(|&g| g * scale));
                        } else {
                            self.send.extend_from_slice(part);
                        }
                    }
                }
            }
            *count = self.send.len() - before;
        }
        let wire = self.wire.backward;
        self.group.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::TowerIntra,
            wire,
        )?;
        let firsts = firsts(&st.samples);
        let global: usize = st.samples.iter().sum();
        for l in &mut st.local {
            let rows = match l.store() {
                Some(_) => l.bags_from().iter().sum(),
                None => global,
            };
            l.grad.clear();
            l.grad.resize(rows * l.columns(), 0.0);
        }
        let mut at = 0;
        for j in 0..self.group.size() {
            for l in &mut st.local {
                let cols = l.columns();
                for g in &self.rank_of {
                    let w = g[j];
                    if l.store().is_some() {
                        stores::place_grads(l, w, &self.recv, &mut at);
                        continue;
                    }
                    let (f, n) = (firsts[w], st.samples[w]);
                    l.grad[f * cols..(f + n) * cols].copy_from_slice(&self.recv[at..at + n * cols]);
                    at += n * cols;
                }
            }
        }
        Ok(())
    }
}
