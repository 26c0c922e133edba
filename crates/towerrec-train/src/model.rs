//! DLRM and DCN-v2 assembled from core layers, with one forward and one fused
//! backward-and-update per step.
//!
//! DLRM (Naumov et al. 2019): dense → bottom MLP → [bottom out | pooled embeddings] →
//! dot interaction → top MLP → logit. DCN-v2 (Wang et al. 2021, stacked): [dense |
//! pooled embeddings] → CrossNet → MLP → logit. In both, the tables pool straight into
//! the row-major buffer the next layer reads (stride = row width, offset = the
//! feature's slot), and their backward reads the gradient from the same slots, so no
//! per-table copies are made.

use crate::config::{ModelConfig, ModelKind, OptimizerConfig};
use crate::error::Result;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Instant;
use towerrec_core::embedding::EmbeddingBag;
use towerrec_core::layers::activation::Activation;
use towerrec_core::layers::crossnet::CrossNet;
use towerrec_core::layers::interaction::DotInteraction;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::optim::DenseOptimizer;
use towerrec_core::{Batch, Layer, ParamMut};
use towerrec_data::Schema;

/// Wall time spent in each phase of the steps so far, in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PhaseTimes {
    pub embedding_forward: f64,
    pub bottom_forward: f64,
    pub interaction_forward: f64,
    pub top_forward: f64,
    pub top_backward: f64,
    pub interaction_backward: f64,
    pub bottom_backward: f64,
    pub embedding_backward_update: f64,
    pub dense_update: f64,
}

impl PhaseTimes {
    /// Each phase with its name.
    pub fn entries(&self) -> [(&'static str, f64); 9] {
        [
            ("embedding_forward", self.embedding_forward),
            ("bottom_forward", self.bottom_forward),
            ("interaction_forward", self.interaction_forward),
            ("top_forward", self.top_forward),
            ("top_backward", self.top_backward),
            ("interaction_backward", self.interaction_backward),
            ("bottom_backward", self.bottom_backward),
            ("embedding_backward_update", self.embedding_backward_update),
            ("dense_update", self.dense_update),
        ]
    }
}

/// Adds the time since `*mark` to `slot` and moves the mark.
fn lap(mark: &mut Instant, slot: &mut f64) {
    let now = Instant::now();
    *slot += (now - *mark).as_secs_f64();
    *mark = now;
}

/// The feature-interaction part: what sits between the embeddings and the top MLP.
enum Interaction {
    Dot {
        bottom: Mlp<f32>,
        dot: DotInteraction<f32>,
        /// Bottom-MLP output, `B × dim`.
        bottom_out: Vec<f32>,
        bottom_grad: Vec<f32>,
    },
    Cross(CrossNet<f32>),
}

/// A DLRM or DCN-v2 model with its dense optimizer.
pub struct Model {
    kind: ModelKind,
    num_dense: usize,
    dim: usize,
    tables: Vec<EmbeddingBag>,
    interaction: Interaction,
    top: Mlp<f32>,
    dense_optimizer: DenseOptimizer,
    /// Input of the interaction (DLRM) or CrossNet (DCN), `B × width`.
    features: Vec<f32>,
    features_grad: Vec<f32>,
    /// Input of the top MLP, `B × top_in`.
    top_in: Vec<f32>,
    top_in_grad: Vec<f32>,
    times: PhaseTimes,
}

impl Model {
    /// Builds a model for data of `schema`, initialized from `seed`.
    pub fn build(
        cfg: &ModelConfig,
        opt: &OptimizerConfig,
        schema: &Schema,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = StdRng::seed_from_u64(seed);
        let dim = cfg.embedding_dim;
        let num_dense = schema.dense.len();
        let tables: Vec<EmbeddingBag> = schema
            .sparse
            .iter()
            .map(|f| {
                EmbeddingBag::new(
                    f.name.clone(),
                    f.rows as usize,
                    dim,
                    cfg.pooling,
                    opt.sparse,
                    &mut rng,
                )
            })
            .collect();
        let n_tables = tables.len();
        let (interaction, top_in_dim) = match cfg.kind {
            ModelKind::Dlrm => {
                let mut dims = vec![num_dense];
                dims.extend(&cfg.bottom_mlp);
                let bottom = Mlp::new(&dims, Activation::Relu, Activation::Relu, &mut rng);
                let dot = DotInteraction::new(n_tables + 1, dim, cfg.self_interaction);
                let out =
                    DotInteraction::<f32>::output_dim(n_tables + 1, dim, cfg.self_interaction);
                (
                    Interaction::Dot {
                        bottom,
                        dot,
                        bottom_out: Vec::new(),
                        bottom_grad: Vec::new(),
                    },
                    out,
                )
            }
            ModelKind::Dcn => {
                let width = num_dense + n_tables * dim;
                let cross = CrossNet::new(width, cfg.cross_layers, cfg.cross_rank, &mut rng);
                (Interaction::Cross(cross), width)
            }
        };
        let mut top_dims = vec![top_in_dim];
        top_dims.extend(&cfg.top_mlp);
        let top = Mlp::new(&top_dims, Activation::Relu, Activation::Identity, &mut rng);
        let mut model = Model {
            kind: cfg.kind,
            num_dense,
            dim,
            tables,
            interaction,
            top,
            dense_optimizer: DenseOptimizer::new(opt.dense, &[]),
            features: Vec::new(),
            features_grad: Vec::new(),
            top_in: Vec::new(),
            top_in_grad: Vec::new(),
            times: PhaseTimes::default(),
        };
        let sizes: Vec<usize> = model.dense_params().iter().map(|p| p.value.len()).collect();
        model.dense_optimizer = DenseOptimizer::new(opt.dense, &sizes);
        Ok(model)
    }

