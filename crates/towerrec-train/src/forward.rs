//! A model's forward in two halves, and scoring a stream of batches with the halves of
//! consecutive batches overlapped.
//!
//! The *front* of a forward is the table lookups (bound by random DRAM reads) and, for
//! DLRM, the bottom MLP; the *back* is the interaction and the top MLP (bound by the
//! GEMM rate). [`Model::forward`](crate::Model::forward) runs one after the other.
//! [`PipelinedForward`] runs batch k + 1's front beside batch k's back: on a CPU one
//! core's gathers already draw most of the memory system's random-read rate (9 of
//! 15 GB/s on the development machine), so a core spent on the top MLP costs the
//! lookups far less than its share. The logits are bit for bit those of
//! `Model::forward`: each batch's arithmetic is unchanged, only its schedule moves.

use crate::error::Result;
use crate::model::{Embeddings, PhaseTimes};
use crate::sharded::FeatureLayout;
use std::time::Instant;
use towerrec_core::layers::crossnet::CrossNet;
use towerrec_core::layers::interaction::DotInteraction;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::{Batch, Layer};

/// What the front of a forward uses: the tables, and for DLRM the bottom MLP.
pub(crate) struct Front<'a> {
    pub embeddings: &'a mut Embeddings,
    /// DLRM's bottom MLP and its output buffer (`B × dim`); `None` for DCN, whose
    /// dense features go into the rows as they are.
    pub bottom: Option<(&'a mut Mlp<f32>, &'a mut Vec<f32>)>,
    pub layout: FeatureLayout,
    pub dim: usize,
    pub num_dense: usize,
}

/// The layer between the feature rows and the top MLP.
pub(crate) enum BackInteraction<'a> {
    Dot(&'a mut DotInteraction<f32>),
    Cross(&'a mut CrossNet<f32>),
}

/// What the back of a forward uses: the interaction and the top MLP.
pub(crate) struct Back<'a> {
    pub interaction: BackInteraction<'a>,
    /// The top MLP's input, `B × top_in`.
    pub top_in: &'a mut Vec<f32>,
    pub top: &'a mut Mlp<f32>,
}

/// Seconds spent in each phase of one front or back.
#[derive(Default)]
pub(crate) struct StageTimes {
    embedding: f64,
    bottom: f64,
    interaction: f64,
    top: f64,
}

impl StageTimes {
    pub fn add_to(&self, times: &mut PhaseTimes) {
        times.embedding_forward += self.embedding;
        times.bottom_forward += self.bottom;
        times.interaction_forward += self.interaction;
        times.top_forward += self.top;
    }
}

impl Front<'_> {
    /// Fills `features` (resized to `B × width`) with `batch`'s feature rows: the
    /// bottom MLP's output (DLRM) or the dense features (DCN), then the pooled tables.
    ///
    /// DLRM's lookups (memory-bound) and bottom MLP (compute-bound) are independent
    /// and run side by side; their phase times then overlap.
    pub fn run(&mut self, batch: &Batch, features: &mut Vec<f32>) -> Result<StageTimes> {
        let b = batch.batch_size();
        let (layout, dim, nd) = (self.layout, self.dim, self.num_dense);
        let width = layout.width;
        resize(features, b * width);
        let embeddings = &mut *self.embeddings;
        let mut times = StageTimes::default();
        match &mut self.bottom {
            Some((bottom, bottom_out)) => {
                resize(bottom_out, b * dim);
                let ((lookups, t_emb), ((), t_bottom)) = rayon::join(
                    || timed(|| embeddings.forward(batch, features, layout)),
                    || timed(|| bottom.forward(&batch.dense, bottom_out, b)),
                );
                lookups?;
                times.embedding = t_emb;
                times.bottom = t_bottom;
                let start = Instant::now();
                for (row, out) in features
                    .chunks_exact_mut(width)
                    .zip(bottom_out.chunks_exact(dim))
                {
                    row[..dim].copy_from_slice(out);
                }
                times.interaction = start.elapsed().as_secs_f64();
            }
            None => {
                let (lookups, t_emb) = timed(|| embeddings.forward(batch, features, layout));
                lookups?;
                times.embedding = t_emb;
                let start = Instant::now();
                for (row, dense) in features
                    .chunks_exact_mut(width)
                    .zip(batch.dense.chunks_exact(nd.max(1)))
                {
                    row[..nd].copy_from_slice(&dense[..nd]);
                }
                times.interaction = start.elapsed().as_secs_f64();
            }
        }
        Ok(times)
    }
}

