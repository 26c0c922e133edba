//! The feature interaction matrix of DMT §3.3 and the distance made from it.
//!
//! `I(i, j) = |cos(F_i, F_j)|`, averaged over samples: for each sample, the pooled
//! embedding of every feature is normalised and the absolute dot product of each pair
//! taken; a feature whose pooled vector is zero (an empty bag, a zero row) contributes
//! 0 to its pairs in that sample. The paper averages over samples rather than over
//! embedding rows because a feature's row differs from sample to sample, while the
//! affinity between two features should hold across samples (§3.3, last paragraphs).
//! Since the samples come from a checkpoint a batch at a time,
//! [`InteractionAccumulator`] sums batch by batch and [`InteractionAccumulator::finish`]
//! divides.

use crate::error::{Error, Result};

/// A square matrix over the features, row-major (`values[i·n + j]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    n: usize,
    values: Vec<f64>,
}

impl Matrix {
    /// An `n × n` matrix with `values[i·n + j]` at `(i, j)`; an error if the lengths do
    /// not match or a value is not finite.
    pub fn new(n: usize, values: Vec<f64>) -> Result<Self> {
        if n.checked_mul(n) != Some(values.len()) {
            return Err(Error::Partition(format!(
                "a {n} × {n} matrix needs {} values, got {}",
                n.saturating_mul(n),
                values.len()
            )));
        }
        if let Some(k) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::Partition(format!(
                "matrix entry ({}, {}) is {}",
                k / n,
                k % n,
                values[k]
            )));
        }
        Ok(Matrix { n, values })
    }

    /// The `n × n` matrix whose `(i, j)` entry is `f(i, j)`.
    pub fn from_fn(n: usize, mut f: impl FnMut(usize, usize) -> f64) -> Self {
        let mut values = Vec::with_capacity(n * n);
        for i in 0..n {
            for j in 0..n {
                values.push(f(i, j));
            }
        }
        Matrix { n, values }
    }

    /// Rows (and columns).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Entry `(i, j)`.
    ///
    /// # Panics
    /// If `i` or `j` is `≥ n`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        assert!(i < self.n && j < self.n, "({i}, {j}) outside {}", self.n);
        self.values[i * self.n + j]
    }

    /// Every entry, row-major.
    pub fn values(&self) -> &[f64] {
        &self.values
    }
}

/// Sums `|cos|` of every feature pair over the samples of batches of pooled embeddings.
#[derive(Debug, Clone)]
pub struct InteractionAccumulator {
    features: usize,
    dim: usize,
    /// Upper triangle (diagonal included) of the sums, row-major `F × F`.
    sums: Vec<f64>,
    samples: u64,
    /// One sample's normalised vectors, `F × N`.
    unit: Vec<f64>,
}

impl InteractionAccumulator {
    /// An empty sum for features of widths `dims` (one per feature): an error if there
    /// are none, if any is zero, or if they differ (the kernel compares vectors of one
    /// width; tables of different widths would first need column-wise slicing into
    /// equal chunks, as the paper does for XLRM).
    pub fn new(dims: &[usize]) -> Result<Self> {
        let Some(&dim) = dims.first() else {
            return Err(Error::Partition("no features to partition".into()));
        };
        if let Some(k) = dims.iter().position(|&d| d != dim) {
            return Err(Error::Partition(format!(
                "features have different embedding widths (feature 0: {dim}, feature {k}: {}); \
                 the interaction needs one width for all",
                dims[k]
            )));
        }
        if dim == 0 {
            return Err(Error::Partition("features have embedding width 0".into()));
        }
        let f = dims.len();
        Ok(InteractionAccumulator {
            features: f,
            dim,
            sums: vec![0.0; f * f],
            samples: 0,
            unit: vec![0.0; f * dim],
        })
    }

    /// Number of features.
    pub fn features(&self) -> usize {
        self.features
    }

    /// The width of every feature's vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Samples added so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Adds a batch of `batch_size` samples of pooled embeddings laid out `B × F × N`
    /// (sample-major, then feature, then element). Errors, adding nothing, if the
    /// length is not `B·F·N` or a value is not finite.
    pub fn add_batch(&mut self, pooled: &[f32], batch_size: usize) -> Result<()> {
        let (f, n) = (self.features, self.dim);
        let row = f * n;
        if batch_size.checked_mul(row) != Some(pooled.len()) {
            return Err(Error::Partition(format!(
                "a batch of {batch_size} samples × {f} features × {n} values needs {} values, got {}",
                batch_size.saturating_mul(row),
                pooled.len()
            )));
        }
        if let Some(k) = pooled.iter().position(|v| !v.is_finite()) {
            return Err(Error::Partition(format!(
                "pooled embedding of feature {} in sample {} holds {}",
                (k % row) / n,
                k / row,
                pooled[k]
            )));
        }
        for sample in pooled.chunks_exact(row) {
            self.add_sample(sample);
        }
        self.samples += batch_size as u64;
        Ok(())
    }