    /// Which model this is.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    /// Width of one row of the interaction (DLRM) or CrossNet (DCN) input.
    fn feature_width(&self) -> usize {
        match self.kind {
            ModelKind::Dlrm => (self.tables.len() + 1) * self.dim,
            ModelKind::Dcn => self.num_dense + self.tables.len() * self.dim,
        }
    }

    /// Offset of table `t`'s pooled vector within a feature row.
    fn table_offset(&self, t: usize) -> usize {
        match self.kind {
            ModelKind::Dlrm => (t + 1) * self.dim,
            ModelKind::Dcn => self.num_dense + t * self.dim,
        }
    }

    /// Computes one logit per sample into `logits` (resized to the batch).
    ///
    /// DLRM's table lookups (memory-bound) and bottom MLP (compute-bound) are
    /// independent and run side by side; their phase times then overlap.
    pub fn forward(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<()> {
        let b = batch.batch_size();
        let width = self.feature_width();
        let (base, dim, nd) = (self.table_offset(0), self.dim, self.num_dense);
        let Model {
            tables,
            interaction,
            features,
            top_in,
            top,
            times,
            ..
        } = self;
        resize(features, b * width);
        match interaction {
            Interaction::Dot {
                bottom,
                dot,
                bottom_out,
                ..
            } => {
                resize(bottom_out, b * dim);
                let ((lookups, t_emb), ((), t_bottom)) = rayon::join(
                    || timed(|| tables_forward(tables, batch, features, width, base)),
                    || timed(|| bottom.forward(&batch.dense, bottom_out, b)),
                );
                lookups?;
                times.embedding_forward += t_emb;
                times.bottom_forward += t_bottom;
                let mut mark = Instant::now();
                for (row, out) in features
                    .chunks_exact_mut(width)
                    .zip(bottom_out.chunks_exact(dim))
                {
                    row[..dim].copy_from_slice(out);
                }
                resize(top_in, b * dot.out_dim());
                dot.forward(features, top_in, b);
                lap(&mut mark, &mut times.interaction_forward);
            }
            Interaction::Cross(cross) => {
                let (lookups, t_emb) =
                    timed(|| tables_forward(tables, batch, features, width, base));
                lookups?;
                times.embedding_forward += t_emb;
                let mut mark = Instant::now();
                for (row, dense) in features
                    .chunks_exact_mut(width)
                    .zip(batch.dense.chunks_exact(nd.max(1)))
                {
                    row[..nd].copy_from_slice(&dense[..nd]);
                }
                resize(top_in, b * width);
                cross.forward(features, top_in, b);
                lap(&mut mark, &mut times.interaction_forward);
            }
        }
        let mut mark = Instant::now();
        resize(logits, b);
        top.forward(top_in, logits, b);
        lap(&mut mark, &mut times.top_forward);
        Ok(())
    }

    /// Backward from `dL/dlogit` of the last forward (same `batch`, same `logits`),
    /// updating the tables where their rows live and the dense layers.
    ///
    /// Once the interaction's input gradient is known, DLRM's bottom-MLP backward and the
    /// tables' fused updates are independent and run side by side.
    pub fn backward_update(
        &mut self,
        batch: &Batch,
        logits: &[f32],
        logits_grad: &[f32],
        dense_lr: f32,
        sparse_lr: f32,
    ) -> Result<()> {
        let b = batch.batch_size();
        let width = self.feature_width();
        let (base, dim) = (self.table_offset(0), self.dim);
        let Model {
            tables,
            interaction,
            top,
            dense_optimizer,
            features,
            features_grad,
            top_in,
            top_in_grad,
            times,
            ..
        } = self;
        let mut mark = Instant::now();
        resize(top_in_grad, top_in.len());
        top.backward(top_in, logits, logits_grad, Some(top_in_grad), b);
        lap(&mut mark, &mut times.top_backward);
        resize(features_grad, b * width);
        match interaction {
            Interaction::Dot {
                bottom,
                dot,
                bottom_out,
                bottom_grad,
            } => {
                dot.backward(features, top_in, top_in_grad, Some(features_grad), b);
                lap(&mut mark, &mut times.interaction_backward);
                let grad: &[f32] = features_grad;
                resize(bottom_grad, b * dim);
                let (((), t_bottom), (updates, t_emb)) = rayon::join(
                    || {
                        timed(|| {
                            for (g, row) in bottom_grad
                                .chunks_exact_mut(dim)
                                .zip(grad.chunks_exact(width))
                            {
                                g.copy_from_slice(&row[..dim]);
                            }
                            bottom.backward(&batch.dense, bottom_out, bottom_grad, None, b);
                        })
                    },
                    || timed(|| tables_backward(tables, batch, grad, width, base, sparse_lr)),
                );
                updates?;
                times.bottom_backward += t_bottom;
                times.embedding_backward_update += t_emb;
            }
            Interaction::Cross(cross) => {
                cross.backward(features, top_in, top_in_grad, Some(features_grad), b);
                lap(&mut mark, &mut times.interaction_backward);
                let (updates, t_emb) =
                    timed(|| tables_backward(tables, batch, features_grad, width, base, sparse_lr));
                updates?;
                times.embedding_backward_update += t_emb;
            }
        }
        let mut mark = Instant::now();
        let mut params = dense_params(interaction, top);
        dense_optimizer.apply(&mut params, dense_lr)?;
        lap(&mut mark, &mut times.dense_update);
        Ok(())
    }

    /// Time spent in each phase since the model was built or [`Model::reset_times`].
    pub fn phase_times(&self) -> &PhaseTimes {
        &self.times
    }

    /// Zeroes the phase times.
    pub fn reset_times(&mut self) {
        self.times = PhaseTimes::default();
    }

    /// Dense parameters with their gradients, named as in checkpoints.
    pub fn dense_params(&mut self) -> Vec<ParamMut<'_, f32>> {
        dense_params(&mut self.interaction, &mut self.top)
    }

