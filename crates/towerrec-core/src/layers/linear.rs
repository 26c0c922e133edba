//! A fully connected layer fused with its activation: `y = act(x · Wᵀ + b)`.
//!
//! Fusing lets the backward recover `act'` from `y` alone, so no pre-activation buffer is
//! kept. The weight is stored `out × in` row-major, PyTorch's layout, so checkpoints map
//! one to one.

use super::activation::Activation;
use crate::layer::{Layer, ParamMut};
use crate::matmul::{matmul_in, Bf16Scratch, DensePrecision};
use crate::real::Real;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

/// `n` draws from `Normal(0, std)`, converted to `T`.
pub(crate) fn normal_vec<T: Real>(n: usize, std: f64, rng: &mut impl Rng) -> Vec<T> {
    assert!(std.is_finite() && std > 0.0, "normal_vec: std = {std}");
    let dist = Normal::new(0.0, std).expect("std was checked to be finite and positive");
    (0..n).map(|_| T::of(dist.sample(rng))).collect()
}

/// `y = act(x · Wᵀ + b)` with `W` of shape `out × in` and `b` of length `out`.
#[derive(Debug, Clone)]
pub struct Linear<T> {
    in_dim: usize,
    out_dim: usize,
    activation: Activation,
    weight: Vec<T>,
    bias: Vec<T>,
    grad_weight: Vec<T>,
    grad_bias: Vec<T>,
    /// `dL/dz` for the pre-activation `z`; grows to the largest batch seen and stays.
    dz: Vec<T>,
    /// Per-block partial sums of the bias gradient (`blocks × out`), reduced in order.
    bias_partials: Vec<T>,
    /// How the matrix products take their operands, and their rounded copies.
    precision: DensePrecision,
    scratch: Box<Bf16Scratch<T>>,
}

/// Rows per block of the element-wise passes. Fixed, so that the bias gradient's
/// summation order (and result) does not depend on the number of threads.
const BLOCK_ROWS: usize = 64;

impl<T: Real> Linear<T> {
    /// Sets the bias to zero (a Tower Module's optional start: see
    /// [`crate::layers::tower::TowerModule::zero_biases`]).
    pub fn zero_bias(&mut self) {
        self.bias.iter_mut().for_each(|b| *b = T::zero());
    }

    /// Initialized as the DLRM reference does: `W ~ N(0, √(2/(in+out)))`,
    /// `b ~ N(0, √(1/out))`.
    pub fn new(in_dim: usize, out_dim: usize, activation: Activation, rng: &mut impl Rng) -> Self {
        assert!(
            in_dim > 0 && out_dim > 0,
            "Linear::new({in_dim}, {out_dim})"
        );
        let w_std = (2.0 / (in_dim + out_dim) as f64).sqrt();
        let b_std = (1.0 / out_dim as f64).sqrt();
        let weight = normal_vec(out_dim * in_dim, w_std, rng);
        let bias = normal_vec(out_dim, b_std, rng);
        Self {
            in_dim,
            out_dim,
            activation,
            weight,
            bias,
            grad_weight: vec![T::zero(); out_dim * in_dim],
            grad_bias: vec![T::zero(); out_dim],
            dz: Vec::new(),
            bias_partials: Vec::new(),
            precision: DensePrecision::Fp32,
            scratch: Box::default(),
        }
    }

    /// `out × in`, row-major.
    pub fn weight(&self) -> &[T] {
        &self.weight
    }

    pub fn bias(&self) -> &[T] {
        &self.bias
    }

    pub fn activation(&self) -> Activation {
        self.activation
    }
}

impl<T: Real> Layer<T> for Linear<T> {
    fn in_dim(&self) -> usize {
        self.in_dim
    }

