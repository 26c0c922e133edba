//! Embedding-bag tables whose backward is fused with the optimizer update.
//!
//! A table maps each sparse id to a row of `dim` floats and pools (sums or averages) the
//! rows of a sample's bag of ids into one vector. Tables are large and a batch touches
//! few of their rows, so the backward never builds a dense `rows × dim` gradient: it
//! aggregates the gradient of every row the batch touched (duplicates across samples
//! and within a bag included) and immediately applies the optimizer to just those rows,
//! as FBGEMM's `split_table_batched_embeddings` and TorchRec's fused optimizers do.
//!
//! - [`mod@self`] (this file): configuration types, the table, its forward.
//! - `update`: the fused backward: grouping the batch's ids by row, then one optimizer
//!   update per unique row.
//! - `kernels`: the inner loops (pooling, per-row aggregation and update), compiled
//!   portable and for AVX2 + FMA, with software prefetch of the rows ahead.
//!
//! Weights and optimizer state live on 2 MiB transparent huge pages
//! ([`HugePageBuf`]): a random row access then needs no page walk through memory,
//! which roughly doubles the rate of random row gathers.

mod kernels;
mod update;

#[cfg(test)]
mod tests;

use crate::batch::JaggedView;
use crate::error::{Error, Result};
use crate::probe::{HugePageBuf, Pages};
use kernels::Isa;
use rand::distr::{Distribution, Uniform};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// How the rows of a bag are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Sum of the rows.
    Sum,
    /// Mean of the rows (an empty bag pools to zeros).
    Mean,
}

/// The optimizer fused into a table's backward. Every variant updates only the rows
/// that the batch touched.
///
/// In configs: `{ kind = "adam" }`, `{ kind = "row_wise_adagrad", eps = 1e-6 }`;
/// omitted hyperparameters take the defaults shown, unknown keys are errors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "SparseOptimizerConfig"
)]
pub enum SparseOptimizer {
    /// `w ← w − lr·g`.
    Sgd,
    /// FBGEMM's row-wise Adagrad: one accumulator per row,
    /// `acc ← acc + mean(g²)`, `w ← w − lr·g / (√acc + eps)`. It keeps Adagrad's
    /// adaptivity per id at `1/dim` of the state of element-wise Adagrad.
    /// Defaults: `eps = 1e-8`, `initial_accumulator = 0`.
    RowWiseAdagrad { eps: f32, initial_accumulator: f32 },
    /// Lazy Adam (as `torch.optim.SparseAdam`): only the rows in the batch update their
    /// moments; bias correction uses the table's global step count.
    /// Defaults: `beta1 = 0.9`, `beta2 = 0.999`, `eps = 1e-8`.
    Adam { beta1: f32, beta2: f32, eps: f32 },
}

/// What [`SparseOptimizer`] is read from. serde ignores unknown keys beside the tag of a
/// unit variant even with `deny_unknown_fields`, so `Sgd` is an empty struct here to
/// reject `{ kind = "sgd", lr = 0.1 }`.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum SparseOptimizerConfig {
    Sgd {},
    RowWiseAdagrad {
        #[serde(default = "default_eps")]
        eps: f32,
        #[serde(default)]
        initial_accumulator: f32,
    },
    Adam {
        #[serde(default = "default_beta1")]
        beta1: f32,
        #[serde(default = "default_beta2")]
        beta2: f32,
        #[serde(default = "default_eps")]
        eps: f32,
    },
}

impl From<SparseOptimizerConfig> for SparseOptimizer {
    fn from(c: SparseOptimizerConfig) -> Self {
        match c {
            SparseOptimizerConfig::Sgd {} => Self::Sgd,
            SparseOptimizerConfig::RowWiseAdagrad {
                eps,
                initial_accumulator,
            } => Self::RowWiseAdagrad {
                eps,
                initial_accumulator,
            },
            SparseOptimizerConfig::Adam { beta1, beta2, eps } => Self::Adam { beta1, beta2, eps },
        }
    }
}

