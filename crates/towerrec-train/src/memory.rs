//! What a run will hold in memory, counted from its config and plan before anything is
//! allocated: a request too large for the machine is then an error naming what and how
//! much instead of an abort (or the kernel's OOM killer) halfway through, and a run that
//! fits is not refused.
//!
//! The count follows what the code allocates, per process (each term's doc names where):
//! - the process itself ([`PROCESS_BYTES`], measured on a tiny run; with MPI, the
//!   library's too), and a GEMM packing slab the size of the L2 cache for every thread
//!   that multiplies;
//! - the embedding tables and their optimizer state, each buffer as the allocator maps
//!   it (from 2 MiB up, in whole 2 MiB pages);
//! - per rank: the dense weights, gradients, optimizer state and gradient-sync buffers;
//!   the layers' activation buffers, which grow to the largest slice of a batch the
//!   rank trains or scores and stay, and what the largest GEMM packs; the sharded
//!   tables' exchange buffers; the batches read ahead;
//! - two passing peaks: an evaluation (the scoring pipeline's two groups of feature
//!   rows, its batches in flight, every sample's score and label) and a checkpoint (the
//!   tables gathered whole on rank 0, their bytes and the serialized file, and the same
//!   for the dense parameters and optimizer state). They never run at once, but the
//!   allocator may still hold one's freed memory while the other runs, so both count.
//!
//! Where the ranks' timing decides what overlaps, the count takes the larger. The count
//! is meant to sit at or a little above the peak resident memory: scripts/memory-check.py
//! compares the two on every config of examples/ and bench/ (docs/data/memory-estimate-*.txt).
//! Sizes are in bytes, in `u128` so that no config can overflow them.

use crate::config::{Config, ModelConfig, ModelKind, OptimizerConfig};
use crate::error::{Error, Result};
use towerrec_core::embedding::SparseOptimizer;
use towerrec_core::layers::tower::TowerModuleKind;
use towerrec_core::optim::DenseOptimizerKind;
use towerrec_data::{DataConfig, Schema, Split};
use towerrec_plan::{Plan, ShardingType, TableSpec};

const F32: u128 = 4;
const U64: u128 = 8;

/// The process before it holds any model or data: code, libraries, thread stacks and
/// the allocator's own state. Measured as the peak RSS of a tiny run (the quickstart cut
/// to one 10-row table, one dense feature and batches of 4; scripts/memory-check.py's
/// "tiny" rows): about 7.7 MB on one rank and 8.3 MB on 2 × 2 in-process ranks, 9.0 and
/// 10.0 MB with a build that links MPI; rounded up.
pub const PROCESS_BYTES: u128 = 10 << 20;

/// What a process of an MPI run holds beyond [`PROCESS_BYTES`]: the MPI library's state
/// and its shared-memory transport. The same tiny run under `mpirun -np 4` (OpenMPI
/// 4.1.4) peaks at 20.0 to 20.2 MB a process, 10.2 MB above the run in-process.
pub const MPI_PROCESS_BYTES: u128 = 10 << 20;

/// Allocations of at least this size get their own mapping in whole pages of it (the
/// binaries' allocator, `towerrec_core::huge_alloc`, and the tables' `HugePageBuf`).
const HUGE: u128 = towerrec_core::probe::HUGE_PAGE_BYTES as u128;

/// Bytes resident for an allocation of `bytes`, once written.
fn mapped(bytes: u128) -> u128 {
    if bytes >= HUGE {
        bytes.div_ceil(HUGE).saturating_mul(HUGE)
    } else {
        bytes
    }
}

/// Batch slices a rank's training reader holds: the prefetch channel's 4
/// (`trainer::run`), the one its thread is building and the one being trained on.
const TRAIN_BATCHES_IN_FLIGHT: u128 = 6;

/// Batches an evaluation holds beside its scoring group: the prefetch channel's 2
/// (`evaluate::score`), the one being built and the one being pushed.
const EVAL_BATCHES_IN_FLIGHT: u128 = 3;

/// Bytes per evaluated sample on every rank: its score and label (every rank gathers
/// all of them), and the AUC's (score, label) pairs (`metrics::auc`), with room for the
/// score vectors' growth.
const SCORE_BYTES: u128 = 24;