    /// The embedding tables.
    pub fn tables(&self) -> &[EmbeddingBag] {
        &self.tables
    }

    /// The embedding tables, mutably (checkpoint loading).
    pub fn tables_mut(&mut self) -> &mut [EmbeddingBag] {
        &mut self.tables
    }

    /// The dense optimizer (its state is part of a checkpoint).
    pub fn dense_optimizer_mut(&mut self) -> &mut DenseOptimizer {
        &mut self.dense_optimizer
    }

    /// Number of trainable parameters, embeddings included.
    pub fn param_count(&mut self) -> usize {
        let dense: usize = self.dense_params().iter().map(|p| p.value.len()).sum();
        dense + self.tables.iter().map(|t| t.weights().len()).sum::<usize>()
    }
}

fn dense_params<'a>(
    interaction: &'a mut Interaction,
    top: &'a mut Mlp<f32>,
) -> Vec<ParamMut<'a, f32>> {
    let mut out = Vec::new();
    match interaction {
        Interaction::Dot { bottom, .. } => out.extend(prefixed("bottom", bottom.params())),
        Interaction::Cross(cross) => out.extend(prefixed("cross", cross.params())),
    }
    out.extend(prefixed("top", top.params()));
    out
}

fn prefixed<'a>(
    prefix: &str,
    params: Vec<ParamMut<'a, f32>>,
) -> impl Iterator<Item = ParamMut<'a, f32>> + 'a {
    let prefix = prefix.to_string();
    params.into_iter().map(move |mut p| {
        p.name = format!("{prefix}.{}", p.name);
        p
    })
}

/// Pools every table's ids into its slot of the feature rows (`base + t·dim`).
fn tables_forward(
    tables: &[EmbeddingBag],
    batch: &Batch,
    features: &mut [f32],
    width: usize,
    base: usize,
) -> Result<()> {
    for (t, table) in tables.iter().enumerate() {
        table.forward(
            batch.sparse.feature(t),
            features,
            width,
            base + t * table.dim(),
        )?;
    }
    Ok(())
}

/// Every table's fused backward and update from its slot of the feature gradients.
fn tables_backward(
    tables: &mut [EmbeddingBag],
    batch: &Batch,
    grad: &[f32],
    width: usize,
    base: usize,
    lr: f32,
) -> Result<()> {
    for (t, table) in tables.iter_mut().enumerate() {
        let offset = base + t * table.dim();
        table.backward_update(batch.sparse.feature(t), grad, width, offset, lr)?;
    }
    Ok(())
}

/// Runs `f`, returning its result and the seconds it took.
fn timed<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed().as_secs_f64())
}

/// Resizes a scratch buffer without shrinking its allocation.
fn resize(buf: &mut Vec<f32>, len: usize) {
    buf.resize(len, 0.0);
}
