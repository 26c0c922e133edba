//! DLRM's dot interaction (Naumov et al. 2019, "Deep Learning Recommendation Model for
//! Personalization and Recommendation Systems"): the pairwise dot products of the dense
//! (bottom-MLP) vector and the pooled embeddings, concatenated after the dense vector.
//!
//! Input row: `num_vectors` vectors of `dim` values, vector 0 the bottom-MLP output.
//! Output row: vector 0, then `<v_i, v_j>` for the strict lower triangle `i > j` (or
//! `i ≥ j` with self-interaction) in the reference's order: `i` ascending, then `j`.
//!
//! A model without dense features has no bottom-MLP vector ([`DotInteraction::without_dense`]):
//! its input row is the embeddings' vectors alone and its output row the dots alone, the
//! same dots in the same order (the reference's `interact_features` concatenates the
//! dense vector `x` ahead of the dots; with no `x` there is nothing to concatenate).

use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use rayon::prelude::*;
use std::marker::PhantomData;

#[cfg(target_arch = "x86_64")]
mod simd;
#[cfg(target_arch = "x86_64")]
use simd::{dot_f32_avx2, dots_upto8_f32_avx2, s_times_x_avx512};

/// Rows are handed to rayon in blocks of at most this many (one scratch allocation per
/// block); each row is computed alone, so results do not depend on the thread count.
const MAX_BLOCK_ROWS: usize = 64;

fn rows_per_block(batch: usize) -> usize {
    batch.clamp(1, MAX_BLOCK_ROWS)
}

/// Output width of a [`DotInteraction`]: `dim` plus the number of pairs. A free function
/// so that model builders can size buffers without naming the scalar type.
pub fn output_dim(num_vectors: usize, dim: usize, self_interaction: bool) -> usize {
    dim + pairs(num_vectors, self_interaction)
}

/// Number of dots of `num_vectors` vectors: the output width of
/// [`DotInteraction::without_dense`].
pub fn pairs(num_vectors: usize, self_interaction: bool) -> usize {
    if self_interaction {
        num_vectors * (num_vectors + 1) / 2
    } else {
        num_vectors * num_vectors.saturating_sub(1) / 2
    }
}

/// `Σ a·b` in eight interleaved partial sums (one 8-wide vector register) combined by
/// halving: the same order on every CPU and thread count, so results are
/// reproducible, and the loop vectorizes.
#[inline(always)]
fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut tail = T::zero();
    for (x, y) in ac.remainder().iter().zip(bc.remainder()) {
        tail += *x * *y;
    }
    for (x, y) in ac.zip(bc) {
        for ((s, &p), &q) in acc.iter_mut().zip(x).zip(y) {
            *s += p * q;
        }
    }
    // Halving: 8 → 4 → 2 → 1 partial sums.
    for l in 0..4 {
        acc[l] += acc[l + 4];
    }
    for l in 0..2 {
        acc[l] += acc[l + 2];
    }
    (acc[0] + acc[1]) + tail
}

