//! The sizes that [`super::MemoryNeed::of_run`] adds up, part by part, as the code
//! allocates them: the dense layers' shapes, buffers and GEMM packing, a rank's tables
//! and exchange buffers, what an evaluation holds. See the parent module for the whole.

use crate::config::{Config, ModelConfig, ModelKind, OptimizerConfig};
use towerrec_core::embedding::SparseOptimizer;
use towerrec_core::layers::tower::TowerModuleKind;
use towerrec_core::optim::DenseOptimizerKind;
use towerrec_data::{DataConfig, Schema, Split};
use towerrec_plan::{Plan, ShardingType, TableSpec};

pub(super) const F32: u128 = 4;
pub(super) const U64: u128 = 8;

/// Allocations of at least this size get their own mapping in whole pages of it (the
/// binaries' allocator, `towerrec_core::huge_alloc`, and the tables' `HugePageBuf`).
pub(super) const HUGE: u128 = towerrec_core::probe::HUGE_PAGE_BYTES as u128;

/// Bytes resident for an allocation of `bytes`, once written.
pub(super) fn mapped(bytes: u128) -> u128 {
    if bytes >= HUGE {
        bytes.div_ceil(HUGE).saturating_mul(HUGE)
    } else {
        bytes
    }
}

/// Batch slices a rank's training reader holds: the prefetch channel's 4
/// (`trainer::run`), the one its thread is building and the one being trained on.
pub(super) const TRAIN_BATCHES_IN_FLIGHT: u128 = 6;

/// Batches an evaluation holds beside its scoring group: the prefetch channel's 2
/// (`evaluate::score`), the one being built and the one being pushed.
pub(super) const EVAL_BATCHES_IN_FLIGHT: u128 = 3;

/// Bytes per evaluated sample on every rank: its score and label (every rank gathers
/// all of them), and the AUC's (score, label) pairs (`metrics::auc`), with room for the
/// score vectors' growth.
pub(super) const SCORE_BYTES: u128 = 24;

