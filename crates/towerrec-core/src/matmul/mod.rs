//! Row-major matrix multiply on top of the `gemm` crate.
//!
//! Every dense layer's forward and backward is a few calls to [`matmul`]; keeping the
//! stride arithmetic in one place keeps the layers readable. [`matmul_in`] multiplies
//! in a [`DensePrecision`]: with bf16, as bf16 hardware and PyTorch's bf16 autocast do,
//! both operands are rounded to bf16 (to nearest, ties to even) and the products summed
//! in f32 (a product of two bf16 values is exact in f32) (docs/CONFIG.md,
//! `model.dense_precision`). [`bf16_kernel`] says which code computes those products:
//! oneDNN's matmul on the CPU's bf16 instructions where this build has the `onednn`
//! feature and the CPU has them ([`onednn`]), else the portable path, rounded copies
//! through the f32 GEMM; both multiply the same rounded values.

use crate::real::Real;
use gemm::Parallelism;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

#[cfg(feature = "onednn")]
pub mod onednn;

/// How the dense layers' matrix products take their operands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DensePrecision {
    /// f32 operands.
    #[default]
    Fp32,
    /// Operands rounded to bf16, products summed in f32; the weights, gradients and
    /// optimizer state stay f32 (master weights); computed by [`bf16_kernel`].
    Bf16,
    /// `Bf16` where [`bf16_kernel`] runs on the CPU's bf16 instructions, else `Fp32`
    /// ([`DensePrecision::resolve`]; a config resolves it when it is read).
    Auto,
}

impl DensePrecision {
    /// The name used in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            DensePrecision::Fp32 => "fp32",
            DensePrecision::Bf16 => "bf16",
            DensePrecision::Auto => "auto",
        }
    }

    /// `Auto` made `Bf16` or `Fp32` for this process; the others as they are.
    pub fn resolve(self) -> DensePrecision {
        match self {
            DensePrecision::Auto if bf16_kernel().is_fast() => DensePrecision::Bf16,
            DensePrecision::Auto => DensePrecision::Fp32,
            p => p,
        }
    }
}

/// Which code computes this process's [`DensePrecision::Bf16`] products.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// oneDNN's matmul primitive on the CPU's bf16 instructions.
    OneDnn {
        /// The library's version.
        version: String,
        /// The implementation oneDNN chose for a 512×512×512 product.
        implementation: String,
    },
    /// Rounded copies of the operands through the f32 GEMM: any CPU, slower than fp32.
    Portable {
        /// Why not oneDNN, for the run's note.
        why: String,
    },
}

impl Bf16Kernel {
    /// Whether bf16 products run on bf16 instructions (faster than fp32 can be).
    pub fn is_fast(&self) -> bool {
        matches!(self, Bf16Kernel::OneDnn { .. })
    }
}

impl std::fmt::Display for Bf16Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bf16Kernel::OneDnn {
                version,
                implementation,
            } => write!(f, "oneDNN {version} ({implementation})"),
            Bf16Kernel::Portable { why } => write!(
                f,
                "the portable path: rounded copies through the f32 GEMM, slower than fp32 ({why})"
            ),
        }
    }
}

/// This process's bf16 kernel, chosen once: oneDNN where this build has the `onednn`
/// feature, the CPU has bf16 instructions and oneDNN picks an implementation other
/// than its reference one; the portable path otherwise.
pub fn bf16_kernel() -> &'static Bf16Kernel {
    static KERNEL: OnceLock<Bf16Kernel> = OnceLock::new();
    KERNEL.get_or_init(choose_bf16_kernel)
}

#[cfg(feature = "onednn")]
fn choose_bf16_kernel() -> Bf16Kernel {
    let found = onednn::probe();
    let version = &found.version;
    match (found.cpu_bf16, found.bf16_implementation) {
        (true, Ok(implementation)) if !implementation.starts_with("ref") => Bf16Kernel::OneDnn {
            version: found.version,
            implementation,
        },
        (false, _) => Bf16Kernel::Portable {
            why: format!("oneDNN {version} finds no bf16 instructions on this CPU"),
        },
        (true, Ok(implementation)) => Bf16Kernel::Portable {
            why: format!(
                "oneDNN {version} offers only its reference bf16 matmul ({implementation})"
            ),
        },
        (true, Err(e)) => Bf16Kernel::Portable { why: e },
    }
}