/// An MLP's counts: parameters; floats per sample of each hidden output (forward); of
/// each backward buffer: `dL/dz` per layer (`Linear::backward`, unless the activation
/// is the identity), the bias gradient's partial sums (a row per 64 samples), and the
/// two ping-pong gradient buffers as wide as the widest hidden output (`Mlp::backward`).
fn mlp(input: u128, widths: &[usize], last_identity: bool) -> (u128, Vec<u128>, Vec<u128>) {
    let (mut params, mut hidden, mut backward, mut widest) = (0u128, vec![], vec![], 0u128);
    let mut fan_in = input;
    let n = widths.len();
    for (i, &w) in widths.iter().enumerate() {
        let w = w as u128;
        params = params.saturating_add(fan_in.saturating_mul(w).saturating_add(w));
        let last = i + 1 == n;
        if !last {
            hidden.push(w);
            widest = widest.max(w);
        }
        if !(last && last_identity) {
            backward.push(w);
        }
        backward.push(w.div_ceil(64));
        fan_in = w;
    }
    if widest > 0 {
        backward.extend([widest, widest]);
    }
    (params, hidden, backward)
}

/// The `(in, out)` of every weight matrix an MLP multiplies by.
fn products(input: u128, widths: &[usize]) -> Vec<(u128, u128)> {
    let mut fan_in = input;
    widths
        .iter()
        .map(|&w| {
            let p = (fan_in, w as u128);
            fan_in = w as u128;
            p
        })
        .collect()
}

/// Bytes the largest GEMM of `shapes` may pack: `gemm` copies a product's operands into
/// its own buffers, so at most both of them: the forward's inputs (`slice` samples, the
/// larger slice) and weights; the backward's output gradients (`train` samples) with
/// the weights or with the inputs.
fn gemm_packing(shapes: &[(u128, u128)], slice: u128, train: u128) -> u128 {
    shapes
        .iter()
        .map(|&(i, o)| {
            let weights = i.saturating_mul(o);
            let forward = weights.saturating_add(slice.saturating_mul(i));
            let grad_weights = train.saturating_mul(i.saturating_add(o));
            let grad_inputs = weights.saturating_add(train.saturating_mul(o));
            mapped(
                forward
                    .max(grad_weights)
                    .max(grad_inputs)
                    .saturating_mul(F32),
            )
        })
        .max()
        .unwrap_or(0)
}

/// The dense part of a model, from its config: what `Model::assemble` builds. Buffers
/// are listed one by one, in floats per sample, as each is its own allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DenseShape {
    /// Parameters (MLPs, interaction, Tower Modules).
    params: u128,
    /// The rows a training forward fills (`Model`'s feature rows and DLRM's bottom-MLP
    /// output; scoring fills its own, `group`).
    rows: Vec<u128>,
    /// The layers' outputs (bottom and top MLPs, interaction, CrossNet, Tower Modules),
    /// kept at the largest batch slice trained or scored.
    layers: Vec<u128>,
    /// The buffers only a backward fills (training slices).
    backward: Vec<u128>,
    /// One batch in a scoring group (`forward::GroupBuffers`): its feature rows, DLRM's
    /// bottom-MLP output and its logits.
    group: Vec<u128>,
    /// The `(in, out)` of the weight matrices of the front (DLRM's bottom MLP) and of
    /// the rest (CrossNet, top MLP), whose products may run at once (scoring overlaps
    /// one batch's front with another's back).
    products: [Vec<(u128, u128)>; 2],
}

/// Bytes resident for `buffers` (floats per sample each) of `samples` samples.
fn buffers(buffers: &[u128], samples: u128) -> u128 {
    buffers.iter().fold(0u128, |a, &w| {
        a.saturating_add(mapped(w.saturating_mul(samples).saturating_mul(F32)))
    })
}

