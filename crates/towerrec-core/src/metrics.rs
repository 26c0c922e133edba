//! Evaluation metrics of a click-through-rate model: ROC AUC, log loss and normalized
//! entropy.
//!
//! All accumulate in f64 (AUC in exact integer counts) so that evaluation sets of
//! millions of samples lose no precision.

use rayon::prelude::*;
use serde::Serialize;

/// Probabilities are clipped to `[CLIP, 1 − CLIP]` in the log loss, so that a confident
/// wrong prediction costs a large but finite amount.
const CLIP: f64 = 1e-7;

/// Sorting more scores than this uses rayon.
const PAR_SORT_MIN: usize = 1 << 16;

/// Exact ROC AUC: the probability that a random positive scores above a random
/// negative, a tie counting one half (the Mann–Whitney statistic with average ranks).
/// Labels `> 0.5` are positive. `None` if there is no positive or no negative.
///
/// Scores are compared as numbers (`-0.0` ties with `0.0`); NaN scores make the
/// result meaningless.
///
/// # Panics
/// If the slices' lengths differ.
pub fn auc(scores: &[f32], labels: &[f32]) -> Option<f64> {
    assert_eq!(scores.len(), labels.len(), "auc: scores vs labels");
    // `+ 0.0` turns -0.0 into 0.0, which `total_cmp` would otherwise order apart.
    let mut pairs: Vec<(f32, bool)> = scores
        .iter()
        .zip(labels)
        .map(|(&s, &y)| (s + 0.0, y > 0.5))
        .collect();
    let n_pos = pairs.iter().filter(|p| p.1).count() as u64;
    let n_neg = pairs.len() as u64 - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    if pairs.len() >= PAR_SORT_MIN {
        pairs.par_sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    } else {
        pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    }
    // Walking groups of equal scores upwards: each positive beats every negative below
    // its group and ties with the group's negatives. Twice the count stays an integer.
    let mut twice_wins: u128 = 0;
    let mut neg_below: u64 = 0;
    for group in pairs.chunk_by(|a, b| a.0.total_cmp(&b.0).is_eq()) {
        let pos = group.iter().filter(|p| p.1).count() as u64;
        let neg = group.len() as u64 - pos;
        twice_wins += 2 * pos as u128 * neg_below as u128 + pos as u128 * neg as u128;
        neg_below += neg;
    }
    Some(twice_wins as f64 / (2.0 * n_pos as f64 * n_neg as f64))
}

/// `Σ −(y·ln p + (1 − y)·ln(1 − p))` with `p` clipped, in f64.
fn log_loss_sum(probs: &[f32], labels: &[f32]) -> f64 {
    probs
        .iter()
        .zip(labels)
        .map(|(&p, &y)| {
            let p = (p as f64).clamp(CLIP, 1.0 - CLIP);
            let y = y as f64;
            -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
        })
        .sum()
}

/// Mean binary cross-entropy of probabilities against labels in `[0, 1]`, with
/// probabilities clipped to `[1e-7, 1 − 1e-7]`. 0 for no samples.
///
/// # Panics
/// If the slices' lengths differ.
pub fn log_loss(probs: &[f32], labels: &[f32]) -> f64 {
    assert_eq!(probs.len(), labels.len(), "log_loss: probs vs labels");
    if probs.is_empty() {
        return 0.0;
    }
    log_loss_sum(probs, labels) / probs.len() as f64
}

/// Log loss divided by the entropy of the empirical positive rate `p̄ = mean(labels)`,
/// `−(p̄·ln p̄ + (1 − p̄)·ln(1 − p̄))` (He et al. 2014): below 1 means better than always
/// predicting the base rate.
///
/// When `p̄` is 0 or 1 (one class only, or no samples) the baseline entropy is 0 and
/// there is nothing to normalize by: the result is `f64::INFINITY`, never NaN.
///
/// # Panics
/// If the slices' lengths differ.
pub fn normalized_entropy(probs: &[f32], labels: &[f32]) -> f64 {
    ne_from(log_loss(probs, labels), labels)
}

