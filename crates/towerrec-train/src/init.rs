//! Initial embedding values that any shard can compute on its own.
//!
//! Element `(row, col)` of table `t` is a hash of `(seed, t, row, col)` mapped to
//! `U(−√(1/rows), √(1/rows))` (the DLRM reference range). A rank that holds rows
//! `r0..r1` and columns `c0..c1` of a table computes exactly the values the whole table
//! would hold there, so every plan starts from the same model as one process does.

/// SplitMix64's finalizer: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The initial values of one table of `rows × dim`.
#[derive(Debug, Clone, Copy)]
pub struct TableInit {
    key: u64,
    dim: usize,
    bound: f32,
}

impl TableInit {
    /// Table number `table` of a model initialized from `seed`.
    pub fn new(seed: u64, table: usize, rows: usize, dim: usize) -> Self {
        Self {
            key: mix(mix(seed) ^ table as u64),
            dim,
            bound: (1.0 / rows.max(1) as f64).sqrt() as f32,
        }
    }

    /// The value at `(row, col)`.
    pub fn value(&self, row: usize, col: usize) -> f32 {
        let bits = mix(self.key ^ (row * self.dim + col) as u64);
        // The top 24 bits give a uniform float in [0, 1) exactly.
        let unit = (bits >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * unit - 1.0) * self.bound
    }

    /// Fills `out` with columns `col0..col0 + out.len()` of `row`.
    pub fn fill_row(&self, row: usize, col0: usize, out: &mut [f32]) {
        for (c, v) in out.iter_mut().enumerate() {
            *v = self.value(row, col0 + c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_in_range_centred_and_depend_on_every_input() {
        let init = TableInit::new(7, 3, 10_000, 16);
        let vals: Vec<f32> = (0..10_000).map(|i| init.value(i / 16, i % 16)).collect();
        let bound = 0.01f64;
        assert!(vals.iter().all(|&v| (v as f64).abs() <= bound));
        let mean = vals.iter().map(|&v| v as f64).sum::<f64>() / vals.len() as f64;
        assert!(mean.abs() < 0.02 * bound, "mean {mean}");
        let var = vals.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / vals.len() as f64;
        // U(−b, b) has variance b²/3.
        assert!(
            (var / (bound * bound / 3.0) - 1.0).abs() < 0.05,
            "var {var}"
        );
        assert_ne!(
            init.value(1, 2),
            TableInit::new(8, 3, 10_000, 16).value(1, 2)
        );
        assert_ne!(
            init.value(1, 2),
            TableInit::new(7, 4, 10_000, 16).value(1, 2)
        );
        assert_ne!(init.value(1, 2), init.value(2, 1));
    }
}
