//! DLRM and DCN-v2 assembled from core layers, with one forward and one fused
//! backward-and-update per step.
//!
//! DLRM (Naumov et al. 2019): dense → bottom MLP → [bottom out | pooled embeddings] →
//! dot interaction → top MLP → logit; without dense features, [pooled embeddings] →
//! their pairwise dots alone → top MLP (docs/CONFIG.md, "Any feature mix"). DCN-v2 (Wang et al. 2021, stacked): [dense |
//! pooled embeddings] → CrossNet → MLP → logit. In both, the tables pool straight into
//! the row-major buffer the next layer reads (stride = row width, offset = the
//! feature's slot), and their backward reads the gradient from the same slots, so no
//! per-table copies are made.

pub use crate::embeddings::Embeddings;
pub use crate::times::PhaseTimes;

use crate::config::{BiasInit, ClusterConfig, DenseSync, QComms, ReplicaSync};
use crate::config::{ModelConfig, ModelKind, OptimizerConfig};
use crate::error::{Error, Result};
use crate::finite::{Fault, Faults, Summed};
use crate::init::TableInit;
use crate::sharded::{ShardedEmbeddings, TableDesc, WholeTable};
use crate::slots::FeatureSlots;
pub use crate::specs::table_descs;
use crate::stages::Front;
use crate::times::lap;
use crate::towers::ModelTowers;
use dense::{Back, Dense};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Instant;
use towerrec_comm::{Comm, HierarchicalAllReduce, Phase, WirePrecision};
use towerrec_core::embedding::{EmbeddingBag, SparseOptimizer, TablePrecision};
use towerrec_core::layers::activation::Activation;
use towerrec_core::layers::crossnet::CrossNet;
use towerrec_core::layers::interaction::{pairs, DotInteraction};
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::optim::DenseOptimizer;
use towerrec_core::{Batch, Layer, ParamMut};
use towerrec_data::Schema;
use towerrec_plan::Plan;

mod dense;
mod schedule;

/// DLRM's bottom MLP, with its output (`B × dim`, the feature rows' base columns) and
/// its gradient.
pub(crate) struct Bottom {
    pub(crate) mlp: Mlp<f32>,
    pub(crate) out: Vec<f32>,
    grad: Vec<f32>,
}

/// A DLRM or DCN-v2 model with its dense optimizer.
pub struct Model {
    kind: ModelKind,
    num_dense: usize,
    dim: usize,
    /// Where each table's pooled vector sits in a feature row.
    slots: FeatureSlots,
    /// Parameters of all tables, whole (whatever part of them this rank holds).
    table_params: usize,
    tables: Vec<TableDesc>,
    sparse_optimizer: SparseOptimizer,
    embeddings: Embeddings,
    /// DLRM's bottom MLP (DCN's dense features go into the feature rows as they are;
    /// DLRM without dense features has none, docs/CONFIG.md "Any feature mix").
    bottom: Option<Bottom>,
    /// The layers after the feature rows: towers run here, interaction, top MLP.
    dense: Dense,
    /// Forward FLOPs per sample of the interaction.
    interaction_flops: u64,
    dense_optimizer: DenseOptimizer,
    /// Input of the interaction (DLRM) or CrossNet (DCN), `B × width`.
    features: Vec<f32>,
    features_grad: Vec<f32>,
    grad_sync: GradSync,
    /// Whether steps run in halves where the plan allows (`cluster.overlap_halves`).
    halves: bool,
    times: PhaseTimes,
    /// What this rank found NaN or infinite in the current step so far, for the check
    /// at its end ([`crate::finite`]).
    faults: Faults,
}

/// One table as [`Model::quantize_tables`] quantized it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Quantized {
    pub name: String,
    /// Its precision before.
    pub from: TablePrecision,
    /// Bytes of its stored rows before and after (optimizer state not counted).
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The largest absolute difference between a value and its quantized value.
    pub max_error: f32,
}

