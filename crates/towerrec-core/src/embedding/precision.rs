//! Reduced-precision table storage: rows kept as fp16 or bf16, widened to f32 where they
//! are read (pooling) and narrowed back where they are updated, the arithmetic in f32
//! (FBGEMM's half-precision tables). The update rounds stochastically, as FBGEMM
//! offers: a value between two representable neighbours becomes the upper one with
//! probability equal to its distance from the lower, so small updates are kept on
//! average instead of rounded away. The random bits are a hash of the table's key,
//! the row's global index, the table's step and the column, so a row's rounding does
//! not depend on where it lives, on the threads, or on a resume (docs/CONFIG.md,
//! `model.table_precision`).

use serde::{Deserialize, Serialize};

/// Bytes after an int8 row's values: its scale and bias as f32 (FBGEMM's fused layout).
pub(super) const INT8_TAIL: usize = 8;

/// How a table stores its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TablePrecision {
    /// 4 bytes a value.
    #[default]
    Fp32,
    /// IEEE half (2 bytes; 11 significant bits, largest finite 65,504).
    Fp16,
    /// bfloat16 (2 bytes; 8 significant bits, f32's range).
    Bf16,
    /// 8-bit row-wise quantized (1 byte a value and a scale and a bias per row, FBGEMM's
    /// fused 8-bit row-wise layout): for inference only, made from a trained table by
    /// `towerrec quantize` (`int8` module).
    Int8,
}

impl TablePrecision {
    /// Bytes one stored value takes (an int8 row has 8 more: [`TablePrecision::row_bytes`]).
    pub fn bytes(self) -> usize {
        match self {
            TablePrecision::Fp32 => 4,
            TablePrecision::Fp16 | TablePrecision::Bf16 => 2,
            TablePrecision::Int8 => 1,
        }
    }

    /// Bytes a stored row of `dim` values takes.
    pub fn row_bytes(self, dim: usize) -> usize {
        let tail = if self == TablePrecision::Int8 {
            INT8_TAIL
        } else {
            0
        };
        dim.saturating_mul(self.bytes()).saturating_add(tail)
    }

    /// Whether a table of this precision can be trained (int8 tables are read-only).
    pub fn trainable(self) -> bool {
        self != TablePrecision::Int8
    }

    /// The name used in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            TablePrecision::Fp32 => "fp32",
            TablePrecision::Fp16 => "fp16",
            TablePrecision::Bf16 => "bf16",
            TablePrecision::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for TablePrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A stored value: widened to f32 to be read, narrowed from f32 to be written.
pub(super) trait Elem: Copy + Default + Send + Sync + bytemuck::Pod + 'static {
    /// Whether the values are fp16 (which x86's F16C instructions widen 8 at a time).
    const FP16: bool = false;
    /// The value as f32 (exact).
    fn widen(self) -> f32;
    /// `x` rounded to nearest, ties to even (loading values).
    fn narrow(x: f32) -> Self;
    /// `x` rounded stochastically with the random bits `noise` (updates).
    fn narrow_stochastic(x: f32, noise: u32) -> Self;
    /// The row as f32 values, when the storage is f32 (updated in place, no rounding).
    fn as_f32(row: &mut [Self]) -> Option<&mut [f32]>;
}

impl Elem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn narrow_stochastic(x: f32, _: u32) -> Self {
        x
    }
    #[inline(always)]
    fn as_f32(row: &mut [Self]) -> Option<&mut [f32]> {
        Some(row)
    }
}

/// An fp16 value's bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F16(pub u16);

/// A bf16 value's bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Bf16(pub u16);

// SAFETY: all-zero bits are +0 in fp16 and in bf16.
unsafe impl crate::probe::Zeroable for F16 {}
// SAFETY: as above.
unsafe impl crate::probe::Zeroable for Bf16 {}

