//! DMT's tower module for DCN (§4, Listing 2): a smaller copy of DCN's own interaction,
//! a DCN-v2 [`CrossNet`] over the tower's `F·N` embedding values only, followed by a
//! [`Linear`] map to `F·D` values.
//!
//! Crossing within the tower first is what makes the module a hierarchical interaction
//! (§3.2): the global CrossNet after the exchange then crosses towers' compressed
//! outputs instead of every feature with every other.

use super::{checked_sum_of_products, grow, prefixed, TowerCounts, TowerModuleKind};
use crate::error::{Error, Result};
use crate::layer::{Layer, ParamMut};
use crate::layers::activation::Activation;
use crate::layers::crossnet::CrossNet;
use crate::layers::linear::Linear;
use crate::real::Real;
use rand::Rng;

/// Listing 2's tower module over `F` features of width `N`; see the module docs.
#[derive(Debug, Clone)]
pub struct DcnTower<T> {
    f: usize,
    n: usize,
    d: usize,
    counts: TowerCounts,
    cross: CrossNet<T>,
    proj: Linear<T>,
    /// The cross network's output in the last forward: the projection's input, which
    /// its backward needs again.
    crossed: Vec<T>,
    /// Backward scratch: `dL/d(crossed)`.
    d_crossed: Vec<T>,
}

pub(super) fn counts(
    f: usize,
    n: usize,
    d: usize,
    layers: usize,
    rank: Option<usize>,
) -> Result<TowerCounts> {
    if d == 0 {
        return Err(Error::Config("DCN tower module: D must be positive".into()));
    }
    if rank == Some(0) {
        return Err(Error::Config(
            "DCN tower module: a low rank must be positive (leave it unset for full rank)".into(),
        ));
    }
    // The caller checked F·N.
    let w = f * n;
    // Per cross layer: parameters (kernel, bias) and FLOPs (kernel GEMM, then x_0 ⊙ z,
    // + b and + x_l), as `towerrec-sim` counts DCN's global CrossNet.
    let (kernel_params, kernel_flops): (&[usize], &[usize]) = match &rank {
        None => (&[w, w], &[2, w, w]),
        Some(r) => (&[2, w, *r], &[4, w, *r]),
    };
    Ok(TowerCounts {
        out_dim: checked_sum_of_products("output width F·D", &[&[f, d]])?,
        params: checked_sum_of_products(
            "parameter count",
            &[
                &[&[layers], kernel_params].concat(),
                &[layers, w],
                &[w, f, d],
                &[f, d],
            ],
        )?,
        forward_flops_per_sample: checked_sum_of_products(
            "FLOP count",
            &[
                &[&[layers], kernel_flops].concat(),
                &[layers, 3, w],
                &[2, w, f, d],
            ],
        )?,
    })
}

impl<T: Real> DcnTower<T> {
    /// Sets the output projection's bias to zero (the CrossNet's biases start at zero).
    pub fn zero_biases(&mut self) {
        self.proj.zero_bias();
    }

    /// A `layers`-deep cross network of width `F·N` (low-rank if `rank` is given), then
    /// `Linear(F·N → F·D)`; weights drawn as [`CrossNet::new`] and [`Linear::new`] draw
    /// theirs. `layers = 0` leaves only the projection.
    ///
    /// # Errors
    /// [`Error::Config`] if `f`, `n`, `d` or the rank is 0, or if a size overflows.
    pub fn new(
        f: usize,
        n: usize,
        d: usize,
        layers: usize,
        rank: Option<usize>,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let counts = TowerModuleKind::Dcn { d, layers, rank }.counts(f, n)?;
        let cross = CrossNet::new(f * n, layers, rank, rng);
        // Identity activation, as Listing 2: the global interaction and the over-arch
        // follow.
        let proj = Linear::new(f * n, f * d, Activation::Identity, rng);
        Ok(Self {
            f,
            n,
            d,
            counts,
            cross,
            proj,
            crossed: Vec::new(),
            d_crossed: Vec::new(),
        })
    }

    pub fn kind(&self) -> TowerModuleKind {
        TowerModuleKind::Dcn {
            d: self.d,
            layers: self.cross.num_layers(),
            rank: self.cross.rank(),
        }
    }

    pub fn num_features(&self) -> usize {
        self.f
    }

    pub fn feature_dim(&self) -> usize {
        self.n
    }

