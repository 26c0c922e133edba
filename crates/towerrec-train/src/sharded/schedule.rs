//! A step's exchanges by parts of each rank's samples, for the model's micro-batch
//! schedule (docs/PERFORMANCE.md): one part is a whole step; in two parts (halves) the
//! dense layers of one half run while the other half's rows cross the link (the
//! micro-batch overlap that OPER §5 and DMT §3 leave to the runtime).
//!
//! Only the exchanges split: the ids are routed, the rows pooled and the stores updated
//! once for the whole step. Each part's rows and gradient rows land where a whole step
//! puts them, and partial sums add in the same rank order, so from the same gradient the
//! tables update as a whole step does. The dense gradients, summed over two halves,
//! round differently, so a run in halves and one of whole steps drift apart within
//! rounding.
//!
//! With DMT's towers, where the per-feature maps run before step d, SPTT's chunks are
//! cut from the two halves instead (`sptt`'s pipeline): the dense layers of the first
//! half run during the last chunk's step f, the second half's during the first chunk's
//! step f back.

use super::{lookup, Part, ShardedEmbeddings, Sptt};
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_core::Batch;

/// Dense work run during a forward exchange, on the previous part's finished feature
/// rows, with a function to call now and then (the exchange moves only then on MPI).
pub(crate) type RowsWork<'a> = &'a mut dyn FnMut(&[f32], &mut dyn FnMut());

/// Dense work run during a gradient exchange: it writes the gradient of the next
/// part's feature rows.
pub(crate) type GradWork<'a> = &'a mut dyn FnMut(&mut [f32], &mut dyn FnMut());

impl ShardedEmbeddings {
    /// Parts a step's exchanges can run in: two where the plan allows (the flat output
    /// path without table-row-wise tables summed in two steps across hosts, or towers
    /// whose maps run before SPTT's step d), else one (whole steps).
    pub fn max_parts(&self) -> usize {
        if self.trw.is_none() && self.sptt.as_ref().is_none_or(Sptt::splits_in_halves) {
            2
        } else {
            1
        }
    }

    /// Part `k` of a step's forward in `parts` (1, or 2 where
    /// [`ShardedEmbeddings::max_parts`] allows): the first part routes the ids and pools
    /// the rows, and every part's feature rows are in `out` when it returns. `work`
    /// runs during part `k`'s exchange on part `k - 1`'s finished rows (`None` for the
    /// first part).
    pub(crate) fn forward_part(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        (k, parts): (usize, usize),
        work: Option<RowsWork<'_>>,
    ) -> Result<()> {
        debug_assert!(
            parts <= self.max_parts() && k < parts,
            "checked by the caller"
        );
        if parts == 1 {
            return self.forward(batch, out, slots);
        }
        if k == 0 {
            self.input_dist(batch)?;
            if self.sptt.is_some() {
                lookup::pool(&mut self.local)?;
                // SPTT's chunks run in the second part; replicas fill their own slots,
                // which SPTT's rows leave alone.
                return self.replicas_forward(batch, out, slots);
            }
            self.pool_flat()?;
            self.output_part_with_own_pass(batch, out, slots, Part::First)?;
            self.scale_mean_row_split(batch, out, slots, Part::First);
            return self.replicas_forward(batch, out, slots);
        }
        let work = work.expect("a later part runs the previous part's work");
        if self.sptt.is_some() {
            let rows = batch.batch_size() * slots.width();
            return self.sptt_forward_in_halves(&mut out[..rows], slots, |r, p| work(r, p));
        }
        self.output_second_half(batch, out, slots, |r, p| work(r, p))
    }

    /// Part `k` of the gradient exchange of the last forward in `parts`, but the last
    /// one: `grad`'s rows of parts up to `k` are final, and `work` writes the next
    /// part's during the exchange.
    pub(crate) fn backward_part(
        &mut self,
        batch: &Batch,
        grad: &mut [f32],
        slots: &FeatureSlots,
        (k, parts): (usize, usize),
        work: GradWork<'_>,
    ) -> Result<()> {
        debug_assert!(
            parts <= self.max_parts() && k + 1 < parts,
            "checked by the caller"
        );
        let grad = &mut grad[..batch.batch_size() * slots.width()];
        if self.sptt.is_some() {
            return self.sptt_grads_in_halves(grad, slots, |g, p| work(g, p));
        }
        self.flat_grads_first_half(batch, grad, slots, |g, p| work(g, p))
    }

    /// The last part's gradient exchange of the last forward in `parts` (a whole step's
    /// only one), from the final gradient `grad` of this rank's feature rows: every local
    /// shard then holds the gradient of the whole global batch; the tables are not
    /// updated yet ([`ShardedEmbeddings::update_after_exchange`]).
    pub(crate) fn backward_last(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        parts: usize,
    ) -> Result<()> {
        debug_assert!(parts <= self.max_parts(), "checked by the caller");
        let grad = &grad[..batch.batch_size() * slots.width()];
        match (parts, self.sptt.is_some()) {
            (1, true) => self.sptt_output_grad(grad, slots),
            (1, false) => self.flat_output_grad(batch, grad, slots),
            // SPTT's chunks ran back in the first part.
            (_, true) => Ok(()),
            (_, false) => self.flat_grads_second_half(batch, grad, slots),
        }
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
