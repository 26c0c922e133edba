//! Embedding tables spread over ranks by a plan, with the flat exchange of the scale-in
//! paper's Appendix (Algorithms 1 and 2).
//!
//! Every rank holds a contiguous slice of the global batch (rank `r` the `r`-th slice;
//! slices may differ in size). Forward:
//! 1. *input distribution*: one AlltoAllv of each sample's ids to the ranks holding its
//!    table's shards: the whole bag to a table-wise or column-wise shard, the ids that
//!    fall in its rows (renumbered from 0) to a row-wise shard;
//! 2. each shard pools the bags of the whole global batch;
//! 3. *output distribution*: one AlltoAllv of the pooled vectors back to the sample
//!    owners, who place table-wise blocks, concatenate column-wise blocks and sum
//!    row-wise partial sums (a ReduceScatter done as a direct exchange and a sum in
//!    owner-rank order; mean pooling divides after the sum).
//!
//! Backward reverses step 3 (each shard receives its columns of the pooled gradient for
//! the whole batch) and applies the fused optimizer update where the rows live. Data-
//! parallel tables pool locally; their gradient is synchronized by an AllGather of every
//! rank's bags and pooled gradients, after which each replica applies the update of the
//! whole batch: the AllReduce of a sparse gradient, and the same rows touched as one
//! process would touch (a dense AllReduce would also move the state of lazy optimizers).

use crate::error::{Error, Result};
use crate::init::TableInit;
use towerrec_comm::{Comm, Phase};
use towerrec_core::batch::JaggedView;
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer};
use towerrec_core::Batch;
use towerrec_plan::{Plan, Shard, ShardingType};

/// One table as the model sees it.
#[derive(Debug, Clone)]
pub struct TableDesc {
    pub name: String,
    pub rows: usize,
    pub dim: usize,
}

/// Where one table's pooled vectors go in a feature row: `base + t·dim`.
#[derive(Debug, Clone, Copy)]
pub struct FeatureLayout {
    pub width: usize,
    pub base: usize,
}

struct TableState {
    dim: usize,
    pooling: Pooling,
    sharding: ShardingType,
    shards: Vec<Shard>,
}

impl TableState {
    fn row_split(&self) -> bool {
        matches!(
            self.sharding,
            ShardingType::RowWise | ShardingType::TableRowWise
        )
    }
}

/// A shard held by this rank, with what its last forward received.
struct LocalShard {
    table: usize,
    shard: Shard,
    bag: EmbeddingBag,
    offsets: Vec<usize>,
    values: Vec<u64>,
    pooled: Vec<f32>,
    grad: Vec<f32>,
}

/// A data-parallel table's replica.
struct Replica {
    table: usize,
    bag: EmbeddingBag,
}

/// The embedding tables of a model, spread over the ranks of `comm` as a plan says.
pub struct ShardedEmbeddings {
    comm: Comm,
    tables: Vec<TableState>,
    /// Every shard of every sharded table, `(table, shard)` in table then shard order:
    /// the order of the segments on the wire.
    wire: Vec<(usize, usize)>,
    local: Vec<LocalShard>,
    replicas: Vec<Replica>,
    /// Samples each rank held in the last forward.
    samples: Vec<usize>,
    /// Exchange buffers, kept to reuse their memory from step to step.
    ids_send: Vec<u64>,
    ids_recv: Vec<u64>,
    vec_send: Vec<f32>,
    vec_recv: Vec<f32>,
}