    /// With `W = F·N`: `L·(W² + W)` (or `L·(2·W·r + W)`) in the cross network and
    /// `W·F·D + F·D` in the projection.
    pub fn param_count(&self) -> usize {
        self.counts.params
    }

    /// With `W = F·N`: `L·(2·W² + 3·W)` (or `L·(4·W·r + 3·W)`) and `2·W·F·D`
    /// (multiply-add = 2; the projection's bias not counted).
    pub fn forward_flops_per_sample(&self) -> usize {
        self.counts.forward_flops_per_sample
    }

    pub(super) fn counts(&self) -> TowerCounts {
        self.counts
    }
}

impl<T: Real> Layer<T> for DcnTower<T> {
    fn in_dim(&self) -> usize {
        self.f * self.n
    }

    fn out_dim(&self) -> usize {
        self.counts.out_dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        assert_eq!(x.len(), batch * self.f * self.n, "DcnTower::forward: x");
        assert_eq!(y.len(), batch * self.counts.out_dim, "DcnTower::forward: y");
        let crossed = grow(&mut self.crossed, batch * self.f * self.n);
        self.cross.forward(x, crossed, batch);
        self.proj.forward(crossed, y, batch);
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        let w = batch * self.f * self.n;
        assert_eq!(x.len(), w, "DcnTower::backward: x");
        assert_eq!(
            y.len(),
            batch * self.counts.out_dim,
            "DcnTower::backward: y"
        );
        assert_eq!(
            dy.len(),
            batch * self.counts.out_dim,
            "DcnTower::backward: dy"
        );
        let crossed = &self.crossed[..w];
        let d_crossed = grow(&mut self.d_crossed, w);
        self.proj
            .backward(crossed, y, dy, Some(&mut *d_crossed), batch);
        self.cross.backward(x, crossed, d_crossed, dx, batch);
    }

