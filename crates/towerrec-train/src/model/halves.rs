//! A training step in two halves of this rank's samples (`cluster.overlap_halves`): the
//! tables' output exchange and gradient exchange each run in two halves, and the dense
//! layers of one half run during the other half's exchange, the first half's forward
//! and backward while the second half's rows arrive, the second half's while the first
//! half's gradient rows leave ([`crate::sharded`]'s `halves`; docs/OPER.md, "A step in
//! halves").
//!
//! The tables see their rows and gradient rows where a whole step puts them and update
//! once a step. The dense layers' parameter gradients are summed over the two halves
//! (each layer's backward overwrites them, so the first half's are kept aside): the
//! same sum, rounded differently. The bottom MLP runs once on the whole slice, before
//! the exchanges and after them.

use super::{Embeddings, Interaction, Model};
use crate::error::Result;
use crate::stages::{put_dense_columns, resize};
use crate::times::{lap, PhaseTimes};
use std::time::Instant;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::loss::bce_with_logits_sum;
use towerrec_core::{Batch, Layer, ParamMut};

/// Whether steps run in halves, and the first half's dense gradients of a step.
#[derive(Default)]
pub(super) struct Halves {
    pub(super) on: bool,
    first_grads: Vec<f32>,
}

/// The layers of one half's dense forward and backward, with their buffers.
struct DenseHalf<'a> {
    interaction: &'a mut Interaction,
    top: &'a mut Mlp<f32>,
    top_in: &'a mut Vec<f32>,
    top_in_grad: &'a mut Vec<f32>,
    first_grads: &'a mut Vec<f32>,
    times: PhaseTimes,
    /// `1 / global batch`: each sample's share of the mean loss.
    scale: f32,
}

/// One half's samples: their feature rows and labels, and where their logits, logit
/// gradients and feature-row gradients go.
struct HalfRows<'a> {
    rows: &'a [f32],
    labels: &'a [f32],
    logits: &'a mut [f32],
    logits_grad: &'a mut [f32],
    rows_grad: &'a mut [f32],
}

impl DenseHalf<'_> {
    /// The half's forward, loss and backward down to its feature rows; returns its loss
    /// summed over its samples. `first`: the step's first half, whose parameter
    /// gradients are kept aside; else they are added to the first half's. Calls
    /// `progress` between layers (the exchange beside it moves only then on MPI).
    fn run(&mut self, half: HalfRows<'_>, first: bool, progress: &mut dyn FnMut()) -> f64 {
        let b = half.labels.len();
        if b == 0 {
            self.end_half(first, false);
            return 0.0;
        }
        let mut mark = Instant::now();
        let out_dim = match &mut *self.interaction {
            Interaction::Dot { dot, .. } => dot.out_dim(),
            Interaction::Cross(cross) => cross.out_dim(),
        };
        resize(self.top_in, b * out_dim);
        match &mut *self.interaction {
            Interaction::Dot { dot, .. } => dot.forward(half.rows, self.top_in, b),
            Interaction::Cross(cross) => cross.forward(half.rows, self.top_in, b),
        }
        lap(&mut mark, &mut self.times.interaction_forward);
        progress();
        self.top.forward(self.top_in, half.logits, b);
        let loss = bce_with_logits_sum(half.logits, half.labels, Some(half.logits_grad));
        let scale = self.scale;
        half.logits_grad.iter_mut().for_each(|g| *g *= scale);
        lap(&mut mark, &mut self.times.top_forward);
        progress();
        resize(self.top_in_grad, self.top_in.len());
        let (x, y, dy) = (&*self.top_in, &*half.logits, &*half.logits_grad);
        self.top.backward(x, y, dy, Some(self.top_in_grad), b);
        lap(&mut mark, &mut self.times.top_backward);
        progress();
        let (y, dy) = (&*self.top_in, &*self.top_in_grad);
        match &mut *self.interaction {
            Interaction::Dot { dot, .. } => dot.backward(half.rows, y, dy, Some(half.rows_grad), b),
            Interaction::Cross(cross) => cross.backward(half.rows, y, dy, Some(half.rows_grad), b),
        }
        self.end_half(first, true);
        lap(&mut mark, &mut self.times.interaction_backward);
        progress();
        loss
    }

    /// After a half: the first half's parameter gradients kept aside (zero if it had no
    /// samples), the second's summed with them (or, with no samples, replaced by them).
    fn end_half(&mut self, first: bool, ran: bool) {
        let kept = &mut *self.first_grads;
        let mut params = half_params(self.interaction, self.top);
        if first {
            kept.clear();
            for p in &params {
                if ran {
                    kept.extend_from_slice(p.grad);
                } else {
                    kept.resize(kept.len() + p.grad.len(), 0.0);
                }
            }
            return;
        }
        let mut at = 0;
        for p in &mut params {
            let mine = &kept[at..at + p.grad.len()];
            if ran {
                p.grad.iter_mut().zip(mine).for_each(|(g, &k)| *g += k);
            } else {
                p.grad.copy_from_slice(mine);
            }
            at += p.grad.len();
        }
    }
}

