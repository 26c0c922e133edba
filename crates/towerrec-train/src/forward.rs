//! A model's forward in two halves, and scoring a stream of batches with the halves of
//! consecutive groups of batches overlapped.
//!
//! The *front* of a forward is the table lookups (bound by random DRAM reads) and, for
//! DLRM, the bottom MLP; the *back* is the interaction and the top MLP (bound by the
//! GEMM rate). [`Model::forward`](crate::Model::forward) runs one after the other for
//! one batch. [`PipelinedForward`] scores a stream in groups of batches, for two
//! reasons measured on the development machine (2 cores, 32 MiB L3):
//!
//! - *Overlap.* Group j + 1's front runs beside group j's back. One core's gathers
//!   already draw most of the memory system's random-read rate (9 of 15 GB/s), so a
//!   core spent on the top MLP costs the lookups far less than its share.
//! - *Cache blocking.* A group's lookups go table by table over all its batches. A
//!   table that fits in the last-level cache (100,000 rows × 256 B = 25.6 MB) is then
//!   read from DRAM about once per group instead of once per batch: the rows a batch
//!   shares with the batches before it in the group are cache hits.
//!
//! The logits are bit for bit those of `Model::forward` on each batch: each batch's
//! arithmetic is unchanged, only its schedule moves.

use crate::error::Result;
use crate::stages::StageTimes;
use crate::times::PhaseTimes;
use std::borrow::Cow;
use towerrec_comm::Comm;
use towerrec_core::Batch;

/// Samples per group of [`PipelinedForward`] when the caller has no reason to choose.
/// On the development machine the multi-hot benchmark (batch 1024) gains about 11%
/// from groups of 1 to groups of 8 batches, and kaggle-like (batch 2048) about as much
/// at 4 (docs/PERFORMANCE.md). The buffers hold two groups' feature rows.
pub const DEFAULT_GROUP_SAMPLES: usize = 8192;

/// Batches per group for batches of `batch_size`: [`DEFAULT_GROUP_SAMPLES`] worth, at
/// least one.
pub fn default_group(batch_size: usize) -> usize {
    (DEFAULT_GROUP_SAMPLES / batch_size.max(1)).max(1)
}

/// Per-batch buffers of one group: the feature rows, the bottom-MLP outputs (DLRM)
/// and the logits.
#[derive(Default)]
struct GroupBuffers {
    features: Vec<Vec<f32>>,
    bottom_outs: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
    /// Batch sizes of the group whose front is done.
    sizes: Vec<usize>,
}

impl GroupBuffers {
    fn ensure(&mut self, n: usize) {
        for v in [&mut self.features, &mut self.bottom_outs, &mut self.logits] {
            if v.len() < n {
                v.resize_with(n, Vec::new);
            }
        }
    }
}

/// Forward passes over a stream of batches, in groups of `group` batches: a group's
/// lookups go table by table over all its batches, beside the previous group's
/// interaction and top MLP. Borrows the model for the whole stream, so no training
/// step can come between a batch's halves.
///
/// ```text
/// push:   b0 b1 b2 b3      b4 b5 b6 b7               ...   finish()
/// front:           b0–b3             b4–b7
/// back:                              b0, b1, b2, b3 → done(logits) × 4   ...
/// ```
pub struct PipelinedForward<'m, 'b> {
    model: &'m mut crate::Model,
    group: usize,
    /// Batches pushed and not yet started.
    queued: Vec<Cow<'b, Batch>>,
    /// The group whose front is done and whose back is not.
    staged: GroupBuffers,
    /// Where the next group's front goes; swapped with `staged` after each step.
    spare: GroupBuffers,
}

impl<'m, 'b> PipelinedForward<'m, 'b> {
    /// An empty pipeline over `model` with `group` batches per group (at least 1).
    pub fn new(model: &'m mut crate::Model, group: usize) -> Self {
        PipelinedForward {
            model,
            group: group.max(1),
            queued: Vec::new(),
            staged: GroupBuffers::default(),
            spare: GroupBuffers::default(),
        }
    }

    /// Queues `batch`. When a group is full, starts its lookups and finishes the group
    /// before it: `done` gets each of that group's batches' logits, in push order, with
    /// the model's communicator if its tables are sharded (to gather the logits, say).
    ///
    /// On an error the pipeline is left empty: the batches in flight are dropped.
    pub fn push(
        &mut self,
        batch: Cow<'b, Batch>,
        done: impl FnMut(&[f32], Option<&Comm>) -> Result<()>,
    ) -> Result<()> {
        self.queued.push(batch);
        if self.queued.len() < self.group {
            return Ok(());
        }
        self.step(done)
    }

    /// Finishes every batch pushed, giving their logits to `done` in push order.
    pub fn finish(
        &mut self,
        mut done: impl FnMut(&[f32], Option<&Comm>) -> Result<()>,
    ) -> Result<()> {
        if !self.queued.is_empty() {
            self.step(&mut done)?;
        }
        self.step(done)
    }

    /// Starts the queued batches' front (if any) beside the staged group's back (if
    /// any), hands the staged group's logits to `done`, and stages the queued batches.
    fn step(&mut self, mut done: impl FnMut(&[f32], Option<&Comm>) -> Result<()>) -> Result<()> {
        let result = self.run_step(&mut done);
        if result.is_err() {
            self.queued.clear();
            self.staged.sizes.clear();
        }
        result
    }

    fn run_step(
        &mut self,
        done: &mut impl FnMut(&[f32], Option<&Comm>) -> Result<()>,
    ) -> Result<()> {
        let n = self.queued.len();
        self.spare.ensure(n);
        let batches: Vec<&Batch> = self.queued.iter().map(|b| b.as_ref()).collect();
        let (mut front, mut back, _, times) = self.model.forward_parts();
        let (staged, spare) = (&mut self.staged, &mut self.spare);
        let (started, finished) = rayon::join(
            || {
                if n == 0 {
                    return Ok(StageTimes::default());
                }
                front.run(
                    &batches,
                    &mut spare.features[..n],
                    &mut spare.bottom_outs[..n],
                )
            },
            || {
                let mut total = StageTimes::default();
                for (i, &b) in staged.sizes.iter().enumerate() {
                    let t = back.run(&staged.features[i], b, &mut staged.logits[i]);
                    total.interaction += t.interaction;
                    total.top += t.top;
                }
                total
            },
        );
        finished.add_to(times);
        let comm = front.embeddings.comm();
        // Collectives (a sharded model's logits gathered by `done`) run here, after the
        // join, never beside the front's own collectives.
        for logits in &staged.logits[..staged.sizes.len()] {
            done(logits, comm)?;
        }
        started?.add_to(times);
        spare.sizes.clear();
        spare.sizes.extend(batches.iter().map(|b| b.batch_size()));
        staged.sizes.clear();
        std::mem::swap(staged, spare);
        self.queued.clear();
        Ok(())
    }

    /// Time spent in each phase since the model was built or the times were reset.
    /// The halves of consecutive groups overlap, and so do their phase times.
    pub fn phase_times(&self) -> &PhaseTimes {
        self.model.phase_times()
    }

    /// Zeroes the phase times.
    pub fn reset_times(&mut self) {
        self.model.reset_times();
    }
}
