//! Zipf-distributed ranks for the synthetic reader: exactly the draws of
//! `rand_distr::Zipf` (same random numbers consumed, same results), with fewer powers.
//!
//! `rand_distr` samples by rejection: a candidate `x = ⌊b + 1⌋` from the inverse of a
//! continuous envelope, accepted when a uniform `y` falls below `x^-s · b^s`. That test
//! costs two `powf` calls besides the one that inverts the envelope, and in the reader
//! they were the largest single cost of a Zipf id. Since `b ≥ x − 1`, the ratio is at
//! least `((x − 1)/x)^s ≥ 1 − max(s, 1)/x` (Bernoulli's inequality), so most `y` can be
//! accepted against that bound alone; only `y` above it pay for the exact ratio. The
//! bound keeps a relative margin far wider than `powf`'s rounding error, so no `y` that
//! `rand_distr` would reject is accepted. A property test holds the two to the same
//! draws.

use rand::distr::StandardUniform;
use rand::Rng;
use rand_distr::{Zipf, ZipfError};

/// How far below the exact acceptance bound the shortcut stays, relative: `powf` is
/// accurate to about an ulp (1e-16), so a wrong acceptance would need an error 10⁷
/// times larger.
const SAFETY: f64 = 1.0 - 1e-9;

/// Zipf(n, s) over ranks `1..=n`, drawing what `rand_distr::Zipf::<f64>` draws.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZipfRanks {
    s: f64,
    /// The envelope's total mass and inverse exponent, computed as `rand_distr` does.
    t: f64,
    q: f64,
    /// `max(s, 1)`: the slope of the acceptance bound.
    slope: f64,
}

impl ZipfRanks {
    /// The distribution over `1..=n` with exponent `s`; errors as `rand_distr`'s.
    pub(crate) fn new(n: u64, s: f64) -> Result<Self, ZipfError> {
        let n = n as f64;
        Zipf::new(n, s)?;
        let q = if s != 1.0 { 1.0 / (1.0 - s) } else { 0.0 };
        let t = if s != 1.0 {
            (n.powf(1.0 - s) - s) * q
        } else {
            1.0 + n.ln()
        };
        Ok(Self {
            s,
            t,
            q,
            slope: s.max(1.0),
        })
    }

    /// One rank, in `1..=n` up to the envelope's rounding (callers clamp).
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let b = self.inverse_envelope(rng.sample(StandardUniform));
            // `b + 1 ≥ 1`, so truncation is the floor `rand_distr` takes.
            let x = (b + 1.0) as u64;
            let y: f64 = rng.sample(StandardUniform);
            if x == 1 || self.surely_accepts(x, y) || y < self.exact_ratio(x, b) {
                return x;
            }
        }
    }

    fn inverse_envelope(&self, p: f64) -> f64 {
        let pt = p * self.t;
        if pt <= 1.0 {
            pt
        } else if self.s != 1.0 {
            (pt * (1.0 - self.s) + self.s).powf(self.q)
        } else {
            (pt - 1.0).exp()
        }
    }

    /// Whether `y` lies below a lower bound of candidate `x`'s acceptance ratio:
    /// `y < (1 − slope/x) · SAFETY`, multiplied out by `x` to spare a division. The
    /// products' rounding (1e-16) is far inside SAFETY's margin; a bound ≤ 0 accepts
    /// nothing, as `y ≥ 0`.
    fn surely_accepts(&self, x: u64, y: f64) -> bool {
        let x = x as f64;
        y * x < (x - self.slope) * SAFETY
    }

    /// The acceptance ratio exactly as `rand_distr` computes it, for `x ≥ 2` (at
    /// `x = 1` it is `1^-s = 1`, above every `y`).
    fn exact_ratio(&self, x: u64, b: f64) -> f64 {
        (x as f64).powf(-self.s) * b.powf(self.s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::Distribution;

    /// Draws `count` ranks both ways from one seed; also returns the RNGs' next words,
    /// which agree only if both consumed the same random numbers.
    fn both(n: u64, s: f64, seed: u64, count: usize) -> (Vec<u64>, Vec<u64>) {
        let ours = ZipfRanks::new(n, s).unwrap();
        let theirs = Zipf::new(n as f64, s).unwrap();
        let (mut a, mut b) = (StdRng::seed_from_u64(seed), StdRng::seed_from_u64(seed));
        let mut xs: Vec<u64> = (0..count).map(|_| ours.sample(&mut a)).collect();
        let mut ys: Vec<u64> = (0..count).map(|_| theirs.sample(&mut b) as u64).collect();
        xs.push(a.random());
        ys.push(b.random());
        (xs, ys)
    }

    #[test]
    fn draws_what_rand_distr_draws_on_the_benchmark_tables() {
        let (ours, theirs) = both(10_000, 1.05, 7, 200_000);
        assert_eq!(ours, theirs);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn draws_what_rand_distr_draws(
            n in 1u64..5_000_000,
            s in prop_oneof![Just(1.0), Just(1.05), 0.01f64..4.0],
            seed in any::<u64>(),
        ) {
            let (ours, theirs) = both(n, s, seed, 2_000);
            prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn rejects_what_rand_distr_rejects() {
        for s in [0.0, -1.0, f64::NAN] {
            assert_eq!(
                ZipfRanks::new(10, s).is_err(),
                Zipf::new(10.0, s).is_err(),
                "s = {s}"
            );
        }
        assert!(ZipfRanks::new(0, 1.0).is_err());
    }
}