/// The DLRM dot interaction; it has no parameters.
#[derive(Debug, Clone)]
pub struct DotInteraction<T> {
    num_vectors: usize,
    dim: usize,
    self_interaction: bool,
    /// Columns copied from vector 0 ahead of the dots: `dim` (vector 0 is the dense
    /// vector), or 0 without dense features.
    lead: usize,
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
            lead: dim,
            _scalar: PhantomData,
        }
    }

    /// The interaction of a model without dense features: every vector is an
    /// embedding, and the output row is the dots alone (no vector ahead of them).
    ///
    /// # Panics
    /// If there would be no dot (one vector without self-interaction): the model builder
    /// refuses such a model first.
    pub fn without_dense(num_vectors: usize, dim: usize, self_interaction: bool) -> Self {
        assert!(
            dim >= 1 && pairs(num_vectors, self_interaction) >= 1,
            "DotInteraction::without_dense({num_vectors}, {dim}, {self_interaction})"
        );
        Self {
            lead: 0,
            ..Self::new(num_vectors, dim, self_interaction)
        }
    }

    /// Whether vector 0 is copied ahead of the dots (false for
    /// [`DotInteraction::without_dense`]).
    pub fn has_dense_vector(&self) -> bool {
        self.lead > 0
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

    /// Scratch one thread needs: the symmetric gradient matrix of one row (backward).
    fn scratch_len(&self) -> usize {
        self.num_vectors * self.num_vectors
    }

    /// One row: vector 0 (unless without dense features), then each pair's dot. The
    /// pairs are independent, so the CPU overlaps their dependency chains; each dot keeps
    /// its partial sums in registers.
    #[inline(always)]
    fn forward_row(&self, x: &[T], y: &mut [T], _scratch: &mut [T]) {
        let (n, d, lead) = (self.num_vectors, self.dim, self.lead);
        y[..lead].copy_from_slice(&x[..lead]);
        let mut k = lead;
        for i in 0..n {
            let vi = &x[i * d..(i + 1) * d];
            for j in 0..self.partners(i) {
                y[k] = dot(vi, &x[j * d..(j + 1) * d]);
                k += 1;
            }
        }
    }

    /// One row: `dX = S·X` with `S` the symmetric matrix of the dots' gradients
    /// (`∂<v_i, v_j>/∂v_i = v_j`; a self-dot contributes `2·v_i`), plus the pass-through
    /// of vector 0 (unless without dense features).
    #[inline(always)]
    fn backward_row(&self, x: &[T], dy: &[T], dx: &mut [T], scratch: &mut [T]) {
        let (n, d, lead) = (self.num_vectors, self.dim, self.lead);
        let s = self.dot_gradients(dy, scratch);
        match d {
            8 => Self::apply_gradient_fixed::<8>(n, s, x, dx),
            16 => Self::apply_gradient_fixed::<16>(n, s, x, dx),
            32 => Self::apply_gradient_fixed::<32>(n, s, x, dx),
            64 => Self::apply_gradient_fixed::<64>(n, s, x, dx),
            _ => {
                dx.fill(T::zero());
                for (i, out) in dx.chunks_exact_mut(d).enumerate() {
                    for (j, v) in x.chunks_exact(d).enumerate() {
                        let g = s[i * n + j];
                        for (o, &b) in out.iter_mut().zip(v) {
                            *o += g * b;
                        }
                    }
                }
            }
        }
        for (o, &g) in dx[..lead].iter_mut().zip(&dy[..lead]) {
            *o += g;
        }
    }

    /// The symmetric `n × n` matrix `S` of one row's dot gradients `dy`, in `scratch`.
    #[inline(always)]
    fn dot_gradients<'s>(&self, dy: &[T], scratch: &'s mut [T]) -> &'s [T] {
        let n = self.num_vectors;
        let s = &mut scratch[..n * n];
        let mut k = self.lead;
        for i in 0..n {
            for j in 0..i {
                // Written as the sum it is: `0 + g` (which turns -0 into +0).
                let g = T::zero() + dy[k];
                k += 1;
                s[i * n + j] = g;
                s[j * n + i] = g;
            }
            // A self-dot's gradient reaches its vector twice.
            s[i * n + i] = if self.self_interaction {
                k += 1;
                (T::zero() + dy[k - 1]) + dy[k - 1]
            } else {
                T::zero()
            };
        }
        s
    }

    /// `dx = S·x` for a width known at compile time, so that each output vector stays
    /// in registers while the `n` inputs stream past.
    #[inline(always)]
    fn apply_gradient_fixed<const D: usize>(n: usize, s: &[T], x: &[T], dx: &mut [T]) {
        for (i, out) in dx.chunks_exact_mut(D).enumerate() {
            let mut acc = [T::zero(); D];
            for (j, v) in x.chunks_exact(D).enumerate() {
                let g = s[i * n + j];
                for (a, &b) in acc.iter_mut().zip(v) {
                    *a += g * b;
                }
            }
            out.copy_from_slice(&acc);
        }
    }

    /// Rows `x → y` with one scratch buffer.
    #[inline(always)]
    fn forward_rows(&self, x: &[T], y: &mut [T], scratch: &mut [T]) {
        let (ni, no) = (self.in_dim(), self.out_dim());
        for (yr, xr) in y.chunks_exact_mut(no).zip(x.chunks_exact(ni)) {
            self.forward_row(xr, yr, scratch);
        }
    }

    #[inline(always)]
    fn backward_rows(&self, x: &[T], dy: &[T], dx: &mut [T], scratch: &mut [T]) {
        let (ni, no) = (self.in_dim(), self.out_dim());
        for (dxr, (xr, dyr)) in dx
            .chunks_exact_mut(ni)
            .zip(x.chunks_exact(ni).zip(dy.chunks_exact(no)))
        {
            self.backward_row(xr, dyr, dxr, scratch);
        }
    }

    /// Compiled for AVX2 + FMA: the same code, with 8-wide f32 vectors.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn forward_rows_avx2(&self, x: &[T], y: &mut [T], scratch: &mut [T]) {
        use std::any::TypeId;
        if TypeId::of::<T>() == TypeId::of::<f32>() {
            // SAFETY: T is f32, so these are the same slices under their own type.
            let (x32, y32) = unsafe {
                (
                    std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()),
                    std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<f32>(), y.len()),
                )
            };
            let (ni, no) = (self.in_dim(), self.out_dim());
            let (n, d, lead) = (self.num_vectors, self.dim, self.lead);
            for (yr, xr) in y32.chunks_exact_mut(no).zip(x32.chunks_exact(ni)) {
                yr[..lead].copy_from_slice(&xr[..lead]);
                let mut k = lead;
                for i in 0..n {
                    let vi = &xr[i * d..(i + 1) * d];
                    let partners = self.partners(i);
                    if d.is_multiple_of(8) {
                        // The partners are contiguous: eight at a time, then the rest.
                        let mut j = 0;
                        while j < partners {
                            let take = (partners - j).min(8);
                            let block = &xr[j * d..(j + take) * d];
                            // SAFETY: AVX2 and FMA were checked by the caller.
                            unsafe { dots_upto8_f32_avx2(vi, block, &mut yr[k..k + take]) };
                            j += take;
                            k += take;
                        }
                    } else {
                        for j in 0..partners {
                            // SAFETY: AVX2 and FMA were checked by the caller.
                            yr[k] = unsafe { dot_f32_avx2(vi, &xr[j * d..(j + 1) * d]) };
                            k += 1;
                        }
                    }
                }
            }
            return;
        }
        self.forward_rows(x, y, scratch)
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn backward_rows_avx2(&self, x: &[T], dy: &[T], dx: &mut [T], scratch: &mut [T]) {
        self.backward_rows(x, dy, dx, scratch)
    }

    fn forward_block(&self, x: &[T], y: &mut [T]) {
        let mut scratch = vec![T::zero(); self.scratch_len()];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx2_fma() {
            // SAFETY: the CPU was just checked for AVX2 and FMA.
            return unsafe { self.forward_rows_avx2(x, y, &mut scratch) };
        }
        self.forward_rows(x, y, &mut scratch)
    }

    /// Whether [`Self::backward_rows_avx512`] takes these rows: f32, dims a multiple of
    /// 16, on a CPU with AVX-512F.
    #[cfg(target_arch = "x86_64")]
    fn avx512_backward_fits(&self) -> bool {
        std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
            && self.dim.is_multiple_of(16)
            && crate::simd::has_avx512f()
    }

    /// [`Self::backward_rows`] with `S·X` in AVX-512 registers, four output vectors at a
    /// time. Each output value sums `s_ij · x_j` over `j` in order, `mul` then `add`, as
    /// [`Self::apply_gradient_fixed`] does: the same bits.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, and the rows must fit
    /// ([`Self::avx512_backward_fits`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn backward_rows_avx512(&self, x: &[T], dy: &[T], dx: &mut [T], scratch: &mut [T]) {
        let (n, d) = (self.num_vectors, self.dim);
        assert!(d.is_multiple_of(16) && std::mem::size_of::<T>() == 4);
        let (ni, no) = (self.in_dim(), self.out_dim());
        for (dxr, (xr, dyr)) in dx
            .chunks_exact_mut(ni)
            .zip(x.chunks_exact(ni).zip(dy.chunks_exact(no)))
        {
            let s = self.dot_gradients(dyr, scratch);
            // SAFETY: T is f32, so these are the same slices under their own type.
            let (s32, x32, dx32) = unsafe {
                (
                    std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()),
                    std::slice::from_raw_parts(xr.as_ptr().cast::<f32>(), xr.len()),
                    std::slice::from_raw_parts_mut(dxr.as_mut_ptr().cast::<f32>(), dxr.len()),
                )
            };
            // SAFETY: AVX-512F was checked by the caller; d is a multiple of 16.
            unsafe { s_times_x_avx512(n, d, s32, x32, dx32) };
            for (o, &g) in dxr[..self.lead].iter_mut().zip(&dyr[..self.lead]) {
                *o += g;
            }
        }
    }

    fn backward_block(&self, x: &[T], dy: &[T], dx: &mut [T]) {
        let mut scratch = vec![T::zero(); self.scratch_len()];
        #[cfg(target_arch = "x86_64")]
        if self.avx512_backward_fits() {
            // SAFETY: the CPU was just checked for AVX-512F, and the rows fit.
            return unsafe { self.backward_rows_avx512(x, dy, dx, &mut scratch) };
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx2_fma() {
            // SAFETY: the CPU was just checked for AVX2 and FMA.
            return unsafe { self.backward_rows_avx2(x, dy, dx, &mut scratch) };
        }
        self.backward_rows(x, dy, dx, &mut scratch)
    }
}

