//! Reduced-precision wire formats for f32 payloads: TorchRec's quantized
//! communication ("qcomms"), which the DMT paper's strong baseline uses (DMT §5:
//! fp16 pooled embeddings forward, bf16 gradients backward). A value is rounded to
//! nearest, ties to even, into 16 bits before it is sent and widened back to f32 when
//! it arrives; the same bits on every backend, so a run with a given setting is
//! reproducible bit for bit. docs/DISTRIBUTED.md, "Quantized communication".

use serde::{Deserialize, Serialize};

/// How f32 values travel on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WirePrecision {
    /// Sent as they are (4 bytes a value).
    #[default]
    Fp32,
    /// IEEE half precision (2 bytes; 11-bit significand, largest finite 65,504: larger
    /// values arrive as infinity, which the run's finite checks report).
    Fp16,
    /// bfloat16 (2 bytes; 8-bit significand, the range of f32).
    Bf16,
}

impl WirePrecision {
    /// Bytes one value takes on the wire.
    pub fn bytes(self) -> usize {
        match self {
            WirePrecision::Fp32 => 4,
            WirePrecision::Fp16 | WirePrecision::Bf16 => 2,
        }
    }

    /// The name used in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            WirePrecision::Fp32 => "fp32",
            WirePrecision::Fp16 => "fp16",
            WirePrecision::Bf16 => "bf16",
        }
    }

    /// What a receiver gets for each value of `values`, in place: the value rounded to
    /// this precision and widened back to f32 (unchanged for fp32).
    pub fn round(self, values: &mut [f32]) {
        match self {
            WirePrecision::Fp32 => {}
            WirePrecision::Fp16 => values
                .iter_mut()
                .for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
            WirePrecision::Bf16 => values
                .iter_mut()
                .for_each(|v| *v = half::bf16::from_f32(*v).to_f32()),
        }
    }

    /// `src` in 16-bit form, into `dst` (resized). Not for fp32.
    pub(crate) fn encode(self, src: &[f32], dst: &mut Vec<u16>) {
        use half::slice::HalfFloatSliceExt;
        dst.clear();
        dst.resize(src.len(), 0);
        match self {
            WirePrecision::Fp16 => {
                let out: &mut [half::f16] = bytemuck::cast_slice_mut(&mut dst[..]);
                out.convert_from_f32_slice(src);
            }
            WirePrecision::Bf16 => {
                let out: &mut [half::bf16] = bytemuck::cast_slice_mut(&mut dst[..]);
                out.convert_from_f32_slice(src);
            }
            WirePrecision::Fp32 => unreachable!("fp32 travels as it is"),
        }
    }

    /// `src`, 16-bit values from [`WirePrecision::encode`], widened into `dst`
    /// (resized). Not for fp32.
    pub(crate) fn decode(self, src: &[u16], dst: &mut Vec<f32>) {
        dst.clear();
        dst.resize(src.len(), 0.0);
        self.decode_into(src, dst);
    }

    /// [`WirePrecision::decode`] into `dst`, as long as `src`. Not for fp32.
    pub(crate) fn decode_into(self, src: &[u16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        match self {
            WirePrecision::Fp16 => {
                let from: &[half::f16] = bytemuck::cast_slice(src);
                from.convert_to_f32_slice(dst);
            }
            WirePrecision::Bf16 => {
                let from: &[half::bf16] = bytemuck::cast_slice(src);
                from.convert_to_f32_slice(dst);
            }
            WirePrecision::Fp32 => unreachable!("fp32 travels as it is"),
        }
    }
}

impl std::fmt::Display for WirePrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between two fp16 values: ties go to the even one (1.0);
        // 1 + 3·2^-11 goes up to 1 + 2^-9.
        let mut v = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 70_000.0];
        WirePrecision::Fp16.round(&mut v);
        assert_eq!(v, [1.0, 1.0 + 2f32.powi(-9), f32::INFINITY]);
        let mut w = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), 70_000.0];
        WirePrecision::Bf16.round(&mut w);
        assert_eq!(w, [1.0, 1.0 + 2f32.powi(-6), 70_144.0]);
    }

    proptest! {
        /// The slice conversion used on the wire (which may use the CPU's conversion
        /// instructions) gives what the scalar rounding gives, NaN aside.
        #[test]
        fn encode_then_decode_is_round(
            values in proptest::collection::vec(any::<f32>().prop_filter("not NaN", |v| !v.is_nan()), 0..300),
            bf in any::<bool>(),
        ) {
            let p = if bf { WirePrecision::Bf16 } else { WirePrecision::Fp16 };
            let (mut wire, mut back) = (Vec::new(), Vec::new());
            p.encode(&values, &mut wire);
            p.decode(&wire, &mut back);
            let mut rounded = values.clone();
            p.round(&mut rounded);
            prop_assert_eq!(
                back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                rounded.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }

        /// Rounding twice is rounding once: a value that crossed one wire crosses the
        /// next unchanged.
        #[test]
        fn rounding_is_idempotent(v in any::<f32>().prop_filter("not NaN", |v| !v.is_nan()), bf in any::<bool>()) {
            let p = if bf { WirePrecision::Bf16 } else { WirePrecision::Fp16 };
            let mut once = [v];
            p.round(&mut once);
            let mut twice = once;
            p.round(&mut twice);
            prop_assert_eq!(once[0].to_bits(), twice[0].to_bits());
        }
    }
}
