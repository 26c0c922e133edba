//! Embedding the features in a few dimensions so that their Euclidean distances follow
//! the distance matrix D (DMT §3.3): coordinates `X_i ∈ ℝⁿ` minimising the stress
//! `Σ_{i<j} (‖X_i − X_j‖ − D_ij)²`, found with Adam as the paper does.
//!
//! The start is classical (Torgerson) multidimensional scaling: the top `n`
//! eigenvectors of the double-centred `−½ J D² J`, found by power iteration, scaled by
//! the square roots of their eigenvalues; plus a little seeded noise so that no two
//! features coincide (the stress has no gradient between coincident points). From
//! there Adam needs few steps, and the whole run is a function of the seed.

use super::interaction::Matrix;
use super::rng::Rng;
use crate::error::{Error, Result};

/// How the embedding is fitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StressOptions {
    /// Dimensions of the embedding (the paper: 2).
    pub dims: usize,
    /// Adam's step size, in units of D (whose entries lie in `[0, 1]`).
    pub learning_rate: f64,
    /// Most Adam steps.
    pub max_iters: usize,
    /// Stop when the best stress of the last [`CHECK_EVERY`] steps fell by less than
    /// this share of it.
    pub tolerance: f64,
}

impl Default for StressOptions {
    fn default() -> Self {
        StressOptions {
            dims: 2,
            learning_rate: 0.02,
            max_iters: 2000,
            tolerance: 1e-5,
        }
    }
}

/// Steps between convergence checks.
pub const CHECK_EVERY: usize = 25;
/// Power-iteration steps per eigenvector of the classical-scaling start.
const POWER_ITERS: usize = 100;

/// Features placed in `dims` dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// Dimensions per feature.
    pub dims: usize,
    /// `F × dims`, row-major: feature `i` at `coords[i·dims ..][..dims]`.
    pub coords: Vec<f64>,
    /// The stress `Σ_{i<j} (d_ij − D_ij)²` of `coords`.
    pub stress: f64,
    /// Kruskal's stress-1, `√(stress / Σ_{i<j} D_ij²)`: 0 is a perfect fit (0 too
    /// where D is all zeros).
    pub normalized_stress: f64,
    /// Adam steps taken.
    pub iterations: usize,
}

impl Embedding {
    /// Number of features.
    pub fn features(&self) -> usize {
        self.coords.len().checked_div(self.dims).unwrap_or(0)
    }

    /// Feature `i`'s coordinates.
    ///
    /// # Panics
    /// If `i` is not a feature.
    pub fn point(&self, i: usize) -> &[f64] {
        &self.coords[i * self.dims..(i + 1) * self.dims]
    }
}

/// Fits coordinates to `d` (symmetric, finite, non-negative; its diagonal is ignored)
/// by Adam from a classical-scaling start, deterministically from `seed`.
pub fn embed(d: &Matrix, opts: &StressOptions, seed: u64) -> Result<Embedding> {
    check(d, opts)?;
    let (f, k) = (d.n(), opts.dims);
    let mut rng = Rng::new(seed);
    // Column-major (coordinate `c` of feature `i` at `x[c·F + i]`) for the pair loop.
    let mut x = classical_scaling(d, k, &mut rng);
    let total: f64 = pairs(f).map(|(i, j)| d.get(i, j).powi(2)).sum();
    let scale = (total / (pairs(f).count().max(1) as f64)).sqrt().max(1e-12);
    for v in &mut x {
        *v += (rng.uniform() - 0.5) * 1e-3 * scale;
    }
    let mut grad = vec![0.0; x.len()];
    let (mut m, mut v) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    let (beta1, beta2, eps) = (0.9f64, 0.999f64, 1e-8);
    let mut best = (stress_and_grad(d, &x, k, &mut grad), x.clone());
    let mut checkpoint = best.0;
    let mut iterations = 0;
    for t in 1..=opts.max_iters {
        let lr_t =
            opts.learning_rate * (1.0 - beta2.powi(t as i32)).sqrt() / (1.0 - beta1.powi(t as i32));
        for (((xi, gi), mi), vi) in x.iter_mut().zip(&grad).zip(&mut m).zip(&mut v) {
            *mi = beta1 * *mi + (1.0 - beta1) * gi;
            *vi = beta2 * *vi + (1.0 - beta2) * gi * gi;
            *xi -= lr_t * *mi / (vi.sqrt() + eps);
        }
        iterations = t;
        let s = stress_and_grad(d, &x, k, &mut grad);
        if s < best.0 {
            best = (s, x.clone());
        }
        if t % CHECK_EVERY == 0 {
            if checkpoint - best.0 <= opts.tolerance * checkpoint {
                break;
            }
            checkpoint = best.0;
        }
    }
    let (stress, x) = best;
    // Column-major inside, row-major out.
    let coords = (0..f * k).map(|p| x[(p % k) * f + p / k]).collect();
    Ok(Embedding {
        dims: k,
        coords,
        stress,
        normalized_stress: if total > 0.0 {
            (stress / total).sqrt()
        } else {
            0.0
        },
        iterations,
    })
}