    fn set_dense_precision(&mut self, precision: crate::matmul::DensePrecision) {
        self.cross.set_dense_precision(precision);
        self.proj.set_dense_precision(precision);
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        let mut out = prefixed("cross", self.cross.params());
        out.extend(prefixed("proj", self.proj.params()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::{check_layer, check_layer_at};
    use crate::layers::linear::test_grid;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// Cross biases random too: [`CrossNet`] starts them at 0, which would leave the
    /// `x_0 ⊙ b` path half-tested.
    fn tower<T: Real>(
        f: usize,
        n: usize,
        d: usize,
        layers: usize,
        rank: Option<usize>,
        seed: u64,
    ) -> DcnTower<T> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tower = DcnTower::new(f, n, d, layers, rank, &mut rng).unwrap();
        for p in tower.params() {
            if p.name.starts_with("cross.") && p.name.ends_with("bias") {
                p.value
                    .iter_mut()
                    .for_each(|b| *b = T::of(rng.random_range(-0.5..0.5)));
            }
        }
        tower
    }

    /// (layers, rank).
    const SHAPES: [(usize, Option<usize>); 4] = [(2, None), (2, Some(2)), (1, Some(1)), (0, None)];

    #[test]
    fn gradcheck_f64() {
        for (layers, rank) in SHAPES {
            let mut layer = tower::<f64>(2, 3, 2, layers, rank, 1);
            let err = check_layer(&mut layer, 4, 1e-5, 1e-6, 2);
            eprintln!("gradcheck dcn tower f64 layers={layers} rank={rank:?}: {err:?}");
            assert!(err.max() < 1e-6, "layers={layers} rank={rank:?}: {err:?}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        // One cross layer and the projection are of degree ≤ 2 in each input and
        // parameter coordinate, so on the grid the central difference is exact (see
        // `test_grid`); deeper stacks are checked in f64 above.
        for rank in [None, Some(1)] {
            let mut rng = StdRng::seed_from_u64(3);
            let mut layer = tower::<f32>(2, 2, 1, 1, rank, 3);
            test_grid::snap_params(&mut layer);
            let batch = 3;
            let x = test_grid::values(batch * layer.in_dim(), &mut rng);
            let r = test_grid::values(batch * layer.out_dim(), &mut rng);
            let err = check_layer_at(&mut layer, &x, &r, batch, test_grid::STEP, 1e-3);
            eprintln!("gradcheck dcn tower f32 rank={rank:?}: {err:?}");
            assert!(err.max() < 1e-3, "rank={rank:?}: {err:?}");
        }
    }

    #[test]
    fn forward_matches_hand_computation() {
        // F = 1, N = 2, D = 2, one full-rank cross layer.
        let mut layer = tower::<f64>(1, 2, 2, 1, None, 0);
        let names: Vec<String> = layer.params().into_iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["cross.0.weight", "cross.0.bias", "proj.weight", "proj.bias"]
        );
        let values: [&[f64]; 4] = [
            &[1.0, 2.0, 0.0, -1.0],
            &[0.5, -1.0],
            &[1.0, 1.0, 2.0, -1.0],
            &[0.5, 0.0],
        ];
        for (p, v) in layer.params().into_iter().zip(values) {
            p.value.copy_from_slice(v);
        }
        let mut y = [0.0; 2];
        layer.forward(&[1.0, 2.0], &mut y, 1);
        // z = W·[1, 2] + b = [5.5, −3] → x1 = [1·5.5 + 1, 2·(−3) + 2] = [6.5, −4]
        // y = P·x1 + c = [6.5 − 4 + 0.5, 13 + 4]
        assert_eq!(y, [3.0, 17.0]);
    }

    #[test]
    fn counts_match_hand_computation() {
        // F = 2, N = 2 (W = 4), D = 3: projection 4·6 + 6 = 30 parameters, 2·4·6 = 48
        // FLOPs.
        for (layers, rank, params, flops) in [
            // 2 layers · (16 + 4); 2 · (2·16 + 3·4)
            (2, None, 40 + 30, 88 + 48),
            // 2 layers · (2·4·1 + 4); 2 · (4·4·1 + 3·4)
            (2, Some(1), 24 + 30, 56 + 48),
            (0, None, 30, 48),
        ] {
            let mut layer = tower::<f32>(2, 2, 3, layers, rank, 0);
            assert_eq!((layer.in_dim(), layer.out_dim()), (4, 6));
            assert_eq!(layer.param_count(), params, "{layers} {rank:?}");
            let actual: usize = layer.params().iter().map(|p| p.value.len()).sum();
            assert_eq!(actual, params, "{layers} {rank:?}");
            assert_eq!(layer.forward_flops_per_sample(), flops, "{layers} {rank:?}");
        }
    }

    #[test]
    fn refuses_bad_parameters() {
        let mut rng = StdRng::seed_from_u64(0);
        for (f, n, d, layers, rank) in [
            (2, 3, 0, 1, None),
            (2, 3, 2, 1, Some(0)),
            (0, 3, 2, 1, None),
            (2, 0, 2, 1, None),
            // W² overflows: refused before anything is allocated.
            (1 << 17, 1 << 17, 1, 1, None),
        ] {
            let got = DcnTower::<f32>::new(f, n, d, layers, rank, &mut rng);
            assert!(
                matches!(got, Err(Error::Config(_))),
                "(f, n, d, layers, rank) = {:?} gave {:?}",
                (f, n, d, layers, rank),
                got.map(|_| ())
            );
        }
    }

    #[test]
    fn backward_without_dx_and_buffer_reuse() {
        let (f, n) = (2, 2);
        let mut layer = tower::<f64>(f, n, 3, 2, Some(2), 9);
        let out = layer.out_dim();
        let x: Vec<f64> = (0..5 * f * n).map(|i| (i as f64 * 0.37).sin()).collect();
        let dy: Vec<f64> = (0..5 * out).map(|i| (i as f64 * 0.61).cos()).collect();
        let run = |layer: &mut DcnTower<f64>, batch: usize, want_dx: bool| {
            let mut y = vec![0.0; batch * out];
            layer.forward(&x[..batch * f * n], &mut y, batch);
            let mut dx = vec![0.0; batch * f * n];
            let dxs = want_dx.then_some(&mut dx[..]);
            layer.backward(&x[..batch * f * n], &y, &dy[..batch * out], dxs, batch);
            let grads: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
            (y, dx, grads)
        };
        let (y2, dx2, g2) = run(&mut layer, 2, true);
        run(&mut layer, 5, true);
        let (y2b, dx2b, g2b) = run(&mut layer, 2, true);
        assert_eq!((&y2, &dx2, &g2), (&y2b, &dx2b, &g2b));
        let (_, _, g2c) = run(&mut layer, 2, false);
        assert_eq!(g2, g2c);
        assert!(g2.iter().flatten().any(|&g| g != 0.0));
    }
}