fn dense_shape(cfg: &ModelConfig, schema: &Schema) -> DenseShape {
    let dim = cfg.embedding_dim as u128;
    let num_dense = schema.dense.len() as u128;
    let tables = schema.sparse.len() as u128;
    let vector = cfg
        .towers
        .as_ref()
        .map_or(dim, |t| t.vector_width(cfg.embedding_dim) as u128);
    let base = match cfg.kind {
        ModelKind::Dlrm => vector,
        ModelKind::Dcn => num_dense,
    };
    let features = base.saturating_add(tables.saturating_mul(dim));
    let mut layers = Vec::new();
    let mut backward = vec![features, 1];
    // Tower Modules (`towers.rs`): each tower's input and output rows and the module's
    // own buffers (as large again; a DCN module's CrossNet besides), the interaction
    // rows; their gradients likewise.
    let mut tower_params = 0u128;
    let mut inter = features;
    if let Some(t) = &cfg.towers {
        let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
        let kind = t.kind();
        inter = base;
        for tower in t.assignment(&names).unwrap_or_default() {
            if let Ok(c) = kind.counts(tower.len(), cfg.embedding_dim) {
                let x = (tower.len() as u128).saturating_mul(dim);
                let y = c.out_dim as u128;
                tower_params = tower_params.saturating_add(c.params as u128);
                inter = inter.saturating_add(y);
                let mut own = vec![x, y, x, y];
                if let TowerModuleKind::Dcn {
                    layers: l, rank, ..
                } = kind
                {
                    let r = rank.unwrap_or(0) as u128;
                    own.extend(std::iter::repeat_n([x, x, r], l).flatten());
                }
                layers.extend(&own);
                backward.extend(&own);
            }
        }
        layers.push(inter);
        backward.push(inter);
    }
    let mut front_products = Vec::new();
    let mut back_products = Vec::new();
    let (front_params, top_in, bottom_out) = match cfg.kind {
        ModelKind::Dlrm => {
            front_products = products(num_dense, &cfg.bottom_mlp);
            let (p, hidden, bwd) = mlp(num_dense, &cfg.bottom_mlp, false);
            layers.extend(hidden);
            // The bottom MLP's last output is the model's `bottom_out`, and its gradient.
            backward.extend(bwd);
            backward.push(vector);
            let n = inter / vector.max(1);
            let pairs = if cfg.self_interaction {
                n.saturating_mul(n.saturating_add(1)) / 2
            } else {
                n.saturating_mul(n.saturating_sub(1)) / 2
            };
            (p, vector.saturating_add(pairs), Some(vector))
        }
        ModelKind::Dcn => {
            let w = inter;
            let l = cfg.cross_layers;
            let r = cfg.cross_rank.map_or(0, |r| r as u128);
            let per_layer = match cfg.cross_rank {
                None => w.saturating_mul(w),
                Some(_) => w.saturating_mul(2).saturating_mul(r),
            }
            .saturating_add(w);
            // `CrossNet`: the hidden rows between layers, every layer's z (and t when
            // low-rank); the backward's g, dz and dt.
            layers.extend(std::iter::repeat_n(w, l.saturating_sub(1)));
            layers.extend(std::iter::repeat_n(w, l));
            if r > 0 {
                layers.extend(std::iter::repeat_n(r, l));
            }
            backward.extend([w, w, r]);
            back_products.push(if r > 0 { (w, r) } else { (w, w) });
            (per_layer.saturating_mul(l as u128), w, None)
        }
    };
    let (top_params, top_hidden, top_bwd) = mlp(top_in, &cfg.top_mlp, true);
    back_products.extend(products(top_in, &cfg.top_mlp));
    layers.push(top_in);
    layers.extend(top_hidden);
    backward.push(top_in);
    backward.extend(top_bwd);
    let mut rows = vec![features];
    rows.extend(bottom_out);
    let mut group = rows.clone();
    group.push(1);
    DenseShape {
        params: tower_params
            .saturating_add(front_params)
            .saturating_add(top_params),
        rows,
        layers,
        backward,
        group,
        products: [front_products, back_products],
    }
}

/// Dense optimizer state per parameter.
fn dense_states(opt: &OptimizerConfig) -> u128 {
    match opt.dense {
        DenseOptimizerKind::Sgd => 0,
        DenseOptimizerKind::Adagrad { .. } => 1,
        DenseOptimizerKind::Adam { .. } => 2,
    }
}

/// Bytes of the dense layers of one model: weights, gradients and the optimizer's state.
pub(crate) fn dense_bytes(cfg: &ModelConfig, opt: &OptimizerConfig, schema: &Schema) -> u128 {
    dense_shape(cfg, schema)
        .params
        .saturating_mul(F32 * (2 + dense_states(opt)))
}

/// Raw bytes of each buffer of a `rows × cols` table (or shard) with `opt`'s state
/// (`EmbeddingBag`: the weights, then Adam's two moments or row-wise Adagrad's
/// accumulator).
fn bag_buffers(rows: usize, cols: usize, opt: SparseOptimizer) -> Vec<u128> {
    let (rows, cols) = (rows as u128, cols as u128);
    let weights = rows.saturating_mul(cols).saturating_mul(F32);
    match opt {
        SparseOptimizer::Sgd => vec![weights],
        SparseOptimizer::RowWiseAdagrad { .. } => vec![weights, rows.saturating_mul(F32)],
        SparseOptimizer::Adam { .. } => vec![weights; 3],
    }
}

/// One shard or store a rank pools from: its columns, whether it pools the rank's own
/// bags straight into the rank's feature rows (`ShardedEmbeddings::pools_into_rows`),
/// and its ids per sample (an upper bound for row-split tables).
#[derive(Debug, Clone, Copy)]
struct Pooler {
    columns: u128,
    direct: bool,
    ids: f64,
}

/// One rank's share of the tables under a plan.
#[derive(Debug, Default, Clone)]
struct RankTables {
    /// Bytes resident for its shards, stores and replicas.
    mapped: u128,
    /// Raw bytes of its shards and stores, which a checkpoint gathers on rank 0.
    sent: u128,
    /// Its shards and stores.
    poolers: Vec<Pooler>,
}

