//! The dot interaction's x86-64 kernels: the forward's dots in AVX2 registers and the
//! backward's `S·X` in AVX-512 ones, each summing in exactly the portable code's order
//! so that every build gives the same bits (the layer picks them at run time).

use std::arch::x86_64::*;

/// [`super::dot`] for f32 in AVX2 registers, summing in exactly `dot`'s order (lane `l` holds
/// elements `l, l+8, …`; then 8 → 4 → 2 → 1).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n / 8 * 8;
    let mut tail = 0.0f32;
    for k in full..n {
        tail += a[k] * b[k];
    }
    let mut acc = _mm256_setzero_ps();
    let mut k = 0;
    while k < full {
        // SAFETY: k + 8 <= full <= both lengths.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(k)),
                _mm256_loadu_ps(b.as_ptr().add(k)),
            )
        };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
        k += 8;
    }
    let half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    let pair = _mm_add_ss(quarter, _mm_shuffle_ps::<0b01>(quarter, quarter));
    _mm_cvtss_f32(pair) + tail
}

/// The dots of `a` with each of the `N ≤ 8` vectors of `b` (`N · a.len()` long,
/// `a.len()` a multiple of 8), bit for bit what [`super::dot`] gives each pair: every lane
/// accumulates `mul` then `add` as the portable loop does, and the 8 lanes of each pair
/// are reduced in [`super::dot`]'s halving order (lane `l` with `l + 4`, then `l + 2`, then the
/// last two). One pair's horizontal sum costs as much as its multiplies at dim 64; the
/// pairs share three transposing steps instead (with `N < 8`, on zeros for the rest).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_f32_avx2<const N: usize>(a: &[f32], b: &[f32], out: &mut [f32]) {
    let d = a.len();
    assert!(N <= 8 && d.is_multiple_of(8) && b.len() == N * d && out.len() >= N);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut k = 0;
    while k < d {
        // SAFETY: k + 8 <= d, and t·d + k + 8 <= N·d = b.len().
        unsafe {
            let x = _mm256_loadu_ps(a.as_ptr().add(k));
            for (t, s) in acc[..N].iter_mut().enumerate() {
                let y = _mm256_loadu_ps(b.as_ptr().add(t * d + k));
                *s = _mm256_add_ps(*s, _mm256_mul_ps(x, y));
            }
        }
        k += 8;
    }
    // Pair t's lanes l and l + 4: [t | t + 4] halves of four sums each.
    let fold = |p: __m256, q: __m256| {
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(p, q),
            _mm256_permute2f128_ps::<0x31>(p, q),
        )
    };
    let (r04, r15) = (fold(acc[0], acc[4]), fold(acc[1], acc[5]));
    let (r26, r37) = (fold(acc[2], acc[6]), fold(acc[3], acc[7]));
    // Then l with l + 2: [a+c of t, t+1; b+d of t, t+1] per half.
    let s01 = _mm256_add_ps(_mm256_unpacklo_ps(r04, r15), _mm256_unpackhi_ps(r04, r15));
    let s23 = _mm256_add_ps(_mm256_unpacklo_ps(r26, r37), _mm256_unpackhi_ps(r26, r37));
    // Then the last two: (a + c) + (b + d), pairs 0..8 in order.
    let ac = _mm256_shuffle_ps::<0b01_00_01_00>(s01, s23);
    let bd = _mm256_shuffle_ps::<0b11_10_11_10>(s01, s23);
    let mut sums = _mm256_add_ps(ac, bd);
    if N < 8 {
        // A row's last partners came from `dot_f32_avx2`, which adds its (here empty)
        // tail: -0.0 became 0.0 there, and does here.
        sums = _mm256_add_ps(sums, _mm256_setzero_ps());
    }
    let mut all = [0.0f32; 8];
    // SAFETY: `all` has 8 elements.
    unsafe { _mm256_storeu_ps(all.as_mut_ptr(), sums) };
    out[..N].copy_from_slice(&all[..N]);
}

