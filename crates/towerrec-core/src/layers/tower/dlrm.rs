//! DMT's tower module for DLRM (§4, Listing 1): the operators of DLRM's over-arch
//! lifted into the tower.
//!
//! `o1` is a linear map of the tower's whole flattened row to `p·D` values, mixing its
//! features; `o2` projects every feature's embedding on its own to `c·D` values with one
//! weight shared by all `F` features, so its parameters do not grow with the tower. The
//! output row is `[o1, o2]`, `o2` feature-major, `D·(p + c·F)` values.
//!
//! The row layout makes `o2` free of copies: a batch of `B` rows of `F·N` values is, in
//! memory, a batch of `B·F` rows of `N` values, so `o2` is one [`Linear`] call on `B·F`
//! rows whose output is already feature-major.

use super::{checked_sum_of_products, grow, prefixed, TowerCounts, TowerModuleKind};
use crate::error::{Error, Result};
use crate::layer::{Layer, ParamMut};
use crate::layers::activation::Activation;
use crate::layers::linear::Linear;
use crate::real::Real;
use rand::Rng;

/// Which of Listing 1's two maps exist: `p = 0` or `c = 0` removes one, parameters and
/// all, rather than keeping a zero-width `Linear`.
#[derive(Debug, Clone)]
enum Parts<T> {
    Flat(Linear<T>),
    PerFeature(Linear<T>),
    Both {
        flat: Linear<T>,
        per_feature: Linear<T>,
    },
}

impl<T: Real> Parts<T> {
    fn zero_biases(&mut self) {
        match self {
            Parts::Flat(l) | Parts::PerFeature(l) => l.zero_bias(),
            Parts::Both { flat, per_feature } => {
                flat.zero_bias();
                per_feature.zero_bias();
            }
        }
    }
}

/// Buffers for [`Parts::Both`] only: a single map writes straight into `y` and reads
/// straight from `dy`.
#[derive(Debug, Clone)]
struct Scratch<T> {
    /// The two maps' outputs in the last forward, which `y` interleaves row by row; the
    /// backward hands them back to the two `Linear`s as their `y`.
    o1: Vec<T>,
    o2: Vec<T>,
    /// `dy` split into the two parts, and `o2`'s input gradient before it is added to
    /// `o1`'s.
    d1: Vec<T>,
    d2: Vec<T>,
    dx2: Vec<T>,
}

/// Listing 1's tower module over `F` features of width `N`; see the module docs.
#[derive(Debug, Clone)]
pub struct DlrmTower<T> {
    f: usize,
    n: usize,
    c: usize,
    p: usize,
    d: usize,
    counts: TowerCounts,
    parts: Parts<T>,
    scratch: Scratch<T>,
}

pub(super) fn counts(f: usize, n: usize, c: usize, p: usize, d: usize) -> Result<TowerCounts> {
    if d == 0 {
        return Err(Error::Config(
            "DLRM tower module: D must be positive".into(),
        ));
    }
    if c == 0 && p == 0 {
        return Err(Error::Config(
            "DLRM tower module: p = c = 0 leaves it no output; use the identity tower to \
             pass embeddings through"
                .into(),
        ));
    }
    Ok(TowerCounts {
        out_dim: checked_sum_of_products("output width D·(p + c·F)", &[&[d, p], &[d, c, f]])?,
        params: checked_sum_of_products(
            "parameter count",
            &[&[f, n, p, d], &[p, d], &[n, c, d], &[c, d]],
        )?,
        forward_flops_per_sample: checked_sum_of_products(
            "FLOP count",
            &[&[2, f, n, p, d], &[2, f, n, c, d]],
        )?,
    })
}

impl<T: Real> DlrmTower<T> {
    /// Sets the biases of both linear maps to zero.
    pub fn zero_biases(&mut self) {
        self.parts.zero_biases();
    }

    /// `c·D` outputs per feature and `p·D` for the whole row; weights drawn as
    /// [`Linear::new`] draws them.
    ///
    /// # Errors
    /// [`Error::Config`] if `f`, `n` or `d` is 0, if `p` and `c` are both 0, or if a size
    /// overflows.
    pub fn new(
        f: usize,
        n: usize,
        c: usize,
        p: usize,
        d: usize,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let counts = TowerModuleKind::Dlrm { c, p, d }.counts(f, n)?;
        // Identity activation: Listing 1 has none; whatever follows the tower (the
        // over-arch) supplies the non-linearity.
        let mut linear = |i: usize, o: usize| Linear::new(i, o, Activation::Identity, &mut *rng);
        let parts = match (p > 0, c > 0) {
            (true, false) => Parts::Flat(linear(f * n, p * d)),
            (false, _) => Parts::PerFeature(linear(n, c * d)),
            (true, true) => Parts::Both {
                flat: linear(f * n, p * d),
                per_feature: linear(n, c * d),
            },
        };
        Ok(Self {
            f,
            n,
            c,
            p,
            d,
            counts,
            parts,
            scratch: Scratch {
                o1: Vec::new(),
                o2: Vec::new(),
                d1: Vec::new(),
                d2: Vec::new(),
                dx2: Vec::new(),
            },
        })
    }