/// The parameters of the layers that run per half: DCN's CrossNet and the top MLP.
fn half_params<'a>(
    interaction: &'a mut Interaction,
    top: &'a mut Mlp<f32>,
) -> Vec<ParamMut<'a, f32>> {
    let mut out = match interaction {
        Interaction::Dot { .. } => Vec::new(),
        Interaction::Cross(cross) => cross.params(),
    };
    out.extend(top.params());
    out
}

impl Model {
    /// Whether this model's steps run in halves: asked for, and possible for its plan
    /// (sharded tables on the flat output path, no towers).
    pub fn steps_in_halves(&self) -> bool {
        self.halves.on
            && self.towers.is_none()
            && matches!(&self.embeddings, Embeddings::Sharded(s) if s.splits_in_halves())
    }

    /// Runs steps in halves where the plan allows ([`Model::steps_in_halves`]); a model
    /// is built with whole steps, and the trainer sets this from
    /// `cluster.overlap_halves` (default on). Every rank must choose the same, before
    /// the first step.
    pub fn set_overlap_halves(&mut self, on: bool) {
        self.halves.on = on;
    }

    /// A step's forward, loss and backward in halves, up to the updates: the tables'
    /// gradient rows are with their shards, the dense gradients summed over the slice.
    /// Returns the loss summed over this rank's samples; `logits` and `grad` are
    /// resized to the slice. Only where [`Model::steps_in_halves`].
    pub(crate) fn forward_backward_in_halves(
        &mut self,
        batch: &Batch,
        global_size: usize,
        logits: &mut Vec<f32>,
        grad: &mut Vec<f32>,
    ) -> Result<f64> {
        let b = batch.batch_size();
        let width = self.slots.width();
        logits.resize(b, 0.0);
        grad.resize(b, 0.0);
        resize(&mut self.features, b * width);
        resize(&mut self.features_grad, b * width);
        self.dense_front(batch);
        let Model {
            embeddings,
            interaction,
            top,
            features,
            features_grad,
            top_in,
            top_in_grad,
            slots,
            halves,
            times,
            ..
        } = self;
        let Embeddings::Sharded(tables) = embeddings else {
            unreachable!("steps_in_halves checks the tables are sharded");
        };
        let mut dense = DenseHalf {
            interaction,
            top,
            top_in,
            top_in_grad,
            first_grads: &mut halves.first_grads,
            times: PhaseTimes::default(),
            scale: 1.0 / global_size.max(1) as f32,
        };
        let split = b / 2;
        let (labels_a, labels_b) = batch.labels.split_at(split);
        let (logits_a, logits_b) = logits.split_at_mut(split);
        let (grad_a, grad_b) = grad.split_at_mut(split);
        let start = Instant::now();
        let rows_grad = &mut features_grad[..split * width];
        let loss_a = tables.forward_in_halves(batch, features, slots, |rows, progress| {
            let half = HalfRows {
                rows,
                labels: labels_a,
                logits: logits_a,
                logits_grad: grad_a,
                rows_grad,
            };
            dense.run(half, true, progress)
        })?;
        let forward = start.elapsed().as_secs_f64();
        let dense_a = dense_seconds(&dense.times);
        let start = Instant::now();
        let rows_b = &features[split * width..b * width];
        let loss_b = tables.exchange_grads_in_halves(
            batch,
            features_grad,
            slots,
            |rows_grad, progress| {
                let half = HalfRows {
                    rows: rows_b,
                    labels: labels_b,
                    logits: logits_b,
                    logits_grad: grad_b,
                    rows_grad,
                };
                dense.run(half, false, progress)
            },
        )?;
        let backward = start.elapsed().as_secs_f64();
        let dense_b = dense_seconds(&dense.times) - dense_a;
        // The exchanges' time, less the dense work that ran inside them.
        times.embedding_forward += forward - dense_a;
        times.embedding_backward_update += backward - dense_b;
        add_dense_times(times, &dense.times);
        Ok(loss_a + loss_b)
    }