impl Model {
    /// Builds a model for data of `schema`, initialized from `seed`, all in this process;
    /// a DMT model's `towers` (table indices) come from [`crate::run_towers::run_towers`],
    /// `None` for a model without towers.
    pub fn build(
        cfg: &ModelConfig,
        opt: &OptimizerConfig,
        schema: &Schema,
        seed: u64,
        towers: Option<&[Vec<usize>]>,
    ) -> Result<Self> {
        let dim = cfg.embedding_dim;
        let tables = crate::specs::table_specs_of(cfg, opt.sparse, schema)
            .iter()
            .fold(0u128, |a, t| a.saturating_add(t.bytes().into()));
        let dense = crate::memory::dense_bytes(cfg, opt, schema);
        crate::memory::check_fits(tables.saturating_add(dense), || {
            "the model's embedding tables and dense layers".into()
        })?;
        let tables: Vec<EmbeddingBag> = table_descs(cfg, schema)
            .into_iter()
            .enumerate()
            .map(|(t, d)| {
                let init = TableInit::new(seed, t, d.rows, dim);
                let (p, pooling) = (d.precision, cfg.pooling);
                EmbeddingBag::try_from_fn_in(
                    p,
                    d.name,
                    d.rows,
                    dim,
                    pooling,
                    opt.sparse,
                    |r, row| init.fill_row(r, 0, row),
                )
            })
            .collect::<std::result::Result<_, _>>()?;
        Self::assemble(cfg, opt, schema, seed, towers, Embeddings::Local(tables))
    }

    /// A model of `cfg` for data of `schema` in one process, initialized from `seed`, on
    /// its run's towers ([`crate::run_towers::run_towers`] without a plan; `recorded`,
    /// the towers of the checkpoint it resumes or restores, as there).
    pub fn for_run(
        cfg: &crate::config::Config,
        schema: &Schema,
        seed: u64,
        recorded: Option<&[Vec<String>]>,
    ) -> Result<Self> {
        let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
        let towers = crate::run_towers::run_towers(&cfg.model, &names, None, recorded)?;
        Self::build(&cfg.model, &cfg.optimizer, schema, seed, towers.as_deref())
    }

    /// Builds this rank's part of a model whose tables are spread over the ranks of
    /// `comm` by `plan` (validated by the caller). Every rank starts from the values
    /// [`Model::build`] gives. Ranks of an in-process cluster must each run in their own
    /// rayon pool (`cluster::run_ranks`). `towers` as for [`Model::build`]: where the plan
    /// has towers, they are the plan's.
    pub fn build_sharded(
        cfg: &ModelConfig,
        opt: &OptimizerConfig,
        schema: &Schema,
        seed: u64,
        comm: Comm,
        plan: &Plan,
        towers: Option<&[Vec<usize>]>,
    ) -> Result<Self> {
        if schema.sparse.is_empty() {
            return Err(Error::Cluster(crate::config::nothing_to_shard()));
        }
        let descs = table_descs(cfg, schema);
        let sharded = ShardedEmbeddings::new(comm, &descs, plan, cfg.pooling, opt.sparse, seed)?;
        sharded.check_optimizer(opt.sparse)?;
        Self::assemble(
            cfg,
            opt,
            schema,
            seed,
            towers,
            Embeddings::Sharded(Box::new(sharded)),
        )
    }

