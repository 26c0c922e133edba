//! The pass-through tower module: a tower's embeddings cross hosts unchanged.
//!
//! DMT §5.2.1 (Table 3) gives every feature such a tower to show that SPTT only
//! reorders the embedding exchange and leaves the model's function intact; here it is
//! the baseline a [`TowerModule`](super::TowerModule) must reduce to when no module is
//! wanted.

use super::TowerCounts;
use crate::error::Result;
use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use std::marker::PhantomData;

/// `y = x` on rows of `F·N` values; no parameters.
#[derive(Debug, Clone)]
pub struct IdentityTower<T> {
    f: usize,
    n: usize,
    counts: TowerCounts,
    _scalar: PhantomData<T>,
}

pub(super) fn counts(f: usize, n: usize) -> Result<TowerCounts> {
    Ok(TowerCounts {
        out_dim: super::checked_sum_of_products("the identity tower's width", &[&[f, n]])?,
        params: 0,
        forward_flops_per_sample: 0,
    })
}

impl<T: Real> IdentityTower<T> {
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) if `f` or `n` is 0 or `f·n` overflows.
    pub fn new(f: usize, n: usize) -> Result<Self> {
        let counts = super::TowerModuleKind::Identity.counts(f, n)?;
        Ok(Self {
            f,
            n,
            counts,
            _scalar: PhantomData,
        })
    }

    pub fn num_features(&self) -> usize {
        self.f
    }

    pub fn feature_dim(&self) -> usize {
        self.n
    }

    /// Always 0.
    pub fn param_count(&self) -> usize {
        0
    }

    /// Always 0: a copy is not arithmetic.
    pub fn forward_flops_per_sample(&self) -> usize {
        0
    }

    pub(super) fn counts(&self) -> TowerCounts {
        self.counts
    }
}

impl<T: Real> Layer<T> for IdentityTower<T> {
    fn in_dim(&self) -> usize {
        self.counts.out_dim
    }

    fn out_dim(&self) -> usize {
        self.counts.out_dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let n = batch * self.counts.out_dim;
        assert_eq!(x.len(), n, "IdentityTower::forward: x");
        assert_eq!(y.len(), n, "IdentityTower::forward: y");
        y.copy_from_slice(x);
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        let n = batch * self.counts.out_dim;
        assert_eq!(x.len(), n, "IdentityTower::backward: x");
        assert_eq!(y.len(), n, "IdentityTower::backward: y");
        assert_eq!(dy.len(), n, "IdentityTower::backward: dy");
        if let Some(dx) = dx {
            assert_eq!(dx.len(), n, "IdentityTower::backward: dx");
            dx.copy_from_slice(dy);
        }
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::check_layer;

    #[test]
    fn forward_and_backward_are_exact_copies() {
        let mut tower = IdentityTower::<f32>::new(3, 2).unwrap();
        assert_eq!((tower.in_dim(), tower.out_dim()), (6, 6));
        let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.37 - 1.1).collect();
        let mut y = vec![0.0; 12];
        tower.forward(&x, &mut y, 2);
        assert_eq!(y, x);
        let dy: Vec<f32> = (0..12).map(|i| (i as f32).sin()).collect();
        let mut dx = vec![f32::NAN; 12];
        tower.backward(&x, &y, &dy, Some(&mut dx), 2);
        assert_eq!(dx, dy);
        tower.backward(&x, &y, &dy, None, 2);
        assert!(tower.params().is_empty());
        assert_eq!(
            (tower.param_count(), tower.forward_flops_per_sample()),
            (0, 0)
        );
    }

    #[test]
    fn gradcheck_f64() {
        let mut tower = IdentityTower::<f64>::new(4, 3).unwrap();
        let err = check_layer(&mut tower, 3, 1e-5, 1e-6, 7).max();
        eprintln!("gradcheck identity tower f64: max relative error {err:e}");
        assert!(err < 1e-6, "{err:e}");
    }

    #[test]
    fn refuses_empty_shapes() {
        assert!(IdentityTower::<f32>::new(0, 4).is_err());
        assert!(IdentityTower::<f32>::new(4, 0).is_err());
        assert!(IdentityTower::<f32>::new(usize::MAX, 2).is_err());
    }
}
