//! bf16 matrix products through oneDNN's matmul primitive: the `onednn` feature, which
//! links the system's oneDNN 2.x (Debian's libdnnl-dev) through the few C calls of
//! csrc/onednn.c (docs/CONFIG.md, `model.dense_precision`).
//!
//! The caller rounds the operands to bf16 by [`super::round_bf16`]'s rule (to nearest,
//! ties to even), so oneDNN multiplies exactly the values the portable path multiplies;
//! it sums the exact products in f32, in its own order. One primitive per shape, kept
//! per thread: creating one costs far more than running a small product.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::ptr::NonNull;

/// csrc/onednn.c's `struct towerrec_dnnl_matmul`, only ever behind a pointer.
#[repr(C)]
struct Raw {
    _opaque: [u8; 0],
}

extern "C" {
    fn towerrec_dnnl_matmul_create(
        m: i64,
        n: i64,
        k: i64,
        trans_a: c_int,
        trans_b: c_int,
        accumulate: c_int,
        bf16: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut Raw;
    fn towerrec_dnnl_matmul_destroy(mm: *mut Raw);
    fn towerrec_dnnl_matmul_impl(mm: *const Raw) -> *const c_char;
    fn towerrec_dnnl_matmul_run(
        mm: *mut Raw,
        a: *const std::ffi::c_void,
        b: *const std::ffi::c_void,
        c: *mut f32,
        threads: c_int,
    ) -> c_int;
    fn towerrec_dnnl_isa() -> c_int;
    fn towerrec_dnnl_version(out: *mut c_char, len: usize);
}

/// The shape of one product: `m, n, k, trans_a, trans_b, accumulate`, and whether
/// the operands are bf16 (else f32).
type Shape = (usize, usize, usize, bool, bool, bool, bool);

/// One oneDNN matmul primitive, for one [`Shape`].
struct Primitive(NonNull<Raw>);

impl Drop for Primitive {
    fn drop(&mut self) {
        // SAFETY: the pointer came from towerrec_dnnl_matmul_create and is dropped once.
        unsafe { towerrec_dnnl_matmul_destroy(self.0.as_ptr()) }
    }
}

impl Primitive {
    fn new((m, n, k, trans_a, trans_b, accumulate, bf16): Shape) -> Result<Self, String> {
        let mut err = [0 as c_char; 256];
        // SAFETY: plain integers in, and a buffer with its length for the message.
        let raw = unsafe {
            towerrec_dnnl_matmul_create(
                m as i64,
                n as i64,
                k as i64,
                trans_a as c_int,
                trans_b as c_int,
                accumulate as c_int,
                bf16 as c_int,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        NonNull::new(raw).map(Primitive).ok_or_else(|| {
            // SAFETY: the shim always leaves a NUL-terminated message when it fails.
            let message = unsafe { CStr::from_ptr(err.as_ptr()) };
            let operands = if bf16 { "bf16" } else { "f32" };
            format!(
                "oneDNN matmul {m}x{k} . {k}x{n} ({operands} operands, f32 sums): {}",
                message.to_string_lossy()
            )
        })
    }

    /// The implementation oneDNN chose, such as `brg:avx512_core_amx` or `ref:any`.
    fn implementation(&self) -> String {
        // SAFETY: a live primitive; the name is a static string of the library's.
        unsafe { CStr::from_ptr(towerrec_dnnl_matmul_impl(self.0.as_ptr())) }
            .to_string_lossy()
            .into_owned()
    }
}

thread_local! {
    static PRIMITIVES: RefCell<HashMap<Shape, Primitive>> = RefCell::new(HashMap::new());
}

/// `c (m×n) = op(a) · op(b) (+ c if accumulate)` with bf16 operands (as bits) and f32
/// sums, all row-major, on `threads` threads: [`super::matmul`]'s contract.
///
/// # Panics
/// If a slice is shorter than its shape needs, or oneDNN refuses a shape after
/// [`probe`] found a bf16 implementation (a bug).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_bf16(
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    trans_a: bool,
    b: &[u16],
    trans_b: bool,
    c: &mut [f32],
    accumulate: bool,
    threads: usize,
) {
    let shape = (m, n, k, trans_a, trans_b, accumulate, true);
    run(shape, a, b, c, threads);
}

/// Runs the cached primitive of `shape` (made on first use): bf16 operands as bits
/// (`E = u16`), or f32 ones (`E = f32`: the same calls on CPUs without a bf16 matmul,
/// for tests), as `shape` says.
fn run<E>(shape: Shape, a: &[E], b: &[E], c: &mut [f32], threads: usize) {
    let (m, n, k, .., bf16) = shape;
    assert_eq!(std::mem::size_of::<E>(), if bf16 { 2 } else { 4 });
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    PRIMITIVES.with_borrow_mut(|cache| {
        let primitive = cache
            .entry(shape)
            .or_insert_with(|| Primitive::new(shape).unwrap_or_else(|e| panic!("{e}")));
        // SAFETY: the asserts above bound every element the primitive's descriptors
        // (these dims and row-major strides) reach; c is borrowed mutably and alone.
        let status = unsafe {
            towerrec_dnnl_matmul_run(
                primitive.0.as_ptr(),
                a.as_ptr().cast(),
                b.as_ptr().cast(),
                c.as_mut_ptr(),
                threads.max(1) as c_int,
            )
        };
        assert_eq!(status, 0, "oneDNN matmul {shape:?}: dnnl_status_t {status}");
    });
}

/// What [`probe`] found of the linked library on this CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneDnn {
    /// The library's version, `major.minor.patch`.
    pub version: String,
    /// Whether the instruction set oneDNN dispatches to has bf16 arithmetic
    /// (AVX-512 BF16, which AMX machines also have).
    pub cpu_bf16: bool,
    /// The implementation oneDNN chose for a 512×512×512 bf16 product, or why there is
    /// none (oneDNN 2.x has no bf16 matmul on CPUs below AVX-512).
    pub bf16_implementation: Result<String, String>,
}

impl OneDnn {
    /// Whether products run on the CPU's bf16 instructions: a bf16 CPU and an
    /// implementation other than oneDNN's reference one.
    pub fn is_fast(&self) -> bool {
        self.cpu_bf16
            && self
                .bf16_implementation
                .as_ref()
                .is_ok_and(|name| !name.starts_with("ref"))
    }
}

/// The library's version and instruction set, and its bf16 implementation, if any.
pub fn probe() -> OneDnn {
    let mut version = [0 as c_char; 32];
    // SAFETY: a buffer with its length; the shim NUL-terminates it.
    let (version, isa) = unsafe {
        towerrec_dnnl_version(version.as_mut_ptr(), version.len());
        (
            CStr::from_ptr(version.as_ptr())
                .to_string_lossy()
                .into_owned(),
            towerrec_dnnl_isa(),
        )
    };
    // dnnl_cpu_isa_avx512_core_bf16's bits (0xe7); the AMX values contain them.
    const AVX512_CORE_BF16: c_int = 0xe7;
    let shape = (512, 512, 512, false, false, false, true);
    OneDnn {
        version,
        cpu_bf16: isa & AVX512_CORE_BF16 == AVX512_CORE_BF16,
        bf16_implementation: Primitive::new(shape).map(|p| p.implementation()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::{matmul, round_bf16};
    use rand::{Rng, SeedableRng};

    fn bits(v: &[f32]) -> Vec<u16> {
        v.iter()
            .map(|&x| half::bf16::from_f32(x).to_bits())
            .collect()
    }

    /// Shapes, transposes, accumulation and threads of [`check`].
    fn cases(mut product: impl FnMut(&[f32], &[f32], Shape, usize, &mut [f32])) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for (m, n, k) in [(37, 29, 300), (1, 7, 3), (64, 1, 128)] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let start: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32).collect();
            for (ta, tb, acc, threads) in [
                (false, false, false, 1),
                (true, false, true, 2),
                (false, true, false, 2),
                (true, true, true, 1),
            ] {
                let mut c = start.clone();
                product(&a, &b, (m, n, k, ta, tb, acc, false), threads, &mut c);
            }
        }
    }

    /// `got` equals the f32 GEMM's `want` up to the order of the f32 sums (|sum| ≤ k).
    fn close(got: &[f32], want: &[f32], shape: Shape) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let bound = 1e-5 * shape.2 as f32;
            assert!((g - w).abs() <= bound, "{shape:?}: c[{i}] {g} vs {w}");
        }
    }

    /// The calls of the bf16 kernel with f32 operands, which oneDNN runs on any CPU:
    /// its descriptors (strides of transposed operands), the sum post-op and the
    /// threads give the f32 GEMM's products up to the order of the sums.
    #[test]
    fn the_same_calls_in_f32_equal_the_gemm() {
        let found = probe();
        assert!(!found.version.is_empty(), "{found:?}");
        cases(|a, b, shape @ (m, n, k, ta, tb, acc, _), threads, c| {
            let mut want = c.to_vec();
            run((m, n, k, ta, tb, acc, false), a, b, c, threads);
            matmul(m, n, k, a, ta, b, tb, &mut want, acc);
            close(c, &want, shape);
        });
    }

    /// With bf16 operands, wherever oneDNN has a bf16 matmul (AVX-512 and up): the
    /// portable path's products up to the order of the sums. Elsewhere the probe says
    /// why there is none, and the CPU has no bf16 instructions.
    #[test]
    fn bf16_equals_the_portable_path_up_to_the_order_of_the_sums() {
        let found = probe();
        if let Err(why) = &found.bf16_implementation {
            assert!(
                !found.cpu_bf16,
                "a bf16 CPU without oneDNN's bf16 matmul: {why}"
            );
            assert!(why.contains("no implementation on this CPU"), "{why}");
            return;
        }
        cases(|a, b, (m, n, k, ta, tb, acc, _), threads, c| {
            let round = |v: &[f32]| v.iter().map(|&x| round_bf16(x)).collect::<Vec<_>>();
            let mut want = c.to_vec();
            matmul_bf16(m, n, k, &bits(a), ta, &bits(b), tb, c, acc, threads);
            matmul(m, n, k, &round(a), ta, &round(b), tb, &mut want, acc);
            close(c, &want, (m, n, k, ta, tb, acc, true));
        });
    }
}