    fn assemble(
        cfg: &ModelConfig,
        opt: &OptimizerConfig,
        schema: &Schema,
        seed: u64,
        towers: Option<&[Vec<usize>]>,
        embeddings: Embeddings,
    ) -> Result<Self> {
        // Layers allocate as they are made: a width too large for the machine must
        // be an error before that, not an abort.
        crate::memory::check_fits(crate::memory::dense_bytes(cfg, opt, schema), || {
            "the model's dense layers (weights, gradients, optimizer state)".into()
        })?;
        crate::config::feature_mix(cfg, schema).map_err(Error::Model)?;
        let mut rng = StdRng::seed_from_u64(seed);
        let dim = cfg.embedding_dim;
        let num_dense = schema.dense.len();
        let n_tables = schema.sparse.len();
        let table_params = schema.sparse.iter().map(|f| f.rows as usize * dim).sum();
        // DLRM's vectors are D wide with towers (the bottom MLP ends in D), else `dim`.
        let vector = cfg.towers.as_ref().map_or(dim, |t| t.vector_width(dim));
        // The base part of a feature row: DLRM's bottom-MLP output (none without dense
        // features: `feature_mix` tied `bottom_mlp = []` to them), DCN's dense features.
        let has_bottom = cfg.kind == ModelKind::Dlrm && !cfg.bottom_mlp.is_empty();
        let base = match cfg.kind {
            ModelKind::Dlrm if has_bottom => vector,
            ModelKind::Dlrm => 0,
            ModelKind::Dcn => num_dense,
        };
        let slots = feature_slots(base, dim, n_tables)?;
        let towers = match (&cfg.towers, towers) {
            (None, None) => None,
            (Some(t), Some(assignment)) => {
                crate::towers::check_widths(&slots)?;
                let init = (t.kind(), t.bias_init() == BiasInit::Zero);
                let mut t = ModelTowers::new(assignment, init, dim, base, seed)?;
                t.set_dense_precision(cfg.dense_precision);
                Some(t)
            }
            (Some(_), None) | (None, Some(_)) => {
                unreachable!("a model's towers come with [model.towers] (run_towers)")
            }
        };
        let inter_width = towers
            .as_ref()
            .map_or(slots.width(), ModelTowers::out_width);
        // With towers in the plan, the modules run inside SPTT and the embeddings' rows
        // are already the interaction rows.
        let mut embeddings = embeddings;
        let (towers, slots) = match (towers, &mut embeddings) {
            (Some(t), Embeddings::Sharded(s)) => {
                let out = t.out_slots().clone();
                match s.adopt_towers(t) {
                    None => (None, out),
                    Some(t) => (Some(t), slots),
                }
            }
            (towers, _) => (towers, slots),
        };
        // The interaction, its checkpoint prefix and forward FLOPs per sample (a
        // multiply-add is 2 FLOPs: the dot interaction `2·n²·D` for `n` vectors of `D`,
        // a cross layer of width `W` `2·W² + 3·W`, `4·W·r + 3·W` at rank `r`).
        let (bottom, interaction, name, flops): (_, Box<dyn Layer<f32>>, _, u64) = match cfg.kind {
            ModelKind::Dlrm => {
                let bottom = has_bottom.then(|| {
                    let mut dims = vec![num_dense];
                    dims.extend(&cfg.bottom_mlp);
                    let mut mlp = Mlp::new(&dims, Activation::Relu, Activation::Relu, &mut rng);
                    mlp.set_dense_precision(cfg.dense_precision);
                    Bottom {
                        mlp,
                        out: Vec::new(),
                        grad: Vec::new(),
                    }
                });
                if inter_width % vector != 0 {
                    return Err(Error::Model(format!(
                        "the towers' outputs ({} columns) are not whole vectors of {vector}",
                        inter_width - base
                    )));
                }
                let n = inter_width / vector;
                let flops = 2 * (n * n * vector) as u64;
                let dot =
                    if has_bottom {
                        DotInteraction::new(n, vector, cfg.self_interaction)
                    } else if pairs(n, cfg.self_interaction) == 0 {
                        return Err(Error::Model(format!(
                        "DLRM without dense features interacts its embedding vectors in pairs, \
                         and this model has {n} vector{} ({}): set model.self_interaction = true \
                         (each vector's dot with itself), or use model.kind = \"dcn\"",
                        if n == 1 { "" } else { "s" },
                        if cfg.towers.is_some() { "the towers' outputs" } else { "one table" }
                    )));
                    } else {
                        DotInteraction::without_dense(n, vector, cfg.self_interaction)
                    };
                (bottom, Box::new(dot), "dot", flops)
            }
            ModelKind::Dcn => {
                let cross = CrossNet::new(inter_width, cfg.cross_layers, cfg.cross_rank, &mut rng);
                let w = inter_width as u64;
                let per_layer = match cross.rank() {
                    None => 2 * w * w,
                    Some(r) => 4 * w * r as u64,
                };
                let flops = cross.num_layers() as u64 * (per_layer + 3 * w);
                (None, Box::new(cross), "cross", flops)
            }
        };
        let mut top_dims = vec![interaction.out_dim()];
        top_dims.extend(&cfg.top_mlp);
        let mut top = Mlp::new(&top_dims, Activation::Relu, Activation::Identity, &mut rng);
        // The dense layers' precision (docs/CONFIG.md, `model.dense_precision`); the dot
        // interaction's products stay f32.
        let mut interaction = interaction;
        interaction.set_dense_precision(cfg.dense_precision);
        top.set_dense_precision(cfg.dense_precision);
        let mut model = Model {
            kind: cfg.kind,
            num_dense,
            dim: vector,
            slots,
            table_params,
            tables: table_descs(cfg, schema),
            sparse_optimizer: opt.sparse,
            embeddings,
            bottom,
            dense: Dense::new(towers, interaction, name, top),
            interaction_flops: flops,
            dense_optimizer: DenseOptimizer::new(opt.dense, &[]),
            features: Vec::new(),
            features_grad: Vec::new(),
            grad_sync: GradSync::default(),
            halves: false,
            times: PhaseTimes::default(),
            faults: Faults::default(),
        };
        let sizes: Vec<usize> = model.dense_params().iter().map(|p| p.value.len()).collect();
        model.dense_optimizer = DenseOptimizer::new(opt.dense, &sizes);
        Ok(model)
    }

