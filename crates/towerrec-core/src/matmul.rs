//! Row-major matrix multiply on top of the `gemm` crate.
//!
//! Every dense layer's forward and backward is a few calls to [`matmul`]; keeping the
//! stride arithmetic in one place keeps the layers readable.

use crate::real::Real;
use gemm::Parallelism;

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
}