fn check(d: &Matrix, opts: &StressOptions) -> Result<()> {
    let bad = |m: String| Err(Error::Partition(m));
    if opts.dims == 0 {
        return bad("the embedding needs at least 1 dimension".into());
    }
    if !(opts.learning_rate.is_finite() && opts.learning_rate > 0.0) {
        return bad(format!(
            "learning rate {} is not a positive number",
            opts.learning_rate
        ));
    }
    if !(opts.tolerance.is_finite() && opts.tolerance >= 0.0) {
        return bad(format!("tolerance {} is negative", opts.tolerance));
    }
    for (i, j) in pairs(d.n()) {
        let (a, b) = (d.get(i, j), d.get(j, i));
        if !(a >= 0.0 && a.is_finite()) || (a - b).abs() > 1e-9 * (1.0 + a.abs()) {
            return bad(format!(
                "distance ({i}, {j}) = {a} and ({j}, {i}) = {b}: distances must be finite, \
                 non-negative and symmetric"
            ));
        }
    }
    Ok(())
}

/// Pairs `(i, j)`, `i < j < n`.
fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |i| (i + 1..n).map(move |j| (i, j)))
}

/// The stress of `x` (column-major: coordinate `c` of feature `i` at `x[c·F + i]`),
/// with its gradient, laid out the same way, written into `grad`.
///
/// The pair loop is the partitioner's hot spot for a thousand features: for each `i`
/// it runs over `j > i` in passes over contiguous arrays (squared distances, then the
/// residual factors, then each coordinate's gradient) that the compiler vectorises,
/// with sums kept in [`LANES`] fixed lanes so that the result does not depend on it.
pub(crate) fn stress_and_grad(d: &Matrix, x: &[f64], k: usize, grad: &mut [f64]) -> f64 {
    let f = d.n();
    grad.fill(0.0);
    let mut sq = vec![0.0; f];
    let mut coef = vec![0.0; f];
    let mut s = 0.0;
    for i in 0..f {
        let (sq, coef) = (&mut sq[i + 1..], &mut coef[i + 1..]);
        let row = &d.values()[i * f + i + 1..(i + 1) * f];
        sq.fill(0.0);
        for c in 0..k {
            let xc = &x[c * f..(c + 1) * f];
            let xi = xc[i];
            for (q, &xj) in sq.iter_mut().zip(&xc[i + 1..]) {
                *q += (xi - xj) * (xi - xj);
            }
        }
        s += residuals(sq, row, coef);
        for c in 0..k {
            let xc = &x[c * f..(c + 1) * f];
            let gc = &mut grad[c * f..(c + 1) * f];
            if let Some((gi, rest)) = gc[i..].split_first_mut() {
                *gi += pull(xc[i], &xc[i + 1..], coef, rest);
            }
        }
    }
    s
}

/// Over the pairs of one row: `Σ (√sq − D)²`, and `coef = 2(√sq − D)/√sq` (0 where
/// the points coincide).
fn residuals(sq: &[f64], row: &[f64], coef: &mut [f64]) -> f64 {
    let mut part = [0.0; LANES];
    let one = |q: f64, r: f64, cf: &mut f64, p: &mut f64| {
        let dist = q.sqrt();
        let res = dist - r;
        *p += res * res;
        *cf = if dist > 0.0 { 2.0 * res / dist } else { 0.0 };
    };
    let mut qs = sq.chunks_exact(LANES);
    let mut rs = row.chunks_exact(LANES);
    let mut cs = coef.chunks_exact_mut(LANES);
    for ((q, r), cf) in (&mut qs).zip(&mut rs).zip(&mut cs) {
        for l in 0..LANES {
            one(q[l], r[l], &mut cf[l], &mut part[l]);
        }
    }
    let tail = qs.remainder().iter().zip(rs.remainder());
    for (l, ((&q, &r), cf)) in tail.zip(cs.into_remainder()).enumerate() {
        one(q, r, cf, &mut part[l]);
    }
    part.iter().sum()
}