    /// Which model this is.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    /// Where the tables' pooled vectors sit in a row of the interaction (DLRM) or
    /// CrossNet (DCN) input.
    pub fn slots(&self) -> &FeatureSlots {
        &self.slots
    }

    /// Computes one logit per sample into `logits` (resized to the batch).
    ///
    /// DLRM's table lookups (memory-bound) and bottom MLP (compute-bound) are
    /// independent and run side by side; their phase times then overlap. To score a
    /// stream of batches faster, overlap consecutive batches with
    /// `forward::PipelinedForward`.
    pub fn forward(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<()> {
        let (mut front, mut back, (features, bottom_out), times) = self.forward_parts();
        let bottom_outs = match bottom_out {
            Some(out) => std::slice::from_mut(out),
            None => &mut [],
        };
        front
            .run(&[batch], std::slice::from_mut(features), bottom_outs)?
            .add_to(times);
        back.run(features, batch.batch_size(), logits).add_to(times);
        Ok(())
    }

    /// The model split into the two halves of a forward; the model's own buffers
    /// between them (the feature rows, and DLRM's bottom-MLP output, which its backward
    /// reads); the phase times.
    #[allow(clippy::type_complexity)]
    pub(crate) fn forward_parts(
        &mut self,
    ) -> (
        Front<'_>,
        Back<'_>,
        (&mut Vec<f32>, Option<&mut Vec<f32>>),
        &mut PhaseTimes,
    ) {
        let Model {
            embeddings,
            bottom,
            dense,
            features,
            slots,
            times,
            dim,
            num_dense,
            ..
        } = self;
        let slots: &FeatureSlots = slots;
        let (bottom, bottom_out) = match bottom {
            Some(Bottom { mlp, out, .. }) => (Some(mlp), Some(out)),
            None => (None, None),
        };
        let front = Front {
            embeddings,
            bottom,
            slots,
            dim: *dim,
            num_dense: *num_dense,
        };
        let back = Back { dense, slots };
        (front, back, (features, bottom_out), times)
    }

    /// Sums the dense gradients over the ranks (a DMT model's modules over their tower
    /// groups), checks the step ([`crate::finite`]: an error on every rank if any found
    /// a non-finite loss or gradient) and applies the dense optimizer: the end of every
    /// step.
    fn sync_dense_and_update(&mut self, dense_lr: f32) -> Result<()> {
        let Model {
            embeddings,
            bottom,
            dense,
            dense_optimizer,
            grad_sync,
            times,
            faults,
            ..
        } = self;
        let bottom = bottom.as_mut().map(|b| &mut b.mlp);
        let mut mark = Instant::now();
        let mut mine = std::mem::take(faults);
        let (comm, domain) = match embeddings {
            Embeddings::Sharded(s) => {
                let (comm, domain) = s.domains();
                (Some(comm), domain)
            }
            Embeddings::Local(_) => (None, None),
        };
        // Modules inside SPTT: each tower's gradients over its group, the rest over the
        // world. The group's first, so that what its sums hold is counted in the world's.
        if let Some(d) = domain {
            let owners = tower_tensor_owners(d.modules, &d.mine);
            let group = d.group;
            let mut params = dense.params(bottom, Some(d.modules));
            let world = comm.expect("a tower domain is sharded");
            let n = owners.len();
            let in_group = |i: usize| owners.get(i).copied().unwrap_or(false);
            all_reduce_grads(
                group,
                &mut params,
                in_group,
                grad_sync,
                Phase::TowerGradSync,
                &mut [],
            )?;
            if let Some(f) = Fault::dense(&params, in_group, Summed::TowerGroup(group.size())) {
                mine.note(f);
            }
            let mine = mine.take();
            let mut count = [f32::from(u8::from(mine.is_some()))];
            all_reduce_grads(
                world,
                &mut params,
                |i| i >= n,
                grad_sync,
                Phase::DenseGradSync,
                &mut count,
            )?;
            lap(&mut mark, &mut times.dense_grad_sync);
            let dense = Fault::dense(&params, |i| i >= n, Summed::World(world.size()));
            crate::finite::verdict(world, mine, count[0], dense)?;
            dense_optimizer.apply(&mut params, dense_lr)?;
            lap(&mut mark, &mut times.dense_update);
            return Ok(());
        }
        let mut params = dense.params(bottom, None);
        let mine = mine.take();
        match comm {
            Some(comm) => {
                let mut count = [f32::from(u8::from(mine.is_some()))];
                let phase = Phase::DenseGradSync;
                all_reduce_grads(comm, &mut params, |_| true, grad_sync, phase, &mut count)?;
                lap(&mut mark, &mut times.dense_grad_sync);
                let dense = Fault::dense(&params, |_| true, Summed::World(comm.size()));
                crate::finite::verdict(comm, mine, count[0], dense)?;
            }
            None => {
                let dense = Fault::dense(&params, |_| true, Summed::Nowhere);
                crate::finite::verdict_alone(mine, dense)?;
            }
        }
        dense_optimizer.apply(&mut params, dense_lr)?;
        lap(&mut mark, &mut times.dense_update);
        Ok(())
    }

    /// Notes what this rank found non-finite in the current step (the trainer: its
    /// loss), for the check at the step's end, where every rank of a cluster stops
    /// together.
    pub(crate) fn note_fault(&mut self, fault: Fault) {
        self.faults.note(fault);
    }

    /// Time spent in each phase since the model was built or [`Model::reset_times`].
    pub fn phase_times(&self) -> &PhaseTimes {
        &self.times
    }

    /// Sets the phase times back to an earlier reading (to leave out an evaluation).
    pub fn restore_times(&mut self, times: PhaseTimes) {
        self.times = times;
    }

    /// Zeroes the phase times.
    pub fn reset_times(&mut self) {
        self.times = PhaseTimes::default();
    }

    /// Dense parameters with their gradients, named as in checkpoints.
    pub fn dense_params(&mut self) -> Vec<ParamMut<'_, f32>> {
        let in_sptt = match &mut self.embeddings {
            Embeddings::Sharded(s) => s.towers_mut(),
            Embeddings::Local(_) => None,
        };
        let bottom = self.bottom.as_mut().map(|b| &mut b.mlp);
        self.dense.params(bottom, in_sptt)
    }

