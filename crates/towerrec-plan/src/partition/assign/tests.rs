//! The exact assignment against brute force (every assignment of a few points) and
//! against `pathfinding`'s Hungarian method (points × cluster slots) on more points.

use super::*;
use pathfinding::prelude::{kuhn_munkres_min, Matrix as Weights};
use proptest::prelude::*;

/// The least cost over every assignment with sizes in `lo..=hi` (brute force).
fn brute_force(cost: &[f64], t: usize, lo: usize, hi: usize) -> f64 {
    let f = cost.len() / t;
    let mut asg = vec![0usize; f];
    let mut best = f64::INFINITY;
    loop {
        if feasible(&asg, t, lo, hi) {
            best = best.min(total(cost, t, &asg));
        }
        // Next assignment, counting in base t.
        let mut k = 0;
        while k < f && asg[k] + 1 == t {
            asg[k] = 0;
            k += 1;
        }
        if k == f {
            return best;
        }
        asg[k] += 1;
    }
}

/// The least cost by the Hungarian method: cluster `c` as `lo` slots that must be
/// filled (a large discount) and `hi − lo` that may be; integer costs.
fn hungarian(cost: &[i64], t: usize, lo: usize, hi: usize) -> i64 {
    let f = cost.len() / t;
    const BIG: i64 = 1 << 32;
    let mut w = Vec::with_capacity(f * t * hi);
    for g in 0..f {
        for c in 0..t {
            for slot in 0..hi {
                w.push(cost[g * t + c] - if slot < lo { BIG } else { 0 });
            }
        }
    }
    let (sum, _) = kuhn_munkres_min(&Weights::from_vec(f, t * hi, w).unwrap());
    sum + BIG * (t * lo) as i64
}

/// Points, clusters and size bounds with `t·lo ≤ f ≤ t·hi`.
fn problem(max_f: usize, max_t: usize) -> impl Strategy<Value = (usize, usize, usize, usize)> {
    (1..=max_f)
        .prop_flat_map(move |f| (Just(f), 1..=max_t.min(f)))
        .prop_flat_map(|(f, t)| (Just(f), Just(t), 0..=f / t))
        .prop_flat_map(|(f, t, lo)| (Just(f), Just(t), Just(lo), f.div_ceil(t).max(lo)..=f))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn matches_brute_force(
        (f, t, lo, hi, ints, start) in problem(7, 4)
            .prop_filter("small enough to enumerate", |&(f, t, _, _)| t.pow(f as u32) <= 20_000)
            .prop_flat_map(|(f, t, lo, hi)| (
                Just(f), Just(t), Just(lo), Just(hi),
                prop::collection::vec(0u8..20, f * t),
                prop::collection::vec(0..t, f),
            )),
        fractional in any::<bool>(),
        warm in any::<bool>(),
    ) {
        // Small integers make ties (the hard case for cycle cancelling); fractions not.
        let cost: Vec<f64> = ints
            .iter()
            .enumerate()
            .map(|(k, &c)| f64::from(c) + if fractional { (k as f64 * 0.618).fract() } else { 0.0 })
            .collect();
        let asg = assign(&cost, t, lo, hi, warm.then_some(start.as_slice()));
        prop_assert_eq!(asg.len(), f);
        prop_assert!(feasible(&asg, t, lo, hi), "sizes out of {lo}..={hi}: {asg:?}");
        let want = brute_force(&cost, t, lo, hi);
        let got = total(&cost, t, &asg);
        prop_assert!((got - want).abs() < 1e-9, "got {got}, best {want}, {asg:?}");
    }

    #[test]
    fn matches_the_hungarian_method(
        (_f, t, lo, hi, ints) in problem(40, 6)
            .prop_flat_map(|(f, t, lo, hi)| (
                Just(f), Just(t), Just(lo), Just(hi),
                prop::collection::vec(0i64..1000, f * t),
            )),
    ) {
        let cost: Vec<f64> = ints.iter().map(|&c| c as f64).collect();
        let asg = assign(&cost, t, lo, hi, None);
        prop_assert!(feasible(&asg, t, lo, hi));
        prop_assert_eq!(total(&cost, t, &asg), hungarian(&ints, t, lo, hi) as f64);
    }
}

#[test]
fn infeasible_start_is_replaced_and_tight_bounds_are_met() {
    // Everyone prefers cluster 0, but each cluster must take exactly two.
    let cost = [
        0.0, 5.0, 9.0, 0.0, 6.0, 9.0, 0.0, 7.0, 9.0, 0.0, 8.0, 9.0, 0.0, 9.0, 9.0, 0.0, 9.5, 9.0,
    ];
    let asg = assign(&cost, 3, 2, 2, Some(&[0; 6]));
    assert!(feasible(&asg, 3, 2, 2));
    assert_eq!(total(&cost, 3, &asg), brute_force(&cost, 3, 2, 2));
}