fn ne_from(logloss: f64, labels: &[f32]) -> f64 {
    if labels.is_empty() {
        return f64::INFINITY;
    }
    let rate = labels.iter().map(|&y| y as f64).sum::<f64>() / labels.len() as f64;
    if !(rate > 0.0 && rate < 1.0) {
        return f64::INFINITY;
    }
    let entropy = -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln());
    logloss / entropy
}

/// The metrics of an evaluation pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalMetrics {
    /// ROC AUC; `None` when the labels are all of one class.
    pub auc: Option<f64>,
    /// Mean log loss.
    pub logloss: f64,
    /// Normalized entropy (`INFINITY` when the labels are all of one class).
    pub ne: f64,
    /// Number of samples.
    pub count: usize,
}

impl EvalMetrics {
    /// All metrics of predicted probabilities against labels.
    ///
    /// # Panics
    /// If the slices' lengths differ.
    pub fn compute(probs: &[f32], labels: &[f32]) -> Self {
        let logloss = log_loss(probs, labels);
        Self {
            auc: auc(probs, labels),
            logloss,
            ne: ne_from(logloss, labels),
            count: probs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// AUC by definition: over all (positive, negative) pairs, 1 if the positive scores
    /// higher, ½ on a tie.
    fn brute_force_auc(scores: &[f32], labels: &[f32]) -> Option<f64> {
        let mut wins = 0.0f64;
        let mut pairs = 0u64;
        for (i, &sp) in scores.iter().enumerate() {
            if labels[i] <= 0.5 {
                continue;
            }
            for (j, &sn) in scores.iter().enumerate() {
                if labels[j] > 0.5 {
                    continue;
                }
                pairs += 1;
                if sp > sn {
                    wins += 1.0;
                } else if sp == sn {
                    wins += 0.5;
                }
            }
        }
        (pairs > 0).then(|| wins / pairs as f64)
    }

    #[test]
    fn auc_hand_values() {
        // The scikit-learn documentation's example.
        assert_eq!(
            auc(&[0.1, 0.4, 0.35, 0.8], &[0.0, 0.0, 1.0, 1.0]),
            Some(0.75)
        );
        assert_eq!(auc(&[0.5, 0.5], &[0.0, 1.0]), Some(0.5));
        assert_eq!(auc(&[0.9, 0.1], &[0.0, 1.0]), Some(0.0));
        // Two wins over 0.2, two ties with the negative 0.3: 3 of 4 pairs.
        assert_eq!(
            auc(&[0.2, 0.3, 0.3, 0.3], &[0.0, 0.0, 1.0, 1.0]),
            Some(0.75)
        );
        // -0.0 and 0.0 are the same score.
        assert_eq!(auc(&[-0.0, 0.0], &[1.0, 0.0]), Some(0.5));
    }

    #[test]
    fn auc_is_none_for_one_class() {
        assert_eq!(auc(&[], &[]), None);
        assert_eq!(auc(&[0.1, 0.9], &[1.0, 1.0]), None);
        assert_eq!(auc(&[0.1, 0.9], &[0.0, 0.0]), None);
    }

    #[test]
    fn log_loss_and_ne_hand_values() {
        let (p, y) = ([0.9f32, 0.2], [1.0f32, 0.0]);
        // -(ln 0.9 + ln 0.8) / 2; the positive rate is ½, whose entropy is ln 2.
        assert!((log_loss(&p, &y) - 0.164252033486018).abs() < 1e-7);
        assert!((normalized_entropy(&p, &y) - 0.23696559416620613).abs() < 1e-7);

        let (p, y) = ([0.9f32, 0.2, 0.6, 0.3], [1.0f32, 0.0, 0.0, 1.0]);
        assert!((log_loss(&p, &y) - 0.6121919007930318).abs() < 1e-7);
        assert!((normalized_entropy(&p, &y) - 0.8832062193464952).abs() < 1e-7);

        // Predicting exactly the base rate scores NE = 1.
        let p = [0.25f32; 8];
        let y = [1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert!((normalized_entropy(&p, &y) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn log_loss_clips_certain_mistakes() {
        let (p, y) = ([0.0f32, 1.0, 0.5], [1.0f32, 0.0, 1.0]);
        // Two terms of -ln(1e-7) and one of ln 2, over a positive rate of ⅔.
        assert!((log_loss(&p, &y) - 10.97644616100098).abs() < 1e-6);
        assert!((normalized_entropy(&p, &y) - 17.244621891773892).abs() < 1e-6);
        assert!(log_loss(&[1.0], &[1.0]) < 1e-6);
    }

    #[test]
    fn degenerate_sets_are_nan_free() {
        assert_eq!(log_loss(&[], &[]), 0.0);
        assert_eq!(normalized_entropy(&[], &[]), f64::INFINITY);
        assert_eq!(normalized_entropy(&[0.3, 0.6], &[1.0, 1.0]), f64::INFINITY);
        assert_eq!(normalized_entropy(&[0.3, 0.6], &[0.0, 0.0]), f64::INFINITY);
        let m = EvalMetrics::compute(&[0.3], &[0.0]);
        assert_eq!(m.auc, None);
        assert_eq!(m.ne, f64::INFINITY);
        assert_eq!(m.count, 1);
    }

    #[test]
    fn compute_agrees_with_the_functions() {
        let p = [0.9f32, 0.2, 0.6, 0.3, 0.6];
        let y = [1.0f32, 0.0, 0.0, 1.0, 1.0];
        let m = EvalMetrics::compute(&p, &y);
        assert_eq!(m.auc, auc(&p, &y));
        assert_eq!(m.logloss, log_loss(&p, &y));
        assert_eq!(m.ne, normalized_entropy(&p, &y));
        assert_eq!(m.count, 5);
    }

    #[test]
    fn large_auc_matches_pairwise_count() {
        // Large enough for the parallel sort.
        let n = 70_000;
        let scores: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 / 100.0).collect();
        let labels: Vec<f32> = (0..n)
            .map(|i| ((i * 31 + i / 3) % 5 == 0) as u8 as f32)
            .collect();
        // Pairwise count grouped by score value, exact in integers.
        let mut pos = [0u64; 101];
        let mut neg = [0u64; 101];
        for (s, y) in scores.iter().zip(&labels) {
            let k = (s * 100.0).round() as usize;
            if *y > 0.5 {
                pos[k] += 1;
            } else {
                neg[k] += 1;
            }
        }
        let mut twice = 0u128;
        for (a, &p) in pos.iter().enumerate() {
            for (b, &q) in neg.iter().enumerate() {
                let pairs = p as u128 * q as u128;
                twice += match a.cmp(&b) {
                    std::cmp::Ordering::Greater => 2 * pairs,
                    std::cmp::Ordering::Equal => pairs,
                    std::cmp::Ordering::Less => 0,
                };
            }
        }
        let (np, nn): (u64, u64) = (pos.iter().sum(), neg.iter().sum());
        let want = twice as f64 / (2.0 * np as f64 * nn as f64);
        assert_eq!(auc(&scores, &labels), Some(want));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Scores from a handful of values so that ties are everywhere.
        #[test]
        fn auc_matches_brute_force_with_ties(
            data in prop::collection::vec((0u8..6, any::<bool>()), 0..80),
        ) {
            let scores: Vec<f32> = data.iter().map(|&(s, _)| s as f32 * 0.2 - 0.4).collect();
            let labels: Vec<f32> = data.iter().map(|&(_, y)| y as u8 as f32).collect();
            let got = auc(&scores, &labels);
            let want = brute_force_auc(&scores, &labels);
            match (got, want) {
                (Some(g), Some(w)) => prop_assert!((g - w).abs() < 1e-12, "{} vs {}", g, w),
                (g, w) => prop_assert_eq!(g, w),
            }
        }

        #[test]
        fn auc_matches_brute_force_on_continuous_scores(
            data in prop::collection::vec((-1.0f32..1.0, any::<bool>()), 0..60),
        ) {
            let scores: Vec<f32> = data.iter().map(|d| d.0).collect();
            let labels: Vec<f32> = data.iter().map(|d| d.1 as u8 as f32).collect();
            let got = auc(&scores, &labels);
            let want = brute_force_auc(&scores, &labels);
            match (got, want) {
                (Some(g), Some(w)) => prop_assert!((g - w).abs() < 1e-12, "{} vs {}", g, w),
                (g, w) => prop_assert_eq!(g, w),
            }
        }
    }
}