fn rank_tables(plan: &Plan, specs: &[TableSpec], opt: SparseOptimizer, rank: usize) -> RankTables {
    let mut out = RankTables::default();
    let sum_mapped = |b: &[u128]| b.iter().fold(0u128, |a, &x| a.saturating_add(mapped(x)));
    let sum_raw = |b: &[u128]| b.iter().fold(0u128, |a, &x| a.saturating_add(x));
    for entry in &plan.tables {
        let Some(spec) = specs.iter().find(|s| s.name == entry.table) else {
            continue;
        };
        let direct = plan.towers.is_empty()
            && matches!(
                entry.sharding,
                ShardingType::TableWise | ShardingType::ColumnWise | ShardingType::RowPartitioned
            );
        let mut held = |rows: usize, cols: usize, replica: bool| {
            let b = bag_buffers(rows, cols, opt);
            out.mapped = out.mapped.saturating_add(sum_mapped(&b));
            if !replica {
                out.sent = out.sent.saturating_add(sum_raw(&b));
                out.poolers.push(Pooler {
                    columns: cols as u128,
                    direct,
                    ids: spec.pooling_factor,
                });
            }
        };
        match entry.sharding {
            ShardingType::DataParallel => held(spec.rows, spec.dim, true),
            ShardingType::RowPartitioned => {
                // One store per rank with every partition it holds (`partitioned::stores`).
                let rows: usize = entry
                    .partitions
                    .iter()
                    .filter(|p| p.holders().any(|h| h == rank))
                    .map(|p| p.num_rows())
                    .sum();
                if rows > 0 {
                    held(rows, spec.dim, false);
                }
            }
            _ => {
                for s in entry.shards.iter().filter(|s| s.rank == rank) {
                    held(s.num_rows(), s.num_columns(), false);
                }
            }
        }
    }
    out
}

/// Bytes of one rank's exchange buffers with `columns` embedding columns in all, for a
/// widest global batch and slice `(wide, wide_slice)` and training ones `(batch,
/// slice)`, `ids` per sample: each shard's pooled rows and their gradient
/// (`lookup::LocalShard`), the vectors sent and received and the backward's first half
/// (`sharded::Buffers`), and the ids in flight. The forward's grow to the widest batch,
/// the backward's to the training one; send and receive buffers serve both.
fn exchange_bytes(
    t: &RankTables,
    columns: u128,
    (wide, wide_slice): (u128, u128),
    (batch, slice): (u128, u128),
    ids: f64,
) -> u128 {
    // A shard pools every sample's bags but the rank's own where it pools those
    // straight into its rows (`own.rs`); vectors come back for the rank's slice but
    // from those shards.
    let served = |p: &Pooler, b: u128, own: u128| {
        let own = if p.direct { own } else { 0 };
        b.saturating_sub(own).saturating_mul(p.columns)
    };
    let (mut pooled, mut served_back, mut direct, mut shards) = (0u128, 0u128, 0u128, 0u128);
    let mut vectors = 0u128;
    for p in &t.poolers {
        let fwd = served(p, wide, wide_slice);
        pooled = pooled.saturating_add(fwd);
        served_back = served_back.saturating_add(served(p, batch, slice));
        if p.direct {
            direct = direct.saturating_add(p.columns);
        }
        shards += 1;
        let grad = batch.saturating_mul(p.columns);
        vectors = vectors
            .saturating_add(mapped(fwd.saturating_mul(F32)))
            .saturating_add(mapped(grad.saturating_mul(F32)));
    }
    let others = columns.saturating_sub(direct);
    let send = pooled.max(slice.saturating_mul(others));
    let recv = wide_slice.saturating_mul(others).max(served_back);
    // The backward's first half of the gradients, when a step runs in halves.
    let first = served_back.div_ceil(2);
    for b in [send, recv, first] {
        vectors = vectors.saturating_add(mapped(b.saturating_mul(F32)));
    }
    // Ids: sent, kept and bucketed by the router for the rank's slice; received,
    // unpacked with offsets, keyed and sorted by each shard.
    let served_ids: f64 = t.poolers.iter().map(|p| p.ids).sum();
    let sent = (wide_slice as f64 * ids).ceil() as u128 * 4;
    let received = (wide as f64 * served_ids).ceil() as u128 * 4;
    let offsets = wide.saturating_mul(shards);
    let id_bytes = sent
        .saturating_add(received)
        .saturating_add(offsets)
        .saturating_mul(U64);
    vectors.saturating_add(id_bytes)
}

