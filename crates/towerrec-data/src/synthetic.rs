//! A synthetic, learnable, Criteo-like data set generated on the fly.
//!
//! - Reproducible and random-access: sample `i` is a pure function of `(seed, i)`; its
//!   random numbers come from an RNG seeded with `hash(seed, i)`. Any index range can be
//!   generated, in any order or in parallel; train is `0..train_samples` and eval the
//!   next `eval_samples` indices, so the two never overlap.
//! - Skewed like real logs: ids of a table are drawn Zipf(rows, s) by rank, then ranks
//!   map to rows through a fixed affine permutation `(a·rank + b) mod rows`, so the hot
//!   rows are scattered over the table instead of sitting at 0..k.
//! - Learnable: every (table, row) and every dense feature has a hidden weight in
//!   `[-1, 1]` derived by hashing. A sample's logit is
//!   `signal · z + bias`, where `z` combines `Σ_tables Σ_ids w / √ids` and
//!   `Σ_d w_d · u_d` (each part normalized to unit variance), and the label is drawn
//!   Bernoulli(sigmoid(logit)). `bias` is solved so the positive rate is about
//!   `positive_rate`. With the default `signal` (2.0) the true logit separates the
//!   classes with AUC ≈ 0.87; what a model can learn is less, since rare rows are seen
//!   too seldom: a per-row logistic regression on 500k samples of 26 tables reaches
//!   AUC ≈ 0.76 (10k uniform rows) to 0.80 (100k Zipf-1.05 rows).
//! - Dense features are `ln(1 + e^(μ_d + u_d))` with `u_d ~ N(0, 1)` and a hidden
//!   per-feature `μ_d ∈ [0, 5)`: positive, log-count-like values.

use crate::error::{Error, Result};
use crate::hash::{mix2, unit_f64};
use crate::record::{Record, Schema, SparseFeature};
use crate::stream::RecordStream;
use crate::zipf::ZipfRanks;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Poisson, StandardNormal};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use towerrec_core::{Batch, KeyedJagged};

/// A synthetic data set (`format = "synthetic"` in a run config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Training samples: indices `0..train_samples`.
    pub train_samples: u64,
    /// Evaluation samples: the `eval_samples` indices after the training ones.
    pub eval_samples: u64,
    /// Number of dense features (default 13).
    #[serde(default = "default_num_dense")]
    pub num_dense: usize,
    /// Embedding tables (sparse features).
    pub tables: Vec<SyntheticTable>,
    /// Seed of everything: ids, dense values, hidden weights, labels (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Logit scale of the hidden signal: 0 makes labels pure noise, larger values make
    /// them more predictable (default 2.0).
    #[serde(default = "default_signal")]
    pub signal: f64,
    /// Target fraction of positive labels (default 0.25).
    #[serde(default = "default_positive_rate")]
    pub positive_rate: f64,
    /// Evaluate on this preprocessed binary file instead of generated samples (what
    /// `--eval-data` sets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_path: Option<PathBuf>,
    /// Every this many samples the Zipf tables' hot rows move (their rank → row map
    /// shifts by about a third of the table): a stream whose access profile drifts
    /// (docs/OPER.md); 0 (default) never.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zipf_rotate_every: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_num_dense() -> usize {
    13
}
fn default_signal() -> f64 {
    2.0
}
fn default_positive_rate() -> f64 {
    0.25
}
fn default_count() -> usize {
    1
}
fn is_one(n: &usize) -> bool {
    *n == 1
}

/// One embedding table, or `count` identical ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticTable {
    /// Feature name (default `C1`, `C2`, ... by position); with `count > 1`, names get a
    /// `_0`, `_1`, ... suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Rows of the table.
    pub rows: u64,
    /// Zipf exponent of id popularity; 0 (default) draws rows uniformly.
    #[serde(default)]
    pub zipf_exponent: f64,
    /// Ids per sample (default 1).
    #[serde(default)]
    pub pooling: PoolingFactor,
    /// How many identical tables this entry stands for (default 1).
    #[serde(default = "default_count", skip_serializing_if = "is_one")]
    pub count: usize,
}

