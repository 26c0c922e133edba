//! Element-wise activations: the [`Activation`] a fused [`Linear`](super::linear::Linear)
//! applies to its output, and [`ActivationLayer`] for using one on its own.
//!
//! Derivatives are expressed from the activation's *output*, so a backward pass needs only
//! the `y` its forward wrote, never the pre-activation.

use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use std::marker::PhantomData;

/// An element-wise activation, named in configs as `identity`, `relu`, `sigmoid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Identity,
    Relu,
    Sigmoid,
}

/// `1 / (1 + e^{-x})` without overflow: `e^{-x}` is only formed for `x ≥ 0`, `e^{x}` only
/// for `x < 0`, so the exponential never exceeds 1.
#[inline]
pub fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::zero() {
        T::one() / (T::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

impl Activation {
    /// `act(x)`.
    #[inline]
    pub fn apply<T: Real>(self, x: T) -> T {
        match self {
            Activation::Identity => x,
            Activation::Relu => {
                if x > T::zero() {
                    x
                } else {
                    T::zero()
                }
            }
            Activation::Sigmoid => sigmoid(x),
        }
    }

    /// `act'(x)` written as a function of `y = act(x)`.
    #[inline]
    pub fn grad_from_output<T: Real>(self, y: T) -> T {
        match self {
            Activation::Identity => T::one(),
            Activation::Relu => {
                if y > T::zero() {
                    T::one()
                } else {
                    T::zero()
                }
            }
            Activation::Sigmoid => y * (T::one() - y),
        }
    }

    /// Applies the activation to every element in place.
    pub fn apply_slice<T: Real>(self, xs: &mut [T]) {
        if self != Activation::Identity {
            xs.iter_mut().for_each(|v| *v = self.apply(*v));
        }
    }

    /// `dz = dy ⊙ act'(y)`, element-wise.
    pub fn backward_slice<T: Real>(self, y: &[T], dy: &[T], dz: &mut [T]) {
        assert!(y.len() == dy.len() && dy.len() == dz.len());
        for ((d, &yv), &g) in dz.iter_mut().zip(y).zip(dy) {
            *d = g * self.grad_from_output(yv);
        }
    }
}

/// An activation as a stand-alone layer of width `dim`; it has no parameters.
#[derive(Debug, Clone)]
pub struct ActivationLayer<T> {
    dim: usize,
    activation: Activation,
    _scalar: PhantomData<fn() -> T>,
}

impl<T: Real> ActivationLayer<T> {
    pub fn new(dim: usize, activation: Activation) -> Self {
        Self {
            dim,
            activation,
            _scalar: PhantomData,
        }
    }

    pub fn activation(&self) -> Activation {
        self.activation
    }
}

impl<T: Real> Layer<T> for ActivationLayer<T> {
    fn in_dim(&self) -> usize {
        self.dim
    }

    fn out_dim(&self) -> usize {
        self.dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let n = batch * self.dim;
        assert_eq!(x.len(), n, "ActivationLayer::forward: x");
        assert_eq!(y.len(), n, "ActivationLayer::forward: y");
        y.copy_from_slice(x);
        self.activation.apply_slice(y);
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        let n = batch * self.dim;
        assert_eq!(x.len(), n, "ActivationLayer::backward: x");
        assert_eq!(y.len(), n, "ActivationLayer::backward: y");
        assert_eq!(dy.len(), n, "ActivationLayer::backward: dy");
        if let Some(dx) = dx {
            assert_eq!(dx.len(), n, "ActivationLayer::backward: dx");
            self.activation.backward_slice(y, dy, dx);
        }
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::check_layer_at;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Inputs with `|x| ≥ 0.1`, so a finite-difference step of up to 1e-2 never crosses
    /// the ReLU kink at 0.
    fn away_from_zero(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let m = rng.random_range(0.1..1.0);
                if rng.random_bool(0.5) {
                    m
                } else {
                    -m
                }
            })
            .collect()
    }

    fn check<T: Real>(act: Activation, h: f64, floor: f64) -> f64 {
        let (batch, dim) = (4, 5);
        let x: Vec<T> = away_from_zero(batch * dim, 7)
            .into_iter()
            .map(T::of)
            .collect();
        let r: Vec<T> = away_from_zero(batch * dim, 8)
            .into_iter()
            .map(T::of)
            .collect();
        let mut layer = ActivationLayer::<T>::new(dim, act);
        check_layer_at(&mut layer, &x, &r, batch, h, floor).max()
    }

    #[test]
    fn gradcheck_f64() {
        for act in [Activation::Identity, Activation::Relu, Activation::Sigmoid] {
            let err = check::<f64>(act, 1e-5, 1e-6);
            eprintln!("gradcheck activation f64 {act:?}: max relative error {err:e}");
            assert!(err < 1e-6, "{act:?}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        for act in [Activation::Identity, Activation::Relu, Activation::Sigmoid] {
            let err = check::<f32>(act, 1e-2, 1e-3);
            eprintln!("gradcheck activation f32 {act:?}: max relative error {err:e}");
            assert!(err < 1e-3, "{act:?}: {err:e}");
        }
    }

    #[test]
    fn sigmoid_is_stable_and_exact() {
        for x in [-3.0f64, -0.5, 0.0, 0.25, 4.0] {
            let naive = 1.0 / (1.0 + (-x).exp());
            assert!((sigmoid(x) - naive).abs() < 1e-15, "{x}");
        }
        assert_eq!(sigmoid(1000.0f64), 1.0);
        assert_eq!(sigmoid(-1000.0f64), 0.0);
        assert!(sigmoid(-100.0f32) > 0.0 && sigmoid(-100.0f32).is_finite());
        assert_eq!(sigmoid(100.0f32), 1.0);
    }

    #[test]
    fn apply_and_grad_values() {
        assert_eq!(Activation::Relu.apply(-2.0f64), 0.0);
        assert_eq!(Activation::Relu.apply(3.0f64), 3.0);
        assert_eq!(Activation::Relu.grad_from_output(0.0f64), 0.0);
        assert_eq!(Activation::Relu.grad_from_output(3.0f64), 1.0);
        assert_eq!(Activation::Identity.apply(-2.0f64), -2.0);
        assert_eq!(Activation::Identity.grad_from_output(-2.0f64), 1.0);
        assert_eq!(Activation::Sigmoid.apply(0.0f64), 0.5);
        assert_eq!(Activation::Sigmoid.grad_from_output(0.5f64), 0.25);
    }
}