    /// `o2`'s map when the module is `o2` alone (`p = 0`); see
    /// [`TowerModule::per_feature_map`](super::TowerModule::per_feature_map).
    pub fn per_feature_map(&mut self) -> Option<&mut Linear<T>> {
        match &mut self.parts {
            Parts::PerFeature(map) => Some(map),
            Parts::Flat(_) | Parts::Both { .. } => None,
        }
    }

    pub fn kind(&self) -> TowerModuleKind {
        TowerModuleKind::Dlrm {
            c: self.c,
            p: self.p,
            d: self.d,
        }
    }

    pub fn num_features(&self) -> usize {
        self.f
    }

    pub fn feature_dim(&self) -> usize {
        self.n
    }

    /// `F·N·p·D + p·D + N·c·D + c·D`.
    pub fn param_count(&self) -> usize {
        self.counts.params
    }

    /// `2·F·N·D·(p + c)`: `o1` is one `F·N × p·D` product, `o2` is `F` products of
    /// `N × c·D` (multiply-add = 2; biases not counted).
    pub fn forward_flops_per_sample(&self) -> usize {
        self.counts.forward_flops_per_sample
    }

    pub(super) fn counts(&self) -> TowerCounts {
        self.counts
    }
}

impl<T: Real> Layer<T> for DlrmTower<T> {
    fn in_dim(&self) -> usize {
        self.f * self.n
    }