/// [`dots_f32_avx2`] for the `b.len() / a.len()` (at most 8) vectors of `b`: a row's
/// partners eight at a time, then its last ones.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dots_upto8_f32_avx2(a: &[f32], b: &[f32], out: &mut [f32]) {
    // SAFETY (every arm): AVX2 and FMA were checked by the caller.
    unsafe {
        match b.len() / a.len() {
            0 => {}
            1 => dots_f32_avx2::<1>(a, b, out),
            2 => dots_f32_avx2::<2>(a, b, out),
            3 => dots_f32_avx2::<3>(a, b, out),
            4 => dots_f32_avx2::<4>(a, b, out),
            5 => dots_f32_avx2::<5>(a, b, out),
            6 => dots_f32_avx2::<6>(a, b, out),
            7 => dots_f32_avx2::<7>(a, b, out),
            8 => dots_f32_avx2::<8>(a, b, out),
            n => unreachable!("{n} vectors: at most 8 at a time"),
        }
    }
}

/// `dx = S·x` for one row: `n` vectors of `d` (a multiple of 16) values, `S` an `n × n`
/// matrix. Output vectors go four at a time (sixteen registers of sums), so each load of
/// an input vector's 16 values feeds four of them; within a vector, 64 columns at a time.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn s_times_x_avx512(n: usize, d: usize, s: &[f32], x: &[f32], dx: &mut [f32]) {
    assert!(d.is_multiple_of(16) && s.len() >= n * n && x.len() >= n * d && dx.len() >= n * d);
    let mut i = 0;
    while i < n {
        let rows = (n - i).min(4);
        let mut c = 0;
        while c < d {
            let cols = match (d - c) / 16 {
                k if k >= 4 => 4,
                k if k >= 2 => 2,
                _ => 1,
            };
            let a = (n, d, s, x, &mut *dx, i, c);
            // SAFETY (every arm): AVX-512F was checked by the caller; rows i..i + R and
            // columns c..c + 16·C lie inside s, x and dx (asserted above).
            unsafe {
                match (rows, cols) {
                    (4, 4) => s_times_x_tile::<4, 4>(a),
                    (3, 4) => s_times_x_tile::<3, 4>(a),
                    (2, 4) => s_times_x_tile::<2, 4>(a),
                    (1, 4) => s_times_x_tile::<1, 4>(a),
                    (4, 2) => s_times_x_tile::<4, 2>(a),
                    (3, 2) => s_times_x_tile::<3, 2>(a),
                    (2, 2) => s_times_x_tile::<2, 2>(a),
                    (1, 2) => s_times_x_tile::<1, 2>(a),
                    (4, _) => s_times_x_tile::<4, 1>(a),
                    (3, _) => s_times_x_tile::<3, 1>(a),
                    (2, _) => s_times_x_tile::<2, 1>(a),
                    _ => s_times_x_tile::<1, 1>(a),
                }
            }
            c += 16 * cols;
        }
        i += rows;
    }
}

/// A tile of [`s_times_x_avx512`]: `(n, d, s, x, dx, i, c)`, the output vectors
/// `i..i + R` and columns `c..c + 16·C` of `dx`.
type Tile<'a> = (
    usize,
    usize,
    &'a [f32],
    &'a [f32],
    &'a mut [f32],
    usize,
    usize,
);

/// Output vectors `i..i + R`, columns `c..c + 16·C`, of [`s_times_x_avx512`]: per input
/// vector `j`, `C` loads shared by the `R` outputs, `mul` then `add` into each sum.
///
/// # Safety
/// The CPU must support AVX-512F; the tile must lie inside `s`, `x` and `dx`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn s_times_x_tile<const R: usize, const C: usize>(tile: Tile<'_>) {
    let (n, d, s, x, dx, i, c) = tile;
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for j in 0..n {
        // SAFETY: the caller keeps the tile inside the slices.
        unsafe {
            let xj = x.as_ptr().add(j * d + c);
            let v: [__m512; C] = std::array::from_fn(|k| _mm512_loadu_ps(xj.add(16 * k)));
            for (r, row) in acc.iter_mut().enumerate() {
                let g = _mm512_set1_ps(*s.get_unchecked((i + r) * n + j));
                for (a, &vk) in row.iter_mut().zip(&v) {
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(g, vk));
                }
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (k, &a) in row.iter().enumerate() {
            // SAFETY: the caller keeps the tile inside dx.
            unsafe { _mm512_storeu_ps(dx.as_mut_ptr().add((i + r) * d + c + 16 * k), a) };
        }
    }
}
