//! What a profile's summary says about skew: the Zipf exponent fitted to the
//! rank–frequency curve, and log-spaced rank cut-offs for the access CDF.

/// Ranks whose count is below this are left out of the fit: their counts are mostly
/// noise (a Poisson count of 30 is ±18%), and ranking by observed counts flattens them.
const MIN_FIT_COUNT: u64 = 30;
/// Fewer ranks than this above [`MIN_FIT_COUNT`] give no fit.
const MIN_FIT_RANKS: usize = 8;

/// The exponent `s` of `count ∝ rank^−s`, by least squares on log count against log
/// rank over the ranks counted at least 30 times. `counts` are most read first. `None`
/// with fewer than 8 such ranks. Uniform access gives about 0; Zipf(s) data about s.
pub fn fit_zipf(counts: &[u64]) -> Option<f64> {
    let points: Vec<(f64, f64)> = counts
        .iter()
        .take_while(|&&c| c >= MIN_FIT_COUNT)
        .enumerate()
        .map(|(i, &c)| (((i + 1) as f64).ln(), (c as f64).ln()))
        .collect();
    if points.len() < MIN_FIT_RANKS {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    Some(-sxy / sxx)
}

/// Up to `points` distinct rank cut-offs in `1..=n`, evenly spaced in log rank, ending
/// at `n` (empty when `n` or `points` is 0).
pub(super) fn log_cuts(n: usize, points: usize) -> Vec<usize> {
    if n == 0 || points == 0 {
        return Vec::new();
    }
    if points == 1 {
        return vec![n];
    }
    let top = (n as f64).ln();
    let mut cuts: Vec<usize> = (0..points)
        .map(|i| ((top * i as f64 / (points - 1) as f64).exp().round() as usize).clamp(1, n))
        .collect();
    cuts.dedup();
    if cuts.last() != Some(&n) {
        cuts.push(n);
    }
    cuts
}
