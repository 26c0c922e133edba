//! Central finite-difference checks of a [`Layer`]'s backward, used by every layer's tests.
//!
//! The scalar checked is `L = Σ r ⊙ f(x)` for a fixed random `r`, so `dL/dy = r`.

use crate::layer::Layer;
use crate::real::Real;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Largest relative errors found, for the input gradient and over all parameters.
#[derive(Debug, Clone, Copy)]
pub struct GradCheck {
    pub input: f64,
    pub params: f64,
}

impl GradCheck {
    /// The larger of the two errors.
    pub fn max(&self) -> f64 {
        self.input.max(self.params)
    }
}

/// Relative error `|a − n| / max(|a|, |n|, floor)`; the floor keeps gradients that are
/// zero up to rounding from reading as 100% errors.
pub fn rel_err(analytic: f64, numeric: f64, floor: f64) -> f64 {
    (analytic - numeric).abs() / analytic.abs().max(numeric.abs()).max(floor)
}

fn objective<T: Real, L: Layer<T>>(layer: &mut L, x: &[T], r: &[T], batch: usize) -> f64 {
    let mut y = vec![T::zero(); batch * layer.out_dim()];
    layer.forward(x, &mut y, batch);
    y.iter().zip(r).map(|(a, b)| (*a * *b).f64()).sum()
}

/// Checks `layer` on random input (uniform in [-1, 1]) of `batch` rows with step `h`.
/// Returns the largest relative errors (floor `floor`) of the input and parameter gradients.
pub fn check_layer<T: Real, L: Layer<T>>(
    layer: &mut L,
    batch: usize,
    h: f64,
    floor: f64,
    seed: u64,
) -> GradCheck {
    let mut rng = StdRng::seed_from_u64(seed);
    let x: Vec<T> = (0..batch * layer.in_dim())
        .map(|_| T::of(rng.random_range(-1.0..1.0)))
        .collect();
    let r: Vec<T> = (0..batch * layer.out_dim())
        .map(|_| T::of(rng.random_range(-1.0..1.0)))
        .collect();
    check_layer_at(layer, &x, &r, batch, h, floor)
}

/// As [`check_layer`] at a given input `x` and output weighting `r`.
pub fn check_layer_at<T: Real, L: Layer<T>>(
    layer: &mut L,
    x: &[T],
    r: &[T],
    batch: usize,
    h: f64,
    floor: f64,
) -> GradCheck {
    let mut y = vec![T::zero(); batch * layer.out_dim()];
    layer.forward(x, &mut y, batch);
    let mut dx = vec![T::zero(); x.len()];
    layer.backward(x, &y, r, Some(&mut dx), batch);
    let analytic_params: Vec<Vec<T>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();

    let mut input = 0.0f64;
    let mut xp = x.to_vec();
    for i in 0..x.len() {
        let orig = xp[i];
        xp[i] = orig + T::of(h);
        let up = objective(layer, &xp, r, batch);
        xp[i] = orig - T::of(h);
        let down = objective(layer, &xp, r, batch);
        xp[i] = orig;
        input = input.max(rel_err(dx[i].f64(), (up - down) / (2.0 * h), floor));
    }

    let mut params = 0.0f64;
    for (pi, analytic) in analytic_params.iter().enumerate() {
        for (j, a) in analytic.iter().enumerate() {
            let orig = layer.params()[pi].value[j];
            layer.params()[pi].value[j] = orig + T::of(h);
            let up = objective(layer, x, r, batch);
            layer.params()[pi].value[j] = orig - T::of(h);
            let down = objective(layer, x, r, batch);
            layer.params()[pi].value[j] = orig;
            params = params.max(rel_err(a.f64(), (up - down) / (2.0 * h), floor));
        }
    }
    GradCheck { input, params }
}
