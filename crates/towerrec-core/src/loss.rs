//! Binary cross-entropy on logits, the CTR models' training loss.
//!
//! Taking logits rather than probabilities lets the loss use the stable form
//! `max(z, 0) − z·y + ln(1 + e^{−|z|})`, finite for any finite `z`, and gives the simple
//! gradient `σ(z) − y`. Sums run in f64 so that the f32 training loss of a large batch
//! does not lose precision.

use crate::layers::activation::sigmoid;
use crate::real::Real;

/// `ℓ(z, y) = −y·ln σ(z) − (1 − y)·ln(1 − σ(z))`, in f64.
#[inline]
fn bce_one(z: f64, y: f64) -> f64 {
    z.max(0.0) - z * y + (-z.abs()).exp().ln_1p()
}

/// Writes `scale · (σ(z) − y)` into `grad` and returns `Σ ℓ(z, y)`.
fn bce_impl<T: Real>(logits: &[T], labels: &[T], grad: Option<&mut [T]>, scale: f64) -> f64 {
    assert_eq!(
        logits.len(),
        labels.len(),
        "bce_with_logits: logits vs labels"
    );
    if let Some(grad) = grad {
        assert_eq!(grad.len(), logits.len(), "bce_with_logits: grad");
        for ((g, &z), &y) in grad.iter_mut().zip(logits).zip(labels) {
            *g = T::of(scale * (sigmoid(z.f64()) - y.f64()));
        }
    }
    logits
        .iter()
        .zip(labels)
        .map(|(z, y)| bce_one(z.f64(), y.f64()))
        .sum()
}

/// Mean binary cross-entropy of `logits` against `labels` (in `[0, 1]`) over the batch.
/// When `grad` is given it receives `dL/dz = (σ(z) − y) / B`.
/// An empty batch has loss 0 (and writes no gradient).
///
/// # Panics
/// If the slices' lengths differ.
pub fn bce_with_logits<T: Real>(logits: &[T], labels: &[T], grad: Option<&mut [T]>) -> f64 {
    let b = logits.len();
    if b == 0 {
        assert!(labels.is_empty(), "bce_with_logits: logits vs labels");
        return 0.0;
    }
    bce_impl(logits, labels, grad, 1.0 / b as f64) / b as f64
}

/// Summed binary cross-entropy, for callers that normalize themselves (a global batch
/// split over workers, a weighted average). `grad` receives `σ(z) − y`.
///
/// # Panics
/// If the slices' lengths differ.
pub fn bce_with_logits_sum<T: Real>(logits: &[T], labels: &[T], grad: Option<&mut [T]>) -> f64 {
    bce_impl(logits, labels, grad, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(z: f64, y: f64) -> f64 {
        let p = 1.0 / (1.0 + (-z).exp());
        -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
    }

    #[test]
    fn matches_naive_formula_for_moderate_logits() {
        let logits = [-4.0f64, -1.5, -0.2, 0.0, 0.3, 2.0, 5.0];
        let labels = [0.0f64, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0];
        let want: f64 = logits
            .iter()
            .zip(&labels)
            .map(|(&z, &y)| naive(z, y))
            .sum::<f64>()
            / logits.len() as f64;
        let got = bce_with_logits(&logits, &labels, None);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        let sum = bce_with_logits_sum(&logits, &labels, None);
        assert!((sum - want * logits.len() as f64).abs() < 1e-11);
        // f32 inputs are widened before the sum.
        let l32: Vec<f32> = logits.iter().map(|&v| v as f32).collect();
        let y32: Vec<f32> = labels.iter().map(|&v| v as f32).collect();
        assert!((bce_with_logits(&l32, &y32, None) - want).abs() < 1e-6);
    }

    #[test]
    fn finite_at_extreme_logits() {
        let logits = [1000.0f32, -1000.0, 1000.0, -1000.0];
        let labels = [0.0f32, 1.0, 1.0, 0.0];
        let mut grad = [0.0f32; 4];
        let loss = bce_with_logits(&logits, &labels, Some(&mut grad));
        // The two wrong-side logits cost 1000 each, the two right-side ones 0.
        assert!(loss.is_finite());
        assert!((loss - 500.0).abs() < 1e-9, "{loss}");
        assert_eq!(grad, [0.25, -0.25, 0.0, 0.0]);
        let single = bce_with_logits(&[-1000.0f64], &[1.0], None);
        assert!((single - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn grad_matches_finite_differences() {
        let logits = [-3.0f64, -0.7, 0.1, 1.2, 4.0];
        let labels = [1.0f64, 0.0, 1.0, 0.25, 0.0];
        let mut grad = [0.0f64; 5];
        bce_with_logits(&logits, &labels, Some(&mut grad));
        let h = 1e-6;
        for i in 0..logits.len() {
            let mut up = logits;
            up[i] += h;
            let mut down = logits;
            down[i] -= h;
            let numeric = (bce_with_logits(&up, &labels, None)
                - bce_with_logits(&down, &labels, None))
                / (2.0 * h);
            let err = crate::gradcheck::rel_err(grad[i], numeric, 1e-8);
            assert!(err < 1e-6, "logit {i}: {} vs {numeric} ({err:e})", grad[i]);
        }
    }

    #[test]
    fn empty_batch_is_zero() {
        assert_eq!(bce_with_logits::<f32>(&[], &[], Some(&mut [])), 0.0);
    }
}