/// Bytes of a core's L2 cache (Linux's sysfs), else 2 MiB.
fn l2_cache_bytes() -> u128 {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    for i in 0..8 {
        let index = dir.join(format!("index{i}"));
        let level = read(index.join("level"));
        let kind = read(index.join("type"));
        if level.as_deref().map(str::trim) != Some("2")
            || kind.as_deref().map(str::trim) == Some("Instruction")
        {
            continue;
        }
        let size = read(index.join("size")).unwrap_or_default();
        let size = size.trim();
        let (digits, unit) = size.split_at(size.trim_end_matches(char::is_alphabetic).len());
        if let Ok(n) = digits.parse::<u128>() {
            return match unit {
                "K" => n << 10,
                "M" => n << 20,
                "G" => n << 30,
                _ => n,
            };
        }
    }
    2 << 20
}

/// Where a process's ranks and tables are.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// One process, one rank, every table whole (no plan).
    Single,
    /// The ranks `ranks` of a cluster whose tables are spread by `plan`.
    Cluster { plan: &'a Plan, ranks: &'a [usize] },
}

/// An upper bound of the evaluation samples: known for synthetic data and a tail of
/// so many rows; else the rows the files can hold (a text row has a byte per field at
/// least, a binary row its label, dense values and one offset per feature), times the
/// evaluated fraction where the split gives one.
fn eval_samples(cfg: &Config, schema: &Schema) -> u128 {
    let file_rows = |path: &std::path::Path, min_row: u128| -> u128 {
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            cfg.base_dir.join(path)
        };
        let bytes = std::fs::metadata(path).map_or(0, |m| m.len() as u128);
        bytes / min_row.max(1)
    };
    let fraction = |rows: u128, split: &Split| -> u128 {
        let f = match split {
            Split::Tail {
                eval_fraction: Some(f),
                ..
            }
            | Split::Random {
                eval_fraction: f, ..
            } => *f,
            _ => 1.0,
        };
        (rows as f64 * f.clamp(0.0, 1.0)).ceil() as u128
    };
    let binary_row = (1 + schema.dense.len() as u128) * F32 + schema.sparse.len() as u128 * U64;
    let (path, eval_path, split, min_row) = match &cfg.data {
        DataConfig::Synthetic(s) => {
            return match &s.eval_path {
                Some(p) => file_rows(p, binary_row),
                None => s.eval_samples as u128,
            }
        }
        DataConfig::Criteo {
            path,
            eval_path,
            split,
            ..
        } => (path, eval_path, split, 40),
        DataConfig::Csv {
            path,
            eval_path,
            split,
            schema: csv,
        } => {
            let mut columns: Vec<&str> = vec![csv.label.column.as_str()];
            columns.extend(csv.dense.iter().map(|d| d.column.as_str()));
            columns.extend(csv.sparse.iter().map(|s| s.column.as_str()));
            columns.sort_unstable();
            columns.dedup();
            (path, eval_path, split, columns.len() as u128)
        }
        DataConfig::Binary {
            path,
            eval_path,
            split,
        } => (path, eval_path, split, binary_row),
    };
    match (eval_path, split) {
        (Some(p), _) => file_rows(p, min_row),
        (
            None,
            Split::Tail {
                eval_rows: Some(n), ..
            },
        ) => *n as u128,
        (None, split) => fraction(file_rows(path, min_row), split),
    }
}

/// Mean ids per sample over all features (the specs' pooling factors: a synthetic
/// config's, else 1 per feature).
fn ids_per_sample(specs: &[TableSpec]) -> f64 {
    specs.iter().map(|s| s.pooling_factor).sum()
}

/// What one process of a run needs, by kind, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryNeed {
    /// The process itself ([`PROCESS_BYTES`], and [`MPI_PROCESS_BYTES`] for a process
    /// of an MPI run) and its threads' GEMM packing slabs.
    pub process: u128,
    /// Embedding tables and their optimizer state (this process's share), with
    /// row-partitioned tables' route caches and stores' bookkeeping.
    pub tables: u128,
    /// Dense weights, gradients, optimizer state and gradient-sync buffers, every rank
    /// in the process.
    pub dense: u128,
    /// Activation buffers and their gradients, every rank in the process.
    pub activations: u128,
    /// Batches read ahead and the sharded tables' exchange buffers, every rank.
    pub data: u128,
    /// What an evaluation holds while it runs.
    pub evaluation: u128,
    /// What writing a checkpoint holds while it runs (and moving rows to a new plan).
    pub checkpoint: u128,
}

impl MemoryNeed {
    /// The whole: what the run holds throughout, an evaluation and a checkpoint. The
    /// two never run at once, but the allocator may still hold one's freed memory while
    /// the other runs (glibc keeps freed blocks under 2 MiB), so both count.
    pub fn total(&self) -> u128 {
        self.process
            .saturating_add(self.tables)
            .saturating_add(self.dense)
            .saturating_add(self.activations)
            .saturating_add(self.data)
            .saturating_add(self.evaluation)
            .saturating_add(self.checkpoint)
    }