    /// Copies every Tower Module run inside SPTT, with its optimizer state, from its
    /// tower group to every rank (their gradients are summed only within the group, so
    /// other ranks' copies are stale): before a checkpoint. Collective; nothing to do
    /// for other models.
    pub fn refresh_tower_replicas(&mut self) -> Result<()> {
        let Model {
            embeddings,
            dense_optimizer,
            ..
        } = self;
        let Embeddings::Sharded(s) = embeddings else {
            return Ok(());
        };
        let (world, Some(d)) = s.domains() else {
            return Ok(());
        };
        let me = world.world_rank();
        let counts = d.modules.tensors_per_tower();
        let mut params = d.modules.params();
        let mut first = 0;
        let mut buf = Vec::new();
        for (t, &n) in counts.iter().enumerate() {
            let range = first..first + n;
            first += n;
            buf.clear();
            if d.owner[t] == me {
                for i in range.clone() {
                    buf.extend_from_slice(params[i].value);
                    dense_optimizer
                        .param_state_mut(i)
                        .for_each(|s| buf.extend_from_slice(s));
                }
            }
            world.broadcast(&mut buf, d.owner[t], Phase::TowerGradSync)?;
            let mut at = 0;
            for i in range {
                let v = &mut params[i].value;
                v.copy_from_slice(&buf[at..at + v.len()]);
                at += v.len();
                for state in dense_optimizer.param_state_mut(i) {
                    state.copy_from_slice(&buf[at..at + state.len()]);
                    at += state.len();
                }
            }
        }
        Ok(())
    }

