//! DLRM's dot interaction (Naumov et al. 2019, "Deep Learning Recommendation Model for
//! Personalization and Recommendation Systems"): the pairwise dot products of the dense
//! (bottom-MLP) vector and the pooled embeddings, concatenated after the dense vector.
//!
//! Input row: `num_vectors` vectors of `dim` values, vector 0 the bottom-MLP output.
//! Output row: vector 0, then `<v_i, v_j>` for the strict lower triangle `i > j` (or
//! `i ≥ j` with self-interaction) in the reference's order: `i` ascending, then `j`.

use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use rayon::prelude::*;
use std::marker::PhantomData;

/// From this many rows on, rows are spread over rayon's pool; each row is computed alone,
/// so results do not depend on the thread count.
const PARALLEL_MIN_ROWS: usize = 64;

/// Output width of a [`DotInteraction`]: `dim` plus the number of pairs. A free function
/// so that model builders can size buffers without naming the scalar type.
pub fn output_dim(num_vectors: usize, dim: usize, self_interaction: bool) -> usize {
    let pairs = if self_interaction {
        num_vectors * (num_vectors + 1) / 2
    } else {
        num_vectors * num_vectors.saturating_sub(1) / 2
    };
    dim + pairs
}

/// The DLRM dot interaction; it has no parameters.
#[derive(Debug, Clone)]
pub struct DotInteraction<T> {
    num_vectors: usize,
    dim: usize,
    self_interaction: bool,
    _scalar: PhantomData<fn() -> T>,
}

impl<T: Real> DotInteraction<T> {
    pub fn new(num_vectors: usize, dim: usize, self_interaction: bool) -> Self {
        assert!(
            num_vectors >= 1 && dim >= 1,
            "DotInteraction::new({num_vectors}, {dim})"
        );
        Self {
            num_vectors,
            dim,
            self_interaction,
            _scalar: PhantomData,
        }
    }

    /// As the free [`output_dim`].
    pub fn output_dim(num_vectors: usize, dim: usize, self_interaction: bool) -> usize {
        output_dim(num_vectors, dim, self_interaction)
    }

    /// The `j` range paired with vector `i`: `0..i`, or `0..=i` with self-interaction.
    #[inline]
    fn partners(&self, i: usize) -> usize {
        if self.self_interaction {
            i + 1
        } else {
            i
        }
    }

    fn forward_row(&self, x: &[T], y: &mut [T]) {
        let d = self.dim;
        y[..d].copy_from_slice(&x[..d]);
        let mut k = d;
        for i in 0..self.num_vectors {
            let vi = &x[i * d..(i + 1) * d];
            for j in 0..self.partners(i) {
                let vj = &x[j * d..(j + 1) * d];
                y[k] = vi.iter().zip(vj).map(|(a, b)| *a * *b).sum();
                k += 1;
            }
        }
    }

    fn backward_row(&self, x: &[T], dy: &[T], dx: &mut [T]) {
        let d = self.dim;
        dx[..d].copy_from_slice(&dy[..d]);
        dx[d..].iter_mut().for_each(|v| *v = T::zero());
        let mut k = d;
        for i in 0..self.num_vectors {
            for j in 0..self.partners(i) {
                let g = dy[k];
                k += 1;
                // d<v_i, v_j>/dv_i = v_j and vice versa; for i == j both adds land on v_i,
                // giving the 2·v_i of d|v_i|².
                for t in 0..d {
                    let (a, b) = (x[i * d + t], x[j * d + t]);
                    dx[i * d + t] += g * b;
                    dx[j * d + t] += g * a;
                }
            }
        }
    }
}

impl<T: Real> Layer<T> for DotInteraction<T> {
    fn in_dim(&self) -> usize {
        self.num_vectors * self.dim
    }