impl ShardedEmbeddings {
    /// This rank's part of `tables` under `plan` (validated by the caller), initialized as
    /// one process would initialize the whole tables from `seed`.
    pub fn new(
        comm: Comm,
        tables: &[TableDesc],
        plan: &Plan,
        pooling: Pooling,
        optimizer: SparseOptimizer,
        seed: u64,
    ) -> Result<Self> {
        let me = comm.world_rank();
        let mut states = Vec::with_capacity(tables.len());
        let mut wire = Vec::new();
        let mut local = Vec::new();
        let mut replicas = Vec::new();
        for (t, desc) in tables.iter().enumerate() {
            let entry = plan.table(&desc.name).ok_or_else(|| {
                Error::Plan(format!("the plan has no entry for table '{}'", desc.name))
            })?;
            let init = TableInit::new(seed, t, desc.rows, desc.dim);
            let state = TableState {
                dim: desc.dim,
                pooling,
                sharding: entry.sharding,
                shards: entry.shards.clone(),
            };
            if entry.sharding == ShardingType::DataParallel {
                let bag = EmbeddingBag::try_from_fn(
                    desc.name.clone(),
                    desc.rows,
                    desc.dim,
                    pooling,
                    optimizer,
                    |r, row| init.fill_row(r, 0, row),
                )?;
                replicas.push(Replica { table: t, bag });
            }
            for (s, shard) in entry.shards.iter().enumerate() {
                wire.push((t, s));
                if shard.rank != me {
                    continue;
                }
                // Row-wise shards return partial sums; the owner of the sample divides.
                let shard_pooling = if state.row_split() {
                    Pooling::Sum
                } else {
                    pooling
                };
                let (r0, c0) = (shard.rows.0, shard.columns.0);
                let bag = EmbeddingBag::try_from_fn(
                    format!("{}[{}]", desc.name, s),
                    shard.num_rows(),
                    shard.num_columns(),
                    shard_pooling,
                    optimizer,
                    |r, row| init.fill_row(r0 + r, c0, row),
                )?;
                local.push(LocalShard {
                    table: t,
                    shard: *shard,
                    bag,
                    offsets: Vec::new(),
                    values: Vec::new(),
                    pooled: Vec::new(),
                    grad: Vec::new(),
                });
            }
            states.push(state);
        }
        Ok(Self {
            comm,
            tables: states,
            wire,
            local,
            replicas,
            samples: Vec::new(),
            ids_send: Vec::new(),
            ids_recv: Vec::new(),
            vec_send: Vec::new(),
            vec_recv: Vec::new(),
        })
    }

    /// The world communicator (dense gradients, evaluation and checkpoints use it too).
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The shards on this rank: `(table, shard, weights-and-state)`.
    pub fn local_shards(&self) -> impl Iterator<Item = (usize, &Shard, &EmbeddingBag)> {
        self.local.iter().map(|l| (l.table, &l.shard, &l.bag))
    }

    /// The shards on this rank, mutably (checkpoint loading).
    pub fn local_shards_mut(&mut self) -> impl Iterator<Item = (usize, &Shard, &mut EmbeddingBag)> {
        self.local
            .iter_mut()
            .map(|l| (l.table, &l.shard, &mut l.bag))
    }

    /// The data-parallel replicas on this rank: `(table, replica)`.
    pub fn replicas_mut(&mut self) -> impl Iterator<Item = (usize, &mut EmbeddingBag)> {
        self.replicas.iter_mut().map(|r| (r.table, &mut r.bag))
    }

    /// The data-parallel replicas on this rank.
    pub fn replicas(&self) -> impl Iterator<Item = (usize, &EmbeddingBag)> {
        self.replicas.iter().map(|r| (r.table, &r.bag))
    }

    /// Every table's shards (empty for data-parallel tables).
    pub fn shards_of(&self, table: usize) -> &[Shard] {
        &self.tables[table].shards
    }