    /// Forward FLOPs per sample of the dense part (MLPs, interaction, Tower Modules),
    /// counted as the simulator and the DMT paper's Table 4 count them: a multiply-add
    /// is 2 FLOPs, the dot interaction `2·n²·D` for `n` vectors of `D`, a cross layer of
    /// width `W` `2·W² + 3·W` (`4·W·r + 3·W` at rank `r`). Embedding lookups are not
    /// FLOPs.
    pub fn forward_flops_per_sample(&mut self) -> u64 {
        let mlp =
            |dims: &[usize]| -> u64 { dims.windows(2).map(|w| 2 * (w[0] * w[1]) as u64).sum() };
        let bottom = self.bottom.as_ref().map_or(0, |b| mlp(b.mlp.dims()));
        let flops = mlp(self.dense.top.dims()) + bottom + self.interaction_flops;
        let towers = match (&self.dense.towers, &mut self.embeddings) {
            (Some(t), _) => Some(t.counts()),
            (None, Embeddings::Sharded(s)) => s.towers_mut().map(|t| t.counts()),
            (None, Embeddings::Local(_)) => None,
        };
        flops + towers.map_or(0, |(_, f)| f as u64)
    }

    /// How the dense gradients are summed over the world (default hierarchical). Every
    /// rank must choose the same, before the first step.
    pub fn set_dense_sync(&mut self, mode: DenseSync) {
        self.grad_sync.mode = mode;
    }

    /// How rows copied on several ranks (OPER plans) sum their gradients (default
    /// sparse). Every rank must choose the same, before the first step.
    pub fn set_replica_sync(&mut self, mode: ReplicaSync) {
        if let Embeddings::Sharded(s) = &mut self.embeddings {
            s.set_replica_sync(mode);
        }
    }

    /// The wire precision of the pooled embeddings, their gradients and the dense
    /// gradients' sums (`[cluster.qcomms]`; default fp32). Every rank must choose the same, before the
    /// first step.
    pub fn set_qcomms(&mut self, wire: QComms) {
        self.grad_sync.wire = wire.dense;
        if let Embeddings::Sharded(s) = &mut self.embeddings {
            s.set_qcomms(wire);
        }
    }

    /// Chunks of a step's samples in SPTT's exchange, where a DMT model's per-feature
    /// modules run before its step d (default 4; 1: one exchange). Every rank must
    /// choose the same, before the first step.
    pub fn set_tower_chunks(&mut self, chunks: usize) {
        if let Embeddings::Sharded(s) = &mut self.embeddings {
            s.set_tower_chunks(chunks);
        }
    }

    /// The run-time choices of `[cluster]`: dense sync, replica sync, tower chunks,
    /// steps in halves and quantized communication.
    pub fn apply_cluster_config(&mut self, cluster: &ClusterConfig) {
        self.set_overlap_halves(cluster.overlap_halves);
        self.set_dense_sync(cluster.dense_sync);
        self.set_replica_sync(cluster.replica_sync);
        self.set_tower_chunks(cluster.tower_chunks);
        self.set_qcomms(cluster.qcomms);
    }

    /// Moves this rank's part of a sharded model's tables to `plan` (every rank at
    /// once): the same values and optimizer state, spread anew. Collective.
    pub fn move_rows(&mut self, plan: &Plan) -> Result<()> {
        if self.dense.towers.is_some() {
            return Err(Error::Plan(
                "a DMT model's tables cannot move to another plan inside a run".into(),
            ));
        }
        let old = std::mem::replace(&mut self.embeddings, Embeddings::Local(Vec::new()));
        let Embeddings::Sharded(sharded) = old else {
            self.embeddings = old;
            return Err(Error::Plan(
                "only a cluster's tables can move to another plan".into(),
            ));
        };
        let moved = sharded.respread(&self.tables, plan, self.sparse_optimizer)?;
        self.embeddings = Embeddings::Sharded(Box::new(moved));
        Ok(())
    }

    /// A DMT model's towers by table name, as its checkpoint records them
    /// (docs/DMT.md, "Where the towers come from"); `None` without towers.
    pub fn tower_tables(&mut self) -> Option<Vec<Vec<String>>> {
        let towers = match (&self.dense.towers, &mut self.embeddings) {
            (Some(t), _) => Some(t.tables()),
            (None, Embeddings::Sharded(s)) => s.towers_mut().map(|t| t.tables()),
            (None, Embeddings::Local(_)) => None,
        }?;
        let names: Vec<String> = self.tables.iter().map(|t| t.name.clone()).collect();
        Some(crate::run_towers::tower_names(&towers, &names))
    }

    /// A DMT model's Tower Modules: their parameters and forward FLOPs per sample.
    pub fn tower_counts(&self) -> Option<(usize, usize)> {
        self.dense.towers.as_ref().map(ModelTowers::counts)
    }

    /// The embedding tables, wherever they live.
    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// The embedding tables, mutably (checkpoint loading).
    pub fn embeddings_mut(&mut self) -> &mut Embeddings {
        &mut self.embeddings
    }

