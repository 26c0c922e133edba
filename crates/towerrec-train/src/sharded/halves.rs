//! A step's output exchanges in two halves of each rank's samples, so that the dense
//! layers of one half run while the other half's rows cross the link (the micro-batch
//! overlap that OPER §5 and DMT §3 leave to the runtime; docs/OPER.md, "A step in
//! halves").
//!
//! Only the exchanges split: the ids are routed, the rows pooled and the stores updated
//! once for the whole step, as in [`ShardedEmbeddings::forward`] and
//! [`ShardedEmbeddings::backward_update`]. Each half's rows and gradient rows land
//! where a whole step puts them, and partial sums add in the same rank order, so from
//! the same gradient the tables update as a whole step does. The dense gradients,
//! summed over two halves, round differently, so a run in halves and one of whole steps
//! drift apart within rounding.
//!
//! With DMT's towers, where the per-feature maps run before step d, SPTT's chunks are
//! cut from the two halves instead (`sptt`'s pipeline): the dense layers of the first
//! half run during the last chunk's step f, the second half's during the first chunk's
//! step f back.

use super::{lookup, Part, ShardedEmbeddings, Sptt};
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_core::Batch;

impl ShardedEmbeddings {
    /// Whether this plan's steps can run in halves: the flat output path (without
    /// table-row-wise tables summed in two steps across hosts), or towers whose maps
    /// run before SPTT's step d.
    pub fn splits_in_halves(&self) -> bool {
        self.trw.is_none() && self.sptt.as_ref().is_none_or(Sptt::splits_in_halves)
    }

    /// [`ShardedEmbeddings::forward`] with the output exchange in two halves: the first
    /// half's rows are finished (own pass during its exchange), then `work` runs on
    /// them (`B/2 × width`, with a function to call now and then) while the second
    /// half's rows are exchanged; returns what `work` returns, once every row is in
    /// `out`.
    pub fn forward_in_halves<R>(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        work: impl FnOnce(&[f32], &mut dyn FnMut()) -> R,
    ) -> Result<R> {
        debug_assert!(self.splits_in_halves(), "checked by the caller");
        self.input_dist(batch)?;
        if self.sptt.is_some() {
            lookup::pool(&mut self.local)?;
            // Replicas fill their own slots, which SPTT's rows leave alone.
            self.replicas_forward(batch, out, slots)?;
            let rows = batch.batch_size() * slots.width();
            return self.sptt_forward_in_halves(&mut out[..rows], slots, work);
        }
        self.pool_flat()?;
        self.output_part_with_own_pass(batch, out, slots, Part::First)?;
        self.scale_mean_row_split(batch, out, slots, Part::First);
        self.replicas_forward(batch, out, slots)?;
        self.output_second_half(batch, out, slots, work)
    }

    /// The gradient exchange of the last [`ShardedEmbeddings::forward_in_halves`] in two
    /// halves of this rank's samples: `grad`'s first half of rows is final, and `work`
    /// fills the second half's (with a function to call now and then) during the first
    /// half's exchange. Leaves every local shard's gradient as
    /// [`ShardedEmbeddings::backward_update`]'s exchange does and returns what `work`
    /// returns; the tables are not updated yet
    /// ([`ShardedEmbeddings::update_after_exchange`]). Only where
    /// [`ShardedEmbeddings::splits_in_halves`].
    pub fn exchange_grads_in_halves<R>(
        &mut self,
        batch: &Batch,
        grad: &mut [f32],
        slots: &FeatureSlots,
        work: impl FnOnce(&mut [f32], &mut dyn FnMut()) -> R,
    ) -> Result<R> {
        debug_assert!(self.splits_in_halves(), "checked by the caller");
        if self.sptt.is_some() {
            let rows = batch.batch_size() * slots.width();
            return self.sptt_grads_in_halves(&mut grad[..rows], slots, work);
        }
        self.flat_grads_in_halves(batch, grad, slots, work)
    }

    /// Updates every shard and replica from the gradient the exchange left (`grad`: this
    /// rank's feature-row gradient, which data-parallel replicas read) and syncs the
    /// rows with copies on several ranks. Returns the first table (model order) whose
    /// gradient rows, as they arrived here, held NaN or infinity, with the value (the
    /// update goes on regardless: the trainer stops at the step's end, every rank
    /// together).
    pub fn update_after_exchange(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        lr: f32,
    ) -> Result<Option<(usize, f32)>> {
        let mut bad = lookup::non_finite_grad(&self.local);
        let touched = lookup::update(&mut self.local, lr)?;
        if self.shared.is_some() {
            self.sync_shared_rows(&touched, lr)?;
        }
        if !self.replicas.is_empty() {
            let replica = self.sync_replicas(batch, grad, slots, lr)?;
            bad = match (bad, replica) {
                (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
                (a, b) => a.or(b),
            };
        }
        Ok(bad)
    }
}