    /// Pools every table for this rank's samples (`batch`, the rank's slice of the global
    /// batch: rank `r` holds the `r`-th slice) into the feature rows `out`
    /// (`B × layout.width`).
    pub fn forward(&mut self, batch: &Batch, out: &mut [f32], layout: FeatureLayout) -> Result<()> {
        let p = self.comm.size();
        let b_local = batch.batch_size();

        // 1. Input distribution: to each rank, this rank's sample count, then a segment
        //    per shard it holds.
        let mut send = std::mem::take(&mut self.ids_send);
        send.clear();
        let mut counts = vec![0usize; p];
        for (dest, count) in counts.iter_mut().enumerate() {
            let before = send.len();
            send.push(b_local as u64);
            for &(t, s) in &self.wire {
                let shard = &self.tables[t].shards[s];
                if shard.rank == dest {
                    self.pack_ids(batch, t, shard, &mut send);
                }
            }
            *count = send.len() - before;
        }
        let mut recv = std::mem::take(&mut self.ids_recv);
        let exchanged = self
            .comm
            .all_to_all_v_into(&send, &counts, &mut recv, Phase::InputDist);
        self.ids_send = send;
        exchanged?;

        // 2. Unpack in source order (= global sample order) and pool.
        for l in &mut self.local {
            l.offsets.clear();
            l.offsets.push(0);
            l.values.clear();
        }
        self.samples.clear();
        let mut at = 0;
        for _ in 0..p {
            let n = recv[at] as usize;
            at += 1;
            self.samples.push(n);
            for l in &mut self.local {
                let lengths = &recv[at..at + n];
                at += n;
                let total: usize = lengths.iter().map(|&x| x as usize).sum();
                let mut end = *l.offsets.last().expect("offsets start with 0");
                for &len in lengths {
                    end += len as usize;
                    l.offsets.push(end);
                }
                l.values.extend_from_slice(&recv[at..at + total]);
                at += total;
            }
        }
        let global_batch: usize = self.samples.iter().sum();
        for l in &mut self.local {
            let cols = l.shard.num_columns();
            l.pooled.clear();
            l.pooled.resize(global_batch * cols, 0.0);
            let view = JaggedView::new(&l.offsets, &l.values)?;
            l.bag.forward(view, &mut l.pooled, cols, 0)?;
        }

        // 3. Output distribution: every sample owner gets its rows of every shard.
        self.ids_recv = recv;
        let mut send = std::mem::take(&mut self.vec_send);
        send.clear();
        let mut counts = vec![0usize; p];
        let mut first = 0;
        for (owner, &n) in self.samples.iter().enumerate() {
            let before = send.len();
            for l in &self.local {
                let cols = l.shard.num_columns();
                send.extend_from_slice(&l.pooled[first * cols..(first + n) * cols]);
            }
            counts[owner] = send.len() - before;
            first += n;
        }
        let mut recv = std::mem::take(&mut self.vec_recv);
        let exchanged = self
            .comm
            .all_to_all_v_into(&send, &counts, &mut recv, Phase::OutputDist);
        self.vec_send = send;
        exchanged?;
        let out = &mut out[..b_local * layout.width];
        for (t, table) in self.tables.iter().enumerate() {
            if table.row_split() {
                let off = layout.base + t * table.dim;
                for row in out.chunks_exact_mut(layout.width) {
                    row[off..off + table.dim].fill(0.0);
                }
            }
        }
        let mut at = 0;
        for src in 0..p {
            for &(t, s) in &self.wire {
                let table = &self.tables[t];
                let shard = &table.shards[s];
                if shard.rank != self.comm.world_rank_of(src) {
                    continue;
                }
                let cols = shard.num_columns();
                let off = layout.base + t * table.dim + shard.columns.0;
                let block = &recv[at..at + b_local * cols];
                at += b_local * cols;
                for (row, part) in out
                    .chunks_exact_mut(layout.width)
                    .zip(block.chunks_exact(cols.max(1)))
                {
                    let dst = &mut row[off..off + cols];
                    if table.row_split() {
                        dst.iter_mut().zip(part).for_each(|(d, &v)| *d += v);
                    } else {
                        dst.copy_from_slice(part);
                    }
                }
            }
        }
        self.vec_recv = recv;
        for (t, table) in self.tables.iter().enumerate() {
            if table.row_split() && table.pooling == Pooling::Mean {
                let off = layout.base + t * table.dim;
                let ids = batch.sparse.feature(t);
                for (b, row) in out.chunks_exact_mut(layout.width).enumerate() {
                    let len = ids.ids(b).len();
                    if len > 1 {
                        let scale = 1.0 / len as f32;
                        row[off..off + table.dim]
                            .iter_mut()
                            .for_each(|v| *v *= scale);
                    }
                }
            }
        }
        for r in &self.replicas {
            let off = layout.base + r.table * self.tables[r.table].dim;
            r.bag
                .forward(batch.sparse.feature(r.table), out, layout.width, off)?;
        }
        Ok(())
    }