    /// The rest of a step in halves, after [`Model::forward_backward_in_halves`]: the
    /// bottom MLP's backward, the tables' updates and the dense sync and update.
    pub(crate) fn update_in_halves(
        &mut self,
        batch: &Batch,
        dense_lr: f32,
        sparse_lr: f32,
    ) -> Result<()> {
        let b = batch.batch_size();
        let (width, dim) = (self.slots.width(), self.dim);
        let mut mark = Instant::now();
        if let Interaction::Dot {
            bottom,
            bottom_out,
            bottom_grad,
            ..
        } = &mut self.interaction
        {
            resize(bottom_grad, b * dim);
            let rows = self.features_grad.chunks_exact(width);
            for (g, row) in bottom_grad.chunks_exact_mut(dim).zip(rows) {
                g.copy_from_slice(&row[..dim]);
            }
            bottom.backward(&batch.dense, bottom_out, bottom_grad, None, b);
            lap(&mut mark, &mut self.times.bottom_backward);
        }
        let Embeddings::Sharded(tables) = &mut self.embeddings else {
            unreachable!("steps_in_halves checks the tables are sharded");
        };
        let bad =
            tables.update_after_exchange(batch, &self.features_grad, &self.slots, sparse_lr)?;
        super::note_table_fault(&mut self.faults, &self.tables, &self.embeddings, bad);
        lap(&mut mark, &mut self.times.embedding_backward_update);
        self.sync_dense_and_update(dense_lr)
    }

    /// The dense columns of every feature row: DLRM's bottom MLP output, or DCN's dense
    /// features as they are.
    fn dense_front(&mut self, batch: &Batch) {
        let b = batch.batch_size();
        let width = self.slots.width();
        let mark = Instant::now();
        match &mut self.interaction {
            Interaction::Dot {
                bottom, bottom_out, ..
            } => {
                let dim = self.dim;
                resize(bottom_out, b * dim);
                bottom.forward(&batch.dense, bottom_out, b);
                put_dense_columns(&mut self.features, width, bottom_out, dim);
            }
            Interaction::Cross(_) => {
                put_dense_columns(&mut self.features, width, &batch.dense, self.num_dense);
            }
        }
        self.times.bottom_forward += mark.elapsed().as_secs_f64();
    }
}

/// Seconds of dense work in `t`.
fn dense_seconds(t: &PhaseTimes) -> f64 {
    t.interaction_forward + t.top_forward + t.top_backward + t.interaction_backward
}

fn add_dense_times(times: &mut PhaseTimes, dense: &PhaseTimes) {
    times.interaction_forward += dense.interaction_forward;
    times.top_forward += dense.top_forward;
    times.top_backward += dense.top_backward;
    times.interaction_backward += dense.interaction_backward;
}
