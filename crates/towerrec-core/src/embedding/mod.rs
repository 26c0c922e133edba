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

mod int8;
mod kernels;
pub(crate) mod precision;
mod update;

pub use precision::TablePrecision;
use precision::{Bf16, Elem, F16};

#[cfg(test)]
mod tests;

use crate::batch::JaggedView;
use crate::error::{Error, Result};
use crate::probe::{HugePageBuf, Pages};
use kernels::Isa;
use rand::distr::{Distribution, Uniform};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

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

/// A table's rows, `rows × dim` row-major, on huge pages, in its precision; an int8
/// table's rows are `int8::row_bytes(dim)` bytes each.
#[derive(Clone)]
enum Weights {
    F32(HugePageBuf<f32>),
    F16(HugePageBuf<F16>),
    Bf16(HugePageBuf<Bf16>),
    Int8(HugePageBuf<u8>),
}

/// Runs `$body` with `$w` bound to the rows of `$weights` (`&` or `&mut`, as the
/// expression gives them) in their element type, or `$int8` with `$q` bound to the
/// bytes of an int8 table's rows.
macro_rules! with_rows {
    ($weights:expr, $w:ident => $body:expr, $q:ident => $int8:expr) => {
        match $weights {
            Weights::F32($w) => $body,
            Weights::F16($w) => $body,
            Weights::Bf16($w) => $body,
            Weights::Int8($q) => $int8,
        }
    };
}
pub(super) use with_rows;

impl Weights {
    fn zeroed(precision: TablePrecision, rows: usize, dim: usize) -> Option<Self> {
        let huge = Pages::Huge;
        let len = rows.checked_mul(dim)?;
        Some(match precision {
            TablePrecision::Fp32 => Weights::F32(HugePageBuf::try_zeroed_with(len, huge)?),
            TablePrecision::Fp16 => Weights::F16(HugePageBuf::try_zeroed_with(len, huge)?),
            TablePrecision::Bf16 => Weights::Bf16(HugePageBuf::try_zeroed_with(len, huge)?),
            TablePrecision::Int8 => {
                let len = rows.checked_mul(int8::row_bytes(dim))?;
                Weights::Int8(HugePageBuf::try_zeroed_with(len, huge)?)
            }
        })
    }

    fn precision(&self) -> TablePrecision {
        match self {
            Weights::F32(_) => TablePrecision::Fp32,
            Weights::F16(_) => TablePrecision::Fp16,
            Weights::Bf16(_) => TablePrecision::Bf16,
            Weights::Int8(_) => TablePrecision::Int8,
        }
    }

    /// Writes `values` (`rows × dim` of them), rounded to nearest, or quantized row by
    /// row in an int8 table.
    fn set(&mut self, dim: usize, values: &[f32]) {
        fn narrow<E: Elem>(dst: &mut [E], src: &[f32]) {
            dst.par_iter_mut()
                .with_min_len(4096)
                .zip(src)
                .for_each(|(d, &v)| *d = E::narrow(v));
        }
        fn quantize(dst: &mut [u8], dim: usize, src: &[f32]) {
            if dim > 0 {
                dst.par_chunks_mut(int8::row_bytes(dim))
                    .zip(src.par_chunks(dim))
                    .for_each(|(d, s)| int8::quantize_row(s, d));
            }
        }
        with_rows!(self, w => narrow(&mut w[..], values), q => quantize(&mut q[..], dim, values))
    }
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
    weights: Weights,
    state: State,
    step: u64,
    scratch: Scratch,
    /// The stochastic rounding's key of the table (reduced-precision storage), and the
    /// global index of this table's row 0 and column 0 (a shard's first row and column).
    rounding: (u64, u64, u64),
    /// The global index of each row, where they are not a range from `rounding.1`
    /// (a store of rows chosen by an address map).
    row_ids: Option<std::sync::Arc<[u64]>>,
}