    /// The need of a process of a run of `cfg` placed as `placement` says;
    /// `extra_table_bytes` (row-partitioned tables' addressing) adds to the tables.
    /// The process's compute threads are those of rayon's pool it is called from (and,
    /// for an in-process cluster, each rank's pool of its share of them).
    pub fn of_run(
        cfg: &Config,
        schema: &Schema,
        placement: Placement<'_>,
        extra_table_bytes: u128,
    ) -> Self {
        let specs = crate::specs::table_specs(cfg, schema);
        let opt = cfg.optimizer.sparse;
        let shape = dense_shape(&cfg.model, schema);
        let (world, ranks): (usize, &[usize]) = match placement {
            Placement::Single => (1, &[0]),
            Placement::Cluster { plan, ranks } => (plan.topology.world_size().max(1), ranks),
        };
        let here = ranks.len() as u128;
        let world = world as u128;
        let eval_samples = eval_samples(cfg, schema);
        let batch = cfg.train.batch_size as u128;
        // A batch is no larger than the evaluation part.
        let eval_batch = (cfg.eval_batch_size() as u128).min(eval_samples.max(1));
        // A rank's slices of a training and of a scoring batch; the widest global batch
        // (the sharded tables pool every sample's bags) and its slice.
        let train_slice = batch.div_ceil(world);
        let eval_slice = eval_batch.div_ceil(world);
        let slice = train_slice.max(eval_slice);
        let (widest, widest_slice) = if eval_batch > batch {
            (eval_batch, eval_slice)
        } else {
            (batch, train_slice)
        };

        // Every table whole, as a checkpoint holds them (and one process without a plan).
        let whole: Vec<Vec<u128>> = specs
            .iter()
            .map(|s| bag_buffers(s.rows, s.dim, opt))
            .collect();
        let whole_mapped = whole
            .iter()
            .flatten()
            .fold(0u128, |a, &b| a.saturating_add(mapped(b)));
        let whole_raw = whole
            .iter()
            .flatten()
            .fold(0u128, |a, &b| a.saturating_add(b));

        let ids = ids_per_sample(&specs);
        let sample = (1 + schema.dense.len() as u128) * F32
            + (schema.sparse.len() as u128) * U64
            + (ids.ceil() as u128) * U64;
        let synthetic = matches!(&cfg.data, DataConfig::Synthetic(s) if s.eval_path.is_none());
        let params = shape.params;
        let states = dense_states(&cfg.optimizer);
        // Weights, gradients and optimizer state (`Linear`, `DenseOptimizer`).
        let mut dense_per_rank = params.saturating_mul(F32 * (2 + states));
        if world > 1 {
            // `model::GradSync`: the flat gradient, a reduce-scatter's arrivals (as
            // many) and this rank's chunk (at most half: two ranks or more); with steps
            // in halves, the first half's gradients.
            let halves = if cfg.cluster.overlap_halves { 2 } else { 0 };
            dense_per_rank =
                dense_per_rank.saturating_add(params.saturating_mul(F32 * (5 + halves)) / 2);
        }
        // The model's rows at the training slice (scoring keeps its own), the layers'
        // outputs at the larger slice, the backward's buffers at the training slice.
        let activations = buffers(&shape.rows, train_slice)
            .saturating_add(buffers(&shape.layers, slice))
            .saturating_add(buffers(&shape.backward, train_slice))
            .saturating_add(gemm_packing(&shape.products[0], slice, train_slice))
            .saturating_add(gemm_packing(&shape.products[1], slice, train_slice));
        // Batches read ahead; a reader of files cuts a rank's slice from a global batch.
        let mut read_ahead = TRAIN_BATCHES_IN_FLIGHT
            .saturating_mul(train_slice)
            .saturating_mul(sample);
        if !synthetic && world > 1 {
            read_ahead = read_ahead.saturating_add(batch.saturating_mul(sample));
        }
        // GEMM's packing slab, one per thread that multiplies (`gemm`'s thread-local
        // `L2_SLAB`, the size of a core's L2 cache): the calling thread, rayon's pool,
        // and an in-process cluster's pool per rank.
        let pool = rayon::current_num_threads() as u128;
        let rank_pools = match placement {
            Placement::Cluster { .. } if here == world => here * (pool / world).max(1),
            _ => 0,
        };
        let slabs = mapped(l2_cache_bytes()).saturating_mul(1 + pool + rank_pools);
        // An evaluation: the scoring pipeline's two groups of feature rows
        // (`forward::PipelinedForward`), its queued batches and those in flight, the
        // scores.
        let group = (crate::forward::default_group(cfg.eval_batch_size()) as u128).max(1);
        let mut evaluation = buffers(&shape.group, eval_slice)
            .saturating_mul(group.saturating_mul(2))
            .saturating_add(
                group
                    .saturating_add(EVAL_BATCHES_IN_FLIGHT)
                    .saturating_mul(eval_slice)
                    .saturating_mul(sample),
            )
            .saturating_add(eval_samples.saturating_mul(SCORE_BYTES));
        if !synthetic && world > 1 {
            evaluation = evaluation.saturating_add(eval_batch.saturating_mul(sample));
        }
        // `checkpoint::save` of whole tables: the dense tensors' bytes (weights and
        // optimizer state), every table's weights and state copied whole, each turned into
        // its bytes in turn (a buffer like its source), then one file of all the bytes.
        let dense_ckpt = params.saturating_mul(F32 * (1 + states));
        let write = dense_ckpt
            .saturating_add(whole_mapped)
            .saturating_add(mapped(whole_raw.saturating_add(dense_ckpt)));

        let (tables, exchange, checkpoint) = match placement {
            Placement::Single => {
                // `EmbeddingBag::backward`'s keys and their sorted copy, per id.
                let scratch = (batch as f64 * ids).ceil() as u128 * U64 * 2;
                (whole_mapped, scratch, write)
            }
            Placement::Cluster { plan, .. } => {
                let all: Vec<RankTables> = (0..plan.topology.world_size())
                    .map(|r| rank_tables(plan, &specs, opt, r))
                    .collect();
                let columns = specs
                    .iter()
                    .fold(0u128, |a, s| a.saturating_add(s.dim as u128));
                let mine: Vec<RankTables> = ranks
                    .iter()
                    .map(|&r| all.get(r).cloned().unwrap_or_default())
                    .collect();
                let tables = mine.iter().fold(0u128, |a, t| a.saturating_add(t.mapped));
                let exchange = mine.iter().fold(0u128, |a, t| {
                    a.saturating_add(exchange_bytes(
                        t,
                        columns,
                        (widest, widest_slice),
                        (batch, train_slice),
                        ids,
                    ))
                });
                let sent_raw = all.iter().fold(0u128, |a, t| a.saturating_add(t.sent));
                let per_pair = towerrec_comm::ROUND_BYTES as u128 / world;
                let sends = mine
                    .iter()
                    .fold(0u128, |a, t| a.saturating_add(mapped(t.sent)));
                let pieces = mine
                    .iter()
                    .fold(0u128, |a, t| a.saturating_add(t.sent.min(per_pair)));
                let mut checkpoint = if ranks.contains(&0) {
                    // `sharded::whole`: every rank's shards sent to rank 0 in rounds
                    // (`Comm::all_to_all_v_in_rounds`: each sender's piece, the round
                    // rank 0 receives, the whole it places them in), then every table
                    // whole; then `checkpoint::save` as one process would.
                    let received = sent_raw.min(towerrec_comm::ROUND_BYTES as u128);
                    let gather = sends
                        .saturating_add(mapped(sent_raw))
                        .saturating_add(whole_mapped.max(pieces.saturating_add(received)));
                    gather.max(write)
                } else {
                    sends.saturating_add(pieces)
                };
                let moves = cfg.cluster.drift.as_ref().is_some_and(|d| d.move_rows);
                if moves {
                    // Rows moved to a fresh plan: every rank gathers every table whole.
                    let respread = sends.saturating_add(
                        here.saturating_mul(mapped(sent_raw).saturating_add(whole_mapped)),
                    );
                    checkpoint = checkpoint.max(respread);
                }
                (tables, exchange, checkpoint)
            }
        };
        // A cluster's process that runs fewer than all its ranks is one of MPI's.
        let mpi = if here < world { MPI_PROCESS_BYTES } else { 0 };
        Self {
            process: PROCESS_BYTES.saturating_add(mpi).saturating_add(slabs),
            tables: tables.saturating_add(extra_table_bytes),
            dense: dense_per_rank.saturating_mul(here),
            activations: activations.saturating_mul(here),
            data: read_ahead.saturating_mul(here).saturating_add(exchange),
            evaluation: evaluation.saturating_mul(here),
            checkpoint,
        }
    }