fn default_eps() -> f32 {
    1e-8
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.999
}

/// Per-table optimizer state, laid out like the weights so that a row's state is found
/// by the same index.
#[derive(Clone)]
enum State {
    Sgd,
    /// One accumulator per row.
    RowWiseAdagrad {
        acc: HugePageBuf<f32>,
        eps: f32,
    },
    /// First and second moments, `rows × dim` each.
    Adam {
        m: HugePageBuf<f32>,
        v: HugePageBuf<f32>,
        beta1: f32,
        beta2: f32,
        eps: f32,
    },
}

/// Buffers of the backward, kept between calls so that a step allocates little.
#[derive(Clone, Default)]
struct Scratch {
    /// `row << sample_bits | sample` for every id of the batch, in batch order.
    keys: Vec<u64>,
    /// The keys partitioned by their row's top bits (and then sorted, bucket by bucket).
    sorted: Vec<u64>,
    /// Start of each bucket in `sorted`, then `sorted.len()`.
    counts: Vec<usize>,
    /// `(row, sample)` for every id, sorted, where the packed keys do not fit in 64 bits.
    pairs: Vec<(u64, usize)>,
}

/// An embedding-bag table with its fused optimizer.
#[derive(Clone)]
pub struct EmbeddingBag {
    name: String,
    rows: usize,
    dim: usize,
    pooling: Pooling,
    optimizer: SparseOptimizer,
    /// `rows × dim`, row-major, on huge pages.
    weights: HugePageBuf<f32>,
    state: State,
    step: u64,
    scratch: Scratch,
}

impl std::fmt::Debug for EmbeddingBag {
    // The weights can be gigabytes: show the shape only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingBag")
            .field("name", &self.name)
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .field("pooling", &self.pooling)
            .field("optimizer", &self.optimizer)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

/// Below this many multiply-adds a call stays on the calling thread: rayon's fork/join
/// costs more than it saves.
const PAR_MIN_WORK: usize = 1 << 15;
/// Work per rayon task, so that tasks are not too fine.
const PAR_TASK_WORK: usize = 1 << 12;

impl EmbeddingBag {
    /// A table of `rows × dim` weights drawn from `U(−√(1/rows), √(1/rows))`, the DLRM
    /// reference initialization, with zeroed optimizer state (row-wise Adagrad's
    /// accumulators start at `initial_accumulator`).
    ///
    /// # Panics
    /// If `rows × dim` overflows `usize` or cannot be allocated.
    pub fn new(
        name: impl Into<String>,
        rows: usize,
        dim: usize,
        pooling: Pooling,
        optimizer: SparseOptimizer,
        rng: &mut impl rand::Rng,
    ) -> Self {
        let mut table =
            Self::zeroed(name, rows, dim, pooling, optimizer).unwrap_or_else(|e| panic!("{e}"));
        let bound = (1.0 / rows.max(1) as f64).sqrt() as f32;
        // Unreachable error for a positive bound; zeros are a valid if poor start.
        if let Ok(dist) = Uniform::new(-bound, bound) {
            for w in table.weights.iter_mut() {
                *w = dist.sample(rng);
            }
        }
        table
    }

