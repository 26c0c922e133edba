//! The inner loops of the embedding bags: the pooled lookup and the per-row aggregation
//! and update of the fused backward.
//!
//! Both are bound by random row accesses, so they
//! - issue software prefetches for the rows a few ids ahead (x86-64; elsewhere the
//!   hardware is left to itself),
//! - sum each bag column block by column block in fixed-size stack arrays
//!   (`[f32; 64]` is eight AVX2 registers), so that a row is read once and the
//!   accumulator never goes through memory,
//! - are compiled twice, portable and with AVX2 + FMA enabled, and picked at run time
//!   ([`crate::simd::has_avx2_fma`]).
//!
//! The two compilations compute bitwise the same results: every element is summed in
//! the same order (ids in bag order, occurrences in `(sample, position)` order), Rust
//! never contracts `a * b + c` into a fused multiply-add, and vector `+ − × ÷ √` are
//! correctly rounded like their scalar forms. The tests check this.

use super::precision::{Elem, RowNoise};
use super::Pooling;
use crate::batch::JaggedView;
use crate::simd::{prefetch, prefetch_for_write, ROWS_APART_AHEAD};

/// How many ids ahead the lookup prefetches rows. Enough to cover a DRAM latency at
/// the rate a core sums rows, not so many that prefetched lines are evicted first.
const LOOKUP_PREFETCH: usize = 12;
/// How many occurrences ahead the backward prefetches the rows it will update.
const UPDATE_PREFETCH: usize = 12;

/// Which compilation of the kernels to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isa {
    /// Baseline instructions only (SSE2 on x86-64).
    Portable,
    /// AVX2 + FMA (and F16C, which every such CPU has, for fp16 tables); only chosen
    /// where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Isa {
    /// The fastest compilation this CPU runs.
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx2_fma() && std::arch::is_x86_feature_detected!("f16c") {
            return Isa::Avx2;
        }
        Isa::Portable
    }
}

/// Pools the bags of samples `first..` into the `stride`-long chunks of `out` (one per
/// sample, the slot at `offset`). Every id is `< weights.len() / dim`, `dim > 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pool_samples<E: Elem>(
    isa: Isa,
    weights: &[E],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    match isa {
        Isa::Portable => {
            pool_samples_body::<E, false>(weights, dim, pooling, ids, first, out, stride, offset)
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only constructed where the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe {
            pool_samples_avx2(weights, dim, pooling, ids, first, out, stride, offset)
        },
    }
}

/// [`pool_samples_body`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn pool_samples_avx2<E: Elem>(
    weights: &[E],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    pool_samples_body::<E, true>(weights, dim, pooling, ids, first, out, stride, offset);
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pool_samples_body<E: Elem, const F16C: bool>(
    weights: &[E],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    let pool = |bag: &[u64], ahead: &[u64], dst: &mut [f32]| {
        pool_bag::<E, F16C>(weights, dim, bag, ahead, dst)
    };
    for_each_bag(dim, pooling, ids, first, out, stride, offset, pool);
}

/// The loop over samples every pooling kernel shares (float and int8 rows): for each
/// sample from `first`, `pool(bag, ahead, dst)` sums its bag's rows into its slot of
/// `out` (`ahead`: the ids `LOOKUP_PREFETCH` positions on, to prefetch), then a mean
/// pooling divides by the bag's length.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn for_each_bag(
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
    mut pool: impl FnMut(&[u64], &[u64], &mut [f32]),
) {
    let values = ids.values;
    let n = out.len().div_ceil(stride);
    // Prefetch no further than this task's last id: the next task's ids are another
    // thread's.
    let limit = ids.start(first + n);
    for i in 0..n {
        if stride > dim && i + ROWS_APART_AHEAD < n {
            prefetch_for_write(out, (i + ROWS_APART_AHEAD) * stride + offset, dim);
        }
        let end = ((i + 1) * stride).min(out.len());
        let slot = &mut out[i * stride..end];
        let (s, e) = (ids.start(first + i), ids.start(first + i + 1));
        let bag = &values[s..e];
        let ahead = &values[(s + LOOKUP_PREFETCH).min(limit)..(e + LOOKUP_PREFETCH).min(limit)];
        let dst = &mut slot[offset..offset + dim];
        pool(bag, ahead, dst);
        if pooling == Pooling::Mean && bag.len() > 1 {
            let scale = 1.0 / bag.len() as f32;
            for d in dst.iter_mut() {
                *d *= scale;
            }
        }
    }
}