    /// Appends this rank's lengths and ids of table `t` for `shard` to `send`.
    fn pack_ids(&self, batch: &Batch, t: usize, shard: &Shard, send: &mut Vec<u64>) {
        let ids = batch.sparse.feature(t);
        let b = ids.batch_size();
        let lengths_at = send.len();
        send.resize(lengths_at + b, 0);
        if self.tables[t].row_split() {
            let (r0, r1) = (shard.rows.0 as u64, shard.rows.1 as u64);
            for s in 0..b {
                let mut n = 0;
                for &id in ids.ids(s) {
                    if (r0..r1).contains(&id) {
                        send.push(id - r0);
                        n += 1;
                    }
                }
                send[lengths_at + s] = n;
            }
        } else {
            for s in 0..b {
                send[lengths_at + s] = ids.ids(s).len() as u64;
            }
            send.extend_from_slice(ids.values);
        }
    }

    /// Backward of the last [`ShardedEmbeddings::forward`] (same `batch`) from the
    /// gradient of its output, updating every shard and replica with `lr`.
    pub fn backward_update(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        layout: FeatureLayout,
        lr: f32,
    ) -> Result<()> {
        let p = self.comm.size();
        let b_local = batch.batch_size();
        let grad = &grad[..b_local * layout.width];

        // Reverse output distribution: each shard's columns of the gradient to its rank.
        let mut send = std::mem::take(&mut self.vec_send);
        send.clear();
        let mut counts = vec![0usize; p];
        for (dest, count) in counts.iter_mut().enumerate() {
            let before = send.len();
            for &(t, s) in &self.wire {
                let table = &self.tables[t];
                let shard = &table.shards[s];
                if shard.rank != self.comm.world_rank_of(dest) {
                    continue;
                }
                let off = layout.base + t * table.dim + shard.columns.0;
                let cols = shard.num_columns();
                let mean = table.row_split() && table.pooling == Pooling::Mean;
                let ids = batch.sparse.feature(t);
                for (b, row) in grad.chunks_exact(layout.width).enumerate() {
                    let part = &row[off..off + cols];
                    let len = ids.ids(b).len();
                    if mean && len > 1 {
                        let scale = 1.0 / len as f32;
                        send.extend(part.iter().map(|&g| g * scale));
                    } else {
                        send.extend_from_slice(part);
                    }
                }
            }
            *count = send.len() - before;
        }
        let mut recv = std::mem::take(&mut self.vec_recv);
        let exchanged = self
            .comm
            .all_to_all_v_into(&send, &counts, &mut recv, Phase::OutputDist);
        self.vec_send = send;
        exchanged?;
        let mut at = 0;
        for l in &mut self.local {
            l.grad.clear();
        }
        for &n in &self.samples {
            for l in &mut self.local {
                let len = n * l.shard.num_columns();
                l.grad.extend_from_slice(&recv[at..at + len]);
                at += len;
            }
        }
        self.vec_recv = recv;
        for l in &mut self.local {
            let view = JaggedView::new(&l.offsets, &l.values)?;
            let cols = l.shard.num_columns();
            l.bag.backward_update(view, &l.grad, cols, 0, lr)?;
        }

        if !self.replicas.is_empty() {
            self.sync_replicas(batch, grad, layout, lr)?;
        }
        Ok(())
    }

