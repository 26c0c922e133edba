//! SPTT's exchange (paper §3.1, Figure 7): steps c–f of the forward and their reverse,
//! on the sharded embedding collection (see the parent module for the steps).

use super::{firsts, mean_scale_of, peer_order, stores, Sptt};
use crate::error::{Error, Result};
use crate::sharded::flat::place_block;
use crate::sharded::ShardedEmbeddings;
use crate::slots::FeatureSlots;
use towerrec_comm::Phase;
use towerrec_core::Batch;

impl ShardedEmbeddings {
    /// SPTT steps c–f: this rank's `b_local` feature rows in `out`.
    pub(in crate::sharded) fn sptt_output_dist(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        self.with_sptt(|this, sp| this.sptt_forward(sp, batch, out, slots))
    }

    /// Runs `f` with SPTT taken out of `self` (so both can be borrowed), then puts it
    /// back; an error without towers.
    fn with_sptt<R>(&mut self, f: impl FnOnce(&mut Self, &mut Sptt) -> Result<R>) -> Result<R> {
        let Some(mut sp) = self.sptt.take() else {
            return Err(Error::Plan("no towers".into()));
        };
        let result = f(self, &mut sp);
        self.sptt = Some(sp);
        result
    }

    /// The second part's forward exchange of a step in halves through SPTT's chunks
    /// ([`Sptt::pipelined_forward_with`] and its work), after the lookups.
    pub(in crate::sharded) fn sptt_forward_in_halves<R>(
        &mut self,
        out: &mut [f32],
        slots: &FeatureSlots,
        work: impl FnOnce(&[f32], &mut dyn FnMut()) -> R,
    ) -> Result<R> {
        self.with_sptt(|this, sp| {
            let (local, router, samples) = (&this.local, &this.router, &this.samples);
            let done = sp.pipelined_forward_with(local, router, samples, out, slots, Some(work))?;
            Ok(done.expect("the last chunk's step f runs the work"))
        })
    }

    /// The first part's gradient exchange of a step in halves through SPTT's chunks
    /// ([`Sptt::pipelined_backward_in_halves`]): `grad` is this rank's rows' gradient.
    pub(in crate::sharded) fn sptt_grads_in_halves<R>(
        &mut self,
        grad: &mut [f32],
        slots: &FeatureSlots,
        work: impl FnOnce(&mut [f32], &mut dyn FnMut()) -> R,
    ) -> Result<R> {
        self.with_sptt(|this, sp| {
            let (router, samples) = (&this.router, &this.samples);
            sp.pipelined_backward_in_halves(&mut this.local, router, samples, grad, slots, work)
        })
    }

