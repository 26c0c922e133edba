//! The output distribution: how the pooled rows of the shards reach the owners of their
//! samples, and their gradient back (the third stage of the sharded forward). One trait,
//! implemented once by each way: flat ([`super::flat`], the scale-in paper's Appendix),
//! table-row-wise in two steps ([`super::trw`]) and SPTT ([`super::sptt`], DMT §3.1). A
//! step may combine them, each over its own tables (a plan with table-row-wise tables
//! across hosts sends the others flat).
//!
//! The model's micro-batch schedule (`model::schedule`; docs/DISTRIBUTED.md, "The step
//! schedule") runs a step's exchanges in parts of each rank's samples: part `k`'s
//! forward exchange carries dense work on part `k - 1`'s finished rows, and a gradient
//! exchange but the last carries the dense work that writes the next part's gradient.
//! One part is a whole step. Each exchange is told its part as a [`StepPart`]: the
//! rank's batch, the feature-row slots, `k` and the number of parts.

use super::route::Part;
use super::spread::Spread;
use crate::error::Result;
use crate::slots::FeatureSlots;
use std::ops::Range;
use towerrec_core::Batch;

/// Dense work run during a forward exchange, on the previous part's finished feature
/// rows, with a function to call now and then (the exchange moves only then on MPI).
pub type RowsWork<'a> = &'a mut dyn FnMut(&[f32], &mut dyn FnMut());

/// Dense work run during a gradient exchange: it writes the gradient of the next
/// part's feature rows.
pub type GradWork<'a> = &'a mut dyn FnMut(&mut [f32], &mut dyn FnMut());

/// Part `k` of a training step in `parts`, as every exchange of the step sees it: this
/// rank's samples and the layout of their feature rows. The model's schedule builds it
/// (a forward alone: [`StepPart::whole`]) and hands it down to the output
/// distributions by value.
#[derive(Clone, Copy)]
pub struct StepPart<'a> {
    /// This rank's slice of the global batch (rank `r` holds the `r`-th slice).
    pub batch: &'a Batch,
    /// Where each table's slot lies in the feature rows (`slots.width()` wide).
    pub slots: &'a FeatureSlots,
    /// Which part, from 0.
    pub k: usize,
    /// Parts the step runs in (1: a whole step; 2: halves).
    pub parts: usize,
}

impl<'a> StepPart<'a> {
    /// Part `k` of a step in `parts`.
    pub fn new(batch: &'a Batch, slots: &'a FeatureSlots, (k, parts): (usize, usize)) -> Self {
        Self {
            batch,
            slots,
            k,
            parts,
        }
    }

    /// A whole step: the one part of one.
    pub fn whole(batch: &'a Batch, slots: &'a FeatureSlots) -> Self {
        Self::new(batch, slots, (0, 1))
    }

    /// Part `k` of the same step.
    pub fn nth(self, k: usize) -> Self {
        Self { k, ..self }
    }

    /// The same step's last part.
    pub fn last(self) -> Self {
        self.nth(self.parts - 1)
    }

    /// Which samples the part holds: the whole slice in one part, a half in two.
    pub(crate) fn part(self) -> Part {
        match (self.k, self.parts) {
            (_, 1) => Part::Whole,
            (0, _) => Part::First,
            _ => Part::Second,
        }
    }

    /// The samples of this rank's slice in the part: the whole slice in one part, or
    /// the slice split at `B / 2` in two.
    pub fn samples(self) -> Range<usize> {
        self.part().range(self.batch.batch_size())
    }

    /// The length of this rank's feature rows, of every part (`B × slots.width()`).
    pub fn rows_len(self) -> usize {
        self.batch.batch_size() * self.slots.width()
    }
}

/// One way of exchanging the pooled rows of its tables and their gradient.
pub(super) trait OutputDist {
    /// Parts a step's exchanges can run in (1: whole steps only).
    fn max_parts(&self) -> usize;

    /// The forward exchange of `step`'s part, after the lookups: this rank's rows of
    /// the part, of this distribution's tables, are in `out` (`B × width`) when it
    /// returns; `work` runs during it on the previous part's finished rows (`None` for
    /// the first part).
    fn forward_part(
        &mut self,
        spread: &mut Spread,
        step: StepPart<'_>,
        out: &mut [f32],
        work: Option<RowsWork<'_>>,
    ) -> Result<()>;

    /// The gradient exchange of `step`'s part (not the last): `grad`'s rows of parts up
    /// to it are final, and `work` writes the next part's during it.
    fn backward_part(
        &mut self,
        spread: &mut Spread,
        step: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()>;

    /// The gradient exchange of `step`'s last part (a whole step's only one), from the
    /// final gradient of this rank's rows: every local shard of this distribution's
    /// tables then holds the gradient of the whole global batch.
    fn backward_last(
        &mut self,
        spread: &mut Spread,
        step: StepPart<'_>,
        grad: &[f32],
    ) -> Result<()>;
}