    /// Data-parallel tables: gathers every rank's bags and pooled gradients, then applies
    /// the whole batch's update to each replica.
    fn sync_replicas(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        layout: FeatureLayout,
        lr: f32,
    ) -> Result<()> {
        let mut ids_send = Vec::new();
        let mut grad_send = Vec::new();
        for r in &self.replicas {
            let ids = batch.sparse.feature(r.table);
            ids_send.extend((0..ids.batch_size()).map(|b| ids.ids(b).len() as u64));
            ids_send.extend_from_slice(ids.values);
            let dim = self.tables[r.table].dim;
            let off = layout.base + r.table * dim;
            for row in grad.chunks_exact(layout.width) {
                grad_send.extend_from_slice(&row[off..off + dim]);
            }
        }
        let (ids_all, _) = self.comm.all_gather(&ids_send, Phase::SparseGradSync)?;
        let (grad_all, _) = self.comm.all_gather(&grad_send, Phase::SparseGradSync)?;
        let samples = self.samples.clone();
        let mut offsets: Vec<Vec<usize>> = vec![vec![0]; self.replicas.len()];
        let mut values: Vec<Vec<u64>> = vec![Vec::new(); self.replicas.len()];
        let mut grads: Vec<Vec<f32>> = vec![Vec::new(); self.replicas.len()];
        let (mut at, mut gat) = (0, 0);
        for &n in &samples {
            for (k, r) in self.replicas.iter().enumerate() {
                let lengths = &ids_all[at..at + n];
                at += n;
                let mut end = *offsets[k].last().expect("offsets start with 0");
                for &len in lengths {
                    end += len as usize;
                    offsets[k].push(end);
                }
                let total = end - (offsets[k][offsets[k].len() - 1 - n]);
                values[k].extend_from_slice(&ids_all[at..at + total]);
                at += total;
                let dim = self.tables[r.table].dim;
                grads[k].extend_from_slice(&grad_all[gat..gat + n * dim]);
                gat += n * dim;
            }
        }
        for (k, r) in self.replicas.iter_mut().enumerate() {
            let dim = self.tables[r.table].dim;
            let view = JaggedView::new(&offsets[k], &values[k])?;
            r.bag.backward_update(view, &grads[k], dim, 0, lr)?;
        }
        Ok(())
    }
}

/// One table whole: weights and optimizer state, as a checkpoint holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeTable {
    pub name: String,
    pub step: u64,
    pub weights: Vec<f32>,
    /// `(name, values)`: per-element state is `rows × dim`, per-row state `rows`.
    pub state: Vec<(String, Vec<f32>)>,
}

/// An optimizer's state tensors: name, and whether it holds one value per row (rather
/// than one per element).
pub(crate) fn state_layout(optimizer: SparseOptimizer) -> Vec<(&'static str, bool)> {
    match optimizer {
        SparseOptimizer::Sgd => vec![],
        SparseOptimizer::RowWiseAdagrad { .. } => vec![("accumulator", true)],
        SparseOptimizer::Adam { .. } => vec![("momentum1", false), ("momentum2", false)],
    }
}

/// A state block's width, the whole tensor's width and the block's first column.
fn state_place(per_row: bool, shard: &Shard, dim: usize) -> (usize, usize, usize) {
    if per_row {
        (1, 1, 0)
    } else {
        (shard.num_columns(), dim, shard.columns.0)
    }
}

/// Where a shard's block sits in a whole tensor: first row, first column, width.
type Place = (usize, usize, usize);

/// Copies the block `src` (rows of `width`) into `whole` (rows of `whole_width`).
fn put_block(whole: &mut [f32], whole_width: usize, src: &[f32], (row0, col0, width): Place) {
    if width == 0 {
        return;
    }
    for (r, s) in src.chunks_exact(width).enumerate() {
        let at = (row0 + r) * whole_width + col0;
        whole[at..at + width].copy_from_slice(s);
    }
}

/// Copies a block of `whole` (rows of `whole_width`) into `dst` (rows of `width`).
fn take_block(whole: &[f32], whole_width: usize, dst: &mut [f32], (row0, col0, width): Place) {
    if width == 0 {
        return;
    }
    for (r, d) in dst.chunks_exact_mut(width).enumerate() {
        let at = (row0 + r) * whole_width + col0;
        d.copy_from_slice(&whole[at..at + width]);
    }
}

impl ShardedEmbeddings {
    /// Per-row state makes no sense split by columns: refuse such a model.
    pub fn check_optimizer(&self, optimizer: SparseOptimizer) -> Result<()> {
        if matches!(optimizer, SparseOptimizer::RowWiseAdagrad { .. }) {
            if let Some(t) = self
                .tables
                .iter()
                .position(|t| t.shards.iter().any(|s| s.num_columns() != t.dim))
            {
                return Err(Error::Plan(format!(
                    "table {t} is split by columns, but row_wise_adagrad keeps one \
                     accumulator per whole row: use row-wise or table-wise sharding for it, \
                     or another sparse optimizer"
                )));
            }
        }
        Ok(())
    }