/// Sums the rows of `bag` into `dst` (`dim` long), prefetching the rows of `ahead`
/// (the ids `LOOKUP_PREFETCH` positions after each of `bag`'s, possibly fewer).
#[inline(always)]
fn pool_bag<E: Elem, const F16C: bool>(
    weights: &[E],
    dim: usize,
    bag: &[u64],
    ahead: &[u64],
    dst: &mut [f32],
) {
    let mut c = 0;
    // Prefetch with the first column block only: it reads every id once.
    let mut ahead = ahead;
    while c < dim {
        let left = dim - c;
        c += if left >= 64 {
            pool_block::<64, E, F16C>(weights, dim, c, bag, ahead, dst)
        } else if left >= 32 {
            pool_block::<32, E, F16C>(weights, dim, c, bag, ahead, dst)
        } else if left >= 16 {
            pool_block::<16, E, F16C>(weights, dim, c, bag, ahead, dst)
        } else if left >= 8 {
            pool_block::<8, E, F16C>(weights, dim, c, bag, ahead, dst)
        } else if left >= 4 {
            pool_block::<4, E, F16C>(weights, dim, c, bag, ahead, dst)
        } else {
            pool_block::<1, E, F16C>(weights, dim, c, bag, ahead, dst)
        };
        ahead = &[];
    }
}

/// Sums columns `c..c + W` of the rows of `bag` into `dst[c..c + W]`; returns `W`.
/// With `F16C` (only inside the AVX2 compilation, whose CPU has F16C) fp16 rows are
/// widened 8 values at a time by `vcvtph2ps` (exact, so the same bits).
#[inline(always)]
fn pool_block<const W: usize, E: Elem, const F16C: bool>(
    weights: &[E],
    dim: usize,
    c: usize,
    bag: &[u64],
    ahead: &[u64],
    dst: &mut [f32],
) -> usize {
    let mut acc = [0.0f32; W];
    for (k, &id) in bag.iter().enumerate() {
        if let Some(&next) = ahead.get(k) {
            prefetch(weights, next as usize * dim, dim);
        }
        let start = id as usize * dim + c;
        let row: &[E; W] = weights[start..start + W]
            .try_into()
            .expect("a slice of W elements");
        #[cfg(target_arch = "x86_64")]
        if F16C && E::FP16 && W.is_multiple_of(8) {
            // SAFETY: `F16C` is set only in the compilation for CPUs with AVX and F16C,
            // and `row` holds `W` fp16 values (`E::FP16`), `W` a multiple of 8.
            unsafe { add_fp16_f16c(&mut acc, row.as_ptr().cast::<u16>()) };
            continue;
        }
        for (a, &w) in acc.iter_mut().zip(row) {
            *a += w.widen();
        }
    }
    dst[c..c + W].copy_from_slice(&acc);
    W
}

/// Adds the `W` fp16 values at `row`, widened by F16C, to `acc`, in the order the
/// scalar loop adds them (element by element: the same bits).
///
/// # Safety
/// The CPU must have AVX and F16C (the caller's compilation enables them), `row`
/// must point to `W` values, and `W` must be a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_fp16_f16c<const W: usize>(acc: &mut [f32; W], row: *const u16) {
    use core::arch::x86_64::{__m128i, _mm256_add_ps, _mm256_cvtph_ps, _mm256_loadu_ps};
    use core::arch::x86_64::{_mm256_storeu_ps, _mm_loadu_si128};
    let mut i = 0;
    while i < W {
        // SAFETY: as the function's; `i + 8 ≤ W`.
        unsafe {
            let wide = _mm256_cvtph_ps(_mm_loadu_si128(row.add(i).cast::<__m128i>()));
            let a = _mm256_loadu_ps(acc.as_ptr().add(i));
            _mm256_storeu_ps(acc.as_mut_ptr().add(i), _mm256_add_ps(a, wide));
        }
        i += 8;
    }
}