    fn out_dim(&self) -> usize {
        self.out_dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let (n_in, n_out) = (self.in_dim, self.out_dim);
        assert_eq!(x.len(), batch * n_in, "Linear::forward: x");
        assert_eq!(y.len(), batch * n_out, "Linear::forward: y");
        let (p, s) = (self.precision, &mut self.scratch);
        matmul_in(
            p,
            s,
            batch,
            n_out,
            n_in,
            x,
            false,
            &self.weight,
            true,
            y,
            false,
        );
        // Bias and activation in one parallel pass over the GEMM's output.
        let (bias, act) = (&self.bias, self.activation);
        y.par_chunks_mut(BLOCK_ROWS * n_out).for_each(|block| {
            for row in block.chunks_exact_mut(n_out) {
                for (v, &b) in row.iter_mut().zip(bias) {
                    *v += b;
                }
                act.apply_slice(row);
            }
        });
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        let (n_in, n_out) = (self.in_dim, self.out_dim);
        let n = batch * n_out;
        assert_eq!(x.len(), batch * n_in, "Linear::backward: x");
        assert_eq!(y.len(), n, "Linear::backward: y");
        assert_eq!(dy.len(), n, "Linear::backward: dy");
        // One parallel pass: dz = dy ⊙ act'(y) and each block's partial bias gradient.
        let blocks = batch.div_ceil(BLOCK_ROWS);
        self.bias_partials.resize(blocks * n_out, T::zero());
        let act = self.activation;
        let identity = act == Activation::Identity;
        if !identity && self.dz.len() < n {
            self.dz.resize(n, T::zero());
        }
        let chunk = BLOCK_ROWS * n_out;
        if identity {
            self.bias_partials
                .par_chunks_mut(n_out)
                .zip(dy.par_chunks(chunk))
                .for_each(|(partial, dyb)| column_sums(dyb, partial));
        } else {
            self.bias_partials
                .par_chunks_mut(n_out)
                .zip(self.dz[..n].par_chunks_mut(chunk))
                .zip(dy.par_chunks(chunk).zip(y.par_chunks(chunk)))
                .for_each(|((partial, dzb), (dyb, yb))| {
                    act.backward_slice(yb, dyb, dzb);
                    column_sums(dzb, partial);
                });
        }
        let dz: &[T] = if identity { dy } else { &self.dz[..n] };
        let (p, s) = (self.precision, &mut self.scratch);
        // dW (out×in) = dzᵀ (out×batch) · x (batch×in)
        matmul_in(
            p,
            s,
            n_out,
            n_in,
            batch,
            dz,
            true,
            x,
            false,
            &mut self.grad_weight,
            false,
        );
        if let Some(dx) = dx {
            assert_eq!(dx.len(), batch * n_in, "Linear::backward: dx");
            // dx (batch×in) = dz (batch×out) · W (out×in)
            matmul_in(
                p,
                s,
                batch,
                n_in,
                n_out,
                dz,
                false,
                &self.weight,
                false,
                dx,
                false,
            );
        }
        self.grad_bias.fill(T::zero());
        for partial in self.bias_partials.chunks_exact(n_out) {
            for (g, &p) in self.grad_bias.iter_mut().zip(partial) {
                *g += p;
            }
        }
    }

    fn set_dense_precision(&mut self, precision: DensePrecision) {
        self.precision = precision;
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        vec![
            ParamMut {
                name: "weight".into(),
                value: &mut self.weight,
                grad: &mut self.grad_weight,
            },
            ParamMut {
                name: "bias".into(),
                value: &mut self.bias,
                grad: &mut self.grad_bias,
            },
        ]
    }
}

/// `sums[c] = Σ_rows block[row][c]` for a row-major block of `sums.len()` columns.
fn column_sums<T: Real>(block: &[T], sums: &mut [T]) {
    sums.fill(T::zero());
    for row in block.chunks_exact(sums.len()) {
        for (s, &v) in sums.iter_mut().zip(row) {
            *s += v;
        }
    }
}

/// For the f32 gradient checks of every layer: inputs, output weights and parameters on
/// multiples of 1/8 and a step of 1/128 (≈ 1e-2). Every product and short sum the layers
/// form is then exact in f32, so for layers of degree ≤ 2 in each coordinate the central
/// difference is exact too and the check measures the backward, not f32 rounding (which
/// is ≈ 1e-5 absolute at this step and would dominate any gradient near the 1e-3 floor).
#[cfg(test)]
pub(crate) mod test_grid {
    use crate::layer::Layer;
    use crate::real::Real;
    use rand::Rng;

    pub const STEP: f64 = 1.0 / 128.0;

    pub fn values<T: Real>(n: usize, rng: &mut impl Rng) -> Vec<T> {
        (0..n)
            .map(|_| T::of(f64::from(rng.random_range(-8i32..=8)) / 8.0))
            .collect()
    }

    /// `n` test values: on the grid, or uniform in [-1, 1].
    pub fn draw<T: Real>(grid: bool, n: usize, rng: &mut impl Rng) -> Vec<T> {
        if grid {
            values(n, rng)
        } else {
            (0..n).map(|_| T::of(rng.random_range(-1.0..1.0))).collect()
        }
    }

