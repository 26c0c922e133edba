//! The most that copies can cut OPER's modelled embedding traffic (Eq. 3) at a given
//! extra memory, over every placement: a yardstick for a plan's copies (docs/OPER.md,
//! "Table 2 analogue").
//!
//! The model spreads a row's reads evenly over the `W` ranks. A read then leaves its
//! rank with probability `(W − 1) / W` whoever owns the row, and each further copy of
//! row `i` keeps `c_i / W` of its `c_i` reads local. A copy is worth the same to every
//! rank, so the best use of the budget is a fractional knapsack: the rows of most
//! saved bytes per byte held copied to every other rank, the last in part. With
//! `r_i` the bytes a read moves, the traffic left is at least `(W − 1) / W` times
//! `Σ c_i r_i` over the rows not copied, and the cut at most the ratio of that to all.

use super::rating::exact_counts;
use crate::error::Result;
use crate::plan::TableSpec;
use towerrec_data::AccessProfile;

/// What copies can do for the modelled traffic of a set of tables on some ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyBound {
    /// Embedding bytes per iteration of any placement without copies (every read
    /// leaves its rank with probability `(W − 1) / W`).
    pub without_copies: f64,
    /// The largest factor by which copies of the given extra memory can cut it;
    /// infinite when they copy every row read; 1 on a single rank, where nothing moves.
    pub best_cut: f64,
}

/// [`CopyBound`] of `tables` read as `profile` says, on `ranks` ranks, iterations of
/// `batch` samples, with `extra_memory` (a share of all tables' bytes) for copies.
/// Row-wise and table-row-wise shards, priced per sample and not per read, are
/// outside it.
pub fn copy_bound(
    tables: &[TableSpec],
    profile: &AccessProfile,
    ranks: usize,
    extra_memory: f64,
    batch: usize,
) -> Result<CopyBound> {
    let counts = exact_counts(tables, profile)?;
    // Per read row: (bytes its reads move, bytes a copy holds).
    let mut rows: Vec<(f64, f64)> = Vec::new();
    for (t, c) in tables.iter().zip(&counts) {
        let (read, held) = ((4 * t.dim) as f64, t.bytes_per_row as f64);
        rows.extend(
            c.iter()
                .filter(|&&n| n > 0)
                .map(|&n| (f64::from(n) * read, held)),
        );
    }
    let all: f64 = rows.iter().map(|r| r.0).sum();
    let w = ranks.max(1) as f64;
    let per_iteration = batch as f64 / profile.samples.max(1) as f64;
    let without_copies = all * (w - 1.0) / w * per_iteration;
    if ranks <= 1 {
        return Ok(CopyBound {
            without_copies,
            best_cut: 1.0,
        });
    }
    // Most moved bytes per byte held first.
    rows.sort_unstable_by(|a, b| (b.0 / b.1).total_cmp(&(a.0 / a.1)));
    let total_bytes: u64 = tables.iter().map(TableSpec::bytes).sum();
    let mut budget = extra_memory.max(0.0) * total_bytes as f64;
    let copies = w - 1.0;
    let mut saved = 0.0;
    for &(moved, held) in &rows {
        let cost = copies * held;
        if budget >= cost {
            budget -= cost;
            saved += moved;
        } else {
            saved += moved * budget / cost;
            break;
        }
    }
    let best_cut = if saved >= all {
        f64::INFINITY
    } else {
        all / (all - saved)
    };
    Ok(CopyBound {
        without_copies,
        best_cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_data::{RowCounts, TableAccess};

    fn case(counts: Vec<u32>) -> (Vec<TableSpec>, AccessProfile) {
        let t = TableSpec {
            name: "T".into(),
            rows: counts.len(),
            dim: 16,
            bytes_per_row: 64,
            pooling_factor: 1.0,
        };
        let p = AccessProfile {
            samples: 100,
            source: "test".into(),
            tables: vec![TableAccess {
                name: "T".into(),
                rows: counts.len() as u64,
                reads: counts.iter().map(|&n| u64::from(n)).sum(),
                counts: RowCounts::Exact(counts),
            }],
        };
        (vec![t], p)
    }

    #[test]
    fn copies_the_most_read_rows_first_the_last_in_part() {
        // Rows read 90, 10 and 0 times; 3 rows of 64 bytes.
        let (t, p) = case(vec![10, 90, 0]);
        let bound = |ranks, extra| copy_bound(&t, &p, ranks, extra, 100).unwrap().best_cut;
        // One copy (64 bytes, a third of the tables) on 2 ranks: the row read 90 times.
        assert!((bound(2, 1.0 / 3.0) - 10.0).abs() < 1e-9);
        // Half of it.
        assert!((bound(2, 1.0 / 6.0) - 100.0 / 55.0).abs() < 1e-9);
        // On 3 ranks a row takes two copies: the same budget copies half of it.
        assert!((bound(3, 1.0 / 3.0) - 100.0 / 55.0).abs() < 1e-9);
        // Enough for both rows read: nothing moves.
        assert_eq!(bound(2, 2.0 / 3.0), f64::INFINITY);
        assert_eq!(bound(2, 0.0), 1.0);
        assert_eq!(bound(1, 0.5), 1.0);
        // 100 reads a profile of 100 samples, half of them away from their rank.
        let b = copy_bound(&t, &p, 2, 0.0, 100).unwrap();
        assert!((b.without_copies - 100.0 * 64.0 / 2.0).abs() < 1e-9);
    }

    /// Against every way of giving 5 rows 1 to 3 holders on 3 ranks within `k` extra
    /// copies: never below the best, and equal to it when whole rows fill the budget.
    #[test]
    fn no_placement_beats_it_on_small_cases() {
        let counts = vec![40, 3, 25, 0, 9];
        let (t, p) = case(counts.clone());
        let w: usize = 3;
        for k in 0..=8usize {
            let mut best = f64::INFINITY;
            for code in 0..w.pow(5) {
                let holders: Vec<usize> = (0..5).map(|i| code / w.pow(i) % w + 1).collect();
                if holders.iter().map(|h| h - 1).sum::<usize>() > k {
                    continue;
                }
                let left: f64 = counts
                    .iter()
                    .zip(&holders)
                    .map(|(&c, &h)| f64::from(c) * (w - h) as f64)
                    .sum();
                best = best.min(left);
            }
            let all: f64 = counts.iter().map(|&c| f64::from(c) * (w - 1) as f64).sum();
            let exhaustive = if best == 0.0 {
                f64::INFINITY
            } else {
                all / best
            };
            let bound = copy_bound(&t, &p, w, k as f64 / 5.0, 100).unwrap().best_cut;
            assert!(
                bound >= exhaustive * (1.0 - 1e-12),
                "k {k}: {bound} < {exhaustive}"
            );
            if k % (w - 1) == 0 {
                let same = bound == exhaustive || (bound - exhaustive).abs() <= 1e-9 * exhaustive;
                assert!(same, "k {k}: {bound} against {exhaustive}");
            }
        }
    }
}
