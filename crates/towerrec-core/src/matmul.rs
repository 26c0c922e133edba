//! Row-major matrix multiply on top of the `gemm` crate.
//!
//! Every dense layer's forward and backward is a few calls to [`matmul`]; keeping the
//! stride arithmetic in one place keeps the layers readable. [`matmul_in`] multiplies
//! in a [`DensePrecision`]: with bf16, as bf16 hardware and PyTorch's bf16 autocast do,
//! both operands are rounded to bf16 (to nearest, ties to even) and the products summed
//! in f32 (a product of two bf16 values is exact in f32) (docs/CONFIG.md,
//! `model.dense_precision`).

use crate::real::Real;
use gemm::Parallelism;
use serde::{Deserialize, Serialize};

/// How the dense layers' matrix products take their operands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DensePrecision {
    /// f32 operands.
    #[default]
    Fp32,
    /// Operands rounded to bf16, products summed in f32; the weights, gradients and
    /// optimizer state stay f32 (master weights). This build computes it portably:
    /// rounded copies of the operands through the f32 GEMM, slower than fp32.
    Bf16,
}

impl DensePrecision {
    /// The name used in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            DensePrecision::Fp32 => "fp32",
            DensePrecision::Bf16 => "bf16",
        }
    }
}

impl std::fmt::Display for DensePrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `x` rounded to the nearest bf16 value (ties to even; NaN stays NaN), as `T`.
#[inline]
pub fn round_bf16<T: Real>(x: T) -> T {
    T::of(half::bf16::from_f32(x.f64() as f32).to_f64())
}

/// The operands' rounded copies of [`matmul_in`], kept between calls.
#[derive(Debug, Clone, Default)]
pub struct Bf16Scratch<T> {
    a: Vec<T>,
    b: Vec<T>,
}

/// [`matmul`] in `precision`: with [`DensePrecision::Bf16`] on copies of the first
/// `m·k` values of `a` and `k·n` of `b` rounded to bf16 (in `scratch`).
#[allow(clippy::too_many_arguments)]
pub fn matmul_in<T: Real>(
    precision: DensePrecision,
    scratch: &mut Bf16Scratch<T>,
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    trans_a: bool,
    b: &[T],
    trans_b: bool,
    c: &mut [T],
    accumulate: bool,
) {
    if precision == DensePrecision::Fp32 {
        return matmul(m, n, k, a, trans_a, b, trans_b, c, accumulate);
    }
    assert!(a.len() >= m * k, "matmul: a has {} < {}", a.len(), m * k);
    assert!(b.len() >= k * n, "matmul: b has {} < {}", b.len(), k * n);
    fn rounded<T: Real>(dst: &mut Vec<T>, src: &[T]) {
        use rayon::prelude::*;
        dst.clear();
        dst.par_extend(src.par_iter().with_min_len(1 << 14).map(|&v| round_bf16(v)));
    }
    let Bf16Scratch { a: ra, b: rb } = scratch;
    rounded(ra, &a[..m * k]);
    rounded(rb, &b[..k * n]);
    matmul(m, n, k, ra, trans_a, rb, trans_b, c, accumulate);
}

/// Below this many multiply-adds a GEMM runs on the calling thread: spawning costs more.
const PARALLEL_MIN_FLOPS: usize = 1 << 17;

/// `c (m×n) = op(a) · op(b) (+ c if accumulate)`, all row-major.
///
/// `op(a)` is `m×k`: `a` is stored `m×k`, or `k×m` if `trans_a`.
/// `op(b)` is `k×n`: `b` is stored `k×n`, or `n×k` if `trans_b`.
///
/// # Panics
/// If a slice is shorter than its shape needs (a programmer's bug: layers check shapes).
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    trans_a: bool,
    b: &[T],
    trans_b: bool,
    c: &mut [T],
    accumulate: bool,
) {
    assert!(a.len() >= m * k, "matmul: a has {} < {}", a.len(), m * k);
    assert!(b.len() >= k * n, "matmul: b has {} < {}", b.len(), k * n);
    assert!(c.len() >= m * n, "matmul: c has {} < {}", c.len(), m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].iter_mut().for_each(|v| *v = T::zero());
        }
        return;
    }
    let (a_rs, a_cs) = if trans_a {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let (b_rs, b_cs) = if trans_b {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 && m * n * k >= PARALLEL_MIN_FLOPS {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above guarantee every index gemm forms from these strides
    // and sizes lies inside the three slices; c is borrowed mutably and alone.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            T::one(),
            T::one(),
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f64], ta: bool, b: &[f64], tb: bool) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    c[i * n + j] += av * bv;
                }
            }
        }
        c
    }

    #[test]
    fn matches_naive_for_every_transpose() {
        let (m, n, k) = (7, 5, 300);
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 11) as f64) - 5.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 13 % 7) as f64) - 3.0).collect();
        for ta in [false, true] {
            for tb in [false, true] {
                let want = naive(m, n, k, &a, ta, &b, tb);
                let mut c = vec![1.0; m * n];
                matmul(m, n, k, &a, ta, &b, tb, &mut c, false);
                assert_eq!(c, want, "ta={ta} tb={tb}");
                matmul(m, n, k, &a, ta, &b, tb, &mut c, true);
                let doubled: Vec<f64> = want.iter().map(|v| 2.0 * v).collect();
                assert_eq!(c, doubled);
            }
        }
    }

    #[test]
    fn bf16_multiplies_the_rounded_operands_in_f32() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (m, n, k) = (37, 29, 300);
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let ra: Vec<f32> = a.iter().map(|&v| round_bf16(v)).collect();
        let rb: Vec<f32> = b.iter().map(|&v| round_bf16(v)).collect();
        // Rounded to bf16: 8 significant bits, to nearest.
        assert!(ra.iter().all(|v| v.to_bits() & 0xffff == 0));
        assert_eq!(round_bf16(1.0f32 + 1.0 / 256.0), 1.0, "a tie goes to even");
        assert_eq!(round_bf16(1.0f32 + 3.0 / 256.0), 1.0 + 1.0 / 64.0);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut scratch = Bf16Scratch::default();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (mut c16, mut want, mut c32) =
                (vec![0.0f32; m * n], vec![0.0; m * n], vec![0.0; m * n]);
            matmul_in(
                DensePrecision::Bf16,
                &mut scratch,
                m,
                n,
                k,
                &a,
                ta,
                &b,
                tb,
                &mut c16,
                false,
            );
            matmul(m, n, k, &ra, ta, &rb, tb, &mut want, false);
            matmul_in(
                DensePrecision::Fp32,
                &mut scratch,
                m,
                n,
                k,
                &a,
                ta,
                &b,
                tb,
                &mut c32,
                false,
            );
            assert_eq!(bits(&c16), bits(&want), "{ta} {tb}");
            assert_ne!(bits(&c16), bits(&c32), "{ta} {tb}: bf16 differs from fp32");
            let worst = c16
                .iter()
                .zip(&c32)
                .fold(0f32, |w, (x, y)| w.max((x - y).abs()));
            assert!(worst < 0.1, "{ta} {tb}: {worst}");
        }
    }
}
