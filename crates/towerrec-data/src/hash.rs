//! Small, stable hash functions.
//!
//! Ids, hidden synthetic weights and random splits must be identical on every run and
//! platform, so they use fixed, hand-written functions instead of `std`'s `Hasher`
//! (whose output may change between Rust releases).

/// 64-bit FNV-1a of `bytes`: categorical strings → ids.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// SplitMix64's finalizer: a bijective mixer whose outputs look independent even for
/// consecutive inputs, which is what per-sample seeds and per-row weights need.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes two words into one hash; not symmetric, so `(a, b)` and `(b, a)` differ.
pub fn mix2(a: u64, b: u64) -> u64 {
    splitmix64(splitmix64(a) ^ b)
}

/// Maps a hash to a uniform float in `[0, 1)` using its top 53 bits.
pub fn unit_f64(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn splitmix_is_stable_and_unit_in_range() {
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_ne!(mix2(1, 2), mix2(2, 1));
        for i in 0..1000 {
            let u = unit_f64(splitmix64(i));
            assert!((0.0..1.0).contains(&u));
        }
        assert!(unit_f64(u64::MAX) < 1.0);
    }
}