    /// Every table whole, with its optimizer state: on a sharded model, gathered on rank
    /// 0 (`None` on the other ranks; every rank must call it).
    pub fn whole_tables(&self) -> Result<Option<Vec<WholeTable>>> {
        match &self.embeddings {
            Embeddings::Local(tables) => Ok(Some(
                tables
                    .iter()
                    .map(|t| WholeTable {
                        name: t.name().to_string(),
                        step: t.step(),
                        packed: t.packed_rows().map(<[u8]>::to_vec),
                        weights: match t.packed_rows() {
                            Some(_) => Vec::new(),
                            None => t.weights().to_vec(),
                        },
                        state: t
                            .optimizer_state()
                            .into_iter()
                            .map(|(n, v)| (n, v.to_vec()))
                            .collect(),
                    })
                    .collect(),
            )),
            Embeddings::Sharded(s) => s.gather_whole(&self.tables, self.sparse_optimizer),
        }
    }

    /// Sets every table (this rank's part of it) from whole tables in model order, as
    /// [`Model::whole_tables`] gives them.
    pub fn load_whole_tables(&mut self, whole: &[WholeTable]) -> Result<()> {
        for (w, d) in whole.iter().zip(&self.tables) {
            let values = match &w.packed {
                Some(p) => p.len() / d.precision.row_bytes(d.dim).max(1) * d.dim,
                None => w.weights.len(),
            };
            if w.name != d.name || values != d.rows * d.dim {
                return Err(Error::Plan(format!(
                    "table '{}' of {} values does not fit the model's '{}' of {} × {}",
                    w.name, values, d.name, d.rows, d.dim
                )));
            }
        }
        match &mut self.embeddings {
            Embeddings::Local(tables) => {
                for (t, w) in tables.iter_mut().zip(whole) {
                    match &w.packed {
                        Some(bytes) => t.set_packed_rows(bytes)?,
                        None => t.set_weights(&w.weights)?,
                    }
                    for ((_, dst), (_, src)) in t.optimizer_state_mut().into_iter().zip(&w.state) {
                        dst.copy_from_slice(src);
                    }
                    t.set_step(w.step);
                }
                Ok(())
            }
            Embeddings::Sharded(_) if whole.iter().any(|w| w.packed.is_some()) => Err(Error::Plan(
                "int8 tables are for one process: not spread over a cluster".into(),
            )),
            Embeddings::Sharded(s) => s.load_whole(whole, self.sparse_optimizer),
        }
    }

    /// Quantizes the tables named in `names` (all where `None`) to int8 row-wise
    /// (`towerrec quantize`): read-only from then on. Tables already int8 are left as
    /// they are. Returns what became of each table quantized. Errors on a model spread
    /// over a cluster, an unknown name, or a table holding NaN or infinity.
    pub fn quantize_tables(&mut self, names: Option<&[String]>) -> Result<Vec<Quantized>> {
        let Embeddings::Local(tables) = &mut self.embeddings else {
            return Err(Error::Plan(
                "int8 tables are for one process: quantize a model restored in one".into(),
            ));
        };
        if let Some(unknown) = names
            .into_iter()
            .flatten()
            .find(|n| !self.tables.iter().any(|d| &d.name == *n))
        {
            return Err(Error::Plan(format!("no table is called '{unknown}'")));
        }
        let mut done = Vec::new();
        for (t, d) in tables.iter_mut().zip(&mut self.tables) {
            let chosen = names.is_none_or(|n| n.contains(&d.name));
            if chosen && d.precision.trainable() {
                let q = t.quantized()?;
                let max_error = (t.weights().iter())
                    .zip(q.weights().iter())
                    .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                done.push(Quantized {
                    name: d.name.clone(),
                    from: d.precision,
                    bytes_before: d.rows as u64 * d.precision.row_bytes(d.dim) as u64,
                    bytes_after: d.rows as u64 * TablePrecision::Int8.row_bytes(d.dim) as u64,
                    max_error,
                });
                *t = q;
                d.precision = TablePrecision::Int8;
            }
        }
        Ok(done)
    }

    /// The sparse optimizer's state tensors: name and whether per row (else per element).
    pub fn sparse_state_layout(&self) -> Vec<(&'static str, bool)> {
        crate::sharded::state_layout(self.sparse_optimizer)
    }