/// What the backward's row update needs besides the rows.
#[derive(Clone, Copy)]
pub(super) enum RowOpt {
    Sgd {
        lr: f32,
    },
    RowWiseAdagrad {
        lr: f32,
        eps: f32,
    },
    Adam {
        beta1: f32,
        beta2: f32,
        eps: f32,
        step_size: f32,
        bc2_sqrt: f32,
    },
}

/// The occurrences of a task's rows, sorted by row then sample.
pub(super) trait Occurrences {
    fn len(&self) -> usize;
    /// Row of occurrence `j < len()`.
    fn row(&self, j: usize) -> usize;
    /// Sample of occurrence `j < len()`.
    fn sample(&self, j: usize) -> usize;
}

/// Keys `row << shift | sample`.
pub(super) struct Packed<'a> {
    pub keys: &'a [u64],
    pub shift: u32,
}

impl Occurrences for Packed<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.keys.len()
    }
    #[inline(always)]
    fn row(&self, j: usize) -> usize {
        (self.keys[j] >> self.shift) as usize
    }
    #[inline(always)]
    fn sample(&self, j: usize) -> usize {
        // `shift < 64` (the caller's condition for packing).
        (self.keys[j] & ((1u64 << self.shift) - 1)) as usize
    }
}

impl Occurrences for &[(u64, usize)] {
    #[inline(always)]
    fn len(&self) -> usize {
        <[_]>::len(self)
    }
    #[inline(always)]
    fn row(&self, j: usize) -> usize {
        self[j].0 as usize
    }
    #[inline(always)]
    fn sample(&self, j: usize) -> usize {
        self[j].1
    }
}

/// One task's share of the fused backward: the occurrences `occ` of a range of rows
/// whose weights are in `w` starting at row `base` (and likewise the optimizer state
/// in `s1`, `s2`: the accumulators, one per row, for row-wise Adagrad; the two moments
/// for Adam; empty for SGD).
pub(super) struct UpdateTask<'a, O, E> {
    pub base: usize,
    pub occ: O,
    pub w: &'a mut [E],
    pub s1: &'a mut [f32],
    pub s2: &'a mut [f32],
}

/// What every task of one backward shares.
#[derive(Clone, Copy)]
pub(super) struct UpdateInput<'a> {
    pub dim: usize,
    pub pooling: Pooling,
    pub offsets: &'a [usize],
    pub grad: &'a [f32],
    pub stride: usize,
    pub offset: usize,
    pub opt: RowOpt,
    /// The stochastic rounding's table key, global indices of row 0 and column 0, and
    /// the step.
    pub rounding: (u64, u64, u64, u64),
    /// The global index of each row, where they are not the range from the first.
    pub row_ids: Option<&'a [u64]>,
}

/// Aggregates each row's gradient over its occurrences (in order), then applies the
/// optimizer to the row.
pub(super) fn update_rows<O: Occurrences, E: Elem>(
    isa: Isa,
    input: UpdateInput<'_>,
    task: UpdateTask<'_, O, E>,
) {
    match isa {
        Isa::Portable => update_rows_body(input, task),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only constructed where the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe { update_rows_avx2(input, task) },
    }
}

/// [`update_rows_body`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn update_rows_avx2<O: Occurrences, E: Elem>(
    input: UpdateInput<'_>,
    task: UpdateTask<'_, O, E>,
) {
    update_rows_body(input, task);
}

