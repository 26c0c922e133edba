//! The backward of the flat output distribution ([`super::flat`]): each shard gets its
//! columns of the pooled gradient for the bags it pooled, by one AlltoAllv, or by two
//! when a step runs in halves (the model's step schedule, `model::schedule`); this
//! rank's own segment skips the exchange and is pushed into its stores while the
//! exchange runs.

use super::flat::Flat;
use super::lookup::LocalShard;
use super::output::{GradWork, StepPart};
use super::route::{bag_of, Part};
use super::spread::Spread;
use crate::error::Result;
use towerrec_comm::Phase;
use towerrec_core::simd::{prefetch, ROWS_APART_AHEAD};

impl Flat {
    /// The first half's gradient exchange on the flat path (`step`'s first part), while
    /// `work` fills the second half's gradient rows; what arrives is kept for
    /// [`Flat::grads_last`].
    pub(super) fn grads_first_half(
        &mut self,
        sp: &Spread,
        step: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()> {
        let grad = &mut grad[..step.rows_len()];
        let (send, counts) = self.pack_grad_rows(sp, step, grad, Part::First);
        let mut first = std::mem::take(&mut self.recv_first);
        let split = Part::First.range(step.batch.batch_size()).end * step.slots.width();
        let second = &mut grad[split..];
        let exchanged = sp.comm.all_to_all_v_wire_during(
            &send,
            &counts,
            &mut first,
            (Phase::OutputDist, sp.wire.backward),
            |progress| work(second, progress),
        );
        self.send = send;
        self.recv_first = first;
        exchanged?;
        Ok(())
    }

    /// The last gradient exchange (`step`'s last part: a whole step, or its second half
    /// after [`Flat::grads_first_half`]): sends each shard its columns of the gradient
    /// `grad` of this rank's feature rows, leaving in each local shard's `grad` the
    /// gradient of the whole global batch, the same values in the same order whatever
    /// the parts. This rank's own segment goes straight from `grad` into its shards
    /// while the exchange runs (it needs nothing from the other ranks); the earlier
    /// ranks' segments, which come before it, are written over a zeroed placeholder
    /// when they arrive.
    pub(super) fn grads_last(
        &mut self,
        sp: &mut Spread,
        step: StepPart<'_>,
        grad: &[f32],
    ) -> Result<()> {
        let part = step.part();
        let first = std::mem::take(&mut self.recv_first);
        let (send, counts) = self.pack_grad_rows(sp, step, grad, part);
        let mut recv = std::mem::take(&mut self.recv);
        let received = self.grad_part_with_own_rows(sp, step, grad, (&send, &counts), &mut recv);
        self.send = send;
        let assembled = received.map(|local| {
            let (whole, halves) = (
                [(&recv, Part::Whole)],
                [(&first, Part::First), (&recv, Part::Second)],
            );
            let parts: &[_] = if part == Part::Whole { &whole } else { &halves };
            self.assemble_grads(sp, local, parts)
        });
        self.recv = recv;
        self.recv_first = first;
        assembled
    }

    /// The send buffer of `part`'s gradient exchange (to each other rank, its shards'
    /// columns of `grad` for this rank's bags of the part) and its counts.
    fn pack_grad_rows(
        &mut self,
        sp: &Spread,
        step: StepPart<'_>,
        grad: &[f32],
        part: Part,
    ) -> (Vec<f32>, Vec<usize>) {
        let (p, me) = (sp.comm.size(), sp.comm.rank());
        let mut send = std::mem::take(&mut self.send);
        send.clear();
        let mut counts = vec![0usize; p];
        for (dest, count) in counts.iter_mut().enumerate().filter(|(d, _)| *d != me) {
            let before = send.len();
            for (t, s) in sp.router.held_by(dest) {
                if self.carries[t] {
                    let at = (t, s, false);
                    push_grad_rows(sp, &mut send, step, grad, at, part);
                }
            }
            *count = send.len() - before;
        }
        (send, counts)
    }

    /// The gradient exchange of `send` (whole or second half) into `recv`, with this
    /// rank's own segment of every local store pushed during it; returns the local
    /// shards, taken out for the push (their `grad` now holds zeros for the earlier
    /// ranks' segments, then this rank's).
    fn grad_part_with_own_rows(
        &self,
        sp: &mut Spread,
        step: StepPart<'_>,
        grad: &[f32],
        (send, counts): (&[f32], &[usize]),
        recv: &mut Vec<f32>,
    ) -> Result<Vec<LocalShard>> {
        let me = sp.comm.rank();
        let mut local = std::mem::take(&mut sp.local);
        // The length of the earlier ranks' segments in each store's `grad`.
        let before: Vec<usize> = local
            .iter()
            .map(|l| (0..me).map(|src| segment(sp, l, src, Part::Whole)).sum())
            .collect();
        let there = &*sp;
        let wire = (Phase::OutputDist, sp.wire.backward);
        let exchanged = there
            .comm
            .all_to_all_v_wire_during(send, counts, recv, wire, |progress| {
                let own = (&mut local[..], &before[..]);
                self.push_own_grad_rows(there, own, step, grad, progress)
            });
        match exchanged {
            Ok(_) => Ok(local),
            Err(e) => {
                sp.local = local;
                Err(e.into())
            }
        }
    }

    /// Puts back the local shards `local`, each with its gradient completed from the
    /// received `parts` (each a buffer of every other rank's segments of one part of
    /// its samples, in rank order): the earlier ranks' segments over the zeroed
    /// placeholder, the later ranks' after this rank's own.
    fn assemble_grads(
        &self,
        sp: &mut Spread,
        mut local: Vec<LocalShard>,
        parts: &[(&Vec<f32>, Part)],
    ) {
        let (p, me) = (sp.comm.size(), sp.comm.rank());
        let mut cursors = vec![0usize; local.len()];
        let mut at = vec![0usize; parts.len()];
        for src in (0..p).filter(|&src| src != me) {
            for (l, cursor) in local.iter_mut().zip(&mut cursors) {
                if !self.carries[l.table] {
                    continue;
                }
                for ((recv, part), at) in parts.iter().zip(&mut at) {
                    let len = segment(sp, l, src, *part);
                    let rows = &recv[*at..*at + len];
                    if src < me {
                        l.grad[*cursor..*cursor + len].copy_from_slice(rows);
                        *cursor += len;
                    } else {
                        l.grad.extend_from_slice(rows);
                    }
                    *at += len;
                }
            }
        }
        sp.local = local;
    }

    /// This rank's own segment of every local store's gradient (after `before[k]` zeroed
    /// values, the earlier ranks' segments of store `k`), of all its samples whatever
    /// `step`'s part, during the gradient exchange.
    fn push_own_grad_rows(
        &self,
        sp: &Spread,
        (local, before): (&mut [LocalShard], &[usize]),
        step: StepPart<'_>,
        grad: &[f32],
        progress: &mut dyn FnMut(),
    ) {
        let own = sp.router.held_by(sp.comm.rank());
        for (k, (l, (t, s))) in local.iter_mut().zip(own).enumerate() {
            l.grad.clear();
            if !self.carries[l.table] {
                continue;
            }
            debug_assert_eq!(l.table, t, "local shards in wire order");
            l.grad.resize(before[k], 0.0);
            // This rank's own store holds every bag of its slice when it pooled them
            // into the rank's rows.
            let at = (t, s, sp.direct[k]);
            push_grad_rows(sp, &mut l.grad, step, grad, at, Part::Whole);
            progress();
        }
    }
}

/// The length of store `l`'s segment of `part` of rank `src`'s samples in its `grad`.
fn segment(sp: &Spread, l: &LocalShard, src: usize, part: Part) -> usize {
    l.part_of_source(src, &sp.samples, part).len() * l.columns()
}

/// Appends to `out` shard `s` of table `t`'s columns of the gradient `grad` (of
/// `step`'s feature rows), for each bag of `part` of the samples (not necessarily
/// `step`'s part) this rank sent it ids of (`every_bag`: for every bag), mean-pooled
/// bags of row-split tables scaled by their length.
fn push_grad_rows(
    sp: &Spread,
    out: &mut Vec<f32>,
    step: StepPart<'_>,
    grad: &[f32],
    (t, s, every_bag): (usize, usize, bool),
    part: Part,
) {
    let StepPart { batch, slots, .. } = step;
    let width = slots.width();
    let shard = &sp.tables[t].shards[s];
    let off = slots.slot(t).offset + shard.columns.0;
    let cols = shard.num_columns();
    let scales = sp.mean_scales(batch, t);
    let b_local = batch.batch_size();
    let push = |out: &mut Vec<f32>, b: usize| {
        let part = &grad[b * width + off..b * width + off + cols];
        match scales.as_ref().map(|f| f(b)) {
            Some(scale) if scale != 1.0 => out.extend(part.iter().map(|&g| g * scale)),
            _ => out.extend_from_slice(part),
        }
    };
    match sp.router.addressed_bags(t, s).filter(|_| !every_bag) {
        // Only the bags that sent the store ids.
        Some(bags) => {
            let bags = part.bags_in(bags, b_local);
            for (i, &packed) in bags.iter().enumerate() {
                if let Some(&ahead) = bags.get(i + ROWS_APART_AHEAD) {
                    prefetch(grad, bag_of(ahead).0 * width + off, cols);
                }
                push(out, bag_of(packed).0);
            }
        }
        None => {
            let rows = part.range(b_local);
            for b in rows.clone() {
                if b + ROWS_APART_AHEAD < rows.end {
                    prefetch(grad, (b + ROWS_APART_AHEAD) * width + off, cols);
                }
                push(out, b);
            }
        }
    }
}