/// An MLP's counts: parameters; floats per sample of each hidden output (forward); of
/// each backward buffer: `dL/dz` per layer (`Linear::backward`, unless the activation
/// is the identity), the bias gradient's partial sums (a row per 64 samples), and the
/// two ping-pong gradient buffers as wide as the widest hidden output (`Mlp::backward`).
pub(super) fn mlp(
    input: u128,
    widths: &[usize],
    last_identity: bool,
) -> (u128, Vec<u128>, Vec<u128>) {
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
pub(super) fn products(input: u128, widths: &[usize]) -> Vec<(u128, u128)> {
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
pub(super) fn gemm_packing(shapes: &[(u128, u128)], slice: u128, train: u128) -> u128 {
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
pub(super) struct DenseShape {
    /// Parameters (MLPs, interaction, Tower Modules).
    pub(super) params: u128,
    /// The rows a training forward fills (`Model`'s feature rows and DLRM's bottom-MLP
    /// output; scoring fills its own, `group`).
    pub(super) rows: Vec<u128>,
    /// The layers' outputs (bottom and top MLPs, interaction, CrossNet, Tower Modules),
    /// kept at the largest batch slice trained or scored.
    pub(super) layers: Vec<u128>,
    /// The buffers only a backward fills (training slices).
    pub(super) backward: Vec<u128>,
    /// One batch in a scoring group (`forward::GroupBuffers`): its feature rows, DLRM's
    /// bottom-MLP output and its logits.
    pub(super) group: Vec<u128>,
    /// The `(in, out)` of the weight matrices of the front (DLRM's bottom MLP) and of
    /// the rest (CrossNet, top MLP), whose products may run at once (scoring overlaps
    /// one batch's front with another's back).
    pub(super) products: [Vec<(u128, u128)>; 2],
}

/// Bytes resident for `buffers` (floats per sample each) of `samples` samples.
pub(super) fn buffers(buffers: &[u128], samples: u128) -> u128 {
    buffers.iter().fold(0u128, |a, &w| {
        a.saturating_add(mapped(w.saturating_mul(samples).saturating_mul(F32)))
    })
}

pub(super) fn dense_shape(cfg: &ModelConfig, schema: &Schema) -> DenseShape {
    let dim = cfg.embedding_dim as u128;
    let num_dense = schema.dense.len() as u128;
    let tables = schema.sparse.len() as u128;
    let vector = cfg
        .towers
        .as_ref()
        .map_or(dim, |t| t.vector_width(cfg.embedding_dim) as u128);
    // DLRM without a bottom MLP (data without dense features) has no base vector.
    let base = match cfg.kind {
        ModelKind::Dlrm if cfg.bottom_mlp.is_empty() => 0,
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
            let bottom_out = (base > 0).then_some(vector);
            backward.extend(bottom_out);
            let n = inter / vector.max(1);
            let pairs = if cfg.self_interaction {
                n.saturating_mul(n.saturating_add(1)) / 2
            } else {
                n.saturating_mul(n.saturating_sub(1)) / 2
            };
            (p, base.saturating_add(pairs), bottom_out)
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
pub(super) fn dense_states(opt: &OptimizerConfig) -> u128 {
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
pub(super) fn bag_buffers(rows: usize, cols: usize, opt: SparseOptimizer) -> Vec<u128> {
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
pub(super) struct Pooler {
    pub(super) columns: u128,
    pub(super) direct: bool,
    pub(super) ids: f64,
}

/// One rank's share of the tables under a plan.
#[derive(Debug, Default, Clone)]
pub(super) struct RankTables {
    /// Bytes resident for its shards, stores and replicas.
    pub(super) mapped: u128,
    /// Raw bytes of its shards and stores, which a checkpoint gathers on rank 0.
    pub(super) sent: u128,
    /// Its shards and stores.
    pub(super) poolers: Vec<Pooler>,
}

pub(super) fn rank_tables(
    plan: &Plan,
    specs: &[TableSpec],
    opt: SparseOptimizer,
    rank: usize,
) -> RankTables {
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
pub(super) fn exchange_bytes(
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
pub(super) fn l2_cache_bytes() -> u128 {
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

/// An upper bound of the evaluation samples: known for synthetic data and a tail of
/// so many rows; else the rows the files can hold (a text row has a byte per field at
/// least, a binary row its label, dense values and one offset per feature), times the
/// evaluated fraction where the split gives one. A Parquet file's metadata says its rows.
pub(super) fn eval_samples(cfg: &Config, schema: &Schema) -> u128 {
    let binary_row = (1 + schema.dense.len() as u128) * F32 + schema.sparse.len() as u128 * U64;
    // `min_row` of a Parquet file: its rows come from its metadata (or, for a binary
    // file named in its place, from its size).
    const PARQUET: u128 = 0;
    let file_rows = |path: &std::path::Path, min_row: u128| -> u128 {
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            cfg.base_dir.join(path)
        };
        if min_row == PARQUET {
            if let Ok(n) = towerrec_data::parquet::file_rows(&path) {
                return n as u128;
            }
        }
        let bytes = std::fs::metadata(path).map_or(0, |m| m.len() as u128);
        bytes
            / if min_row == PARQUET {
                binary_row
            } else {
                min_row
            }
            .max(1)
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
            ..
        } => {
            let mut columns: Vec<&str> = vec![csv.label.column.as_str()];
            columns.extend(csv.dense.iter().map(|d| d.column.as_str()));
            columns.extend(csv.sparse.iter().map(|s| s.column.as_str()));
            columns.sort_unstable();
            columns.dedup();
            (path, eval_path, split, columns.len() as u128)
        }
        DataConfig::Parquet {
            path,
            eval_path,
            split,
            ..
        } => (path, eval_path, split, PARQUET),
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
pub(super) fn ids_per_sample(specs: &[TableSpec]) -> f64 {
    specs.iter().map(|s| s.pooling_factor).sum()
}
