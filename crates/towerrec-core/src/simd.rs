//! Runtime CPU feature checks for the hand-written kernels, which are compiled twice:
//! once portable and once for AVX2 + FMA, chosen at run time; and the prefetch hints
//! they and the sharded runtime's row copies give.

/// Whether this CPU runs AVX2 and FMA instructions (cached by the standard library).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Whether this CPU runs AVX-512F instructions (cached by the standard library).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx512f() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// Whether this CPU has bf16 arithmetic (AVX-512 BF16 or AMX-BF16, as the kernel
/// reports them in /proc/cpuinfo; false where that cannot be read).
pub fn has_bf16_instructions() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .filter(|l| l.starts_with("flags"))
            .take(1)
            .any(|l| {
                l.split_whitespace()
                    .any(|f| f == "avx512_bf16" || f == "amx_bf16")
            })
    })
}

/// Whether this CPU runs AVX2 and FMA instructions: never off x86_64.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn has_avx2_fma() -> bool {
    false
}

/// How many rows ahead a walk over slots that lie a row apart (a rank's feature rows,
/// kilobytes wide, one slot of each touched) asks for the slot it will reach: the
/// hardware's prefetchers follow runs of adjacent lines, not such strides. The lookup
/// kernel writing into feature rows and the sharded runtime's row copies use it.
pub const ROWS_APART_AHEAD: usize = 8;

/// Asks for the cache lines of `buf[start..start + len]` (elements) to be loaded into L1, without
/// waiting. A hint only: it never faults and never changes a result.
#[inline(always)]
pub fn prefetch<T>(buf: &[T], start: usize, len: usize) {
    prefetch_hint::<{ HINT_READ }, T>(buf, start, len);
}

/// [`prefetch`] with the intent to write (`PREFETCHW`): the line arrives exclusive, so
/// the update's store does not have to ask for ownership again.
#[inline(always)]
pub fn prefetch_for_write<T>(buf: &[T], start: usize, len: usize) {
    prefetch_hint::<{ HINT_WRITE }, T>(buf, start, len);
}

#[cfg(target_arch = "x86_64")]
const HINT_READ: i32 = core::arch::x86_64::_MM_HINT_T0;
#[cfg(target_arch = "x86_64")]
const HINT_WRITE: i32 = core::arch::x86_64::_MM_HINT_ET0;
#[cfg(not(target_arch = "x86_64"))]
const HINT_READ: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
const HINT_WRITE: i32 = 1;

#[inline(always)]
fn prefetch_hint<const HINT: i32, T>(buf: &[T], start: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::_mm_prefetch;
        let base = buf.as_ptr();
        let mut i = 0;
        while i < len {
            // `wrapping_add`: the address is only a hint, so it need not be in bounds
            // (callers keep it in bounds anyway).
            let p = base.wrapping_add(start + i).cast::<i8>();
            // SAFETY: SSE is part of the x86-64 baseline, and a prefetch never faults
            // nor reads memory in the abstract machine's sense.
            unsafe { _mm_prefetch::<HINT>(p) };
            i += (64 / std::mem::size_of::<T>()).max(1); // one 64-byte line
        }
        // A row that starts mid-line ends in one more line.
        if len > 0 && (base.wrapping_add(start) as usize) & 63 != 0 {
            let p = base.wrapping_add(start + len - 1).cast::<i8>();
            // SAFETY: as above.
            unsafe { _mm_prefetch::<HINT>(p) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, start, len);
}
