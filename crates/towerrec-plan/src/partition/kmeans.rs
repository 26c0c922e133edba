//! Constrained k-means (Bradley, Bennett & Demiriz 2000), as DMT §3.3 uses it to cut
//! the embedded features into balanced towers.
//!
//! Lloyd's iteration with an exact assignment step under size bounds (see
//! [`super::assign`]): assign every point to a cluster, minimising the total squared
//! distance to the centres subject to the sizes; move every centre to the mean of its
//! points; repeat until the assignment no longer changes. Both steps can only lower the
//! cost, so it ends. Centres start k-means++ style (Arthur & Vassilvitskii 2007) from a
//! seed, and the run is repeated from several starts keeping the cheapest.
//!
//! The size rule (the paper's "maximum group size at most K times the minimum"): every
//! tower holds at least one feature, and `max ≤ K·min` or `max ≤ min + 1`. The second
//! arm makes `K = 1` mean "as equal as integers allow": sizes `⌊F/T⌋` and `⌈F/T⌉`. The
//! rule is not a bound per cluster, so the assignment is solved for each smallest size
//! `m` with the bounds `[m, max(⌊K·m⌋, m + 1)]` and the cheapest kept; these boxes
//! together hold exactly the allowed size vectors ([`size_bounds`]).

use super::assign::{assign, total};
use super::rng::Rng;
use crate::error::{Error, Result};

/// How the features are clustered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KMeansOptions {
    /// Clusters (towers), `1 ≤ T ≤ F`.
    pub towers: usize,
    /// K: the largest tower at most K times the smallest (or one more than it); `≥ 1`.
    pub max_ratio: f64,
    /// Starts from different k-means++ seeds; the cheapest result is kept.
    pub restarts: usize,
    /// Most Lloyd iterations per start.
    pub max_iters: usize,
    /// Seed of the starts.
    pub seed: u64,
}

impl KMeansOptions {
    /// `towers` clusters as equal as integers allow, 8 starts of at most 100 iterations.
    pub fn new(towers: usize) -> Self {
        KMeansOptions {
            towers,
            max_ratio: 1.0,
            restarts: 8,
            max_iters: 100,
            seed: 0,
        }
    }
}

/// The result of [`constrained_kmeans`].
#[derive(Debug, Clone, PartialEq)]
pub struct Clustering {
    /// Cluster of every point.
    pub assignment: Vec<usize>,
    /// Sum of squared distances of the points to their cluster's mean.
    pub cost: f64,
    /// Lloyd iterations of the start that gave it.
    pub iterations: usize,
}

/// The boxes `[lo, hi]` of cluster sizes whose union is exactly the size vectors (of
/// `towers` positive sizes summing to `features`) allowed with ratio `max_ratio`:
/// `max ≤ max(⌊K·min⌋, min + 1)`. Each box is tightened by the sum (no cluster can
/// hold more than what the others leave it), and boxes inside others are left out.
pub fn size_bounds(features: usize, towers: usize, max_ratio: f64) -> Result<Vec<(usize, usize)>> {
    if towers == 0 {
        return Err(Error::Partition(
            "the number of towers must be at least 1".into(),
        ));
    }
    if towers > features {
        return Err(Error::Partition(format!(
            "{towers} towers but only {features} features: every tower needs at least one"
        )));
    }
    if !(max_ratio.is_finite() && max_ratio >= 1.0) {
        return Err(Error::Partition(format!(
            "size ratio K = {max_ratio}: must be a number ≥ 1 (largest tower ≤ K × smallest)"
        )));
    }
    let (f, t) = (features, towers);
    let mut boxes: Vec<(usize, usize)> = Vec::new();
    for m in 1..=f / t {
        let hi = ((max_ratio * m as f64).floor() as usize).max(m + 1);
        if t.saturating_mul(hi) < f {
            continue;
        }
        let lo_eff = m.max(f.saturating_sub((t - 1).saturating_mul(hi)));
        let hi_eff = hi.min(f - (t - 1) * m);
        if !boxes.contains(&(lo_eff, hi_eff)) {
            boxes.push((lo_eff, hi_eff));
        }
    }
    let inside = |a: (usize, usize), b: (usize, usize)| a != b && b.0 <= a.0 && a.1 <= b.1;
    let kept: Vec<(usize, usize)> = boxes
        .iter()
        .copied()
        .filter(|&a| !boxes.iter().any(|&b| inside(a, b)))
        .collect();
    Ok(kept)
}

/// Clusters the `F` points of `points` (`F × dims`, row-major) into balanced clusters.
pub fn constrained_kmeans(points: &[f64], dims: usize, opts: &KMeansOptions) -> Result<Clustering> {
    if dims == 0 || !points.len().is_multiple_of(dims) {
        return Err(Error::Partition(format!(
            "{} coordinates are not a whole number of {dims}-dimensional points",
            points.len()
        )));
    }
    if let Some(k) = points.iter().position(|v| !v.is_finite()) {
        return Err(Error::Partition(format!(
            "coordinate {} of point {} is {}",
            k % dims,
            k / dims,
            points[k]
        )));
    }
    if opts.restarts == 0 {
        return Err(Error::Partition("k-means needs at least one start".into()));
    }
    let boxes = size_bounds(points.len() / dims, opts.towers, opts.max_ratio)?;
    let mut rng = Rng::new(opts.seed);
    let mut best: Option<Clustering> = None;
    for _ in 0..opts.restarts {
        let run = lloyd(points, dims, opts, &boxes, &mut rng);
        if best.as_ref().is_none_or(|b| run.cost < b.cost) {
            best = Some(run);
        }
    }
    best.ok_or_else(|| Error::Partition("k-means made no clustering".into()))
}

