//! DCN-v2's cross network (Wang et al. 2021, "DCN V2: Improved Deep & Cross Network and
//! Practical Lessons for Web-scale Learning to Rank Systems").
//!
//! Each layer computes `x_{l+1} = x_0 ⊙ (W_l x_l + b_l) + x_l` with a full-rank `dim × dim`
//! `W_l`, or with the paper's low-rank `W_l = U_l V_lᵀ` (`U`, `V` both `dim × r`), which
//! costs `2·dim·r` instead of `dim²` per row.

use super::linear::normal_vec;
use crate::layer::{Layer, ParamMut};
use crate::matmul::{matmul_in, Bf16Scratch, DensePrecision};
use crate::real::Real;
use rand::Rng;

#[derive(Debug, Clone)]
enum Kernel<T> {
    /// `w` is `dim × dim`, row-major: `z = x · wᵀ + b` row by row.
    Full { w: Vec<T>, gw: Vec<T> },
    /// `u`, `v` are `dim × r`, row-major: `t = x · v`, `z = t · uᵀ + b`.
    LowRank {
        u: Vec<T>,
        v: Vec<T>,
        gu: Vec<T>,
        gv: Vec<T>,
    },
}

#[derive(Debug, Clone)]
struct Cross<T> {
    kernel: Kernel<T>,
    bias: Vec<T>,
    grad_bias: Vec<T>,
}

/// A stack of `num_layers` DCN-v2 cross layers of width `dim`.
#[derive(Debug, Clone)]
pub struct CrossNet<T> {
    dim: usize,
    rank: Option<usize>,
    layers: Vec<Cross<T>>,
    /// `x_l` for `l = 1..num_layers` (`x_0` is the caller's input, the last output its `y`).
    hidden: Vec<Vec<T>>,
    /// `z_l = W_l x_l + b_l` per layer: backward needs it for the `x_0` gradient.
    z: Vec<Vec<T>>,
    /// `t_l = V_lᵀ x_l` per layer (low rank only).
    t: Vec<Vec<T>>,
    /// Backward scratch: `dL/dx_l`, `dL/dz_l`, `dL/dt_l`.
    g: Vec<T>,
    dz: Vec<T>,
    dt: Vec<T>,
    /// How the matrix products take their operands, and their rounded copies.
    precision: DensePrecision,
    scratch: Bf16Scratch<T>,
}

fn grow<T: Real>(buf: &mut Vec<T>, len: usize) {
    if buf.len() < len {
        buf.resize(len, T::zero());
    }
}

impl<T: Real> CrossNet<T> {
    /// Weights `~ N(0, √(2/(fan_in + fan_out)))`, biases 0.
    pub fn new(dim: usize, num_layers: usize, rank: Option<usize>, rng: &mut impl Rng) -> Self {
        assert!(dim > 0, "CrossNet::new: dim 0");
        let layers = (0..num_layers)
            .map(|_| {
                let kernel = match rank {
                    None => Kernel::Full {
                        w: normal_vec(dim * dim, (2.0 / (2 * dim) as f64).sqrt(), rng),
                        gw: vec![T::zero(); dim * dim],
                    },
                    Some(r) => {
                        assert!(r > 0, "CrossNet::new: rank 0");
                        let std = (2.0 / (dim + r) as f64).sqrt();
                        Kernel::LowRank {
                            u: normal_vec(dim * r, std, rng),
                            v: normal_vec(dim * r, std, rng),
                            gu: vec![T::zero(); dim * r],
                            gv: vec![T::zero(); dim * r],
                        }
                    }
                };
                Cross {
                    kernel,
                    bias: vec![T::zero(); dim],
                    grad_bias: vec![T::zero(); dim],
                }
            })
            .collect();
        Self {
            dim,
            rank,
            layers,
            hidden: vec![Vec::new(); num_layers.saturating_sub(1)],
            z: vec![Vec::new(); num_layers],
            t: vec![Vec::new(); if rank.is_some() { num_layers } else { 0 }],
            g: Vec::new(),
            dz: Vec::new(),
            dt: Vec::new(),
            precision: DensePrecision::Fp32,
            scratch: Bf16Scratch::default(),
        }
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn rank(&self) -> Option<usize> {
        self.rank
    }
}

impl<T: Real> Layer<T> for CrossNet<T> {
    fn in_dim(&self) -> usize {
        self.dim
    }