    /// The parts, for messages: "embedding tables 0.03 GiB, dense layers …".
    fn parts(&self, decimals: usize) -> String {
        let g = |b: u128| format!("{:.*} GiB", decimals, b as f64 / GIB);
        format!(
            "embedding tables {}, dense layers {}, activations {}, data buffers {}, \
             evaluation {}, checkpoint {}, the process {}",
            g(self.tables),
            g(self.dense),
            g(self.activations),
            g(self.data),
            g(self.evaluation),
            g(self.checkpoint),
            g(self.process)
        )
    }

    /// One line for a run's start: "memory estimate: 0.123 GiB for the run (…)".
    pub fn describe(&self, whose: &str) -> String {
        format!(
            "memory estimate: {:.3} GiB for {whose} ({})",
            self.total() as f64 / GIB,
            self.parts(3)
        )
    }

    /// Refuses the run where it needs more than the machine has available now. Passes
    /// where the available memory is unknown.
    pub fn check(&self, whose: &str) -> Result<()> {
        check_fits(self.total(), || format!("{whose} ({})", self.parts(2)))
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Refuses `need` bytes (`what()` names them) where they exceed the memory the machine
/// has available now. Passes where the available memory is unknown.
pub(crate) fn check_fits(need: u128, what: impl FnOnce() -> String) -> Result<()> {
    match towerrec_core::probe::available_memory_bytes() {
        Some(available) if need > available as u128 => Err(Error::Memory {
            what: what(),
            need,
            available,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quickstart(sets: &[&str]) -> (Config, Schema) {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::quickstart(&sets).unwrap();
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
        (cfg, schema)
    }

    #[test]
    fn dense_count_matches_the_built_model() {
        for sets in [
            &[][..],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=2",
                "model.bottom_mlp=[]",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=3",
                "model.cross_rank=4",
                "model.bottom_mlp=[]",
            ],
            &[
                "model.bottom_mlp=[64, 8]",
                "model.towers={ module = \"dlrm\", count = 2, d = 8, c = 1, p = 0 }",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.bottom_mlp=[]",
                "model.cross_layers=2",
                "model.towers={ module = \"dcn\", count = 2, d = 8, cross_layers = 1 }",
            ],
        ] {
            let (cfg, schema) = quickstart(sets);
            let mut model = crate::Model::build(&cfg.model, &cfg.optimizer, &schema, 0).unwrap();
            let dense: usize = model.dense_params().iter().map(|p| p.value.len()).sum();
            assert_eq!(
                dense_shape(&cfg.model, &schema).params,
                dense as u128,
                "{sets:?}"
            );
        }
    }

    #[test]
    fn huge_layers_count_without_overflow() {
        let (cfg, schema) = quickstart(&["model.bottom_mlp=[2147483648, 16]"]);
        let plan = crate::cluster::resolve_plan(
            &cfg,
            &schema,
            towerrec_comm::Topology::new(2, 2).unwrap(),
            None,
        )
        .unwrap();
        let ranks = [0, 1, 2, 3];
        let need = MemoryNeed::of_run(
            &cfg,
            &schema,
            Placement::Cluster {
                plan: &plan,
                ranks: &ranks,
            },
            0,
        );
        // 13 × 2^31 weights of the first layer alone on each of 4 ranks, with gradients
        // and Adam's two moments.
        assert!(need.dense >= 4 * 13 * (1u128 << 31) * 4 * 4, "{need:?}");
        let (cfg, schema) = quickstart(&["model.top_mlp=[9223372036854775807, 1]"]);
        let need = MemoryNeed::of_run(&cfg, &schema, Placement::Single, 0);
        assert!(need.total() > i64::MAX as u128);
    }

    #[test]
    fn a_wide_top_layer_is_counted_once_per_sample_of_a_batch_slice() {
        // Before: about 19 GiB for `top_mlp = [100000, 1]` on the quickstart, whose run
        // peaks at 2.3 GB on one rank: every layer's output was counted for two scoring
        // groups of 8192 samples, three times over. A layer's output is held for one
        // batch slice (the scoring pipeline keeps only the feature rows of its groups).
        let (cfg, schema) = quickstart(&["model.top_mlp=[100000, 1]"]);
        let need = MemoryNeed::of_run(&cfg, &schema, Placement::Single, 0);
        let params = dense_shape(&cfg.model, &schema).params;
        // 367 interaction outputs into 100,000, into 1; the bottom MLP 13-64-16.
        let top = 367 * 100_000 + 100_000 + 100_001;
        assert_eq!(params, top + 13 * 64 + 64 + 64 * 16 + 16);
        // Counted here from the model alone: weights, gradients and Adam's two moments;
        // a checkpoint's bytes of weights and moments and the file of them; a packed
        // copy of the wide layer's weights; its output for a scoring slice of 1024 and
        // its dz and two gradient buffers for a training slice of 256.
        let wide = params * 4 * (4 + 6) + top * 4 + 100_000 * 4 * (1024 + 3 * 256);
        let total = need.total();
        assert!(total >= wide, "{total} < {wide}: {need:?}");
        assert!(
            total <= wide + wide / 2,
            "{:.2} GiB counted for a model whose wide layer needs {:.2} GiB: {need:?}",
            total as f64 / GIB,
            wide as f64 / GIB
        );
    }
}
