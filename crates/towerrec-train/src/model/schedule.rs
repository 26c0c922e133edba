//! A training step as one micro-batch schedule over parts of this rank's samples
//! (docs/DISTRIBUTED.md, "The step schedule"): the tables' output exchange and gradient
//! exchange run part by part, and the dense layers of part `k` run during part `k + 1`'s
//! exchange; one part is a whole step.
//!
//! With `P` parts: the ids are routed and the rows pooled with the first part's
//! exchange, beside DLRM's bottom MLP; part `k`'s forward exchange carries part
//! `k - 1`'s dense forward and backward ([`super::dense::Dense::step_part`]); the last
//! part's dense work runs during the first part's gradient exchange (alone in a whole
//! step); the last gradient exchange and the tables' updates run beside the bottom
//! MLP's backward, then the dense gradients are summed and applied. The tables update
//! once a step, from the same gradient rows whatever `P`; the dense parameter gradients
//! are summed over the parts, which rounds differently from a whole step. Every
//! exchange is handed its part as a [`StepPart`].

use super::dense::{PartRows, Place};
use super::{Bottom, Embeddings, Model};
use crate::error::Result;
use crate::sharded::StepPart;
use crate::stages::{put_dense_columns, resize, timed};
use crate::times::PhaseTimes;
use towerrec_core::{Batch, Layer};

/// Seconds of dense work in `t`.
fn dense_seconds(t: &PhaseTimes) -> f64 {
    t.interaction_forward + t.top_forward + t.top_backward + t.interaction_backward
}

impl Model {
    /// Parts this model's training step runs in: two (halves) where asked
    /// (`cluster.overlap_halves`, default on) and the plan's exchanges can split
    /// (sharded tables, no Tower Modules in the model), else one.
    pub fn step_parts(&self) -> usize {
        match &self.embeddings {
            Embeddings::Sharded(s) if self.halves && self.dense.towers.is_none() => {
                s.max_parts().min(2)
            }
            _ => 1,
        }
    }

    /// Whether this model's steps run in halves ([`Model::step_parts`] is 2).
    pub fn steps_in_halves(&self) -> bool {
        self.step_parts() == 2
    }

    /// Runs steps in halves where the plan allows ([`Model::step_parts`]); a model is
    /// built with whole steps, and the trainer sets this from `cluster.overlap_halves`.
    /// Every rank must choose the same, before the first step.
    pub fn set_overlap_halves(&mut self, on: bool) {
        self.halves = on;
    }