impl std::fmt::Debug for EmbeddingBag {
    // The weights can be gigabytes: show the shape only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingBag")
            .field("name", &self.name)
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .field("pooling", &self.pooling)
            .field("precision", &self.precision())
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
        let mut table = Self::zeroed(TablePrecision::Fp32, name, rows, dim, pooling, optimizer)
            .unwrap_or_else(|e| panic!("{e}"));
        let bound = (1.0 / rows.max(1) as f64).sqrt() as f32;
        // Unreachable error for a positive bound; zeros are a valid if poor start.
        if let (Ok(dist), Weights::F32(w)) = (Uniform::new(-bound, bound), &mut table.weights) {
            for w in w.iter_mut() {
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
        let fp32 = TablePrecision::Fp32;
        Self::try_from_fn_in(fp32, name, rows, dim, pooling, optimizer, init)
    }

    /// [`EmbeddingBag::try_from_fn`] for a table stored in `precision`: each row as
    /// `init` writes it, rounded to nearest.
    pub fn try_from_fn_in(
        precision: TablePrecision,
        name: impl Into<String>,
        rows: usize,
        dim: usize,
        pooling: Pooling,
        optimizer: SparseOptimizer,
        init: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Result<Self> {
        let mut table = Self::zeroed(precision, name, rows, dim, pooling, optimizer)?;
        if dim > 0 {
            fn fill<E: Elem>(w: &mut [E], dim: usize, init: &(impl Fn(usize, &mut [f32]) + Sync)) {
                w.par_chunks_mut(dim).enumerate().for_each_init(
                    || vec![0.0f32; dim],
                    |row, (r, dst)| {
                        init(r, row);
                        dst.iter_mut()
                            .zip(row.iter())
                            .for_each(|(d, &v)| *d = E::narrow(v));
                    },
                );
            }
            fn quantize(q: &mut [u8], dim: usize, init: &(impl Fn(usize, &mut [f32]) + Sync)) {
                q.par_chunks_mut(int8::row_bytes(dim))
                    .enumerate()
                    .for_each_init(
                        || vec![0.0f32; dim],
                        |row, (r, dst)| {
                            init(r, row);
                            int8::quantize_row(row, dst);
                        },
                    );
            }
            with_rows!(
                &mut table.weights,
                w => fill(&mut w[..], dim, &init),
                q => quantize(&mut q[..], dim, &init)
            );
        }
        Ok(table)
    }

    fn zeroed(
        precision: TablePrecision,
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
        let weights = Weights::zeroed(precision, rows, dim).ok_or_else(|| Error::OutOfMemory {
            what: format!("the weights of embedding table '{name}' ({rows} × {dim})"),
            bytes: rows as u128 * precision.row_bytes(dim) as u128,
        })?;
        // An int8 table is never updated: it keeps no optimizer state.
        let optimizer_of_state = if precision.trainable() {
            optimizer
        } else {
            SparseOptimizer::Sgd
        };
        let state = match optimizer_of_state {
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
            rows,
            dim,
            pooling,
            optimizer,
            weights,
            state,
            step: 0,
            scratch: Scratch::default(),
            rounding: (Self::rounding_key(&name), 0, 0),
            row_ids: None,
            name,
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
    /// How the rows are stored.
    pub fn precision(&self) -> TablePrecision {
        self.weights.precision()
    }
    /// The weights, `rows × dim` row-major, as f32 (borrowed from an fp32 table,
    /// widened, exactly, from an fp16 or bf16 one).
    pub fn weights(&self) -> Cow<'_, [f32]> {
        match &self.weights {
            Weights::F32(w) => Cow::Borrowed(&w[..]),
            Weights::F16(w) => Cow::Owned(w.iter().map(|v| v.widen()).collect()),
            Weights::Bf16(w) => Cow::Owned(w.iter().map(|v| v.widen()).collect()),
            Weights::Int8(q) => {
                let mut out = vec![0.0; self.rows * self.dim];
                if self.dim > 0 {
                    let width = int8::row_bytes(self.dim);
                    out.par_chunks_mut(self.dim)
                        .zip(q.par_chunks(width))
                        .for_each(|(d, row)| int8::dequantize_row(row, d));
                }
                Cow::Owned(out)
            }
        }
    }
    /// An int8 table's stored rows (`dim` bytes, then the scale and bias as
    /// little-endian f32, per row: FBGEMM's fused 8-bit row-wise layout); `None` for
    /// another precision.
    pub fn packed_rows(&self) -> Option<&[u8]> {
        match &self.weights {
            Weights::Int8(q) => Some(&q[..]),
            _ => None,
        }
    }
    /// Replaces an int8 table's stored rows (checkpoint loading). [`Error::Shape`] for
    /// another length or a table of another precision.
    pub fn set_packed_rows(&mut self, bytes: &[u8]) -> Result<()> {
        let want = self.rows * int8::row_bytes(self.dim);
        let context = || format!("embedding table '{}' int8 rows", self.name);
        match &mut self.weights {
            Weights::Int8(q) if bytes.len() == want => {
                q.copy_from_slice(bytes);
                Ok(())
            }
            Weights::Int8(_) => Err(Error::shape(context(), want, bytes.len())),
            other => Err(Error::shape(context(), "an int8 table", other.precision())),
        }
    }
    /// This table quantized to 8 bits row-wise (read-only: for inference), with its
    /// step count; no optimizer state. [`Error::Config`] where a weight is not finite.
    pub fn quantized(&self) -> Result<Self> {
        if !self.all_finite() {
            return Err(Error::Config(format!(
                "embedding table '{}' holds a NaN or infinite weight: it cannot be quantized",
                self.name
            )));
        }
        let int8 = TablePrecision::Int8;
        let (rows, dim, pooling) = (self.rows, self.dim, self.pooling);
        let mut q = Self::zeroed(int8, self.name.clone(), rows, dim, pooling, self.optimizer)?;
        q.weights.set(dim, &self.weights());
        q.step = self.step;
        q.rounding = self.rounding;
        q.row_ids = self.row_ids.clone();
        Ok(q)
    }
    /// Replaces the weights (`rows × dim` values; checkpoint loading), rounded to
    /// nearest in a reduced-precision table. [`Error::Shape`] for another length.
    pub fn set_weights(&mut self, values: &[f32]) -> Result<()> {
        let want = self.rows * self.dim;
        if values.len() != want {
            let what = format!("embedding table '{}' weights", self.name);
            return Err(Error::shape(what, want, values.len()));
        }
        self.weights.set(self.dim, values);
        Ok(())
    }
    /// Whether every weight is finite.
    pub fn all_finite(&self) -> bool {
        fn finite<E: Elem>(w: &[E]) -> bool {
            w.iter().all(|v| v.widen().is_finite())
        }
        let dim = self.dim;
        let width = int8::row_bytes(dim);
        // A quantized value is finite where its row's scale and bias are.
        let scale_bias_finite = |q: &[u8]| {
            q.chunks(width).all(|row| {
                row[dim..]
                    .chunks(4)
                    .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
            })
        };
        with_rows!(&self.weights, w => finite(&w[..]), q => dim == 0 || scale_bias_finite(&q[..]))
    }
    /// Keys the stochastic rounding of a reduced-precision table's updates: `table`
    /// names the table (by default [`EmbeddingBag::rounding_key`] of its name) and
    /// `first_row`, `first_column` are the global indices of this one's row 0 and
    /// column 0 (a shard's first row and column), so that every placement of a value
    /// rounds it alike.
    pub fn set_rounding(&mut self, table: u64, first_row: u64, first_column: u64) {
        self.rounding = (table, first_row, first_column);
        self.row_ids = None;
    }

    /// [`EmbeddingBag::set_rounding`] for a table whose row `r` is the global row
    /// `rows[r]` (a store of rows an address map chose). [`Error::Shape`] unless
    /// `rows` has one entry per row.
    pub fn set_rounding_rows(
        &mut self,
        table: u64,
        rows: std::sync::Arc<[u64]>,
        first_column: u64,
    ) -> Result<()> {
        if rows.len() != self.rows {
            let what = format!("embedding table '{}' global rows", self.name);
            return Err(Error::shape(what, self.rows, rows.len()));
        }
        self.rounding = (table, 0, first_column);
        self.row_ids = Some(rows);
        Ok(())
    }

    /// The stochastic rounding's key of the table called `name` (FNV-1a of the name:
    /// the same on every rank and in every run).
    pub fn rounding_key(name: &str) -> u64 {
        name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
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
        let (dim, pooling) = (self.dim, self.pooling);
        with_rows!(
            &self.weights,
            w => self.pool(ids, out, stride, |first, chunk| {
                kernels::pool_samples(isa, &w[..], dim, pooling, ids, first, chunk, stride, offset)
            }),
            q => self.pool(ids, out, stride, |first, chunk| {
                let avx2 = isa != Isa::Portable;
                int8::pool_samples(avx2, &q[..], dim, pooling, ids, first, chunk, stride, offset)
            })
        );
        Ok(())
    }

    /// The forward's pooling: `kernel(first, chunk)` pools the samples from `first` into
    /// `chunk` (whole `stride`-long sample slots), over the batch in parallel tasks.
    fn pool(
        &self,
        ids: JaggedView<'_>,
        out: &mut [f32],
        stride: usize,
        kernel: impl Fn(usize, &mut [f32]) + Sync,
    ) {
        let batch = ids.batch_size();
        let dim = self.dim;
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
                .for_each(|(k, chunk)| kernel(k * samples_per_task, chunk));
        } else {
            kernel(0, out);
        }
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
