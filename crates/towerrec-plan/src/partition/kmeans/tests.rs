//! The size rule, the exact assignment under it, and whole k-means runs.

use super::*;
use crate::partition::assign::total;
use proptest::prelude::*;

/// Every way to write `f` as `t` positive sizes, in order.
fn compositions(f: usize, t: usize) -> Vec<Vec<usize>> {
    if t == 1 {
        return if f > 0 { vec![vec![f]] } else { vec![] };
    }
    (1..f)
        .flat_map(|first| {
            compositions(f - first, t - 1)
                .into_iter()
                .map(move |mut rest| {
                    rest.insert(0, first);
                    rest
                })
        })
        .collect()
}

const RATIOS: [f64; 6] = [1.0, 1.25, 1.5, 2.0, 3.0, 100.0];

#[test]
fn the_boxes_hold_exactly_the_allowed_sizes() {
    for f in 1..=12 {
        for t in 1..=f.min(5) {
            for k in RATIOS {
                let boxes = size_bounds(f, t, k).unwrap();
                assert!(!boxes.is_empty(), "f {f} t {t} k {k}");
                for s in compositions(f, t) {
                    let in_a_box = boxes
                        .iter()
                        .any(|&(lo, hi)| s.iter().all(|x| (lo..=hi).contains(x)));
                    assert_eq!(
                        in_a_box,
                        sizes_allowed(&s, k),
                        "f {f} t {t} k {k} {s:?} {boxes:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn ratio_one_means_floor_and_ceil() {
    assert_eq!(size_bounds(26, 8, 1.0).unwrap(), vec![(3, 4)]);
    assert_eq!(size_bounds(24, 8, 1.0).unwrap(), vec![(3, 3)]);
    assert_eq!(size_bounds(1000, 64, 1.0).unwrap(), vec![(15, 16)]);
    assert!(sizes_allowed(&[3, 4, 4], 1.0));
    assert!(!sizes_allowed(&[3, 5, 3], 1.0));
    assert!(sizes_allowed(&[3, 6, 2], 3.0));
    assert!(!sizes_allowed(&[0, 2], 100.0));
}

#[test]
fn bad_requests_are_errors() {
    assert!(size_bounds(5, 0, 1.0)
        .unwrap_err()
        .to_string()
        .contains("at least 1"));
    assert!(size_bounds(5, 6, 1.0)
        .unwrap_err()
        .to_string()
        .contains("only 5 features"));
    for k in [0.5, f64::NAN, f64::INFINITY] {
        assert!(size_bounds(5, 2, k).is_err(), "{k}");
    }
    let opts = KMeansOptions::new(2);
    assert!(
        constrained_kmeans(&[0.0; 5], 2, &opts).is_err(),
        "not whole points"
    );
    assert!(constrained_kmeans(&[0.0, f64::NAN], 1, &opts).is_err());
    let none = KMeansOptions {
        restarts: 0,
        ..opts
    };
    assert!(constrained_kmeans(&[0.0, 1.0], 1, &none).is_err());
}

/// Brute force over every assignment whose sizes follow the rule.
fn brute_force(cost: &[f64], t: usize, k: f64) -> f64 {
    let f = cost.len() / t;
    let mut asg = vec![0usize; f];
    let mut best = f64::INFINITY;
    loop {
        let mut sizes = vec![0; t];
        asg.iter().for_each(|&a| sizes[a] += 1);
        if sizes_allowed(&sizes, k) {
            best = best.min(total(cost, t, &asg));
        }
        let mut i = 0;
        while i < f && asg[i] + 1 == t {
            asg[i] = 0;
            i += 1;
        }
        if i == f {
            return best;
        }
        asg[i] += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_assignment_under_the_rule_is_exact(
        (f, t, ints) in (2usize..=8)
            .prop_flat_map(|f| (Just(f), 1..=f.min(3)))
            .prop_flat_map(|(f, t)| (Just(f), Just(t), prop::collection::vec(0u8..30, f * t))),
        k in prop::sample::select(RATIOS.to_vec()),
    ) {
        let cost: Vec<f64> = ints.iter().map(|&c| f64::from(c)).collect();
        let boxes = size_bounds(f, t, k).unwrap();
        let mut warm = vec![None; boxes.len()];
        let asg = assign_in_boxes(&cost, t, &boxes, &mut warm).unwrap();
        let mut sizes = vec![0; t];
        asg.iter().for_each(|&a| sizes[a] += 1);
        prop_assert!(sizes_allowed(&sizes, k), "{sizes:?}");
        prop_assert_eq!(total(&cost, t, &asg), brute_force(&cost, t, k));
    }

    #[test]
    fn clusters_always_follow_the_size_rule(
        (f, t, coords) in (1usize..=40)
            .prop_flat_map(|f| (Just(f), 1..=f.min(9)))
            .prop_flat_map(|(f, t)| (Just(f), Just(t), prop::collection::vec(-3.0f64..3.0, 2 * f))),
        k in prop::sample::select(RATIOS.to_vec()),
        seed in any::<u64>(),
    ) {
        let opts = KMeansOptions { max_ratio: k, restarts: 2, seed, ..KMeansOptions::new(t) };
        let c = constrained_kmeans(&coords, 2, &opts).unwrap();
        prop_assert_eq!(c.assignment.len(), f);
        let mut sizes = vec![0; t];
        for &a in &c.assignment {
            prop_assert!(a < t);
            sizes[a] += 1;
        }
        prop_assert!(sizes_allowed(&sizes, k), "{sizes:?} k {k}");
        prop_assert!(c.cost.is_finite() && c.cost >= 0.0);
        prop_assert_eq!(&c, &constrained_kmeans(&coords, 2, &opts).unwrap(), "deterministic");
    }
}

#[test]
fn finds_well_separated_groups() {
    // Four tight groups of five on a line, far apart; given in shuffled order.
    let order = [
        7, 0, 13, 19, 2, 11, 5, 16, 9, 1, 18, 4, 14, 8, 3, 17, 10, 6, 15, 12,
    ];
    let coords: Vec<f64> = order
        .iter()
        .map(|&g| (g / 5) as f64 * 10.0 + (g % 5) as f64 * 0.01)
        .collect();
    let c = constrained_kmeans(&coords, 1, &KMeansOptions::new(4)).unwrap();
    for (a, &g) in order.iter().enumerate() {
        for (b, &h) in order.iter().enumerate() {
            assert_eq!(c.assignment[a] == c.assignment[b], g / 5 == h / 5);
        }
    }
    // Three groups into two clusters: equal sizes split a group, K = 2 keeps them whole.
    let coords: Vec<f64> = (0..15)
        .map(|g| (g / 5) as f64 * 10.0 + (g % 5) as f64 * 0.01)
        .collect();
    let three = constrained_kmeans(&coords, 1, &KMeansOptions::new(2)).unwrap();
    let mut sizes = [0; 2];
    three.assignment.iter().for_each(|&a| sizes[a] += 1);
    sizes.sort();
    assert_eq!(sizes, [7, 8]);
    let loose = KMeansOptions {
        max_ratio: 2.0,
        ..KMeansOptions::new(2)
    };
    let c = constrained_kmeans(&coords, 1, &loose).unwrap();
    let mut sizes = [0; 2];
    c.assignment.iter().for_each(|&a| sizes[a] += 1);
    sizes.sort();
    assert_eq!(sizes, [5, 10]);
    assert!(c.cost < three.cost);
}
