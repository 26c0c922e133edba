//! The output distribution: how the pooled rows of the shards reach the owners of their
//! samples, and their gradient back (the third stage of the sharded forward). One trait,
//! implemented once by each way: flat ([`super::flat`], the scale-in paper's Appendix),
//! table-row-wise in two steps ([`super::trw`]) and SPTT ([`super::sptt`], DMT §3.1). A
//! step may combine them, each over its own tables (a plan with table-row-wise tables
//! across hosts sends the others flat).
//!
//! The model's micro-batch schedule (`model::schedule`; docs/DISTRIBUTED.md, "The step schedule") runs a step's exchanges in parts
//! of each rank's samples: part `k`'s forward exchange carries dense work on part
//! `k - 1`'s finished rows, and a gradient exchange but the last carries the dense work
//! that writes the next part's gradient. One part is a whole step.

use super::spread::Spread;
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_core::Batch;

/// Dense work run during a forward exchange, on the previous part's finished feature
/// rows, with a function to call now and then (the exchange moves only then on MPI).
pub type RowsWork<'a> = &'a mut dyn FnMut(&[f32], &mut dyn FnMut());

/// Dense work run during a gradient exchange: it writes the gradient of the next
/// part's feature rows.
pub type GradWork<'a> = &'a mut dyn FnMut(&mut [f32], &mut dyn FnMut());

/// One way of exchanging the pooled rows of its tables and their gradient.
pub(super) trait OutputDist {
    /// Parts a step's exchanges can run in (1: whole steps only).
    fn max_parts(&self) -> usize;

    /// Part `k` of a step's forward exchange in `parts`, after the lookups: this rank's
    /// rows of the part, of this distribution's tables, are in `out` (`B × width`) when
    /// it returns; `work` runs during it on part `k - 1`'s finished rows (`None` for
    /// the first part).
    #[allow(clippy::too_many_arguments)]
    fn forward_part(
        &mut self,
        spread: &mut Spread,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
        part: (usize, usize),
        work: Option<RowsWork<'_>>,
    ) -> Result<()>;

    /// Part `k` (not the last) of the gradient exchange of a step in `parts`: `grad`'s
    /// rows of parts up to `k` are final, and `work` writes the next part's during it.
    #[allow(clippy::too_many_arguments)]
    fn backward_part(
        &mut self,
        spread: &mut Spread,
        batch: &Batch,
        grad: &mut [f32],
        slots: &FeatureSlots,
        part: (usize, usize),
        work: GradWork<'_>,
    ) -> Result<()>;

    /// The last part's gradient exchange of a step in `parts` (a whole step's only
    /// one), from the final gradient of this rank's rows: every local shard of this
    /// distribution's tables then holds the gradient of the whole global batch.
    fn backward_last(
        &mut self,
        spread: &mut Spread,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        parts: usize,
    ) -> Result<()>;
}
