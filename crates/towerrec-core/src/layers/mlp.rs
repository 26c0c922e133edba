//! A multi-layer perceptron: a stack of fused [`Linear`] layers, as DLRM's bottom and top
//! MLPs and DCN-v2's deep tower use.
//!
//! The hidden outputs of the last forward are kept in owned buffers because each layer's
//! backward needs its input and output; the buffers grow to the largest batch seen and are
//! then reused, so a warm training loop does not allocate.

use super::activation::Activation;
use super::linear::Linear;
use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use rand::Rng;

/// `dims = [in, h1, …, out]`: `dims.len() − 1` fused Linear layers, every one but the last
/// with the `hidden` activation, the last with `last`.
#[derive(Debug, Clone)]
pub struct Mlp<T> {
    dims: Vec<usize>,
    layers: Vec<Linear<T>>,
    /// `hidden[i]` is the output of layer `i`, for every layer but the last (whose output
    /// is the caller's `y`).
    hidden: Vec<Vec<T>>,
    /// Ping-pong buffers for the gradient flowing between layers in backward.
    grad_in: Vec<T>,
    grad_out: Vec<T>,
}

impl<T: Real> Mlp<T> {
    /// # Panics
    /// If `dims` has fewer than 2 entries or a zero width (the model builder validates).
    pub fn new(dims: &[usize], hidden: Activation, last: Activation, rng: &mut impl Rng) -> Self {
        assert!(
            dims.len() >= 2,
            "Mlp::new: dims {dims:?} needs at least in and out"
        );
        let n = dims.len() - 1;
        let layers = (0..n)
            .map(|i| {
                let act = if i + 1 == n { last } else { hidden };
                Linear::new(dims[i], dims[i + 1], act, rng)
            })
            .collect();
        Self {
            dims: dims.to_vec(),
            layers,
            hidden: vec![Vec::new(); n - 1],
            grad_in: Vec::new(),
            grad_out: Vec::new(),
        }
    }

    /// `[in, h1, …, out]`.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn layers(&self) -> &[Linear<T>] {
        &self.layers
    }
}

impl<T: Real> Layer<T> for Mlp<T> {
    fn in_dim(&self) -> usize {
        self.dims[0]
    }

