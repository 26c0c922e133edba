//! The two halves of a model's forward, as stages that borrow the model's parts: the
//! *front* (table lookups and, for DLRM, the bottom MLP) and, in `model::dense`, the
//! *back* (the dense layers after the feature rows). [`crate::Model::forward`] runs them one after the other;
//! `forward::PipelinedForward` overlaps consecutive groups of batches.

use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::slots::FeatureSlots;
use crate::times::PhaseTimes;
use std::time::Instant;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::{Batch, Layer};

/// What the front of a forward uses: the tables, and for DLRM the bottom MLP.
pub(crate) struct Front<'a> {
    pub embeddings: &'a mut Embeddings,
    /// DLRM's bottom MLP; `None` for DCN, whose dense features go into the rows as
    /// they are, and for DLRM on data without dense features (no base columns).
    pub bottom: Option<&'a mut Mlp<f32>>,
    pub slots: &'a FeatureSlots,
    pub dim: usize,
    pub num_dense: usize,
}

/// Seconds spent in each phase of fronts or backs.
#[derive(Default)]
pub(crate) struct StageTimes {
    pub(crate) embedding: f64,
    pub(crate) bottom: f64,
    pub(crate) interaction: f64,
    pub(crate) top: f64,
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
    /// Fills `features[i]` (resized to `Bᵢ × width`) with the feature rows of
    /// `batches[i]`: the bottom MLP's output (DLRM, through `bottom_outs[i]`) or the
    /// dense features (DCN), then the pooled tables, looked up table by table over all
    /// the batches. `features` and, for DLRM, `bottom_outs` have one buffer per batch.
    ///
    /// DLRM's lookups (memory-bound) and bottom MLP (compute-bound) are independent
    /// and run side by side; their phase times then overlap.
    pub fn run(
        &mut self,
        batches: &[&Batch],
        features: &mut [Vec<f32>],
        bottom_outs: &mut [Vec<f32>],
    ) -> Result<StageTimes> {
        let (slots, dim, nd) = (self.slots, self.dim, self.num_dense);
        let width = slots.width();
        for (rows, batch) in features.iter_mut().zip(batches) {
            resize(rows, batch.batch_size() * width);
        }
        let embeddings = &mut *self.embeddings;
        let mut times = StageTimes::default();
        match &mut self.bottom {
            Some(bottom) => {
                let ((lookups, t_emb), ((), t_bottom)) = rayon::join(
                    || timed(|| embeddings.forward_group(batches, features, slots)),
                    || {
                        timed(|| {
                            for (out, batch) in bottom_outs.iter_mut().zip(batches) {
                                let b = batch.batch_size();
                                resize(out, b * dim);
                                bottom.forward(&batch.dense, out, b);
                            }
                        })
                    },
                );
                lookups?;
                times.embedding = t_emb;
                times.bottom = t_bottom;
                let start = Instant::now();
                for (rows, out) in features.iter_mut().zip(bottom_outs.iter()) {
                    put_dense_columns(rows, width, out, dim);
                }
                times.interaction = start.elapsed().as_secs_f64();
            }
            None => {
                let (lookups, t_emb) = timed(|| embeddings.forward_group(batches, features, slots));
                lookups?;
                times.embedding = t_emb;
                let start = Instant::now();
                for (rows, batch) in features.iter_mut().zip(batches) {
                    put_dense_columns(rows, width, &batch.dense, nd);
                }
                times.interaction = start.elapsed().as_secs_f64();
            }
        }
        Ok(times)
    }
}

/// Copies each `cols`-wide row of `dense` (DLRM's bottom-MLP output, or DCN's dense
/// features) into the first `cols` columns of the feature rows `rows` (`width` wide).
pub(crate) fn put_dense_columns(rows: &mut [f32], width: usize, dense: &[f32], cols: usize) {
    for (row, d) in rows
        .chunks_exact_mut(width)
        .zip(dense.chunks_exact(cols.max(1)))
    {
        row[..cols].copy_from_slice(&d[..cols]);
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