/// Ids per sample: `pooling = 3` (always 3) or `pooling = { mean = 20.0 }`
/// (`1 + Poisson(mean − 1)`: at least one id, `mean` on average; needs `mean ≥ 1`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PoolingFactor {
    /// Exactly this many ids (0 gives empty bags).
    Fixed(u32),
    /// A random count with this mean.
    Mean {
        /// Average ids per sample, at least 1.
        mean: f64,
    },
}

impl PoolingFactor {
    /// Ids per sample on average.
    pub fn mean(self) -> f64 {
        match self {
            PoolingFactor::Fixed(n) => f64::from(n),
            PoolingFactor::Mean { mean } => mean,
        }
    }
}

impl Default for PoolingFactor {
    fn default() -> Self {
        PoolingFactor::Fixed(1)
    }
}

impl SyntheticConfig {
    /// `tables` tables of `rows_per_table` rows, 13 dense features, seed 0, 1M train and
    /// 100k eval samples; change the public fields for anything else.
    pub fn criteo_like(
        rows_per_table: u64,
        tables: usize,
        pooling: PoolingFactor,
        zipf: f64,
    ) -> Self {
        Self {
            train_samples: 1_000_000,
            eval_samples: 100_000,
            num_dense: default_num_dense(),
            tables: vec![SyntheticTable {
                name: None,
                rows: rows_per_table,
                zipf_exponent: zipf,
                pooling,
                count: tables,
            }],
            seed: 0,
            signal: default_signal(),
            positive_rate: default_positive_rate(),
            eval_path: None,
            zipf_rotate_every: 0,
        }
    }

    /// The schema of the generated records (validates the config).
    pub fn schema(&self) -> Result<Schema> {
        self.check_sample_counts()?;
        Ok(SyntheticGenerator::new(self)?.schema)
    }