impl<T: Real> Layer<T> for DotInteraction<T> {
    fn in_dim(&self) -> usize {
        self.num_vectors * self.dim
    }

    fn out_dim(&self) -> usize {
        self.lead + pairs(self.num_vectors, self.self_interaction)
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        let (ni, no) = (self.in_dim(), self.out_dim());
        assert_eq!(x.len(), batch * ni, "DotInteraction::forward: x");
        assert_eq!(y.len(), batch * no, "DotInteraction::forward: y");
        let this = &*self;
        let rows = rows_per_block(batch);
        y.par_chunks_mut(no * rows)
            .zip(x.par_chunks(ni * rows))
            .for_each(|(yb, xb)| this.forward_block(xb, yb));
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
        let rows = rows_per_block(batch);
        dx.par_chunks_mut(ni * rows)
            .zip(x.par_chunks(ni * rows).zip(dy.par_chunks(no * rows)))
            .for_each(|(dxb, (xb, dyb))| this.backward_block(xb, dyb, dxb));
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
        assert_eq!(pairs(3, false), 3);
        assert_eq!(pairs(3, true), 6);
        assert_eq!(
            DotInteraction::<f32>::without_dense(26, 16, false).out_dim(),
            325
        );
        assert_eq!(
            DotInteraction::<f32>::without_dense(26, 16, true).out_dim(),
            351
        );
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
    fn without_dense_matches_hand_computation() {
        let x = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut layer = DotInteraction::<f64>::without_dense(3, 2, false);
        assert!(!layer.has_dense_vector());
        assert_eq!((layer.in_dim(), layer.out_dim()), (6, 3));
        let mut y = [0.0; 3];
        layer.forward(&x, &mut y, 1);
        // <v1,v0>, <v2,v0>, <v2,v1>: no vector ahead of them.
        assert_eq!(y, [11.0, 17.0, 39.0]);
        let mut dx = [0.0; 6];
        layer.backward(&x, &y, &[1.0, 0.0, 0.0], Some(&mut dx), 1);
        // d<v1,v0> alone: v1 onto v0, v0 onto v1, no pass-through.
        assert_eq!(dx, [3.0, 4.0, 1.0, 2.0, 0.0, 0.0]);

        let mut layer = DotInteraction::<f64>::without_dense(3, 2, true);
        let mut y = [0.0; 6];
        layer.forward(&x, &mut y, 1);
        assert_eq!(y, [5.0, 11.0, 25.0, 17.0, 39.0, 61.0]);
        // One vector has a dot only with itself.
        let mut one = DotInteraction::<f64>::without_dense(1, 2, true);
        let mut y = [0.0; 1];
        one.forward(&x[..2], &mut y, 1);
        assert_eq!(y, [5.0]);
    }

    #[test]
    #[should_panic(expected = "without_dense(1, 4, false)")]
    fn without_dense_needs_a_pair() {
        DotInteraction::<f32>::without_dense(1, 4, false);
    }

    #[test]
    fn gradcheck_without_dense_f64() {
        for (n, self_interaction, batch) in [
            (4, false, 5),
            (4, true, 5),
            (2, false, 3),
            (1, true, 3),
            (3, true, MAX_BLOCK_ROWS + 6),
        ] {
            let mut layer = DotInteraction::<f64>::without_dense(n, 3, self_interaction);
            let err = check_layer(&mut layer, batch, 1e-5, 1e-6, 17).max();
            eprintln!(
                "gradcheck interaction without dense f64 n={n} self={self_interaction}: max relative error {err:e}"
            );
            assert!(err < 1e-6, "n={n} self={self_interaction}: {err:e}");
        }
    }

    #[test]
    fn gradcheck_without_dense_f32() {
        let mut rng = StdRng::seed_from_u64(18);
        for self_interaction in [false, true] {
            let mut layer = DotInteraction::<f32>::without_dense(4, 3, self_interaction);
            let batch = 3;
            let x = test_grid::values(batch * layer.in_dim(), &mut rng);
            let r = test_grid::values(batch * layer.out_dim(), &mut rng);
            let err = check_layer_at(&mut layer, &x, &r, batch, test_grid::STEP, 1e-3).max();
            eprintln!(
                "gradcheck interaction without dense f32 self={self_interaction}: max relative error {err:e}"
            );
            assert!(err < 1e-3, "self={self_interaction}: {err:e}");
        }
    }

    /// Without dense features the output is the full layer's output after its first
    /// `dim` columns, bit for bit, and the input gradient is the full layer's for an
    /// output gradient of -0 on those columns (adding -0 changes no value), on every
    /// kernel the CPU runs (AVX2, AVX-512 and portable paths alike).
    #[test]
    fn without_dense_is_the_full_layers_dots_bit_for_bit() {
        for (self_interaction, d, n) in [
            (false, 16, 27),
            (true, 16, 27),
            (false, 19, 27),
            (true, 64, 9),
            (false, 8, 9),
            (true, 8, 5),
            (false, 48, 6),
            (true, 80, 3),
            (false, 112, 2),
            (true, 32, 1),
            (false, 3, 4),
        ] {
            let batch = 9;
            let mut full = DotInteraction::<f32>::new(n, d, self_interaction);
            let mut dots = DotInteraction::<f32>::without_dense(n, d, self_interaction);
            let (ni, no) = (dots.in_dim(), dots.out_dim());
            assert_eq!((ni, no + d), (full.in_dim(), full.out_dim()));
            let x: Vec<f32> = (0..batch * ni)
                .map(|i| ((i * 7919) % 211) as f32 / 97.0 - 1.0)
                .collect();
            let dy: Vec<f32> = (0..batch * no)
                .map(|i| ((i * 104_729) % 193) as f32 / 89.0 - 1.0)
                .collect();
            let mut y = vec![0.0; batch * no];
            dots.forward(&x, &mut y, batch);
            let mut y_full = vec![0.0; batch * (no + d)];
            full.forward(&x, &mut y_full, batch);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let tail: Vec<f32> = y_full
                .chunks_exact(no + d)
                .flat_map(|r| r[d..].to_vec())
                .collect();
            assert_eq!(
                bits(&y),
                bits(&tail),
                "({self_interaction}, {d}, {n}) forward"
            );
            let mut portable = vec![0.0; batch * no];
            let mut scratch = vec![0.0; dots.scratch_len()];
            dots.forward_rows(&x, &mut portable, &mut scratch);
            assert_eq!(bits(&y), bits(&portable));

            let mut dx = vec![0.0; batch * ni];
            dots.backward(&x, &y, &dy, Some(&mut dx), batch);
            let dy_full: Vec<f32> = dy
                .chunks_exact(no)
                .flat_map(|r| std::iter::repeat_n(-0.0, d).chain(r.iter().copied()))
                .collect();
            let mut dx_full = vec![0.0; batch * ni];
            full.backward(&x, &y_full, &dy_full, Some(&mut dx_full), batch);
            assert_eq!(
                bits(&dx),
                bits(&dx_full),
                "({self_interaction}, {d}, {n}) backward"
            );
            let mut dx_portable = vec![0.0; batch * ni];
            dots.backward_rows(&x, &dy, &mut dx_portable, &mut scratch);
            assert_eq!(bits(&dx), bits(&dx_portable));
        }
    }

    #[test]
    fn gradcheck_f64_parallel_path() {
        let mut layer = DotInteraction::<f64>::new(3, 2, true);
        let err = check_layer(&mut layer, MAX_BLOCK_ROWS + 6, 1e-5, 1e-6, 13).max();
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

    /// `S` written entry by entry holds the bits of the sums `0 + g (+ g)` it stands for,
    /// signed zeros included.
    #[test]
    fn dot_gradients_equal_sums_into_zeros() {
        for self_interaction in [false, true] {
            let (n, d) = (6, 2);
            let layer = DotInteraction::<f32>::new(n, d, self_interaction);
            let dy: Vec<f32> = (0..layer.out_dim())
                .map(|k| match k % 4 {
                    0 => -0.0,
                    1 => 0.0,
                    _ => k as f32 * -0.37,
                })
                .collect();
            let mut scratch = vec![f32::NAN; layer.scratch_len()];
            let s = layer.dot_gradients(&dy, &mut scratch).to_vec();
            let mut sums = vec![0.0f32; n * n];
            let mut k = d;
            for i in 0..n {
                for j in 0..layer.partners(i) {
                    sums[i * n + j] += dy[k];
                    sums[j * n + i] += dy[k];
                    k += 1;
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&s), bits(&sums), "self_interaction {self_interaction}");
        }
    }

    /// The row kernels (AVX2, and AVX-512 for the backward, where the CPU has them) equal
    /// the portable build exactly and a naive pair-by-pair sum to rounding.
    #[test]
    fn vectorized_rows_equal_naive_pairs() {
        // n = 27 as in DLRM on Criteo: partners go eight at a time, then the last 0 to 7
        // together; with 9 and 8 vectors the last row has 8 partners or fewer; below 8
        // vectors no row has a full block. d = 19 takes the pair-by-pair path.
        for (self_interaction, d, n) in [
            (false, 16, 27),
            (true, 16, 27),
            (false, 19, 27),
            (true, 64, 27),
            (false, 64, 27),
            (true, 8, 27),
            (false, 8, 9),
            (true, 16, 8),
            (false, 16, 8),
            (true, 8, 5),
            // The AVX-512 backward's tiles: 4, 3, 2 and 1 output vectors; 64, 32 and 16
            // columns (d = 112 takes all three).
            (false, 48, 6),
            (true, 80, 3),
            (false, 112, 2),
            (true, 32, 1),
            (false, 64, 4),
        ] {
            let batch = 9;
            let mut layer = DotInteraction::<f32>::new(n, d, self_interaction);
            let (ni, no) = (layer.in_dim(), layer.out_dim());
            let x: Vec<f32> = (0..batch * ni)
                .map(|i| ((i * 7919) % 211) as f32 / 97.0 - 1.0)
                .collect();
            let dy: Vec<f32> = (0..batch * no)
                .map(|i| ((i * 104_729) % 193) as f32 / 89.0 - 1.0)
                .collect();
            let mut y = vec![0.0; batch * no];
            layer.forward(&x, &mut y, batch);
            let mut portable = vec![0.0; batch * no];
            let mut scratch = vec![0.0; layer.scratch_len()];
            layer.forward_rows(&x, &mut portable, &mut scratch);
            assert_eq!(y, portable);
            let mut dx = vec![0.0; batch * ni];
            layer.backward(&x, &y, &dy, Some(&mut dx), batch);
            let mut dx_portable = vec![0.0; batch * ni];
            layer.backward_rows(&x, &dy, &mut dx_portable, &mut scratch);
            assert_eq!(dx, dx_portable);
            for r in 0..batch {
                let (xr, yr) = (&x[r * ni..(r + 1) * ni], &y[r * no..(r + 1) * no]);
                let mut k = d;
                for i in 0..n {
                    for j in 0..layer.partners(i) {
                        let mut naive = 0.0f64;
                        for t in 0..d {
                            naive += f64::from(xr[i * d + t]) * f64::from(xr[j * d + t]);
                        }
                        let got = f64::from(yr[k]);
                        assert!(
                            (got - naive).abs() <= 1e-5 * naive.abs().max(1.0),
                            "row {r} pair ({i}, {j}): {got} vs {naive}"
                        );
                        k += 1;
                    }
                }
            }
        }
    }
}