    /// Gathers every table whole on rank 0 (`Some` there, `None` elsewhere). Collective.
    pub fn gather_whole(
        &self,
        descs: &[TableDesc],
        optimizer: SparseOptimizer,
    ) -> Result<Option<Vec<WholeTable>>> {
        let p = self.comm.size();
        let mut send = Vec::new();
        let mut steps = Vec::new();
        for l in &self.local {
            send.extend_from_slice(l.bag.weights());
            for (_, buf) in l.bag.optimizer_state() {
                send.extend_from_slice(buf);
            }
            steps.push(l.bag.step());
        }
        let mut counts = vec![0; p];
        counts[0] = send.len();
        let (recv, _) = self.comm.all_to_all_v(&send, &counts, Phase::Control)?;
        counts[0] = steps.len();
        let (recv_steps, _) = self.comm.all_to_all_v(&steps, &counts, Phase::Control)?;
        if self.comm.rank() != 0 {
            return Ok(None);
        }
        let mut whole: Vec<WholeTable> = descs
            .iter()
            .enumerate()
            .map(|(t, d)| WholeTable {
                name: d.name.clone(),
                step: 0,
                weights: vec![0.0; d.rows * d.dim],
                state: state_layout(optimizer)
                    .into_iter()
                    .map(|(n, per_row)| {
                        let width = if per_row { 1 } else { self.tables[t].dim };
                        (n.to_string(), vec![0.0; d.rows * width])
                    })
                    .collect(),
            })
            .collect();
        for r in &self.replicas {
            let w = &mut whole[r.table];
            w.step = r.bag.step();
            w.weights.copy_from_slice(r.bag.weights());
            for ((_, dst), (_, src)) in w.state.iter_mut().zip(r.bag.optimizer_state()) {
                dst.copy_from_slice(src);
            }
        }
        let (mut at, mut step_at) = (0, 0);
        for src in 0..p {
            for &(t, s) in &self.wire {
                let shard = self.tables[t].shards[s];
                if shard.rank != self.comm.world_rank_of(src) {
                    continue;
                }
                let (rows, cols, dim) = (shard.num_rows(), shard.num_columns(), descs[t].dim);
                let w = &mut whole[t];
                w.step = recv_steps[step_at];
                step_at += 1;
                let block = &recv[at..at + rows * cols];
                at += rows * cols;
                put_block(
                    &mut w.weights,
                    dim,
                    block,
                    (shard.rows.0, shard.columns.0, cols),
                );
                for ((_, dst), (_, per_row)) in w.state.iter_mut().zip(state_layout(optimizer)) {
                    let (width, whole_width, col0) = state_place(per_row, &shard, dim);
                    let block = &recv[at..at + rows * width];
                    at += rows * width;
                    put_block(dst, whole_width, block, (shard.rows.0, col0, width));
                }
            }
        }
        Ok(Some(whole))
    }

    /// Loads this rank's shards and replicas from the whole tables (in model order).
    pub fn load_whole(&mut self, whole: &[WholeTable], optimizer: SparseOptimizer) -> Result<()> {
        for l in &mut self.local {
            let w = &whole[l.table];
            let dim = self.tables[l.table].dim;
            let (row0, col0, cols) = (l.shard.rows.0, l.shard.columns.0, l.shard.num_columns());
            take_block(&w.weights, dim, l.bag.weights_mut(), (row0, col0, cols));
            let layout = state_layout(optimizer);
            for (((_, dst), (_, src)), (_, per_row)) in l
                .bag
                .optimizer_state_mut()
                .into_iter()
                .zip(&w.state)
                .zip(layout)
            {
                let (width, whole_width, c0) = state_place(per_row, &l.shard, dim);
                take_block(src, whole_width, dst, (row0, c0, width));
            }
            l.bag.set_step(w.step);
        }
        for r in &mut self.replicas {
            let w = &whole[r.table];
            r.bag.weights_mut().copy_from_slice(&w.weights);
            for ((_, dst), (_, src)) in r.bag.optimizer_state_mut().into_iter().zip(&w.state) {
                dst.copy_from_slice(src);
            }
            r.bag.set_step(w.step);
        }
        Ok(())
    }
}