impl Back<'_> {
    /// Computes `b` logits into `logits` (resized to `b`) from the feature rows of a
    /// front.
    pub fn run(&mut self, features: &[f32], b: usize, logits: &mut Vec<f32>) -> StageTimes {
        let mut times = StageTimes::default();
        let start = Instant::now();
        match &mut self.interaction {
            BackInteraction::Dot(dot) => {
                resize(self.top_in, b * dot.out_dim());
                dot.forward(features, self.top_in, b);
            }
            BackInteraction::Cross(cross) => {
                resize(self.top_in, b * cross.out_dim());
                cross.forward(features, self.top_in, b);
            }
        }
        times.interaction = start.elapsed().as_secs_f64();
        let start = Instant::now();
        resize(logits, b);
        self.top.forward(self.top_in, logits, b);
        times.top = start.elapsed().as_secs_f64();
        times
    }
}

/// Forward passes over a stream of batches, each batch's front beside the previous
/// batch's back. Borrows the model for the whole stream, so no training step can come
/// between a batch's halves.
///
/// ```text
/// call:   push(b0)   push(b1)          push(b2)          finish()
/// front:  b0         b1                b2
/// back:              b0 → logits       b1 → logits       b2 → logits
/// ```
pub struct PipelinedForward<'m> {
    model: &'m mut crate::Model,
    /// Where the front of the next batch goes while the back reads the model's
    /// feature rows; the two swap after every step.
    spare: Vec<f32>,
    /// The size of the batch whose front is done and whose back is not.
    staged: Option<usize>,
}

impl<'m> PipelinedForward<'m> {
    /// An empty pipeline over `model`.
    pub fn new(model: &'m mut crate::Model) -> Self {
        PipelinedForward {
            model,
            spare: Vec::new(),
            staged: None,
        }
    }

    /// Starts `next` and finishes the batch pushed before it, whose logits go to
    /// `logits`. Returns whether there was one (every call but the first).
    ///
    /// On an error the pipeline holds no batch: the one in flight is dropped.
    pub fn push(&mut self, next: &Batch, logits: &mut Vec<f32>) -> Result<bool> {
        let staged = self.staged.take();
        let (mut front, mut back, features, times) = self.model.forward_parts();
        let Some(b) = staged else {
            front.run(next, features)?.add_to(times);
            self.staged = Some(next.batch_size());
            return Ok(false);
        };
        let spare = &mut self.spare;
        let (started, finished) =
            rayon::join(|| front.run(next, spare), || back.run(features, b, logits));
        finished.add_to(times);
        started?.add_to(times);
        std::mem::swap(features, spare);
        self.staged = Some(next.batch_size());
        Ok(true)
    }

    /// The model's communicator, if its tables are sharded.
    pub fn comm(&self) -> Option<&towerrec_comm::Comm> {
        self.model.comm()
    }

    /// Time spent in each phase since the model was built or the times were reset.
    /// The halves of consecutive batches overlap, and so do their phase times.
    pub fn phase_times(&self) -> &PhaseTimes {
        self.model.phase_times()
    }

    /// Zeroes the phase times.
    pub fn reset_times(&mut self) {
        self.model.reset_times();
    }

    /// Finishes the last batch pushed, into `logits`. Returns whether there was one.
    pub fn finish(&mut self, logits: &mut Vec<f32>) -> Result<bool> {
        let Some(b) = self.staged.take() else {
            return Ok(false);
        };
        let (_, mut back, features, times) = self.model.forward_parts();
        back.run(features, b, logits).add_to(times);
        Ok(true)
    }
}

/// Runs `f`, returning its result and the seconds it took.
pub(crate) fn timed<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed().as_secs_f64())
}

/// Resizes a scratch buffer without shrinking its allocation.
pub(crate) fn resize(buf: &mut Vec<f32>, len: usize) {
    buf.resize(len, 0.0);
}