    /// A table whose row `r` is filled by `init(r, row)`, rows in parallel; optimizer
    /// state as in [`EmbeddingBag::new`]. Shards of one table use this to start from
    /// the same values as the whole table would. [`Error::OutOfMemory`] where the
    /// weights or the optimizer state cannot be allocated.
    pub fn try_from_fn(
        name: impl Into<String>,
        rows: usize,
        dim: usize,
        pooling: Pooling,
        optimizer: SparseOptimizer,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Result<Self> {
        let mut table = Self::zeroed(name, rows, dim, pooling, optimizer)?;
        if dim > 0 {
            table
                .weights
                .par_chunks_mut(dim)
                .enumerate()
                .for_each(|(r, row)| init(r, row));
        }
        Ok(table)
    }

    fn zeroed(
        name: impl Into<String>,
        rows: usize,
        dim: usize,
        pooling: Pooling,
        optimizer: SparseOptimizer,
    ) -> Result<Self> {
        let name = name.into();
        let floats = |what: &str, len: Option<usize>| {
            len.and_then(|len| HugePageBuf::<f32>::try_zeroed_with(len, Pages::Huge))
                .ok_or_else(|| Error::OutOfMemory {
                    what: format!("{what} of embedding table '{name}' ({rows} × {dim})"),
                    bytes: rows as u128 * dim as u128 * 4,
                })
        };
        let len = rows.checked_mul(dim);
        let weights = floats("the weights", len)?;
        let state = match optimizer {
            SparseOptimizer::Sgd => State::Sgd,
            SparseOptimizer::RowWiseAdagrad {
                eps,
                initial_accumulator,
            } => State::RowWiseAdagrad {
                acc: HugePageBuf::try_from_elem(rows, initial_accumulator).ok_or_else(|| {
                    Error::OutOfMemory {
                        what: format!("the Adagrad state of embedding table '{name}'"),
                        bytes: rows as u128 * 4,
                    }
                })?,
                eps,
            },
            SparseOptimizer::Adam { beta1, beta2, eps } => State::Adam {
                m: floats("the Adam first moments", len)?,
                v: floats("the Adam second moments", len)?,
                beta1,
                beta2,
                eps,
            },
        };
        Ok(Self {
            name,
            rows,
            dim,
            pooling,
            optimizer,
            weights,
            state,
            step: 0,
            scratch: Scratch::default(),
        })
    }

    /// The table's name (its feature's), used in errors and checkpoints.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Number of rows (ids `0..rows` are valid).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Width of a row.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// How bags are pooled.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }
    /// The fused optimizer.
    pub fn optimizer(&self) -> SparseOptimizer {
        self.optimizer
    }
    /// The weights, `rows × dim` row-major.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }
    /// The weights, mutably (checkpoint loading).
    pub fn weights_mut(&mut self) -> &mut [f32] {
        &mut self.weights
    }
    /// Number of [`EmbeddingBag::backward_update`] calls so far (Adam's bias correction).
    pub fn step(&self) -> u64 {
        self.step
    }
    /// Restores the step count (checkpoint loading).
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// The optimizer's state buffers by name, for checkpoints: `"momentum1"` and
    /// `"momentum2"` (`rows × dim` each) for Adam, `"accumulator"` (`rows`) for row-wise
    /// Adagrad, none for SGD. Writing through the slices restores a saved state.
    pub fn optimizer_state_mut(&mut self) -> Vec<(String, &mut [f32])> {
        match &mut self.state {
            State::Sgd => Vec::new(),
            State::RowWiseAdagrad { acc, .. } => {
                vec![("accumulator".to_string(), &mut acc[..])]
            }
            State::Adam { m, v, .. } => vec![
                ("momentum1".to_string(), &mut m[..]),
                ("momentum2".to_string(), &mut v[..]),
            ],
        }
    }

    /// Read-only view of [`EmbeddingBag::optimizer_state_mut`].
    pub fn optimizer_state(&self) -> Vec<(String, &[f32])> {
        match &self.state {
            State::Sgd => Vec::new(),
            State::RowWiseAdagrad { acc, .. } => vec![("accumulator".to_string(), &acc[..])],
            State::Adam { m, v, .. } => vec![
                ("momentum1".to_string(), &m[..]),
                ("momentum2".to_string(), &v[..]),
            ],
        }
    }

    /// Pools each sample's bag into `out[b·stride + offset .. b·stride + offset + dim]`,
    /// leaving the rest of `out` alone; an empty bag pools to zeros. The strided layout
    /// lets several tables write straight into the rows of the next layer's input.
    ///
    /// Errors, before writing anything, if an id is `≥ rows`
    /// ([`Error::IdOutOfRange`]) or if `offset + dim > stride` or `out` is too short
    /// ([`Error::Shape`]).
    pub fn forward(
        &self,
        ids: JaggedView<'_>,
        out: &mut [f32],
        stride: usize,
        offset: usize,
    ) -> Result<()> {
        self.forward_with(Isa::detect(), ids, out, stride, offset)
    }

    /// [`EmbeddingBag::forward`] with the kernels' compilation chosen (tests compare
    /// them).
    fn forward_with(
        &self,
        isa: Isa,
        ids: JaggedView<'_>,
        out: &mut [f32],
        stride: usize,
        offset: usize,
    ) -> Result<()> {
        let batch = ids.batch_size();
        let needed = self.check_layout("forward output", batch, out.len(), stride, offset)?;
        self.check_ids(&ids)?;
        if batch == 0 || self.dim == 0 {
            return Ok(());
        }
        // Trimmed so that the last sample's chunk ends right after its slot: `out` only
        // has to reach that far.
        let out = &mut out[..needed];
        let (weights, dim, pooling) = (&self.weights[..], self.dim, self.pooling);
        let per_sample = (ids.values.len() / batch).max(1) * dim;
        let threads = rayon::current_num_threads();
        if per_sample * batch >= PAR_MIN_WORK && threads > 1 {
            // A few long tasks per thread: each keeps its prefetch pipeline full over
            // its whole range of samples.
            let samples_per_task = batch
                .div_ceil(threads * 4)
                .max(PAR_TASK_WORK.div_ceil(per_sample));
            out.par_chunks_mut(samples_per_task * stride)
                .enumerate()
                .for_each(|(k, chunk)| {
                    let first = k * samples_per_task;
                    kernels::pool_samples(
                        isa, weights, dim, pooling, ids, first, chunk, stride, offset,
                    );
                });
        } else {
            kernels::pool_samples(isa, weights, dim, pooling, ids, 0, out, stride, offset);
        }
        Ok(())
    }

    /// Checks that sample slots fit: `offset + dim ≤ stride` (so samples do not
    /// overlap) and `len` reaches the last sample's slot. Returns the length used.
    fn check_layout(
        &self,
        what: &str,
        batch: usize,
        len: usize,
        stride: usize,
        offset: usize,
    ) -> Result<usize> {
        let context = || format!("embedding table '{}' {what}", self.name);
        let slot_end = offset
            .checked_add(self.dim)
            .ok_or_else(|| Error::shape(context(), "offset + dim to fit in usize", offset))?;
        if slot_end > stride {
            return Err(Error::shape(
                format!("{} stride (offset {offset} + dim {})", context(), self.dim),
                format!("at least {slot_end}"),
                stride,
            ));
        }
        if batch == 0 {
            return Ok(0);
        }
        let needed = (batch - 1)
            .checked_mul(stride)
            .and_then(|n| n.checked_add(slot_end))
            .ok_or_else(|| Error::shape(context(), "a length that fits in usize", "overflow"))?;
        if len < needed {
            return Err(Error::shape(
                format!("{} length ({batch} samples × stride {stride})", context()),
                format!("at least {needed}"),
                len,
            ));
        }
        Ok(needed)
    }

    /// Errors on the first id that is not a row of the table; returns the largest id
    /// (0 for none).
    fn check_ids(&self, ids: &JaggedView<'_>) -> Result<u64> {
        let rows = self.rows as u64;
        // A branch-free maximum first (vectorized): the common case is all valid.
        let max = ids.values.iter().fold(0u64, |m, &id| m.max(id));
        if max < rows {
            return Ok(max);
        }
        let id = ids
            .values
            .iter()
            .copied()
            .find(|&id| id >= rows)
            .unwrap_or(max);
        Err(Error::IdOutOfRange {
            table: self.name.clone(),
            id,
            rows: self.rows,
        })
    }
}