    fn out_dim(&self) -> usize {
        self.dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let (d, r) = (self.dim, self.rank.unwrap_or(0));
        let n = batch * d;
        assert_eq!(x.len(), n, "CrossNet::forward: x");
        assert_eq!(y.len(), n, "CrossNet::forward: y");
        let num_layers = self.layers.len();
        if num_layers == 0 {
            y.copy_from_slice(x);
            return;
        }
        let Self {
            layers,
            hidden,
            z,
            t,
            precision,
            scratch,
            ..
        } = self;
        let mut matmul = |m, n, k, a: &[T], ta, b: &[T], tb, c: &mut [T], acc| {
            matmul_in(*precision, scratch, m, n, k, a, ta, b, tb, c, acc)
        };
        hidden
            .iter_mut()
            .chain(z.iter_mut())
            .for_each(|b| grow(b, n));
        t.iter_mut().for_each(|b| grow(b, batch * r));
        for (l, layer) in layers.iter().enumerate() {
            let (before, after) = hidden.split_at_mut(l);
            let xl: &[T] = if l == 0 { x } else { &before[l - 1][..n] };
            let zl = &mut z[l][..n];
            for row in zl.chunks_exact_mut(d) {
                row.copy_from_slice(&layer.bias);
            }
            match &layer.kernel {
                Kernel::Full { w, .. } => matmul(batch, d, d, xl, false, w, true, zl, true),
                Kernel::LowRank { u, v, .. } => {
                    let tl = &mut t[l][..batch * r];
                    matmul(batch, r, d, xl, false, v, false, tl, false);
                    matmul(batch, d, r, tl, false, u, true, zl, true);
                }
            }
            let out: &mut [T] = if l + 1 == num_layers {
                &mut *y
            } else {
                &mut after[0][..n]
            };
            for (((o, &x0), &zv), &xv) in out.iter_mut().zip(x).zip(zl.iter()).zip(xl) {
                *o = x0 * zv + xv;
            }
        }
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], mut dx: Option<&mut [T]>, batch: usize) {
        let (d, r) = (self.dim, self.rank.unwrap_or(0));
        let n = batch * d;
        assert_eq!(x.len(), n, "CrossNet::backward: x");
        assert_eq!(y.len(), n, "CrossNet::backward: y");
        assert_eq!(dy.len(), n, "CrossNet::backward: dy");
        if let Some(dx) = dx.as_deref_mut() {
            assert_eq!(dx.len(), n, "CrossNet::backward: dx");
            // x_0 reaches the output through every layer's `x_0 ⊙ z_l` and through the
            // residual chain; dx accumulates the former and gets the latter added last.
            dx.iter_mut().for_each(|v| *v = T::zero());
        }
        let Self {
            layers,
            hidden,
            z,
            t,
            g,
            dz,
            dt,
            precision,
            scratch,
            ..
        } = self;
        let mut matmul = |m, n, k, a: &[T], ta, b: &[T], tb, c: &mut [T], acc| {
            matmul_in(*precision, scratch, m, n, k, a, ta, b, tb, c, acc)
        };
        grow(g, n);
        grow(dz, n);
        grow(dt, batch * r);
        let (g, dz, dt) = (&mut g[..n], &mut dz[..n], &mut dt[..batch * r]);
        g.copy_from_slice(dy);
        let want_dx = dx.is_some();
        for (l, layer) in layers.iter_mut().enumerate().rev() {
            let xl: &[T] = if l == 0 { x } else { &hidden[l - 1][..n] };
            let zl = &z[l][..n];
            for ((dzv, &gv), &x0) in dz.iter_mut().zip(g.iter()).zip(x) {
                *dzv = gv * x0;
            }
            if let Some(dx) = dx.as_deref_mut() {
                for ((dxv, &gv), &zv) in dx.iter_mut().zip(g.iter()).zip(zl) {
                    *dxv += gv * zv;
                }
            }
            layer.grad_bias.iter_mut().for_each(|v| *v = T::zero());
            for row in dz.chunks_exact(d) {
                for (gb, &v) in layer.grad_bias.iter_mut().zip(row) {
                    *gb += v;
                }
            }
            // dL/dx_l = dL/dx_{l+1} (residual) + dz · W_l; skipped for x_0 when unwanted.
            let need_g = l > 0 || want_dx;
            match &mut layer.kernel {
                Kernel::Full { w, gw } => {
                    matmul(d, d, batch, dz, true, xl, false, gw, false);
                    if need_g {
                        matmul(batch, d, d, dz, false, w, false, g, true);
                    }
                }
                Kernel::LowRank { u, v, gu, gv } => {
                    let tl = &t[l][..batch * r];
                    matmul(d, r, batch, dz, true, tl, false, gu, false);
                    matmul(batch, r, d, dz, false, u, false, dt, false);
                    matmul(d, r, batch, xl, true, dt, false, gv, false);
                    if need_g {
                        matmul(batch, d, r, dt, false, v, true, g, true);
                    }
                }
            }
        }
        if let Some(dx) = dx {
            dx.iter_mut().zip(g.iter()).for_each(|(a, &b)| *a += b);
        }
    }