    fn out_dim(&self) -> usize {
        Self::output_dim(self.num_vectors, self.dim, self.self_interaction)
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let (ni, no) = (self.in_dim(), self.out_dim());
        assert_eq!(x.len(), batch * ni, "DotInteraction::forward: x");
        assert_eq!(y.len(), batch * no, "DotInteraction::forward: y");
        let this = &*self;
        if batch >= PARALLEL_MIN_ROWS {
            y.par_chunks_mut(no)
                .zip(x.par_chunks(ni))
                .for_each(|(yr, xr)| this.forward_row(xr, yr));
        } else {
            y.chunks_mut(no)
                .zip(x.chunks(ni))
                .for_each(|(yr, xr)| this.forward_row(xr, yr));
        }
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        let (ni, no) = (self.in_dim(), self.out_dim());
        assert_eq!(x.len(), batch * ni, "DotInteraction::backward: x");
        assert_eq!(y.len(), batch * no, "DotInteraction::backward: y");
        assert_eq!(dy.len(), batch * no, "DotInteraction::backward: dy");
        // No parameters: without dx there is nothing to compute.
        let Some(dx) = dx else { return };
        assert_eq!(dx.len(), batch * ni, "DotInteraction::backward: dx");
        let this = &*self;
        if batch >= PARALLEL_MIN_ROWS {
            dx.par_chunks_mut(ni)
                .zip(x.par_chunks(ni).zip(dy.par_chunks(no)))
                .for_each(|(dxr, (xr, dyr))| this.backward_row(xr, dyr, dxr));
        } else {
            dx.chunks_mut(ni)
                .zip(x.chunks(ni).zip(dy.chunks(no)))
                .for_each(|(dxr, (xr, dyr))| this.backward_row(xr, dyr, dxr));
        }
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::{check_layer, check_layer_at};
    use crate::layers::linear::test_grid;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn output_dim_counts_pairs() {
        assert_eq!(DotInteraction::<f32>::output_dim(3, 2, false), 2 + 3);
        assert_eq!(DotInteraction::<f32>::output_dim(3, 2, true), 2 + 6);
        assert_eq!(output_dim(1, 4, false), 4);
        assert_eq!(output_dim(2, 4, true), 4 + 3);
        assert_eq!(
            DotInteraction::<f32>::new(27, 16, false).out_dim(),
            16 + 351
        );
    }

    #[test]
    fn forward_matches_hand_computation() {
        let x = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut layer = DotInteraction::<f64>::new(3, 2, false);
        let mut y = [0.0; 5];
        layer.forward(&x, &mut y, 1);
        // <v1,v0> = 3+8, <v2,v0> = 5+12, <v2,v1> = 15+24
        assert_eq!(y, [1.0, 2.0, 11.0, 17.0, 39.0]);

        let mut layer = DotInteraction::<f64>::new(3, 2, true);
        let mut y = [0.0; 8];
        layer.forward(&x, &mut y, 1);
        // (0,0), (1,0), (1,1), (2,0), (2,1), (2,2)
        assert_eq!(y, [1.0, 2.0, 5.0, 11.0, 25.0, 17.0, 39.0, 61.0]);
    }

    #[test]
    fn backward_matches_hand_computation() {
        let x = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut layer = DotInteraction::<f64>::new(3, 2, false);
        let y = [1.0, 2.0, 11.0, 17.0, 39.0];
        let dy = [10.0, 20.0, 1.0, 0.0, 0.0];
        let mut dx = [0.0; 6];
        layer.backward(&x, &y, &dy, Some(&mut dx), 1);
        // pass-through to v0 plus d<v1,v0>: v1 onto v0, v0 onto v1
        assert_eq!(dx, [13.0, 24.0, 1.0, 2.0, 0.0, 0.0]);
    }

    #[test]
    fn gradcheck_f64() {
        for self_interaction in [false, true] {
            let mut layer = DotInteraction::<f64>::new(4, 3, self_interaction);
            let err = check_layer(&mut layer, 5, 1e-5, 1e-6, 11).max();
            eprintln!(
                "gradcheck interaction f64 self={self_interaction}: max relative error {err:e}"
            );
            assert!(err < 1e-6, "self={self_interaction}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_f32() {
        // Products of grid values are exact in f32 and the layer is quadratic in each
        // input, so on the grid the central difference is exact (see `test_grid`).
        let mut rng = StdRng::seed_from_u64(12);
        for self_interaction in [false, true] {
            let mut layer = DotInteraction::<f32>::new(4, 3, self_interaction);
            let batch = 3;
            let x = test_grid::values(batch * layer.in_dim(), &mut rng);
            let r = test_grid::values(batch * layer.out_dim(), &mut rng);
            let err = check_layer_at(&mut layer, &x, &r, batch, test_grid::STEP, 1e-3).max();
            eprintln!(
                "gradcheck interaction f32 self={self_interaction}: max relative error {err:e}"
            );
            assert!(err < 1e-3, "self={self_interaction}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_f64_parallel_path() {
        let mut layer = DotInteraction::<f64>::new(3, 2, true);
        let err = check_layer(&mut layer, PARALLEL_MIN_ROWS + 6, 1e-5, 1e-6, 13).max();
        assert!(err < 1e-6, "{err:e}");
    }

    #[test]
    fn parallel_rows_equal_row_by_row() {
        let (n, d, batch) = (5, 4, 100);
        let mut layer = DotInteraction::<f32>::new(n, d, false);
        let (ni, no) = (layer.in_dim(), layer.out_dim());
        let x: Vec<f32> = (0..batch * ni)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let dy: Vec<f32> = (0..batch * no)
            .map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let mut y = vec![0.0; batch * no];
        let mut dx = vec![0.0; batch * ni];
        layer.forward(&x, &mut y, batch);
        layer.backward(&x, &y, &dy, Some(&mut dx), batch);
        for r in 0..batch {
            let (xr, dyr) = (&x[r * ni..(r + 1) * ni], &dy[r * no..(r + 1) * no]);
            let mut y1 = vec![0.0; no];
            let mut dx1 = vec![0.0; ni];
            layer.forward(xr, &mut y1, 1);
            layer.backward(xr, &y1, dyr, Some(&mut dx1), 1);
            assert_eq!(&y[r * no..(r + 1) * no], &y1[..], "row {r}");
            assert_eq!(&dx[r * ni..(r + 1) * ni], &dx1[..], "row {r}");
        }
    }
}