/// One coordinate's gradient over the pairs of row `i`: `g_j −= coef·(x_i − x_j)` for
/// each `j`, and the sum of the terms (row `i`'s own gradient) returned.
fn pull(xi: f64, xs: &[f64], coef: &[f64], g: &mut [f64]) -> f64 {
    let mut part = [0.0; LANES];
    let mut xc = xs.chunks_exact(LANES);
    let mut cc = coef.chunks_exact(LANES);
    let mut gc = g.chunks_exact_mut(LANES);
    for ((x, c), g) in (&mut xc).zip(&mut cc).zip(&mut gc) {
        for l in 0..LANES {
            let t = c[l] * (xi - x[l]);
            part[l] += t;
            g[l] -= t;
        }
    }
    let tail = xc.remainder().iter().zip(cc.remainder());
    for (l, ((&x, &c), g)) in tail.zip(gc.into_remainder()).enumerate() {
        let t = c * (xi - x);
        part[l] += t;
        *g -= t;
    }
    part.iter().sum()
}

/// Lanes of the pair loop's sums.
const LANES: usize = 4;

/// Classical scaling: coordinates (column-major, `k × F`) from the top `k` eigenpairs of
/// `B = −½ J D² J`, by power iteration on `B + cI` (`c` bounds B's most negative
/// eigenvalue, so the largest eigenvalues come first) with Gram–Schmidt against the
/// vectors already found. A direction with no positive eigenvalue gets zeros (the
/// caller's noise moves it off).
fn classical_scaling(d: &Matrix, k: usize, rng: &mut Rng) -> Vec<f64> {
    let f = d.n();
    let sq = |i: usize, j: usize| if i == j { 0.0 } else { d.get(i, j).powi(2) };
    let row_mean: Vec<f64> = (0..f)
        .map(|i| (0..f).map(|j| sq(i, j)).sum::<f64>() / f as f64)
        .collect();
    let mean = row_mean.iter().sum::<f64>() / f as f64;
    let b = Matrix::from_fn(f, |i, j| {
        -0.5 * (sq(i, j) - row_mean[i] - row_mean[j] + mean)
    });
    let shift = (0..f)
        .map(|i| (0..f).map(|j| b.get(i, j).abs()).sum::<f64>())
        .fold(0.0, f64::max);
    let mut coords = vec![0.0; f * k];
    let mut found: Vec<Vec<f64>> = Vec::new();
    let mut next = vec![0.0; f];
    for c in 0..k {
        let mut v: Vec<f64> = (0..f).map(|_| rng.uniform() - 0.5).collect();
        for _ in 0..POWER_ITERS {
            orthonormalize(&mut v, &found);
            for (i, out) in next.iter_mut().enumerate() {
                let row = &b.values()[i * f..(i + 1) * f];
                *out = row.iter().zip(&v).map(|(a, x)| a * x).sum::<f64>() + shift * v[i];
            }
            std::mem::swap(&mut v, &mut next);
        }
        if !orthonormalize(&mut v, &found) {
            break;
        }
        let lambda: f64 = (0..f)
            .map(|i| {
                let row = &b.values()[i * f..(i + 1) * f];
                v[i] * row.iter().zip(&v).map(|(a, x)| a * x).sum::<f64>()
            })
            .sum();
        let root = lambda.max(0.0).sqrt();
        for i in 0..f {
            coords[c * f + i] = v[i] * root;
        }
        found.push(v.clone());
    }
    coords
}

/// Removes from `v` its components along the orthonormal `basis` and scales it to unit
/// length; false (leaving `v` as it is) if nothing is left.
fn orthonormalize(v: &mut [f64], basis: &[Vec<f64>]) -> bool {
    for u in basis {
        let dot: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
        for (a, b) in v.iter_mut().zip(u) {
            *a -= dot * b;
        }
    }
    let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
    if norm.is_nan() || norm <= 1e-300 {
        return false;
    }
    for a in v.iter_mut() {
        *a /= norm;
    }
    true
}

#[cfg(test)]
mod tests;