    fn out_dim(&self) -> usize {
        self.dims[self.dims.len() - 1]
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let Self {
            dims,
            layers,
            hidden,
            ..
        } = self;
        let n = layers.len();
        for (i, buf) in hidden.iter_mut().enumerate() {
            let len = batch * dims[i + 1];
            if buf.len() < len {
                buf.resize(len, T::zero());
            }
        }
        for (i, layer) in layers.iter_mut().enumerate() {
            let (before, after) = hidden.split_at_mut(i);
            let input: &[T] = if i == 0 {
                x
            } else {
                &before[i - 1][..batch * dims[i]]
            };
            if i + 1 == n {
                layer.forward(input, y, batch);
            } else {
                layer.forward(input, &mut after[0][..batch * dims[i + 1]], batch);
            }
        }
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], mut dx: Option<&mut [T]>, batch: usize) {
        let Self {
            dims,
            layers,
            hidden,
            grad_in,
            grad_out,
        } = self;
        let n = layers.len();
        let widest = dims[1..n].iter().copied().max().unwrap_or(0) * batch;
        for buf in [&mut *grad_in, &mut *grad_out] {
            if buf.len() < widest {
                buf.resize(widest, T::zero());
            }
        }
        // `upstream` holds dL/d(output of layer i); layer i writes dL/d(its input) into
        // `downstream`, and the two swap roles for layer i − 1.
        let (mut upstream, mut downstream) = (grad_in, grad_out);
        for i in (0..n).rev() {
            let input: &[T] = if i == 0 {
                x
            } else {
                &hidden[i - 1][..batch * dims[i]]
            };
            let output: &[T] = if i + 1 == n {
                y
            } else {
                &hidden[i][..batch * dims[i + 1]]
            };
            let d_out: &[T] = if i + 1 == n {
                dy
            } else {
                &upstream[..batch * dims[i + 1]]
            };
            if i == 0 {
                layers[0].backward(input, output, d_out, dx.take(), batch);
            } else {
                let d_in = &mut downstream[..batch * dims[i]];
                layers[i].backward(input, output, d_out, Some(d_in), batch);
                std::mem::swap(&mut upstream, &mut downstream);
            }
        }
    }

    fn set_dense_precision(&mut self, precision: crate::matmul::DensePrecision) {
        self.layers
            .iter_mut()
            .for_each(|l| l.set_dense_precision(precision));
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        let mut out = Vec::with_capacity(2 * self.layers.len());
        for (i, layer) in self.layers.iter_mut().enumerate() {
            out.extend(layer.params().into_iter().map(|p| ParamMut {
                name: format!("{i}.{}", p.name),
                ..p
            }));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::check_layer_at;
    use crate::layers::linear::test_grid;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// Smallest `|pre-activation|` over every ReLU layer, recomputed in f64 from the
    /// layers' public weights.
    fn min_abs_relu_preact<T: Real>(mlp: &Mlp<T>, x: &[T], batch: usize) -> f64 {
        let mut m = f64::INFINITY;
        let mut a: Vec<f64> = x.iter().map(|v| v.f64()).collect();
        for layer in mlp.layers() {
            let (ni, no) = (layer.in_dim(), layer.out_dim());
            let mut next = vec![0.0; batch * no];
            for r in 0..batch {
                for o in 0..no {
                    let z: f64 = layer.bias()[o].f64()
                        + (0..ni)
                            .map(|i| a[r * ni + i] * layer.weight()[o * ni + i].f64())
                            .sum::<f64>();
                    if layer.activation() == Activation::Relu {
                        m = m.min(z.abs());
                    }
                    next[r * no + o] = layer.activation().apply(z);
                }
            }
            a = next;
        }
        m
    }

    /// Gradient check at the first seed whose ReLU pre-activations all stay `margin` away
    /// from 0, so that no finite-difference step crosses a kink. `grid`: see
    /// [`test_grid`](crate::layers::linear::test_grid).
    fn check<T: Real>(
        dims: &[usize],
        last: Activation,
        batch: usize,
        h: f64,
        floor: f64,
        grid: bool,
    ) -> f64 {
        let margin = 20.0 * h;
        let (ni, no) = (dims[0], dims[dims.len() - 1]);
        for seed in 0..500u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut mlp = Mlp::<T>::new(dims, Activation::Relu, last, &mut rng);
            if grid {
                test_grid::snap_params(&mut mlp);
            }
            let x = test_grid::draw(grid, batch * ni, &mut rng);
            let r = test_grid::draw(grid, batch * no, &mut rng);
            if min_abs_relu_preact(&mlp, &x, batch) < margin {
                continue;
            }
            return check_layer_at(&mut mlp, &x, &r, batch, h, floor).max();
        }
        panic!("no seed keeps the ReLU pre-activations {margin} away from 0");
    }

    #[test]
    fn gradcheck_f64() {
        for last in [Activation::Identity, Activation::Sigmoid] {
            let err = check::<f64>(&[6, 8, 5, 3], last, 4, 1e-5, 1e-6, false);
            eprintln!("gradcheck mlp f64 {last:?}: max relative error {err:e}");
            assert!(err < 1e-6, "{last:?}: {err:e}");
        }
        // One layer: the hidden buffers and the ping-pong are empty.
        let err = check::<f64>(&[4, 3], Activation::Sigmoid, 3, 1e-5, 1e-6, false);
        eprintln!("gradcheck mlp f64 single layer: max relative error {err:e}");
        assert!(err < 1e-6, "single layer: {err:e}");
    }

    #[test]
    fn gradcheck_f32() {
        let err = check::<f32>(
            &[3, 4, 3, 2],
            Activation::Identity,
            2,
            test_grid::STEP,
            1e-3,
            true,
        );
        eprintln!("gradcheck mlp f32 Identity last: max relative error {err:e}");
        assert!(err < 1e-3, "Identity last: {err:e}");
        // σ is not exact on the grid: its rounding and the h² term need the 1e-2 floor
        // (see linear.rs), and a CTR-like single-logit head keeps both small.
        let err = check::<f32>(
            &[3, 3, 1],
            Activation::Sigmoid,
            2,
            test_grid::STEP,
            1e-2,
            true,
        );
        eprintln!("gradcheck mlp f32 Sigmoid last: max relative error {err:e}");
        assert!(err < 1e-3, "Sigmoid last: {err:e}");
    }

    #[test]
    fn params_are_named_by_layer() {
        let mut mlp = Mlp::<f32>::new(
            &[3, 4, 2],
            Activation::Relu,
            Activation::Identity,
            &mut StdRng::seed_from_u64(0),
        );
        let names: Vec<String> = mlp.params().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["0.weight", "0.bias", "1.weight", "1.bias"]);
        assert_eq!(mlp.dims(), &[3, 4, 2]);
        assert_eq!((mlp.in_dim(), mlp.out_dim()), (3, 2));
    }

    #[test]
    fn larger_batch_after_smaller_reuses_buffers_correctly() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut mlp = Mlp::<f64>::new(
            &[3, 5, 2],
            Activation::Sigmoid,
            Activation::Identity,
            &mut rng,
        );
        let x: Vec<f64> = (0..8 * 3).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut y_big = vec![0.0; 16];
        mlp.forward(&x[..6], &mut [0.0; 4], 2);
        mlp.forward(&x, &mut y_big, 8);
        let mut y_small = vec![0.0; 4];
        mlp.forward(&x[..6], &mut y_small, 2);
        assert_eq!(&y_big[..4], &y_small[..]);
    }
}