    fn set_dense_precision(&mut self, precision: DensePrecision) {
        self.precision = precision;
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        let mut out = Vec::new();
        for (l, layer) in self.layers.iter_mut().enumerate() {
            match &mut layer.kernel {
                Kernel::Full { w, gw } => out.push(ParamMut {
                    name: format!("{l}.weight"),
                    value: w,
                    grad: gw,
                }),
                Kernel::LowRank { u, v, gu, gv } => {
                    out.push(ParamMut {
                        name: format!("{l}.u"),
                        value: u,
                        grad: gu,
                    });
                    out.push(ParamMut {
                        name: format!("{l}.v"),
                        value: v,
                        grad: gv,
                    });
                }
            }
            out.push(ParamMut {
                name: format!("{l}.bias"),
                value: &mut layer.bias,
                grad: &mut layer.grad_bias,
            });
        }
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

    /// Random biases too: a zero bias would leave its parameter path half-tested.
    fn net<T: Real>(dim: usize, layers: usize, rank: Option<usize>, seed: u64) -> CrossNet<T> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut net = CrossNet::new(dim, layers, rank, &mut rng);
        for p in net.params() {
            if p.name.ends_with("bias") {
                p.value
                    .iter_mut()
                    .for_each(|b| *b = T::of(rng.random_range(-0.5..0.5)));
            }
        }
        net
    }