    fn add_sample(&mut self, sample: &[f32]) {
        let (f, n) = (self.features, self.dim);
        for (u, v) in self.unit.chunks_exact_mut(n).zip(sample.chunks_exact(n)) {
            let norm = v
                .iter()
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt();
            let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            for (u, &x) in u.iter_mut().zip(v) {
                *u = f64::from(x) * scale;
            }
        }
        for i in 0..f {
            let ui = &self.unit[i * n..(i + 1) * n];
            let sums = &mut self.sums[i * f..(i + 1) * f];
            for (j, s) in sums.iter_mut().enumerate().skip(i) {
                let uj = &self.unit[j * n..(j + 1) * n];
                let dot: f64 = ui.iter().zip(uj).map(|(a, b)| a * b).sum();
                *s += dot.abs();
            }
        }
    }

    /// The interaction matrix: the mean `|cos|` of every pair, symmetric, in `[0, 1]`
    /// (the diagonal is the share of samples where the feature's vector is not zero).
    /// An error if no sample was added.
    pub fn finish(self) -> Result<Matrix> {
        if self.samples == 0 {
            return Err(Error::Partition(
                "no samples: the interaction matrix is a mean over samples".into(),
            ));
        }
        let (f, count) = (self.features, self.samples as f64);
        let sums = &self.sums;
        Ok(Matrix::from_fn(f, |i, j| {
            let (a, b) = if i <= j { (i, j) } else { (j, i) };
            (sums[a * f + b] / count).clamp(0.0, 1.0)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_abs_cosine_over_samples_and_batches() {
        let mut acc = InteractionAccumulator::new(&[2, 2, 2]).unwrap();
        // Sample 1: f0 = (1,0), f1 = (−3,0) (anti-parallel: |cos| = 1), f2 = (0,0) (zero).
        // Sample 2: f0 = (1,0), f1 = (1,1) (|cos| = 1/√2), f2 = (0,5).
        acc.add_batch(&[1.0, 0.0, -3.0, 0.0, 0.0, 0.0], 1).unwrap();
        acc.add_batch(&[1.0, 0.0, 1.0, 1.0, 0.0, 5.0], 1).unwrap();
        assert_eq!(acc.samples(), 2);
        let i = acc.finish().unwrap();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(i.get(0, 1), (1.0 + h) / 2.0));
        assert!(close(i.get(1, 0), i.get(0, 1)));
        assert!(close(i.get(0, 2), 0.0));
        assert!(close(i.get(1, 2), h / 2.0));
        assert!(close(i.get(0, 0), 1.0));
        assert!(close(i.get(2, 2), 0.5), "f2 is zero in one of two samples");
    }

    #[test]
    fn one_batch_equals_the_same_samples_in_two() {
        let data: Vec<f32> = (0..4 * 3 * 5)
            .map(|k| ((k * 37 % 11) as f32) - 5.0)
            .collect();
        let mut one = InteractionAccumulator::new(&[5; 3]).unwrap();
        one.add_batch(&data, 4).unwrap();
        let mut two = InteractionAccumulator::new(&[5; 3]).unwrap();
        two.add_batch(&data[..15], 1).unwrap();
        two.add_batch(&data[15..], 3).unwrap();
        let (a, b) = (one.finish().unwrap(), two.finish().unwrap());
        for (x, y) in a.values().iter().zip(b.values()) {
            assert!((x - y).abs() < 1e-12);
        }
    }

    #[test]
    fn refuses_bad_input() {
        let e = InteractionAccumulator::new(&[4, 4, 8]).unwrap_err();
        assert!(e.to_string().contains("different embedding widths"), "{e}");
        assert!(InteractionAccumulator::new(&[]).is_err());
        assert!(InteractionAccumulator::new(&[0, 0]).is_err());
        let mut acc = InteractionAccumulator::new(&[2, 2]).unwrap();
        let e = acc.add_batch(&[1.0; 7], 2).unwrap_err();
        assert!(e.to_string().contains("needs 8 values, got 7"), "{e}");
        let e = acc.add_batch(&[1.0, 1.0, f32::NAN, 1.0], 1).unwrap_err();
        assert!(e.to_string().contains("feature 1 in sample 0"), "{e}");
        assert_eq!(acc.samples(), 0);
        assert!(acc.finish().is_err(), "no samples");
        assert!(Matrix::new(2, vec![0.0; 3]).is_err());
        assert!(Matrix::new(1, vec![f64::NAN]).is_err());
    }
}