impl Elem for F16 {
    const FP16: bool = true;
    /// Branch-free, so that the pooling loop vectorizes: the exponent and mantissa
    /// moved into f32's places and scaled by 2¹¹² (exact, subnormals included);
    /// infinities and NaNs take f32's all-ones exponent.
    #[inline(always)]
    fn widen(self) -> f32 {
        let h = self.0 as u32;
        let em = h & 0x7fff;
        let sign = (h & 0x8000) << 16;
        let finite = f32::from_bits(em << 13) * f32::from_bits(0x7780_0000);
        let special = f32::from_bits((em << 13) | 0x7f80_0000);
        let v = if em >= 0x7c00 { special } else { finite };
        f32::from_bits(v.to_bits() | sign)
    }
    fn narrow(x: f32) -> Self {
        F16(half::f16::from_f32(x).to_bits())
    }
    #[inline(always)]
    fn narrow_stochastic(x: f32, noise: u32) -> Self {
        F16(f16_stochastic(x, noise))
    }
    fn as_f32(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

impl Elem for Bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    fn narrow(x: f32) -> Self {
        Bf16(half::bf16::from_f32(x).to_bits())
    }
    /// The 16 bits dropped are replaced by their sum with 16 random bits, whose carry
    /// rounds up (an infinity stays one; a NaN stays a NaN).
    #[inline(always)]
    fn narrow_stochastic(x: f32, noise: u32) -> Self {
        let bits = x.to_bits();
        let rounded = bits.wrapping_add(noise & 0xffff) >> 16;
        // Infinities and NaNs keep their top half (a NaN made quiet), without a branch.
        let special = (bits >> 16) | if bits & 0x7f_ffff != 0 { 0x40 } else { 0 };
        let h = if bits & 0x7f80_0000 == 0x7f80_0000 {
            special
        } else {
            rounded
        };
        Bf16(h as u16)
    }
    fn as_f32(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

/// `x` rounded stochastically to fp16 bits with the random bits `noise`, without a
/// branch (so that a row's loop vectorizes): in fp16's normal range the 13 mantissa
/// bits fp16 drops get 13 random bits added, whose carry rounds up (into the exponent
/// too, up to infinity past 65,504); below it, the value in units of fp16's smallest
/// subnormal 2⁻²⁴ is `m / 2^s` for f32's 24-bit significand `m`, and `s` random bits
/// added to `m` before the shift round it up with the right probability. NaN stays NaN.
#[inline(always)]
fn f16_stochastic(x: f32, noise: u32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let a = bits & 0x7fff_ffff;
    // Normal fp16 range (and overflow to infinity).
    let normal =
        ((a.wrapping_add(noise & 0x1fff) >> 13).wrapping_sub((127 - 15) << 10)).min(0x7c00);
    // Below 2⁻¹⁴: the value is `m · 2^(e − 126)` units of 2⁻²⁴ (e: f32's biased
    // exponent, at most 112 here, so the shift is at least 14; f32 subnormals have no
    // implicit bit and e = 1's scale).
    let e = a >> 23;
    let m = (a & 0x7f_ffff) | if e > 0 { 0x80_0000 } else { 0 };
    let shift = (126u32.saturating_sub(e.max(1))).min(31);
    let sub = (m + (noise & ((1u32 << shift) - 1))) >> shift;
    let h = if a < 0x3880_0000 { sub } else { normal };
    let h = if a > 0x7f80_0000 { 0x7e00 } else { h };
    (sign | h) as u16
}

/// The random bits of a row's update: one 64-bit seed per (table, row, step), mixed
/// with the column for each value (SplitMix64's finalizer, then a 32-bit one).
#[derive(Clone, Copy)]
pub(super) struct RowNoise(u64);

impl RowNoise {
    pub(super) fn new(table_key: u64, row: u64, step: u64) -> Self {
        let mut z = table_key
            ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ step.wrapping_mul(0xD1B5_4A32_D192_ED03);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        RowNoise(z ^ (z >> 31))
    }

    /// 32 random bits for column `c`.
    #[inline(always)]
    pub(super) fn at(self, c: usize) -> u32 {
        let mut h = (self.0 as u32) ^ (c as u32).wrapping_mul(0x9E37_79B9) ^ (self.0 >> 32) as u32;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85EB_CA6B);
        h ^= h >> 13;
        h = h.wrapping_mul(0xC2B2_AE35);
        h ^ (h >> 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The two representable neighbours of `x` (equal when `x` is representable), from
    /// the `half` crate's rounding: the one of smaller magnitude, and the next one up
    /// in magnitude (bit patterns of one sign are ordered by magnitude).
    fn neighbours<E: Elem>(x: f32) -> (f32, f32) {
        let to_bits = |v: f32| -> u16 {
            let e = E::narrow(v);
            if std::mem::size_of::<E>() == 2 {
                bytemuck::cast::<E, u16>(e)
            } else {
                unreachable!()
            }
        };
        let from_bits = |b: u16| -> f32 { bytemuck::cast::<u16, E>(b).widen() };
        let n = to_bits(x);
        if from_bits(n) == x {
            return (x, x);
        }
        let lo = if from_bits(n).abs() > x.abs() {
            n - 1
        } else {
            n
        };
        let (a, b) = (from_bits(lo), from_bits(lo + 1));
        (a.min(b), a.max(b))
    }

    #[test]
    fn fp16_widens_every_value_as_the_half_crate_does() {
        for h in 0..=u16::MAX {
            let ours = F16(h).widen();
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn stochastic_rounding_with_no_noise_truncates_and_with_all_noise_rounds_up() {
        let x = 1.0 + 2f32.powi(-12); // between fp16's 1 and 1 + 2⁻¹⁰
        assert_eq!(F16::narrow_stochastic(x, 0).widen(), 1.0);
        assert_eq!(
            F16::narrow_stochastic(x, u32::MAX).widen(),
            1.0 + 2f32.powi(-10)
        );
        let y = 1.0 + 2f32.powi(-10); // between bf16's 1 and 1 + 2⁻⁷
        assert_eq!(Bf16::narrow_stochastic(y, 0).widen(), 1.0);
        assert_eq!(
            Bf16::narrow_stochastic(y, u32::MAX).widen(),
            1.0 + 2f32.powi(-7)
        );
        // Representable values never move; fp16 overflows to infinity.
        assert_eq!(F16::narrow_stochastic(0.5, u32::MAX).widen(), 0.5);
        assert_eq!(F16::narrow_stochastic(70_000.0, 0).widen(), f32::INFINITY);
        assert_eq!(
            F16::narrow_stochastic(-3e-8, u32::MAX).widen(),
            -(2f32.powi(-24))
        );
    }

    #[test]
    fn stochastic_rounding_is_unbiased() {
        // The mean of many roundings of one value, with the row noise's bits, is the value.
        for x in [1.0 + 2f32.powi(-12) * 1.3, -7.3e-6, 3.1e-7, 1234.567] {
            for bf in [false, true] {
                let n = 20_000;
                let sum: f64 = (0..n)
                    .map(|i| {
                        let noise = RowNoise::new(7, i, 3).at(5);
                        let v = if bf {
                            Bf16::narrow_stochastic(x, noise).widen()
                        } else {
                            F16::narrow_stochastic(x, noise).widen()
                        };
                        v as f64
                    })
                    .sum();
                let (lo, hi) = if bf {
                    neighbours::<Bf16>(x)
                } else {
                    neighbours::<F16>(x)
                };
                let mean = sum / n as f64;
                let tol = 4.0 * (hi - lo) as f64 / (n as f64).sqrt() + 1e-12;
                assert!((mean - x as f64).abs() <= tol, "{x} bf16 {bf}: mean {mean}");
            }
        }
    }

    proptest! {
        /// A stochastic rounding is always one of the two neighbours.
        #[test]
        fn stochastic_rounding_lands_on_a_neighbour(x in -65_000f32..65_000f32, noise in any::<u32>(), tiny in any::<bool>()) {
            let x = if tiny { x * 1e-9 } else { x };
            let (lo, hi) = neighbours::<F16>(x);
            let v = F16::narrow_stochastic(x, noise).widen();
            prop_assert!(v == lo || v == hi, "fp16 {x}: {v} not in [{lo}, {hi}]");
            let (lo, hi) = neighbours::<Bf16>(x);
            let v = Bf16::narrow_stochastic(x, noise).widen();
            prop_assert!(v == lo || v == hi, "bf16 {x}: {v} not in [{lo}, {hi}]");
        }
    }
}