    /// The tables as the model sees them (names, rows, dims), in model order.
    pub fn table_descs(&self) -> &[TableDesc] {
        &self.tables
    }

    /// The cluster communicator of a sharded model.
    pub fn comm(&self) -> Option<&Comm> {
        self.embeddings.comm()
    }

    /// The dense optimizer (its state is part of a checkpoint).
    pub fn dense_optimizer_mut(&mut self) -> &mut DenseOptimizer {
        &mut self.dense_optimizer
    }

    /// Number of trainable parameters, embeddings included.
    pub fn param_count(&mut self) -> usize {
        self.dense_param_count() + self.table_params
    }

    /// Number of dense parameters: MLPs, interaction and Tower Modules (every module
    /// once, wherever it runs), as [`Model::dense_params`] lists them.
    pub fn dense_param_count(&mut self) -> usize {
        self.dense_params().iter().map(|p| p.value.len()).sum()
    }

    /// Number of embedding parameters: every table whole (rows × width), however it is
    /// sharded.
    pub fn embedding_param_count(&self) -> usize {
        self.table_params
    }
}

/// The feature rows' slots after a base part of `base` columns (DLRM's bottom-MLP output,
/// DCN's dense features): every table's pooled vector in table order.
fn feature_slots(base: usize, dim: usize, tables: usize) -> Result<FeatureSlots> {
    FeatureSlots::contiguous(base + tables * dim, base, std::iter::repeat_n(dim, tables))
}

/// Buffers of the dense gradients' AllReduce, kept from step to step.
#[derive(Default)]
struct GradSync {
    flat: Vec<f32>,
    scratch: (Vec<f32>, Vec<f32>),
    /// How the world's dense gradients are summed.
    mode: DenseSync,
    /// The hierarchical all-reduce over the world, made at the first step (a collective
    /// every rank reaches at the same point).
    hier: Option<HierarchicalAllReduce<f32>>,
    /// The wire precision of the sums (`[cluster.qcomms] dense`).
    wire: WirePrecision,
}

/// Sums the dense gradients of the parameters `which` selects over the ranks of `comm`,
/// and `extra` after them (one AllReduce of all of them together), counted under
/// `phase`.
fn all_reduce_grads(
    comm: &Comm,
    params: &mut [ParamMut<'_, f32>],
    which: impl Fn(usize) -> bool,
    sync: &mut GradSync,
    phase: Phase,
    extra: &mut [f32],
) -> Result<()> {
    let flat = &mut sync.flat;
    flat.clear();
    for (_, p) in params.iter().enumerate().filter(|(i, _)| which(*i)) {
        flat.extend_from_slice(p.grad);
    }
    flat.extend_from_slice(extra);
    let world = comm.size() == comm.topology().world_size();
    if world && phase == Phase::DenseGradSync && sync.mode == DenseSync::Hierarchical {
        if sync.hier.is_none() {
            sync.hier = Some(HierarchicalAllReduce::new(comm)?);
        }
        if let Some(hier) = sync.hier.as_mut() {
            hier.all_reduce_wire(flat, phase, sync.wire)?;
        }
    } else {
        comm.all_reduce_wire(flat, &mut sync.scratch, phase, sync.wire)?;
    }
    let mut at = 0;
    for (_, p) in params.iter_mut().enumerate().filter(|(i, _)| which(*i)) {
        let n = p.grad.len();
        p.grad.copy_from_slice(&flat[at..at + n]);
        at += n;
    }
    extra.copy_from_slice(&flat[at..at + extra.len()]);
    Ok(())
}

/// Notes the table a step's backward found with non-finite gradient rows, if any.
fn note_table_fault(
    faults: &mut Faults,
    tables: &[TableDesc],
    embeddings: &Embeddings,
    bad: Option<(usize, f32)>,
) {
    if let Some((t, x)) = bad {
        let name = tables.get(t).map_or("?", |d| d.name.as_str());
        let exchanged = embeddings.comm().is_some_and(|c| c.size() > 1);
        faults.note(Fault::table(t, name, x, exchanged));
    }
}

/// For each parameter tensor of the modules (they come first among the dense
/// parameters), whether its tower is one this rank's group runs.
fn tower_tensor_owners(modules: &mut ModelTowers, mine: &[bool]) -> Vec<bool> {
    modules
        .tensors_per_tower()
        .into_iter()
        .zip(mine)
        .flat_map(|(n, &m)| std::iter::repeat_n(m, n))
        .collect()
}