#[cfg(not(feature = "onednn"))]
fn choose_bf16_kernel() -> Bf16Kernel {
    let cpu = match crate::simd::has_bf16_instructions() {
        true => "this CPU has bf16 instructions",
        false => "this CPU has no bf16 instructions",
    };
    Bf16Kernel::Portable {
        why: format!("this build has no oneDNN: build with --features onednn; {cpu}"),
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

/// The operands' rounded copies of [`matmul_in`], kept between calls: as `T` for the
/// portable path, as bf16 bits for oneDNN.
#[derive(Debug, Clone, Default)]
pub struct Bf16Scratch<T> {
    a: Vec<T>,
    b: Vec<T>,
    #[cfg(feature = "onednn")]
    a16: Vec<u16>,
    #[cfg(feature = "onednn")]
    b16: Vec<u16>,
}

/// [`matmul`] in `precision`: with [`DensePrecision::Bf16`] on copies of the first
/// `m·k` values of `a` and `k·n` of `b` rounded to bf16 (in `scratch`), by
/// [`bf16_kernel`] (oneDNN for `f32` where it is fast); `Auto` as it [resolves].
///
/// [resolves]: DensePrecision::resolve
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
    if precision.resolve() == DensePrecision::Fp32 {
        return matmul(m, n, k, a, trans_a, b, trans_b, c, accumulate);
    }
    check_shapes(m, n, k, a, b, c);
    #[cfg(feature = "onednn")]
    if bf16_kernel().is_fast() && m * n * k > 0 {
        if let (Some(a), Some(b), Some(c)) = (as_f32(a), as_f32(b), as_f32_mut(c)) {
            let bits = |v: &f32| half::bf16::from_f32(*v).to_bits();
            convert(&mut scratch.a16, &a[..m * k], bits);
            convert(&mut scratch.b16, &b[..k * n], bits);
            let threads = match m * n * k >= PARALLEL_MIN_FLOPS {
                true => rayon::current_num_threads(),
                false => 1,
            };
            let (a16, b16) = (&scratch.a16, &scratch.b16);
            onednn::matmul_bf16(m, n, k, a16, trans_a, b16, trans_b, c, accumulate, threads);
            return;
        }
    }
    portable_bf16(scratch, m, n, k, a, trans_a, b, trans_b, c, accumulate);
}

/// The portable bf16 product: rounded copies of the operands through the f32 GEMM.
#[allow(clippy::too_many_arguments)]
fn portable_bf16<T: Real>(
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
    convert(&mut scratch.a, &a[..m * k], |&v| round_bf16(v));
    convert(&mut scratch.b, &b[..k * n], |&v| round_bf16(v));
    matmul(
        m, n, k, &scratch.a, trans_a, &scratch.b, trans_b, c, accumulate,
    );
}

/// `dst` made `src` mapped by `f`, in parallel for large operands.
fn convert<S: Sync, D: Send>(dst: &mut Vec<D>, src: &[S], f: impl Fn(&S) -> D + Sync + Send) {
    use rayon::prelude::*;
    dst.clear();
    dst.par_extend(src.par_iter().with_min_len(1 << 14).map(f));
}

/// `s` as `&[f32]` when `T` is `f32`.
#[cfg(feature = "onednn")]
fn as_f32<T: Real>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (same type id), so the slice is one of f32s.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// `s` as `&mut [f32]` when `T` is `f32`.
#[cfg(feature = "onednn")]
fn as_f32_mut<T: Real>(s: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as in as_f32; the borrow moves into the result.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
}

/// [`matmul`]'s checks of the slices' lengths.
fn check_shapes<T>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &[T]) {
    assert!(a.len() >= m * k, "matmul: a has {} < {}", a.len(), m * k);
    assert!(b.len() >= k * n, "matmul: b has {} < {}", b.len(), k * n);
    assert!(c.len() >= m * n, "matmul: c has {} < {}", c.len(), m * n);
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
    check_shapes(m, n, k, a, b, c);
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
            portable_bf16(&mut scratch, m, n, k, &a, ta, &b, tb, &mut c16, false);
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
            if !bf16_kernel().is_fast() {
                let mut via = vec![0.0f32; m * n];
                let p = DensePrecision::Bf16;
                matmul_in(p, &mut scratch, m, n, k, &a, ta, &b, tb, &mut via, false);
                assert_eq!(
                    bits(&via),
                    bits(&c16),
                    "{ta} {tb}: matmul_in is the portable path"
                );
            }
            assert_ne!(bits(&c16), bits(&c32), "{ta} {tb}: bf16 differs from fp32");
            let worst = c16
                .iter()
                .zip(&c32)
                .fold(0f32, |w, (x, y)| w.max((x - y).abs()));
            assert!(worst < 0.1, "{ta} {tb}: {worst}");
        }
    }

    #[test]
    fn auto_is_bf16_exactly_where_the_kernel_is_fast() {
        let fast = bf16_kernel().is_fast();
        let want = match fast {
            true => DensePrecision::Bf16,
            false => DensePrecision::Fp32,
        };
        assert_eq!(DensePrecision::Auto.resolve(), want);
        assert_eq!(DensePrecision::Bf16.resolve(), DensePrecision::Bf16);
        assert_eq!(DensePrecision::Fp32.resolve(), DensePrecision::Fp32);
        let said = bf16_kernel().to_string();
        if cfg!(not(feature = "onednn")) {
            assert!(!fast && said.contains("--features onednn"), "{said}");
        }
        assert_eq!(fast, said.starts_with("oneDNN"), "{said}");
    }
}