    /// A step's forward, loss and backward up to the last gradient exchange: the dense
    /// layers' parameter gradients are this rank's, summed over its parts. Returns the
    /// loss summed over this rank's samples; `logits` and `grad` (the logits' gradient)
    /// are resized to the slice. [`Model::update`] ends the step.
    pub(crate) fn forward_backward(
        &mut self,
        batch: &Batch,
        global_size: usize,
        logits: &mut Vec<f32>,
        grad: &mut Vec<f32>,
    ) -> Result<f64> {
        let parts = self.step_parts();
        let b = batch.batch_size();
        let width = self.slots.width();
        logits.resize(b, 0.0);
        grad.resize(b, 0.0);
        resize(&mut self.features, b * width);
        resize(&mut self.features_grad, b * width);
        let Model {
            embeddings,
            bottom,
            dense,
            features,
            features_grad,
            slots,
            times,
            num_dense,
            dim,
            ..
        } = self;
        let slots = &*slots;
        let step = StepPart::new(batch, slots, (0, parts));
        let scale = 1.0 / global_size.max(1) as f32;
        let place = |k: usize| Place {
            first: k == 0,
            last: k + 1 == parts,
        };
        // The lookups and the first part's exchange, beside DLRM's bottom MLP.
        let ((first, t_emb), t_bottom) = rayon::join(
            || timed(|| embeddings.forward_part(step, features, None)),
            || timed(|| bottom.as_mut().map(|bottom| bottom.forward(batch, *dim))),
        );
        first?;
        times.embedding_forward += t_emb;
        times.bottom_forward += t_bottom.1;
        let (_, t_put) = timed(|| match bottom {
            Some(bottom) => put_dense_columns(features, width, &bottom.out, *dim),
            None => put_dense_columns(features, width, &batch.dense, *num_dense),
        });
        times.interaction_forward += t_put;
        let mut inside = PhaseTimes::default();
        let mut loss = 0.0;
        let (logits, grad) = (&mut logits[..], &mut grad[..]);
        for k in 1..parts {
            let r = step.nth(k - 1).samples();
            let before = dense_seconds(&inside);
            let part = (
                &batch.labels[r.clone()],
                &mut logits[r.clone()],
                &mut grad[r.clone()],
                &mut features_grad[r.start * width..r.end * width],
            );
            let (labels, part_logits, logits_grad, rows_grad) = part;
            let mut rows_grad = Some(rows_grad);
            let mut work = |rows: &[f32], progress: &mut dyn FnMut()| {
                let rows_grad = rows_grad.take().expect("the work runs once");
                let rows = PartRows {
                    rows,
                    labels,
                    logits: &mut *part_logits,
                    logits_grad: &mut *logits_grad,
                    rows_grad,
                };
                loss += dense.step_part(rows, slots, (scale, place(k - 1)), &mut inside, progress);
            };
            let (sent, t) =
                timed(|| embeddings.forward_part(step.nth(k), features, Some(&mut work)));
            sent?;
            times.embedding_forward += t - (dense_seconds(&inside) - before);
        }
        // The last part's dense work: during the first gradient exchange, or alone in a
        // whole step.
        let last = step.last().samples();
        let before = dense_seconds(&inside);
        let rows = &features[last.start * width..last.end * width];
        let (labels, part_logits, logits_grad) = (
            &batch.labels[last.clone()],
            &mut logits[last.clone()],
            &mut grad[last.clone()],
        );
        let mut dense_last = |rows_grad: &mut [f32], progress: &mut dyn FnMut()| {
            let part = PartRows {
                rows,
                labels,
                logits: &mut *part_logits,
                logits_grad: &mut *logits_grad,
                rows_grad,
            };
            loss += dense.step_part(
                part,
                slots,
                (scale, place(parts - 1)),
                &mut inside,
                progress,
            );
        };
        if parts == 1 {
            dense_last(&mut features_grad[..], &mut || {});
        } else {
            let (sent, t) =
                timed(|| embeddings.backward_part(step, features_grad, &mut dense_last));
            sent?;
            times.embedding_backward_update += t - (dense_seconds(&inside) - before);
        }
        times.interaction_forward += inside.interaction_forward;
        times.top_forward += inside.top_forward;
        times.top_backward += inside.top_backward;
        times.interaction_backward += inside.interaction_backward;
        Ok(loss)
    }

    /// The end of a step after [`Model::forward_backward`]: the last gradient exchange
    /// and the tables' updates beside DLRM's bottom-MLP backward, then the dense
    /// gradients summed over the ranks, checked and applied.
    pub(crate) fn update(&mut self, batch: &Batch, dense_lr: f32, sparse_lr: f32) -> Result<()> {
        let parts = self.step_parts();
        let Model {
            embeddings,
            bottom,
            features_grad,
            slots,
            times,
            tables,
            faults,
            dim,
            ..
        } = self;
        let (grad, slots, dim) = (&features_grad[..], &*slots, *dim);
        let width = slots.width();
        let last = StepPart::new(batch, slots, (parts - 1, parts));
        let ((bad, t_emb), t_bottom) = rayon::join(
            || {
                timed(|| {
                    embeddings.backward_last(last, grad)?;
                    embeddings.update(batch, grad, slots, sparse_lr)
                })
            },
            || timed(|| bottom.as_mut().map(|b| b.backward(batch, grad, width, dim))),
        );
        super::note_table_fault(faults, tables, embeddings, bad?);
        times.embedding_backward_update += t_emb;
        times.bottom_backward += t_bottom.1;
        self.sync_dense_and_update(dense_lr)
    }
}

impl Bottom {
    /// DLRM's bottom MLP on the batch's dense features, into its output buffer.
    fn forward(&mut self, batch: &Batch, dim: usize) {
        let b = batch.batch_size();
        resize(&mut self.out, b * dim);
        self.mlp.forward(&batch.dense, &mut self.out, b);
    }

    /// The bottom MLP's backward from the first `dim` columns of the feature rows'
    /// gradient `grad` (rows `width` wide).
    fn backward(&mut self, batch: &Batch, grad: &[f32], width: usize, dim: usize) {
        let b = batch.batch_size();
        resize(&mut self.grad, b * dim);
        for (g, row) in self
            .grad
            .chunks_exact_mut(dim)
            .zip(grad.chunks_exact(width))
        {
            g.copy_from_slice(&row[..dim]);
        }
        self.mlp
            .backward(&batch.dense, &self.out, &self.grad, None, b);
    }
}
