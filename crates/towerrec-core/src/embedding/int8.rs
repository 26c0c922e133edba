//! 8-bit row-wise quantized tables for inference (issue 40; docs/CONFIG.md,
//! `model.table_precision = "int8"`; `towerrec quantize`).
//!
//! A row of `dim` values is stored as `dim` unsigned bytes followed by its scale and
//! bias as little-endian f32, the layout of FBGEMM's fused 8-bit row-wise tables:
//! value `j` is `q[j] · scale + bias`. Quantizing takes the row's minimum as the bias
//! and `(max − min) / 255` as the scale and rounds each value to the nearest step, so
//! a value is off by at most half a step (`(max − min) / 510`) plus f32 rounding.
//! The tables are read-only: they are made from trained f32 rows and pooled, never
//! updated.
//!
//! The pooling kernel is compiled portable and with AVX2 like the others
//! (`kernels`): each row value is `(q · scale) + bias` rounded as written (no fused
//! multiply-add), then added to the bag's sum in bag order, so both compilations give
//! the same bits.

use super::Pooling;
use crate::batch::JaggedView;
use crate::simd::prefetch;

use super::precision::INT8_TAIL as TAIL;

/// Bytes a stored row of `dim` values takes.
pub(super) fn row_bytes(dim: usize) -> usize {
    dim + TAIL
}

/// Quantizes `src` (one row) into `dst` (`src.len() + TAIL` bytes). Non-finite values
/// are a caller's bug (quantizing refuses them first).
pub(super) fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let (min, max) = src
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let (min, max) = if src.is_empty() {
        (0.0, 0.0)
    } else {
        (min, max)
    };
    let scale = (max - min) / 255.0;
    let (q, tail) = dst.split_at_mut(src.len());
    for (d, &v) in q.iter_mut().zip(src) {
        *d = if scale > 0.0 {
            ((v - min) / scale).round().clamp(0.0, 255.0) as u8
        } else {
            0
        };
    }
    tail[..4].copy_from_slice(&scale.to_le_bytes());
    tail[4..TAIL].copy_from_slice(&min.to_le_bytes());
}

/// A stored row's scale and bias.
#[inline(always)]
fn scale_bias(row: &[u8], dim: usize) -> (f32, f32) {
    let t = &row[dim..dim + TAIL];
    (
        f32::from_le_bytes([t[0], t[1], t[2], t[3]]),
        f32::from_le_bytes([t[4], t[5], t[6], t[7]]),
    )
}

/// Writes the values of the stored row `row` into `dst` (`dim` long).
pub(super) fn dequantize_row(row: &[u8], dst: &mut [f32]) {
    let dim = dst.len();
    let (scale, bias) = scale_bias(row, dim);
    for (d, &q) in dst.iter_mut().zip(&row[..dim]) {
        *d = q as f32 * scale + bias;
    }
}

/// Pools the bags of samples `first..` into the `stride`-long chunks of `out`, as
/// `kernels::pool_samples` does for float rows. `rows` holds `row_bytes(dim)` bytes a
/// row; every id is a row; `dim > 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pool_samples(
    avx2: bool,
    rows: &[u8],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is set only where the CPU has AVX2 and FMA (`kernels::Isa`).
        unsafe { pool_samples_avx2(rows, dim, pooling, ids, first, out, stride, offset) };
        return;
    }
    let _ = avx2;
    pool_samples_body(rows, dim, pooling, ids, first, out, stride, offset);
}

/// [`pool_samples_body`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pool_samples_avx2(
    rows: &[u8],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    pool_samples_body(rows, dim, pooling, ids, first, out, stride, offset);
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pool_samples_body(
    rows: &[u8],
    dim: usize,
    pooling: Pooling,
    ids: JaggedView<'_>,
    first: usize,
    out: &mut [f32],
    stride: usize,
    offset: usize,
) {
    let pool = |bag: &[u64], ahead: &[u64], dst: &mut [f32]| pool_bag(rows, dim, bag, ahead, dst);
    super::kernels::for_each_bag(dim, pooling, ids, first, out, stride, offset, pool);
}

/// Sums the rows of `bag` into `dst`, column block by column block.
#[inline(always)]
fn pool_bag(rows: &[u8], dim: usize, bag: &[u64], ahead: &[u64], dst: &mut [f32]) {
    let mut c = 0;
    let mut ahead = ahead;
    while c < dim {
        let left = dim - c;
        c += if left >= 64 {
            pool_block::<64>(rows, dim, c, bag, ahead, dst)
        } else if left >= 32 {
            pool_block::<32>(rows, dim, c, bag, ahead, dst)
        } else if left >= 16 {
            pool_block::<16>(rows, dim, c, bag, ahead, dst)
        } else if left >= 8 {
            pool_block::<8>(rows, dim, c, bag, ahead, dst)
        } else if left >= 4 {
            pool_block::<4>(rows, dim, c, bag, ahead, dst)
        } else {
            pool_block::<1>(rows, dim, c, bag, ahead, dst)
        };
        ahead = &[];
    }
}

/// Sums columns `c..c + W` of the rows of `bag` into `dst[c..c + W]`; returns `W`.
#[inline(always)]
fn pool_block<const W: usize>(
    rows: &[u8],
    dim: usize,
    c: usize,
    bag: &[u64],
    ahead: &[u64],
    dst: &mut [f32],
) -> usize {
    let width = row_bytes(dim);
    let mut acc = [0.0f32; W];
    for (k, &id) in bag.iter().enumerate() {
        if let Some(&next) = ahead.get(k) {
            prefetch(rows, next as usize * width, width);
        }
        let row = &rows[id as usize * width..(id as usize + 1) * width];
        let (scale, bias) = scale_bias(row, dim);
        let q: &[u8; W] = row[c..c + W].try_into().expect("a slice of W bytes");
        for (a, &q) in acc.iter_mut().zip(q) {
            *a += q as f32 * scale + bias;
        }
    }
    dst[c..c + W].copy_from_slice(&acc);
    W
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_value_is_within_half_a_step(row in prop::collection::vec(-10f32..10f32, 1..40)) {
            let mut q = vec![0u8; row_bytes(row.len())];
            quantize_row(&row, &mut q);
            let mut back = vec![0.0; row.len()];
            dequantize_row(&q, &mut back);
            let (lo, hi) = row.iter().fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let half_step = (hi - lo) / 510.0;
            for (&a, &b) in row.iter().zip(&back) {
                prop_assert!((a - b).abs() <= half_step * 1.001 + 1e-6, "{a} -> {b}, half step {half_step}");
            }
            // The extremes are exact: the bias is the minimum, and the maximum is 255 steps.
            prop_assert_eq!(q[..row.len()].iter().copied().min(), Some(0));
        }
    }

    #[test]
    fn a_constant_row_is_exact() {
        let row = [0.25f32; 5];
        let mut q = vec![7u8; row_bytes(5)];
        quantize_row(&row, &mut q);
        let mut back = [0.0; 5];
        dequantize_row(&q, &mut back);
        assert_eq!(back, row);
        assert!(q[..5].iter().all(|&v| v == 0));
    }
}