    fn out_dim(&self) -> usize {
        self.counts.out_dim
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        assert_eq!(x.len(), batch * self.f * self.n, "DlrmTower::forward: x");
        assert_eq!(
            y.len(),
            batch * self.counts.out_dim,
            "DlrmTower::forward: y"
        );
        let (w1, w2) = (self.p * self.d, self.f * self.c * self.d);
        match &mut self.parts {
            Parts::Flat(flat) => flat.forward(x, y, batch),
            Parts::PerFeature(per_feature) => per_feature.forward(x, y, batch * self.f),
            Parts::Both { flat, per_feature } => {
                let o1 = grow(&mut self.scratch.o1, batch * w1);
                let o2 = grow(&mut self.scratch.o2, batch * w2);
                flat.forward(x, o1, batch);
                per_feature.forward(x, o2, batch * self.f);
                for ((row, a), b) in y
                    .chunks_exact_mut(w1 + w2)
                    .zip(o1.chunks_exact(w1))
                    .zip(o2.chunks_exact(w2))
                {
                    row[..w1].copy_from_slice(a);
                    row[w1..].copy_from_slice(b);
                }
            }
        }
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], mut dx: Option<&mut [T]>, batch: usize) {
        let (n_in, n_out) = (batch * self.f * self.n, batch * self.counts.out_dim);
        assert_eq!(x.len(), n_in, "DlrmTower::backward: x");
        assert_eq!(y.len(), n_out, "DlrmTower::backward: y");
        assert_eq!(dy.len(), n_out, "DlrmTower::backward: dy");
        let (w1, w2) = (self.p * self.d, self.f * self.c * self.d);
        match &mut self.parts {
            Parts::Flat(flat) => flat.backward(x, y, dy, dx, batch),
            Parts::PerFeature(per_feature) => per_feature.backward(x, y, dy, dx, batch * self.f),
            Parts::Both { flat, per_feature } => {
                let Scratch {
                    o1,
                    o2,
                    d1,
                    d2,
                    dx2,
                } = &mut self.scratch;
                let d1 = grow(d1, batch * w1);
                let d2 = grow(d2, batch * w2);
                for ((row, a), b) in dy
                    .chunks_exact(w1 + w2)
                    .zip(d1.chunks_exact_mut(w1))
                    .zip(d2.chunks_exact_mut(w2))
                {
                    a.copy_from_slice(&row[..w1]);
                    b.copy_from_slice(&row[w1..]);
                }
                let (o1, o2) = (&o1[..batch * w1], &o2[..batch * w2]);
                flat.backward(x, o1, d1, dx.as_deref_mut(), batch);
                match dx {
                    Some(dx) => {
                        let dx2 = grow(dx2, n_in);
                        per_feature.backward(x, o2, d2, Some(&mut *dx2), batch * self.f);
                        dx.iter_mut().zip(dx2.iter()).for_each(|(a, &b)| *a += b);
                    }
                    None => per_feature.backward(x, o2, d2, None, batch * self.f),
                }
            }
        }
    }

    fn set_dense_precision(&mut self, precision: crate::matmul::DensePrecision) {
        match &mut self.parts {
            Parts::Flat(l) | Parts::PerFeature(l) => l.set_dense_precision(precision),
            Parts::Both { flat, per_feature } => {
                flat.set_dense_precision(precision);
                per_feature.set_dense_precision(precision);
            }
        }
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        match &mut self.parts {
            Parts::Flat(flat) => prefixed("flat", flat.params()),
            Parts::PerFeature(per_feature) => prefixed("per_feature", per_feature.params()),
            Parts::Both { flat, per_feature } => {
                let mut out = prefixed("flat", flat.params());
                out.extend(prefixed("per_feature", per_feature.params()));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::{check_layer, check_layer_at};
    use crate::layers::linear::test_grid;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn tower<T: Real>(f: usize, n: usize, c: usize, p: usize, d: usize, seed: u64) -> DlrmTower<T> {
        DlrmTower::new(f, n, c, p, d, &mut StdRng::seed_from_u64(seed)).unwrap()
    }

    /// (c, p): only the per-feature map, only the flat one, both.
    const SPLITS: [(usize, usize); 3] = [(2, 0), (0, 2), (1, 2)];

    #[test]
    fn gradcheck_f64() {
        for (c, p) in SPLITS {
            let mut layer = tower::<f64>(3, 4, c, p, 2, 1);
            let err = check_layer(&mut layer, 4, 1e-5, 1e-6, 2);
            eprintln!("gradcheck dlrm tower f64 c={c} p={p}: {err:?}");
            assert!(err.max() < 1e-6, "c={c} p={p}: {err:?}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        // Linear in every input and parameter, so exact on the grid (see `test_grid`).
        for (c, p) in SPLITS {
            let mut rng = StdRng::seed_from_u64(3);
            let mut layer = tower::<f32>(2, 3, c, p, 2, 3);
            test_grid::snap_params(&mut layer);
            let batch = 3;
            let x = test_grid::values(batch * layer.in_dim(), &mut rng);
            let r = test_grid::values(batch * layer.out_dim(), &mut rng);
            let err = check_layer_at(&mut layer, &x, &r, batch, test_grid::STEP, 1e-3);
            eprintln!("gradcheck dlrm tower f32 c={c} p={p}: {err:?}");
            assert!(err.max() < 1e-3, "c={c} p={p}: {err:?}");
        }
    }

    fn set(layer: &mut DlrmTower<f64>, values: &[&[f64]]) {
        assert_eq!(layer.params().len(), values.len());
        for (p, v) in layer.params().into_iter().zip(values) {
            p.value.copy_from_slice(v);
        }
    }

    #[test]
    fn forward_matches_hand_computation() {
        // F = 2, N = 2, c = p = D = 1.
        let mut layer = tower::<f64>(2, 2, 1, 1, 1, 0);
        let names: Vec<String> = layer.params().into_iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            [
                "flat.weight",
                "flat.bias",
                "per_feature.weight",
                "per_feature.bias"
            ]
        );
        set(
            &mut layer,
            &[&[1.0, -1.0, 2.0, 0.5], &[0.25], &[3.0, -2.0], &[1.0]],
        );
        let mut y = [0.0; 6];
        layer.forward(&[1.0, 2.0, 3.0, 4.0, 0.0, -1.0, 2.0, 1.0], &mut y, 2);
        // row 0: o1 = 1 − 2 + 6 + 2 + 0.25; o2 = [3 − 4 + 1, 9 − 8 + 1]
        // row 1: o1 = 0 + 1 + 4 + 0.5 + 0.25; o2 = [0 + 2 + 1, 6 − 2 + 1]
        assert_eq!(y, [7.25, 0.0, 2.0, 5.75, 3.0, 5.0]);
    }

    #[test]
    fn the_per_feature_map_alone_is_the_module_on_any_grouping_of_rows() {
        // The kind says which modules are the map alone, as the module does.
        for (c, p) in [(1, 1), (0, 1), (2, 0)] {
            let mut m = tower::<f64>(3, 4, c, p, 2, 0);
            let width = m.kind().per_feature_width();
            assert_eq!(
                width,
                m.per_feature_map().map(|map| map.out_dim()),
                "c={c} p={p}"
            );
            assert_eq!(width.is_some(), p == 0, "c={c} p={p}");
        }
        let (f, n, batch) = (3, 4, 2);
        let mut layer = tower::<f64>(f, n, 2, 0, 2, 6);
        let mut rng = StdRng::seed_from_u64(7);
        let x: Vec<f64> = (0..batch * f * n)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut want = vec![0.0; batch * layer.out_dim()];
        layer.forward(&x, &mut want, batch);
        // Feature-major rows regrouped feature by feature: the map runs on them as well.
        let by_feature: Vec<f64> = (0..f)
            .flat_map(|j| (0..batch).flat_map(move |b| (b * f + j) * n..(b * f + j + 1) * n))
            .map(|i| x[i])
            .collect();
        let map = layer.per_feature_map().unwrap();
        let w = map.out_dim();
        let mut got = vec![0.0; batch * f * w];
        map.forward(&by_feature, &mut got, batch * f);
        for j in 0..f {
            for b in 0..batch {
                let g = &got[(j * batch + b) * w..(j * batch + b + 1) * w];
                assert_eq!(g, &want[(b * f + j) * w..(b * f + j + 1) * w]);
            }
        }
    }

    #[test]
    fn per_feature_map_is_shared_across_features() {
        let (f, n, c, p, d, batch) = (3, 4, 2, 1, 2, 2);
        let mut layer = tower::<f64>(f, n, c, p, d, 4);
        let (w1, w2) = (p * d, c * d);
        let out = layer.out_dim();
        let mut rng = StdRng::seed_from_u64(5);
        let x: Vec<f64> = (0..batch * f * n)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        // Feature `perm[j]` of the input moves to slot `j`.
        let perm = [2, 0, 1];
        let mut xp = x.clone();
        for b in 0..batch {
            for (j, &src) in perm.iter().enumerate() {
                let (to, from) = ((b * f + j) * n, (b * f + src) * n);
                xp[to..to + n].copy_from_slice(&x[from..from + n]);
            }
        }
        let (mut y, mut yp) = (vec![0.0; batch * out], vec![0.0; batch * out]);
        layer.forward(&x, &mut y, batch);
        layer.forward(&xp, &mut yp, batch);
        for b in 0..batch {
            let (row, rowp) = (&y[b * out..(b + 1) * out], &yp[b * out..(b + 1) * out]);
            for (j, &src) in perm.iter().enumerate() {
                let block = |r: &[f64], k: usize| r[w1 + k * w2..w1 + (k + 1) * w2].to_vec();
                // Same weight for every feature: blocks move with their features, bit
                // for bit.
                assert_eq!(block(rowp, j), block(row, src));
            }
            // The flat map mixes features with a weight per position, so it does not.
            assert_ne!(&rowp[..w1], &row[..w1]);
        }
        // And the shared map's size does not depend on F.
        for f in [1, 5] {
            let mut t = tower::<f64>(f, n, c, 0, d, 0);
            let sizes: Vec<usize> = t.params().iter().map(|p| p.value.len()).collect();
            assert_eq!(sizes, [n * c * d, c * d]);
        }
    }

    #[test]
    fn counts_match_hand_computation() {
        // F = 2, N = 3, c = 2, p = 1, D = 2.
        let mut layer = tower::<f32>(2, 3, 2, 1, 2, 0);
        assert_eq!((layer.in_dim(), layer.out_dim()), (6, 10)); // D·(p + c·F) = 2·5
                                                                // flat: 6·2 + 2 = 14; per feature: 3·4 + 4 = 16.
        assert_eq!(layer.param_count(), 30);
        let actual: usize = layer.params().iter().map(|p| p.value.len()).sum();
        assert_eq!(actual, 30);
        // flat: 2·6·2 = 24; per feature: 2 features · 2·3·4 = 48.
        assert_eq!(layer.forward_flops_per_sample(), 72);
        // The simulator's DLRM tower (c = 1, p = 0, D = N/2 on N = 128): 2·N·D per feature.
        let sim = tower::<f32>(26, 128, 1, 0, 64, 0);
        assert_eq!(sim.forward_flops_per_sample(), 2 * 128 * 64 * 26);
        assert_eq!(sim.param_count(), 128 * 64 + 64);
        assert_eq!(sim.out_dim(), 26 * 64);
    }

    #[test]
    fn refuses_bad_parameters() {
        let mut rng = StdRng::seed_from_u64(0);
        for (f, n, c, p, d) in [
            (2, 3, 0, 0, 4),
            (2, 3, 1, 1, 0),
            (0, 3, 1, 1, 4),
            (2, 0, 1, 1, 4),
            (2, 3, usize::MAX, 0, 2),
            (usize::MAX / 2, 3, 1, 0, 1),
        ] {
            let got = DlrmTower::<f32>::new(f, n, c, p, d, &mut rng);
            assert!(
                matches!(got, Err(Error::Config(_))),
                "(f, n, c, p, d) = {:?} gave {:?}",
                (f, n, c, p, d),
                got.map(|_| ())
            );
        }
    }

    /// Big enough for the `Linear`s' multi-block passes and for every scratch buffer to
    /// hold many rows: compare with loops instead of finite differences.
    #[test]
    fn large_batch_matches_naive_loops() {
        let (f, n, c, p, d, batch) = (3, 5, 2, 2, 3, 70);
        let mut layer = tower::<f64>(f, n, c, p, d, 7);
        let (w1, w2, out) = (p * d, c * d, layer.out_dim());
        let mut rng = StdRng::seed_from_u64(8);
        let mut draw =
            |len: usize| -> Vec<f64> { (0..len).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let (x, dy) = (draw(batch * f * n), draw(batch * out));
        let mut y = vec![0.0; batch * out];
        let mut dx = vec![0.0; batch * f * n];
        layer.forward(&x, &mut y, batch);
        layer.backward(&x, &y, &dy, Some(&mut dx), batch);
        let params: Vec<Vec<f64>> = layer.params().iter().map(|p| p.value.to_vec()).collect();
        let grads: Vec<Vec<f64>> = layer.params().iter().map(|p| p.grad.to_vec()).collect();
        let (wf, bf, wp, bp) = (&params[0], &params[1], &params[2], &params[3]);
        let mut want = [
            vec![0.0; wf.len()],
            vec![0.0; bf.len()],
            vec![0.0; wp.len()],
            vec![0.0; bp.len()],
        ];
        let mut want_dx = vec![0.0; dx.len()];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        for b in 0..batch {
            let xr = &x[b * f * n..(b + 1) * f * n];
            let (yr, dyr) = (&y[b * out..(b + 1) * out], &dy[b * out..(b + 1) * out]);
            for o in 0..w1 {
                let z = bf[o] + (0..f * n).map(|i| wf[o * f * n + i] * xr[i]).sum::<f64>();
                assert!(close(yr[o], z));
                want[1][o] += dyr[o];
                for i in 0..f * n {
                    want[0][o * f * n + i] += dyr[o] * xr[i];
                    want_dx[b * f * n + i] += dyr[o] * wf[o * f * n + i];
                }
            }
            for j in 0..f {
                for o in 0..w2 {
                    let k = w1 + j * w2 + o;
                    let z = bp[o] + (0..n).map(|i| wp[o * n + i] * xr[j * n + i]).sum::<f64>();
                    assert!(close(yr[k], z));
                    want[3][o] += dyr[k];
                    for i in 0..n {
                        want[2][o * n + i] += dyr[k] * xr[j * n + i];
                        want_dx[b * f * n + j * n + i] += dyr[k] * wp[o * n + i];
                    }
                }
            }
        }
        for (g, w) in grads.iter().zip(&want) {
            assert!(g.iter().zip(w).all(|(&a, &b)| close(a, b)));
        }
        assert!(dx.iter().zip(&want_dx).all(|(&a, &b)| close(a, b)));
    }

    #[test]
    fn backward_without_dx_and_buffer_reuse() {
        let (f, n) = (2, 3);
        let mut layer = tower::<f64>(f, n, 1, 1, 2, 9);
        let out = layer.out_dim();
        let x: Vec<f64> = (0..5 * f * n).map(|i| (i as f64 * 0.37).sin()).collect();
        let dy: Vec<f64> = (0..5 * out).map(|i| (i as f64 * 0.61).cos()).collect();
        let run = |layer: &mut DlrmTower<f64>, batch: usize, want_dx: bool| {
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
        // Smaller after larger: the grown scratch buffers must be sliced, not reused whole.
        let (y2b, dx2b, g2b) = run(&mut layer, 2, true);
        assert_eq!((&y2, &dx2, &g2), (&y2b, &dx2b, &g2b));
        // Parameter gradients are overwritten, and do not depend on whether dx is wanted.
        let (_, _, g2c) = run(&mut layer, 2, false);
        assert_eq!(g2, g2c);
        assert!(g2.iter().flatten().any(|&g| g != 0.0));
    }
}