    pub fn snap_params<T: Real, L: Layer<T>>(layer: &mut L) {
        for p in layer.params() {
            for v in p.value.iter_mut() {
                *v = T::of((v.f64() * 8.0).round() / 8.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::check_layer_at;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// Smallest `|z|` over the pre-activations `x·Wᵀ + b`, in f64.
    fn min_abs_preact<T: Real>(layer: &Linear<T>, x: &[T], batch: usize) -> f64 {
        let (w, b) = (layer.weight(), layer.bias());
        let (ni, no) = (layer.in_dim, layer.out_dim);
        let mut m = f64::INFINITY;
        for r in 0..batch {
            for o in 0..no {
                let z: f64 = b[o].f64()
                    + (0..ni)
                        .map(|i| x[r * ni + i].f64() * w[o * ni + i].f64())
                        .sum::<f64>();
                m = m.min(z.abs());
            }
        }
        m
    }

    /// Gradient check at the first seed whose pre-activations all stay `margin` away from
    /// 0, so that no finite-difference step crosses a ReLU kink. `grid`: see [`test_grid`].
    fn check<T: Real>(
        act: Activation,
        dims: (usize, usize, usize),
        h: f64,
        floor: f64,
        grid: bool,
    ) -> f64 {
        let (batch, ni, no) = dims;
        let margin = 10.0 * h;
        for seed in 0..200u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut layer = Linear::<T>::new(ni, no, act, &mut rng);
            if grid {
                test_grid::snap_params(&mut layer);
            }
            let x = test_grid::draw(grid, batch * ni, &mut rng);
            let r = test_grid::draw(grid, batch * no, &mut rng);
            if act == Activation::Relu && min_abs_preact(&layer, &x, batch) < margin {
                continue;
            }
            return check_layer_at(&mut layer, &x, &r, batch, h, floor).max();
        }
        panic!("no seed keeps the ReLU pre-activations {margin} away from 0");
    }

    #[test]
    fn gradcheck_f64() {
        for act in [Activation::Identity, Activation::Relu, Activation::Sigmoid] {
            let err = check::<f64>(act, (5, 7, 6), 1e-5, 1e-6, false);
            eprintln!("gradcheck linear f64 {act:?}: max relative error {err:e}");
            assert!(err < 1e-6, "{act:?}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        for act in [Activation::Identity, Activation::Relu] {
            let err = check::<f32>(act, (3, 4, 3), test_grid::STEP, 1e-3, true);
            eprintln!("gradcheck linear f32 {act:?}: max relative error {err:e}");
            assert!(err < 1e-3, "{act:?}: {err:e}");
        }
        // σ is not exact on the grid: its f32 rounding (≈ 6e-8 / 2h ≈ 4e-6 per output)
        // needs a 1e-2 floor to stay well under 1e-3 for any seed.
        let err = check::<f32>(Activation::Sigmoid, (3, 4, 3), test_grid::STEP, 1e-2, true);
        eprintln!("gradcheck linear f32 Sigmoid: max relative error {err:e}");
        assert!(err < 1e-3, "Sigmoid: {err:e}");
    }

    #[test]
    fn large_batch_matches_naive_loops() {
        // Big enough (50·48·64 multiply-adds) that matmul takes its multi-threaded path,
        // where finite differences would drown in rounding noise: compare with loops.
        let (batch, ni, no) = (50, 64, 48);
        let mut rng = StdRng::seed_from_u64(3);
        let mut layer = Linear::<f64>::new(ni, no, Activation::Sigmoid, &mut rng);
        let x: Vec<f64> = (0..batch * ni)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let dy: Vec<f64> = (0..batch * no)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut y = vec![0.0; batch * no];
        let mut dx = vec![0.0; batch * ni];
        layer.forward(&x, &mut y, batch);
        layer.backward(&x, &y, &dy, Some(&mut dx), batch);
        let (w, b) = (layer.weight().to_vec(), layer.bias().to_vec());
        let mut want_gw = vec![0.0; no * ni];
        let mut want_gb = vec![0.0; no];
        let mut want_dx = vec![0.0; batch * ni];
        for r in 0..batch {
            for o in 0..no {
                let z = b[o] + (0..ni).map(|i| x[r * ni + i] * w[o * ni + i]).sum::<f64>();
                let yv = 1.0 / (1.0 + (-z).exp());
                assert!((y[r * no + o] - yv).abs() < 1e-13);
                let dz = dy[r * no + o] * yv * (1.0 - yv);
                want_gb[o] += dz;
                for i in 0..ni {
                    want_gw[o * ni + i] += dz * x[r * ni + i];
                    want_dx[r * ni + i] += dz * w[o * ni + i];
                }
            }
        }
        let p = layer.params();
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(u, v)| (u - v).abs() < 1e-12);
        assert!(close(p[0].grad, &want_gw));
        assert!(close(p[1].grad, &want_gb));
        assert!(close(&dx, &want_dx));
    }

    #[test]
    fn backward_overwrites_param_grads() {
        let mut layer =
            Linear::<f64>::new(3, 2, Activation::Sigmoid, &mut StdRng::seed_from_u64(5));
        let (x, dy) = ([0.5, -1.0, 0.25, 1.0, 0.0, -0.5], [1.0, -2.0, 0.5, 3.0]);
        let mut y = [0.0; 4];
        layer.forward(&x, &mut y, 2);
        layer.backward(&x, &y, &dy, None, 2);
        let first: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
        layer.backward(&x, &y, &dy, None, 2);
        let second: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
        assert_eq!(first, second);
        assert!(first.iter().flatten().any(|&g| g != 0.0));
    }

    #[test]
    fn forward_matches_hand_computation() {
        let mut layer = Linear::<f64>::new(2, 2, Activation::Relu, &mut StdRng::seed_from_u64(0));
        {
            let mut p = layer.params();
            p[0].value.copy_from_slice(&[1.0, 2.0, -3.0, 0.5]);
            p[1].value.copy_from_slice(&[0.25, -1.0]);
        }
        let mut y = [0.0; 4];
        layer.forward(&[1.0, 1.0, 2.0, 4.0], &mut y, 2);
        // rows: [1+2+0.25, relu(-3+0.5-1)], [2+8+0.25, relu(-6+2-1)]
        assert_eq!(y, [3.25, 0.0, 10.25, 0.0]);
    }

    #[test]
    fn init_statistics_follow_dlrm() {
        let (ni, no) = (300, 200);
        let layer = Linear::<f64>::new(ni, no, Activation::Identity, &mut StdRng::seed_from_u64(9));
        let std = |v: &[f64]| (v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64).sqrt();
        let want_w = (2.0 / (ni + no) as f64).sqrt();
        let want_b = (1.0 / no as f64).sqrt();
        assert!((std(layer.weight()) / want_w - 1.0).abs() < 0.02);
        assert!((std(layer.bias()) / want_b - 1.0).abs() < 0.15);
    }

    #[test]
    fn bf16_products_take_rounded_operands_and_keep_f32_weights() {
        use crate::matmul::round_bf16;
        use rand::Rng;
        let mut rng = StdRng::seed_from_u64(8);
        let (batch, ni, no) = (70, 40, 30);
        let mut bf = Linear::<f32>::new(ni, no, Activation::Identity, &mut rng);
        bf.set_dense_precision(DensePrecision::Bf16);
        let weight = bf.weight().to_vec();
        // The same layer in fp32 with its weights rounded, fed rounded inputs.
        let mut reference = bf.clone();
        reference.set_dense_precision(DensePrecision::Fp32);
        reference.params()[0]
            .value
            .iter_mut()
            .for_each(|w| *w = round_bf16(*w));
        let x: Vec<f32> = (0..batch * ni)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let dy: Vec<f32> = (0..batch * no)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let rx: Vec<f32> = x.iter().map(|&v| round_bf16(v)).collect();
        let rdy: Vec<f32> = dy.iter().map(|&v| round_bf16(v)).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // The portable path gives the f32 GEMM's bits on the rounded operands; oneDNN
        // (a build with `onednn` on a bf16 CPU) the same products summed in its order.
        let portable = !crate::matmul::bf16_kernel().is_fast();
        let same = |got: &[f32], want: &[f32], what: &str| match portable {
            true => assert_eq!(bits(got), bits(want), "{what}"),
            false => got.iter().zip(want).for_each(|(g, w)| {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{what}: {g} vs {w}"
                )
            }),
        };
        let (mut y, mut want) = (vec![0.0; batch * no], vec![0.0; batch * no]);
        bf.forward(&x, &mut y, batch);
        reference.forward(&rx, &mut want, batch);
        same(&y, &want, "forward");
        let (mut dx, mut want_dx) = (vec![0.0; batch * ni], vec![0.0; batch * ni]);
        bf.backward(&x, &y, &dy, Some(&mut dx), batch);
        reference.backward(&rx, &want, &rdy, Some(&mut want_dx), batch);
        same(&dx, &want_dx, "dx");
        let gw = bf.params()[0].grad.to_vec();
        same(&gw, reference.params()[0].grad, "dW");
        // The master weights stay f32: unrounded, untouched.
        assert_eq!(bits(bf.weight()), bits(&weight));
        assert!(weight.iter().any(|w| w.to_bits() & 0xffff != 0));
    }
}