    /// A run needs samples to train on and, without an evaluation file, to evaluate on.
    fn check_sample_counts(&self) -> Result<()> {
        if self.train_samples == 0 {
            return Err(Error::Config(
                "data.train_samples: must be at least 1 (nothing to train on)".into(),
            ));
        }
        if self.eval_samples == 0 && self.eval_path.is_none() {
            return Err(Error::Config(
                "data.eval_samples: must be at least 1 (nothing to evaluate on), or set data.eval_path"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Index range of the training samples.
    pub fn train_range(&self) -> Range<u64> {
        0..self.train_samples
    }

    /// Index range of the evaluation samples.
    pub fn eval_range(&self) -> Range<u64> {
        self.train_samples..self.train_samples.saturating_add(self.eval_samples)
    }
}

/// The most dense features, and the most tables, a synthetic data set may have: far
/// beyond real models (Criteo has 13 and 26).
pub const MAX_FEATURES: usize = 1 << 16;

/// The most ids a sample may hold over all its tables, on average (2^22: 32 MiB).
pub const MAX_IDS_PER_SAMPLE: f64 = (1u64 << 22) as f64;

/// How one table draws its ids.
#[derive(Debug, Clone)]
struct TableGen {
    rows: u64,
    zipf: Option<ZipfRanks>,
    pooling: PoolGen,
    /// The rank → row permutation `(a·rank + b) mod rows`, `gcd(a, rows) = 1`.
    perm: (u64, u64),
    /// Hash key of this table's hidden row weights.
    key: u64,
}

impl TableGen {
    /// The row at popularity `rank` (0-based) after `rotation` rotations:
    /// `(a·rank + b + rotation·(rows/3 + 1)) mod rows`.
    fn row_of_rank(&self, rank: u64, rotation: u64) -> u64 {
        let (a, b) = self.perm;
        let rows = u128::from(self.rows);
        // `a, b, rank < rows`. u128 division is several times dearer than u64's, so the
        // common cases (no rotation; fewer than 2^32 rows) avoid it.
        let offset = match rotation {
            0 => b,
            _ => ((u128::from(b) + u128::from(rotation) * (rows / 3 + 1)) % rows) as u64,
        };
        let scaled = match a.checked_mul(rank) {
            Some(ar) => ar % self.rows,
            None => (u128::from(a) * u128::from(rank) % rows) as u64,
        };
        // Both terms are below rows ≤ 2^64 − 1, so their sum wraps at most once.
        let (sum, wrapped) = scaled.overflowing_add(offset);
        if wrapped || sum >= self.rows {
            sum.wrapping_sub(self.rows)
        } else {
            sum
        }
    }
}

#[derive(Debug, Clone)]
enum PoolGen {
    Fixed(u32),
    /// `1 + Poisson(λ)`; `None` when λ = 0.
    OnePlus(Option<Poisson<f64>>),
}

/// The generator behind [`SyntheticStream`]: `sample(i)` is a pure function of the
/// config and `i`, and the generator is `Sync`, so threads may share one.
#[derive(Debug, Clone)]
pub struct SyntheticGenerator {
    schema: Schema,
    seed: u64,
    rotate_every: u64,
    tables: Vec<TableGen>,
    /// Per dense feature: (μ, hidden weight).
    dense: Vec<(f64, f64)>,
    /// Multipliers that give each part of `z` unit variance and the agreed share.
    sparse_coef: f64,
    dense_coef: f64,
    signal: f64,
    bias: f64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The bias `b` with `E[sigmoid(scale·z + b)] = rate` for `z ~ N(0, 1)`, by bisection
/// over a fixed quadrature grid (deterministic, so every process agrees).
fn solve_bias(scale: f64, rate: f64) -> f64 {
    let grid: Vec<(f64, f64)> = (0..=1600)
        .map(|k| {
            let z = -8.0 + 0.01 * f64::from(k);
            (z, (-0.5 * z * z).exp())
        })
        .collect();
    let total: f64 = grid.iter().map(|g| g.1).sum();
    let mean = |b: f64| {
        grid.iter()
            .map(|&(z, w)| w * sigmoid(scale * z + b))
            .sum::<f64>()
            / total
    };
    let (mut lo, mut hi) = (-60.0, 60.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if mean(mid) > rate {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    0.5 * (lo + hi)
}

impl SyntheticGenerator {
    /// Validates `cfg` and precomputes the hidden parameters.
    pub fn new(cfg: &SyntheticConfig) -> Result<Self> {
        let bad = |key: &str, msg: String| Err(Error::Config(format!("data.{key}: {msg}")));
        if !(cfg.positive_rate > 0.0 && cfg.positive_rate < 1.0) {
            return bad(
                "positive_rate",
                format!("must be between 0 and 1, got {}", cfg.positive_rate),
            );
        }
        if !(cfg.signal.is_finite() && cfg.signal >= 0.0) {
            return bad(
                "signal",
                format!("must be a number ≥ 0, got {}", cfg.signal),
            );
        }
        // Checked before anything is built per feature: a typo such as `count = 1e9`
        // would otherwise exhaust memory here.
        if cfg.num_dense > MAX_FEATURES {
            return bad(
                "num_dense",
                format!("must be at most {MAX_FEATURES}, got {}", cfg.num_dense),
            );
        }
        let features = cfg
            .tables
            .iter()
            .try_fold(0usize, |n, t| n.checked_add(t.count));
        if features.is_none_or(|n| n > MAX_FEATURES) {
            return bad(
                "tables",
                format!("at most {MAX_FEATURES} tables in all (the sum of the counts)"),
            );
        }
        // Each table's pooling is bounded below, but not their sum over many tables.
        let ids: f64 = cfg
            .tables
            .iter()
            .map(|t| t.count as f64 * t.pooling.mean())
            .sum();
        if ids > MAX_IDS_PER_SAMPLE {
            return bad(
                "tables",
                format!("at most {MAX_IDS_PER_SAMPLE} ids per sample over all tables (count × pooling), got {ids}"),
            );
        }
        let mut sparse = Vec::new();
        let mut tables = Vec::new();
        for (ti, t) in cfg.tables.iter().enumerate() {
            let key = format!("tables[{ti}]");
            if t.rows == 0 {
                return bad(&key, "rows must be at least 1".into());
            }
            if !(t.zipf_exponent.is_finite() && t.zipf_exponent >= 0.0) {
                return bad(
                    &key,
                    format!("zipf_exponent must be ≥ 0, got {}", t.zipf_exponent),
                );
            }
            // Bags this large are a config typo, and would exhaust memory per sample.
            const MAX_POOLING: f64 = 100_000.0;
            let pooling_size = t.pooling.mean();
            if pooling_size > MAX_POOLING {
                return bad(
                    &key,
                    format!("pooling must be at most {MAX_POOLING}, got {pooling_size}"),
                );
            }
            let pooling = match t.pooling {
                PoolingFactor::Fixed(n) => PoolGen::Fixed(n),
                PoolingFactor::Mean { mean: 1.0 } => PoolGen::OnePlus(None),
                PoolingFactor::Mean { mean } => match Poisson::new(mean - 1.0) {
                    Ok(p) if mean > 1.0 => PoolGen::OnePlus(Some(p)),
                    _ => {
                        return bad(
                            &key,
                            format!("pooling mean must be a number ≥ 1, got {mean}"),
                        )
                    }
                },
            };
            let zipf = if t.zipf_exponent > 0.0 {
                match ZipfRanks::new(t.rows, t.zipf_exponent) {
                    Ok(z) => Some(z),
                    Err(e) => return bad(&key, format!("zipf: {e}")),
                }
            } else {
                None
            };
            for j in 0..t.count {
                let index = sparse.len() as u64;
                let name = match (&t.name, t.count) {
                    (Some(n), 1) => n.clone(),
                    (Some(n), _) => format!("{n}_{j}"),
                    (None, _) => format!("C{}", index + 1),
                };
                let key = mix2(cfg.seed ^ 0x7461_626c_6573, index);
                let mut a = mix2(key, 1) % t.rows;
                // A multiplier coprime to rows makes the affine map a permutation.
                while t.rows > 1 && (a == 0 || gcd(a, t.rows) != 1) {
                    a = (a + 1) % t.rows;
                }
                tables.push(TableGen {
                    rows: t.rows,
                    zipf,
                    pooling: pooling.clone(),
                    perm: (a, mix2(key, 2) % t.rows),
                    key,
                });
                sparse.push(SparseFeature { name, rows: t.rows });
            }
        }
        let mut names = std::collections::HashSet::new();
        if let Some(f) = sparse.iter().find(|f| !names.insert(f.name.as_str())) {
            return bad(
                "tables",
                format!("feature name \"{}\" is used twice", f.name),
            );
        }
        let dense: Vec<(f64, f64)> = (0..cfg.num_dense as u64)
            .map(|d| {
                let h = mix2(cfg.seed ^ 0x0064_656e_7365, d);
                (5.0 * unit_f64(mix2(h, 1)), 2.0 * unit_f64(mix2(h, 2)) - 1.0)
            })
            .collect();
        // Each table contributes variance ≈ 1/3 (a uniform weight), each dense feature
        // w_d²; the shares of z follow the feature counts.
        let (nt, nd) = (tables.len() as f64, dense.len() as f64);
        let dense_var: f64 = dense.iter().map(|d| d.1 * d.1).sum();
        let (sparse_share, dense_share) = match (nt > 0.0, dense_var > 0.0) {
            (true, true) => (nt / (nt + nd), nd / (nt + nd)),
            (true, false) => (1.0, 0.0),
            (false, true) => (0.0, 1.0),
            (false, false) => (0.0, 0.0),
        };
        let sparse_coef = if nt > 0.0 {
            (sparse_share / (nt / 3.0)).sqrt()
        } else {
            0.0
        };
        let dense_coef = if dense_var > 0.0 {
            (dense_share / dense_var).sqrt()
        } else {
            0.0
        };
        Ok(Self {
            schema: Schema {
                dense: (1..=cfg.num_dense).map(|d| format!("I{d}")).collect(),
                sparse,
            },
            seed: cfg.seed,
            rotate_every: cfg.zipf_rotate_every,
            tables,
            dense,
            sparse_coef,
            dense_coef,
            signal: cfg.signal,
            bias: solve_bias(cfg.signal, cfg.positive_rate),
        })
    }

    /// The schema of generated records.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Sample `i`.
    pub fn sample(&self, i: u64) -> Record {
        self.sample_with_logit(i).0
    }

    /// Sample `i` and the true logit its label was drawn from (the best any model can do).
    pub fn sample_with_logit(&self, i: u64) -> (Record, f64) {
        let mut dense = Vec::with_capacity(self.dense.len());
        let mut sparse = vec![Vec::new(); self.tables.len()];
        let (label, logit) = self.generate(i, &mut dense, &mut sparse);
        (
            Record {
                label,
                dense,
                sparse,
            },
            logit,
        )
    }

    /// Samples `range` as one batch, built in place: the same samples as
    /// [`SyntheticGenerator::sample`] gives one by one, without a [`Record`] (and its
    /// vectors) each.
    pub fn batch(&self, range: Range<u64>) -> Result<Batch> {
        let n = (range.end - range.start) as usize;
        let f = self.tables.len();
        let mut dense = Vec::with_capacity(n * self.dense.len());
        let mut labels = Vec::with_capacity(n);
        let mut ids: Vec<Vec<u64>> = vec![Vec::with_capacity(n); f];
        // Per table, where each sample's ids end.
        let mut ends: Vec<Vec<usize>> = vec![Vec::with_capacity(n); f];
        for i in range {
            labels.push(self.generate(i, &mut dense, &mut ids).0);
            for (end, table) in ends.iter_mut().zip(&ids) {
                end.push(table.len());
            }
        }
        // Feature-major: every sample of feature 0, then feature 1, ...
        let mut offsets = Vec::with_capacity(f * n + 1);
        offsets.push(0);
        let mut values = Vec::with_capacity(ids.iter().map(Vec::len).sum());
        for (table, end) in ids.iter().zip(&ends) {
            let base = values.len();
            offsets.extend(end.iter().map(|e| base + e));
            values.extend_from_slice(table);
        }
        let sparse = KeyedJagged::from_offsets(self.schema.sparse_names(), n, offsets, values)?;
        Ok(Batch::new(dense, self.dense.len(), sparse, labels)?)
    }

    /// Generates sample `i`: appends its dense values to `dense` and its ids of table `t`
    /// to `ids[t]`; returns its label and the true logit the label was drawn from.
    fn generate(&self, i: u64, dense: &mut Vec<f32>, ids: &mut [Vec<u64>]) -> (f32, f64) {
        let mut rng = StdRng::seed_from_u64(mix2(self.seed, i));
        let mut dense_sum = 0.0;
        for &(mu, w) in &self.dense {
            let u: f64 = rng.sample(StandardNormal);
            let x = mu + u;
            // softplus, written to stay finite for large x.
            let v = if x > 30.0 { x } else { x.exp().ln_1p() };
            dense.push(v as f32);
            dense_sum += w * u;
        }
        let mut sparse_sum = 0.0;
        let rotation = i.checked_div(self.rotate_every).unwrap_or(0);
        for (t, out) in self.tables.iter().zip(ids.iter_mut()) {
            let n = match &t.pooling {
                PoolGen::Fixed(n) => *n as usize,
                PoolGen::OnePlus(None) => 1,
                PoolGen::OnePlus(Some(p)) => 1 + p.sample(&mut rng).min(1e6) as usize,
            };
            let mut wsum = 0.0;
            for _ in 0..n {
                let row = match &t.zipf {
                    None => rng.random_range(0..t.rows),
                    Some(z) => t.row_of_rank(z.sample(&mut rng).clamp(1, t.rows) - 1, rotation),
                };
                wsum += 2.0 * unit_f64(mix2(t.key, row)) - 1.0;
                out.push(row);
            }
            if n > 0 {
                // Σ/√n rather than the mean keeps a table's share of the signal the same
                // whatever its pooling factor.
                sparse_sum += wsum / (n as f64).sqrt();
            }
        }
        let z = self.sparse_coef * sparse_sum + self.dense_coef * dense_sum;
        let logit = self.signal * z + self.bias;
        let label = if rng.random::<f64>() < sigmoid(logit) {
            1.0
        } else {
            0.0
        };
        (label, logit)
    }
}

/// Generated samples `range.start..range.end`, in order.
pub struct SyntheticStream {
    generator: Arc<SyntheticGenerator>,
    range: Range<u64>,
}

impl SyntheticStream {
    /// A stream of samples `range` of the data set `cfg` describes.
    pub fn new(cfg: &SyntheticConfig, range: Range<u64>) -> Result<Self> {
        Ok(Self::from_generator(
            Arc::new(SyntheticGenerator::new(cfg)?),
            range,
        ))
    }

    /// A stream over a shared generator.
    pub fn from_generator(generator: Arc<SyntheticGenerator>, range: Range<u64>) -> Self {
        Self { generator, range }
    }
}

impl RecordStream for SyntheticStream {
    fn schema(&self) -> &Schema {
        &self.generator.schema
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        Ok(self.range.next().map(|i| self.generator.sample(i)))
    }

    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        let end = self
            .range
            .end
            .min(self.range.start.saturating_add(n as u64));
        let batch = self.generator.batch(self.range.start..end)?;
        self.range.start = end;
        Ok(Some(batch))
    }

    fn skipped(&self) -> u64 {
        0
    }

    fn remaining(&self) -> Option<u64> {
        Some(self.range.end - self.range.start)
    }

    /// Sample `i` depends on `i` alone, so passing over samples costs nothing.
    fn skip_records(&mut self, n: u64) -> Result<u64> {
        let passed = n.min(self.range.end - self.range.start);
        self.range.start += passed;
        Ok(passed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_the_samples_one_by_one() {
        // Zipf and uniform tables, random and empty bags, and a rotating ranking.
        let mut cfg =
            SyntheticConfig::criteo_like(1000, 2, PoolingFactor::Mean { mean: 3.0 }, 1.05);
        cfg.tables.push(SyntheticTable {
            name: None,
            rows: 50,
            zipf_exponent: 0.0,
            pooling: PoolingFactor::Fixed(0),
            count: 1,
        });
        cfg.zipf_rotate_every = 7;
        let generator = SyntheticGenerator::new(&cfg).expect("config");
        let batch = generator.batch(5..45).expect("batch");
        assert_eq!(batch.batch_size(), 40);
        for (b, i) in (5..45).enumerate() {
            let record = generator.sample(i);
            assert_eq!(batch.labels[b], record.label, "sample {i}");
            assert_eq!(
                &batch.dense[b * 13..(b + 1) * 13],
                &record.dense[..],
                "sample {i}"
            );
            for (t, ids) in record.sparse.iter().enumerate() {
                assert_eq!(
                    batch.sparse.feature(t).ids(b),
                    &ids[..],
                    "sample {i} table {t}"
                );
            }
        }
        assert_eq!(generator.batch(9..9).expect("empty").batch_size(), 0);
    }

    #[test]
    fn bias_hits_the_positive_rate() {
        for (scale, rate) in [(0.0, 0.25), (2.5, 0.25), (4.0, 0.1)] {
            let b = solve_bias(scale, rate);
            let n = 400;
            let m: f64 = (0..n)
                .map(|k| {
                    // Normal quantiles via a fine grid keep the check deterministic.
                    let p = (k as f64 + 0.5) / n as f64;
                    let z = inverse_normal(p);
                    sigmoid(scale * z + b)
                })
                .sum::<f64>()
                / n as f64;
            assert!((m - rate).abs() < 0.005, "scale {scale}: {m}");
        }
    }

    /// Bisection on the normal CDF (erf-free: integrates the density).
    fn inverse_normal(p: f64) -> f64 {
        let cdf = |x: f64| {
            let steps = 400;
            let h = (x + 9.0) / steps as f64;
            (0..steps)
                .map(|k| {
                    let t = -9.0 + (k as f64 + 0.5) * h;
                    (-0.5 * t * t).exp() * h
                })
                .sum::<f64>()
                / (2.0 * std::f64::consts::PI).sqrt()
        };
        let (mut lo, mut hi) = (-9.0, 9.0);
        for _ in 0..50 {
            let mid = 0.5 * (lo + hi);
            if cdf(mid) < p {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    }

    #[test]
    fn skipping_passes_over_exactly_the_records_reading_would() {
        let cfg = SyntheticConfig::criteo_like(50, 3, PoolingFactor::Fixed(2), 1.05);
        let mut read = SyntheticStream::new(&cfg, 3..20).unwrap();
        let mut skip = SyntheticStream::new(&cfg, 3..20).unwrap();
        assert_eq!(skip.remaining(), Some(17));
        for _ in 0..5 {
            read.next_record().unwrap();
        }
        assert_eq!(skip.skip_records(5).unwrap(), 5);
        assert_eq!(skip.remaining(), Some(12));
        assert_eq!(skip.next_record().unwrap(), read.next_record().unwrap());
        // At the end it passes over what is left and says how much that was.
        assert_eq!(skip.skip_records(100).unwrap(), 11);
        assert_eq!(skip.remaining(), Some(0));
        assert_eq!(skip.next_record().unwrap(), None);
    }

    #[test]
    fn affine_rank_map_is_a_permutation() {
        let mut cfg = SyntheticConfig::criteo_like(12, 1, PoolingFactor::Fixed(1), 1.1);
        cfg.seed = 5;
        let g = SyntheticGenerator::new(&cfg).unwrap();
        let t = &g.tables[0];
        let mut seen: Vec<u64> = (0..12u64).map(|r| t.row_of_rank(r, 0)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..12).collect::<Vec<_>>());
    }

    proptest::proptest! {
        #[test]
        fn row_of_rank_is_the_affine_map_in_wide_arithmetic(
            rows in proptest::prop_oneof![1u64..100_000, 1u64..=u64::MAX],
            a in proptest::num::u64::ANY,
            b in proptest::num::u64::ANY,
            rank in proptest::num::u64::ANY,
            rotation in proptest::prop_oneof![proptest::strategy::Just(0u64), 0u64..1_000_000],
        ) {
            let (a, b, rank) = (a % rows, b % rows, rank % rows);
            let t = TableGen {
                rows,
                zipf: None,
                pooling: PoolGen::Fixed(1),
                perm: (a, b),
                key: 0,
            };
            let wide = |x: u64| u128::from(x);
            let shift = wide(rotation) * wide(rows / 3 + 1);
            let expected = ((wide(a) * wide(rank) + wide(b) + shift) % wide(rows)) as u64;
            proptest::prop_assert_eq!(t.row_of_rank(rank, rotation), expected);
        }
    }

    #[test]
    fn names_and_validation() {
        let mut cfg = SyntheticConfig::criteo_like(10, 3, PoolingFactor::Mean { mean: 2.0 }, 0.0);
        let s = cfg.schema().unwrap();
        assert_eq!(s.sparse_names(), vec!["C1", "C2", "C3"]);
        cfg.tables[0].name = Some("user".into());
        assert_eq!(
            cfg.schema().unwrap().sparse_names(),
            vec!["user_0", "user_1", "user_2"]
        );
        cfg.tables[0].pooling = PoolingFactor::Mean { mean: 0.5 };
        assert!(cfg.schema().is_err());
        cfg.tables[0].pooling = PoolingFactor::Fixed(0);
        cfg.tables[0].rows = 0;
        assert!(cfg.schema().is_err());
    }

    /// Found by fuzzing: `count = 100000000` built a hundred million tables. The bound
    /// on ids per sample closes the same hole for many tables of big bags.
    #[test]
    fn feature_counts_are_bounded_before_anything_is_built() {
        let mut cfg = SyntheticConfig::criteo_like(10, MAX_FEATURES, PoolingFactor::Fixed(1), 0.0);
        assert_eq!(cfg.schema().unwrap().num_sparse(), MAX_FEATURES);
        cfg.tables[0].count = 100_000_000;
        let e = cfg.schema().unwrap_err().to_string();
        assert!(e.contains("data.tables: at most 65536 tables"), "{e}");
        cfg.tables[0].count = usize::MAX;
        assert!(cfg.schema().is_err());
        cfg.tables[0].count = 60_000;
        cfg.tables[0].pooling = PoolingFactor::Fixed(100_000);
        let e = cfg.schema().unwrap_err().to_string();
        assert!(e.contains("at most 4194304 ids per sample"), "{e}");
        cfg.tables[0].count = 1;
        cfg.num_dense = 1 << 40;
        let e = cfg.schema().unwrap_err().to_string();
        assert!(e.contains("data.num_dense: must be at most 65536"), "{e}");
    }
}