    fn sptt_forward(
        &mut self,
        sp: &mut Sptt,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        if sp.early.is_some() {
            return sp.pipelined_forward(&self.local, &self.router, &self.samples, out, slots);
        }
        let firsts = firsts(&self.samples);
        // c, d: every group-mate gets its peers' rows of every local shard (a store's:
        // only the bags it served, their samples on the index channel).
        sp.send.clear();
        sp.index_send.clear();
        let mut counts = vec![0; sp.group.size()];
        let mut index_counts = vec![0; sp.group.size()];
        let order = peer_order(&sp.rank_of);
        for (j, dests) in order.chunks(sp.rank_of.len()).enumerate() {
            let (before, index_before) = (sp.send.len(), sp.index_send.len());
            for l in &self.local {
                if l.store().is_some() {
                    stores::send_rows(l, dests, &mut sp.send, &mut sp.index_send);
                    continue;
                }
                let cols = l.columns();
                for &w in dests {
                    let (f, n) = (firsts[w], self.samples[w]);
                    sp.send
                        .extend_from_slice(&l.pooled[f * cols..(f + n) * cols]);
                }
            }
            counts[j] = sp.send.len() - before;
            index_counts[j] = sp.index_send.len() - index_before;
        }
        if sp.addressed {
            sp.group.all_to_all_v_into(
                &sp.index_send,
                &index_counts,
                &mut sp.index_recv,
                Phase::TowerIntra,
            )?;
        }
        sp.group
            .all_to_all_v_into(&sp.send, &counts, &mut sp.recv, Phase::TowerIntra)?;
        // e: the blocks laid out as group rows, peers in group order.
        let peer_rows = sp.peer_rows(&self.samples);
        let width = sp.widths[sp.my_group];
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        // Row-split blocks add into their slots.
        sp.rows.clear();
        sp.rows.resize(total * width, 0.0);
        let (mut at, mut iat) = (0, 0);
        for j in 0..sp.group.size() {
            for (t, s) in self.router.held_by(sp.rank_of[sp.my_group][j]) {
                let table = &self.tables[t];
                let shard = &table.shards[s];
                let (cols, off) = (shard.num_columns(), sp.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if table.addresses.is_some() {
                        let b = stores::Block {
                            first,
                            width,
                            off,
                            cols,
                        };
                        let (index, recv) = (&sp.index_recv, &sp.recv);
                        stores::add_rows(index, &mut iat, recv, &mut at, &mut sp.rows, b);
                        continue;
                    }
                    let block = &sp.recv[at..at + n * cols];
                    at += n * cols;
                    let rows = &mut sp.rows[first * width..(first + n) * width];
                    place_block(rows, width, off, block, cols, table.row_split());
                }
            }
        }
        sp.gather_mean_scales(batch, &peer_rows)?;
        sp.scale_mean_rows(total);
        // Between e and f: the Tower Modules, if any.
        let between = sp.modules.is_some();
        if between {
            sp.run_modules(total);
        }
        // f: each peer gets the rows of its own samples.
        let sent = sp.sent_width(sp.my_group);
        let counts: Vec<usize> = peer_rows.iter().map(|&(_, n)| n * sent).collect();
        let rows = if between { &sp.outs } else { &sp.rows };
        sp.peers
            .all_to_all_v_into(rows, &counts, &mut sp.recv, Phase::TowerPeer)?;
        let b_local = batch.batch_size();
        let out_width = slots.width();
        let mut at = 0;
        for g in 0..sp.features.len() {
            let w = sp.sent_width(g);
            let placed = sp.placed(g, slots);
            let block = &sp.recv[at..at + b_local * w];
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

    /// Reverse of [`ShardedEmbeddings::sptt_output_dist`]: leaves in each local shard's
    /// `grad` the gradient of the whole global batch.
    pub(in crate::sharded) fn sptt_output_grad(
        &mut self,
        grad: &[f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        self.with_sptt(|this, sp| this.sptt_backward(sp, grad, slots))
    }

    fn sptt_backward(&mut self, sp: &mut Sptt, grad: &[f32], slots: &FeatureSlots) -> Result<()> {
        if sp.early.is_some() {
            let (router, samples) = (&self.router, &self.samples);
            return sp.pipelined_backward(&mut self.local, router, samples, grad, slots);
        }
        // f reversed: each group's columns of this rank's rows to that group's peer.
        sp.send.clear();
        let mut counts = vec![0; sp.peers.size()];
        for (g, count) in counts.iter_mut().enumerate() {
            let before = sp.send.len();
            let placed = sp.placed(g, slots);
            for row in grad.chunks_exact(slots.width()) {
                for (slot, _) in &placed {
                    sp.send.extend_from_slice(&row[slot.range()]);
                }
            }
            *count = sp.send.len() - before;
        }
        let peer_rows = sp.peer_rows(&self.samples);
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        if sp.modules.is_some() {
            sp.peers
                .all_to_all_v_into(&sp.send, &counts, &mut sp.outs, Phase::TowerPeer)?;
            sp.modules_backward(total);
        } else {
            sp.peers
                .all_to_all_v_into(&sp.send, &counts, &mut sp.rows, Phase::TowerPeer)?;
        }
        // e, d, c reversed: each shard's columns of its group-mates' peers' rows.
        let width = sp.widths[sp.my_group];
        sp.send.clear();
        let mut counts = vec![0; sp.group.size()];
        let mut iat = 0;
        for (j, count) in counts.iter_mut().enumerate() {
            let before = sp.send.len();
            for (t, s) in self.router.held_by(sp.rank_of[sp.my_group][j]) {
                let shard = &self.tables[t].shards[s];
                let (cols, off) = (shard.num_columns(), sp.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if self.tables[t].addresses.is_some() {
                        // The gradients of the rows the store sent, in its order.
                        let (index, rows, send) = (&sp.index_recv, &sp.rows, &mut sp.send);
                        stores::for_each_row(index, &mut iat, first, |r| {
                            let part = &rows[r * width + off..r * width + off + cols];
                            match mean_scale_of(&sp.mean_split, &sp.scales, t, r, total) {
                                1.0 => send.extend_from_slice(part),
                                scale => send.extend(part.iter().map(|&g| g * scale)),
                            }
                        });
                        continue;
                    }
                    let rows = &sp.rows[first * width..(first + n) * width];
                    for (k, row) in rows.chunks_exact(width.max(1)).enumerate() {
                        let part = &row[off..off + cols];
                        let scale = sp.mean_scale_of(t, first + k, total);
                        if scale != 1.0 {
                            sp.send.extend(part.iter().map(|&g| g * scale));
                        } else {
                            sp.send.extend_from_slice(part);
                        }
                    }
                }
            }
            *count = sp.send.len() - before;
        }
        sp.group
            .all_to_all_v_into(&sp.send, &counts, &mut sp.recv, Phase::TowerIntra)?;
        let firsts = firsts(&self.samples);
        let global: usize = self.samples.iter().sum();
        for l in &mut self.local {
            let rows = match l.store() {
                Some(_) => l.bags_from().iter().sum(),
                None => global,
            };
            l.grad.clear();
            l.grad.resize(rows * l.columns(), 0.0);
        }
        let mut at = 0;
        for j in 0..sp.group.size() {
            for l in &mut self.local {
                let cols = l.columns();
                for g in &sp.rank_of {
                    let w = g[j];
                    if l.store().is_some() {
                        stores::place_grads(l, w, &sp.recv, &mut at);
                        continue;
                    }
                    let (f, n) = (firsts[w], self.samples[w]);
                    l.grad[f * cols..(f + n) * cols].copy_from_slice(&sp.recv[at..at + n * cols]);
                    at += n * cols;
                }
            }
        }
        Ok(())
    }
}