/// One start: k-means++ centres, then assignment and update until nothing changes.
fn lloyd(
    points: &[f64],
    dims: usize,
    opts: &KMeansOptions,
    boxes: &[(usize, usize)],
    rng: &mut Rng,
) -> Clustering {
    let (f, t) = (points.len() / dims, opts.towers);
    let mut centers = seed_centers(points, dims, t, rng);
    let mut cost = vec![0.0; f * t];
    // The last solution for each box: a feasible warm start for it.
    let mut warm: Vec<Option<Vec<usize>>> = vec![None; boxes.len()];
    let mut current: Vec<usize> = Vec::new();
    let mut iterations = 0;
    while iterations < opts.max_iters.max(1) {
        iterations += 1;
        for g in 0..f {
            let p = &points[g * dims..(g + 1) * dims];
            for (c, out) in cost[g * t..(g + 1) * t].iter_mut().enumerate() {
                *out = sq_dist(p, &centers[c * dims..(c + 1) * dims]);
            }
        }
        let Some(asg) = assign_in_boxes(&cost, t, boxes, &mut warm) else {
            break;
        };
        if asg == current {
            break;
        }
        current = asg;
        centers = means(points, dims, t, &current);
    }
    let centers = means(points, dims, t, &current);
    let cost = current
        .iter()
        .enumerate()
        .map(|(g, &c)| {
            sq_dist(
                &points[g * dims..(g + 1) * dims],
                &centers[c * dims..(c + 1) * dims],
            )
        })
        .sum();
    Clustering {
        assignment: current,
        cost,
        iterations,
    }
}

/// The cheapest assignment whose sizes lie in one of `boxes` (the exact assignment
/// under the size rule), each box solved from its entry in `warm` (then updated);
/// `None` if there are no boxes.
pub(crate) fn assign_in_boxes(
    cost: &[f64],
    t: usize,
    boxes: &[(usize, usize)],
    warm: &mut [Option<Vec<usize>>],
) -> Option<Vec<usize>> {
    let mut chosen: Option<(f64, Vec<usize>)> = None;
    for (&(lo, hi), warm) in boxes.iter().zip(warm) {
        let asg = assign(cost, t, lo, hi, warm.as_deref());
        let c = total(cost, t, &asg);
        if chosen.as_ref().is_none_or(|(best, _)| c < *best) {
            chosen = Some((c, asg.clone()));
        }
        *warm = Some(asg);
    }
    chosen.map(|(_, asg)| asg)
}

/// Whether sizes follow the rule of ratio `k`: all positive, `max ≤ max(⌊k·min⌋, min + 1)`.
pub fn sizes_allowed(sizes: &[usize], max_ratio: f64) -> bool {
    let (Some(&min), Some(&max)) = (sizes.iter().min(), sizes.iter().max()) else {
        return false;
    };
    min > 0 && (max <= min + 1 || max as f64 <= max_ratio * min as f64)
}

fn sq_dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The mean of each cluster's points (`T × dims`; zeros for an empty cluster).
fn means(points: &[f64], dims: usize, t: usize, asg: &[usize]) -> Vec<f64> {
    let mut sums = vec![0.0; t * dims];
    let mut counts = vec![0usize; t];
    for (g, &c) in asg.iter().enumerate() {
        counts[c] += 1;
        for (s, x) in sums[c * dims..(c + 1) * dims]
            .iter_mut()
            .zip(&points[g * dims..])
        {
            *s += x;
        }
    }
    for (c, &n) in counts.iter().enumerate() {
        if n > 0 {
            for s in &mut sums[c * dims..(c + 1) * dims] {
                *s /= n as f64;
            }
        }
    }
    sums
}

/// k-means++: the first centre a uniformly drawn point, each next one a point drawn
/// with probability proportional to its squared distance to the nearest centre so far
/// (uniformly where all distances are zero).
fn seed_centers(points: &[f64], dims: usize, t: usize, rng: &mut Rng) -> Vec<f64> {
    let f = points.len() / dims;
    let point = |g: usize| &points[g * dims..(g + 1) * dims];
    let mut centers = Vec::with_capacity(t * dims);
    centers.extend_from_slice(point(rng.below(f)));
    let mut nearest: Vec<f64> = (0..f)
        .map(|g| sq_dist(point(g), &centers[..dims]))
        .collect();
    while centers.len() < t * dims {
        let sum: f64 = nearest.iter().sum();
        let g = if sum > 0.0 {
            let mut target = rng.uniform() * sum;
            let mut pick = f - 1;
            for (g, &w) in nearest.iter().enumerate() {
                if target < w {
                    pick = g;
                    break;
                }
                target -= w;
            }
            pick
        } else {
            rng.below(f)
        };
        let c = centers.len();
        centers.extend_from_slice(point(g));
        for (h, n) in nearest.iter_mut().enumerate() {
            *n = n.min(sq_dist(point(h), &centers[c..c + dims]));
        }
    }
    centers
}

#[cfg(test)]
mod tests;