#[inline(always)]
fn update_rows_body<O: Occurrences, E: Elem>(input: UpdateInput<'_>, task: UpdateTask<'_, O, E>) {
    let UpdateInput {
        dim,
        pooling,
        offsets,
        grad,
        stride,
        offset,
        opt,
        rounding: (key, first_row, first_col, step),
        row_ids,
    } = input;
    let UpdateTask {
        base,
        occ,
        w,
        s1,
        s2,
    } = task;
    let n = occ.len();
    let mut agg = vec![0.0f32; dim];
    // A reduced-precision row, widened for the update.
    let mut wide = vec![0.0f32; if E::as_f32(&mut []).is_some() { 0 } else { dim }];
    let mut j = 0;
    while j < n {
        let row = occ.row(j);
        agg.fill(0.0);
        while j < n && occ.row(j) == row {
            if j + UPDATE_PREFETCH < n {
                let r = (occ.row(j + UPDATE_PREFETCH) - base) * dim;
                prefetch_for_write(w, r, dim);
                if let RowOpt::Adam { .. } = opt {
                    prefetch_for_write(s1, r, dim);
                    prefetch_for_write(s2, r, dim);
                }
                prefetch(grad, occ.sample(j + UPDATE_PREFETCH) * stride + offset, dim);
            }
            let b = occ.sample(j);
            let start = b * stride + offset;
            let g = &grad[start..start + dim];
            match pooling {
                Pooling::Sum => {
                    for (a, &g) in agg.iter_mut().zip(g) {
                        *a += g;
                    }
                }
                Pooling::Mean => {
                    let scale = 1.0 / (offsets[b + 1] - offsets[b]) as f32;
                    for (a, &g) in agg.iter_mut().zip(g) {
                        *a += scale * g;
                    }
                }
            }
            j += 1;
        }
        let r = row - base;
        let stored = &mut w[r * dim..(r + 1) * dim];
        if let Some(w) = E::as_f32(stored) {
            apply(opt, w, &agg, (&mut *s1, &mut *s2), r);
            continue;
        }
        // A reduced-precision row: updated in f32, then rounded stochastically.
        wide.iter_mut()
            .zip(stored.iter())
            .for_each(|(d, v)| *d = v.widen());
        apply(opt, &mut wide, &agg, (&mut *s1, &mut *s2), r);
        let global = row_ids.map_or(first_row + row as u64, |ids| ids[row]);
        let noise = RowNoise::new(key, global, step);
        for (c, (d, &v)) in stored.iter_mut().zip(wide.iter()).enumerate() {
            *d = E::narrow_stochastic(v, noise.at(first_col as usize + c));
        }
    }
}

/// The optimizer's update of row `r` (`w`, `dim` long) by its summed gradient `agg`,
/// with its state in `s1`, `s2` (as [`UpdateTask`] lays them out).
#[inline(always)]
fn apply(opt: RowOpt, w: &mut [f32], agg: &[f32], (s1, s2): (&mut [f32], &mut [f32]), r: usize) {
    let dim = w.len();
    match opt {
        RowOpt::Sgd { lr } => {
            for (w, &g) in w.iter_mut().zip(agg) {
                *w -= lr * g;
            }
        }
        RowOpt::RowWiseAdagrad { lr, eps } => {
            let a = &mut s1[r];
            let sq: f64 = agg.iter().map(|&g| (g as f64) * (g as f64)).sum();
            *a += (sq / dim as f64) as f32;
            let mult = lr / (a.sqrt() + eps);
            for (w, &g) in w.iter_mut().zip(agg) {
                *w -= mult * g;
            }
        }
        RowOpt::Adam {
            beta1,
            beta2,
            eps,
            step_size,
            bc2_sqrt,
        } => {
            let m = &mut s1[r * dim..(r + 1) * dim];
            let v = &mut s2[r * dim..(r + 1) * dim];
            for (((w, m), v), &g) in w.iter_mut().zip(m).zip(v).zip(agg) {
                *m = beta1 * *m + (1.0 - beta1) * g;
                *v = beta2 * *v + (1.0 - beta2) * g * g;
                *w -= step_size * *m / (v.sqrt() / bc2_sqrt + eps);
            }
        }
    }
}
