//! Runtime CPU feature checks for the hand-written kernels, which are compiled twice:
//! once portable and once for AVX2 + FMA, chosen at run time.

/// Whether this CPU runs AVX2 and FMA instructions (cached by the standard library).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Whether this CPU runs AVX2 and FMA instructions: never off x86_64.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn has_avx2_fma() -> bool {
    false
}