    #[test]
    fn gradcheck_f64() {
        for rank in [None, Some(2)] {
            let mut layer = net::<f64>(5, 3, rank, 1);
            let err = check_layer(&mut layer, 4, 1e-5, 1e-6, 2).max();
            eprintln!("gradcheck crossnet f64 rank {rank:?}: max relative error {err:e}");
            assert!(err < 1e-6, "rank {rank:?}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        // One layer is of degree ≤ 2 in each input and parameter coordinate, so on the
        // grid the central difference is exact (see `test_grid`); stacks are checked in
        // f64, where the h² term of the cubic and higher terms is negligible.
        for rank in [None, Some(2)] {
            let mut rng = StdRng::seed_from_u64(3);
            let mut layer = net::<f32>(4, 1, rank, 3);
            test_grid::snap_params(&mut layer);
            let batch = 3;
            let x = test_grid::values(batch * 4, &mut rng);
            let r = test_grid::values(batch * 4, &mut rng);
            let err = check_layer_at(&mut layer, &x, &r, batch, test_grid::STEP, 1e-3).max();
            eprintln!("gradcheck crossnet f32 rank {rank:?}: max relative error {err:e}");
            assert!(err < 1e-3, "rank {rank:?}: {err:e}");
        }
    }

    fn set(net: &mut CrossNet<f64>, values: &[&[f64]]) {
        assert_eq!(net.params().len(), values.len());
        for (p, v) in net.params().into_iter().zip(values) {
            p.value.copy_from_slice(v);
        }
    }

    #[test]
    fn forward_matches_hand_computation_full() {
        let mut net = CrossNet::<f64>::new(2, 2, None, &mut StdRng::seed_from_u64(0));
        set(
            &mut net,
            &[
                &[1.0, 2.0, 0.0, -1.0],
                &[0.5, -1.0],
                &[0.0, 1.0, 1.0, 0.0],
                &[0.0, 0.0],
            ],
        );
        let mut y = [0.0; 2];
        net.forward(&[1.0, 2.0], &mut y, 1);
        // z0 = W0·[1,2] + b0 = [5.5, -3]  → x1 = [1·5.5 + 1, 2·(−3) + 2] = [6.5, −4]
        // z1 = W1·x1       = [−4, 6.5]   → x2 = [1·(−4) + 6.5, 2·6.5 − 4] = [2.5, 9]
        assert_eq!(y, [2.5, 9.0]);
    }

    #[test]
    fn forward_matches_hand_computation_low_rank() {
        let mut net = CrossNet::<f64>::new(2, 1, Some(1), &mut StdRng::seed_from_u64(0));
        set(&mut net, &[&[1.0, 2.0], &[1.0, -1.0], &[0.0, 0.5]]);
        let mut y = [0.0; 2];
        net.forward(&[1.0, 2.0], &mut y, 1);
        // vᵀx = −1, z = u·(−1) + b = [−1, −1.5], x1 = [−1 + 1, −3 + 2]
        assert_eq!(y, [0.0, -1.0]);
    }

    #[test]
    fn low_rank_equals_full_with_w_equal_u_vt() {
        let (dim, r, batch) = (6, 2, 3);
        let mut low = net::<f64>(dim, 2, Some(r), 5);
        let mut full = CrossNet::<f64>::new(dim, 2, None, &mut StdRng::seed_from_u64(6));
        let lp: Vec<Vec<f64>> = low.params().iter().map(|p| p.value.to_vec()).collect();
        let mut want = Vec::new();
        for l in 0..2 {
            let (u, v, b) = (&lp[3 * l], &lp[3 * l + 1], &lp[3 * l + 2]);
            let w: Vec<f64> = (0..dim * dim)
                .map(|k| {
                    (0..r)
                        .map(|c| u[(k / dim) * r + c] * v[(k % dim) * r + c])
                        .sum()
                })
                .collect();
            want.push(w);
            want.push(b.clone());
        }
        let refs: Vec<&[f64]> = want.iter().map(Vec::as_slice).collect();
        set(&mut full, &refs);
        let x: Vec<f64> = (0..batch * dim).map(|i| (i as f64 * 0.61).cos()).collect();
        let (mut y_low, mut y_full) = (vec![0.0; batch * dim], vec![0.0; batch * dim]);
        low.forward(&x, &mut y_low, batch);
        full.forward(&x, &mut y_full, batch);
        for (a, b) in y_low.iter().zip(&y_full) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }

    #[test]
    fn params_are_named_by_layer() {
        let mut rng = StdRng::seed_from_u64(0);
        let mut full = CrossNet::<f32>::new(3, 2, None, &mut rng);
        let names: Vec<String> = full.params().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
        let mut low = CrossNet::<f32>::new(3, 1, Some(2), &mut rng);
        let names: Vec<String> = low.params().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["0.u", "0.v", "0.bias"]);
        assert!(low
            .params()
            .iter()
            .all(|p| p.name != "0.bias" || p.value.iter().all(|&b| b == 0.0)));
    }

    #[test]
    fn backward_overwrites_param_grads() {
        for rank in [None, Some(2)] {
            let mut layer = net::<f64>(3, 2, rank, 8);
            let x = [0.5, -1.0, 0.25, 1.0, 0.0, -0.5];
            let dy = [1.0, -2.0, 0.5, 3.0, 0.25, -1.0];
            let mut y = [0.0; 6];
            layer.forward(&x, &mut y, 2);
            layer.backward(&x, &y, &dy, None, 2);
            let first: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
            let mut dx = [0.0; 6];
            layer.backward(&x, &y, &dy, Some(&mut dx), 2);
            let second: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
            assert_eq!(first, second, "rank {rank:?}");
            assert!(first.iter().flatten().any(|&g| g != 0.0));
        }
    }

    #[test]
    fn zero_layers_is_identity() {
        let mut net = CrossNet::<f64>::new(3, 0, None, &mut StdRng::seed_from_u64(0));
        let x = [1.0, -2.0, 3.0];
        let mut y = [0.0; 3];
        net.forward(&x, &mut y, 1);
        assert_eq!(y, x);
        let mut dx = [0.0; 3];
        net.backward(&x, &y, &[4.0, 5.0, 6.0], Some(&mut dx), 1);
        assert_eq!(dx, [4.0, 5.0, 6.0]);
    }
}
