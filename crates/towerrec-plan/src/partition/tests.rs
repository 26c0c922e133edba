//! The partitioner end to end on interactions with known groups, the naive baseline,
//! and the JSON.

use super::*;

/// An interaction where features in one of `groups` interact strongly (0.9) and others
/// weakly (0.1); feature `g` in group `g % groups`.
fn grouped(f: usize, groups: usize) -> Matrix {
    Matrix::from_fn(f, |i, j| match (i == j, i % groups == j % groups) {
        (true, _) => 1.0,
        (false, true) => 0.9,
        (false, false) => 0.1,
    })
}

fn names(f: usize) -> Vec<String> {
    (1..=f).map(|k| format!("C{k}")).collect()
}

#[test]
fn naive_is_the_papers_strided_assignment() {
    let t = naive(26, 8).unwrap();
    assert_eq!(t[0], vec![0, 8, 16, 24]);
    assert_eq!(t[1], vec![1, 9, 17, 25]);
    assert_eq!(t[2], vec![2, 10, 18]);
    assert_eq!(t[7], vec![7, 15, 23]);
    assert_eq!(t.len(), 8);
    assert!(naive(3, 4).is_err());
    assert!(naive(3, 0).is_err());
}

#[test]
fn coherent_groups_interacting_features_and_diverse_spreads_them() {
    let i = grouped(24, 4);
    let coherent = partition(&i, &PartitionOptions::new(4, Mode::Coherent)).unwrap();
    for tower in &coherent.towers {
        assert_eq!(tower.len(), 6);
        assert!(tower.iter().all(|g| g % 4 == tower[0] % 4), "{tower:?}");
    }
    let close = |x: Option<f64>, y: f64| (x.unwrap() - y).abs() < 1e-9;
    let a = affinity(&i, &coherent.towers);
    assert!(close(a.within, 0.9) && close(a.between, 0.1), "{a:?}");

    let diverse = partition(&i, &PartitionOptions::new(6, Mode::Diverse)).unwrap();
    for tower in &diverse.towers {
        let mut groups: Vec<usize> = tower.iter().map(|g| g % 4).collect();
        groups.sort();
        assert_eq!(groups, vec![0, 1, 2, 3], "{tower:?}");
    }
    assert!(close(affinity(&i, &diverse.towers).within, 0.1));
    // Coherent beats the naive baseline here by construction: naive puts 0, 4, 8, … together.
    let n = affinity(&i, &naive(24, 4).unwrap());
    assert!(
        close(n.within, 0.9),
        "stride 4 happens to follow the groups"
    );
    let n = affinity(&i, &naive(24, 3).unwrap());
    assert!(n.within.unwrap() < 0.9);
}

#[test]
fn same_seed_same_partition_and_every_feature_once() {
    let f = 50;
    let i = Matrix::from_fn(f, |a, b| {
        if a == b {
            1.0
        } else {
            (((a * b + a + b) * 2654435761usize) % 1000) as f64 / 1000.0
        }
    });
    // Make it symmetric.
    let i = Matrix::from_fn(f, |a, b| (i.get(a, b) + i.get(b, a)) / 2.0);
    let opts = PartitionOptions {
        max_ratio: 1.5,
        seed: 9,
        ..PartitionOptions::new(7, Mode::Coherent)
    };
    let p = partition(&i, &opts).unwrap();
    assert_eq!(p, partition(&i, &opts).unwrap());
    let sizes: Vec<usize> = p.towers.iter().map(Vec::len).collect();
    assert!(sizes_allowed(&sizes, 1.5), "{sizes:?}");
    let json = TowerPartition::new(Method::Coherent, &p.towers, &names(f)).unwrap();
    assert_eq!(json.indices(&names(f)).unwrap(), p.towers);
}

#[test]
fn json_round_trips_and_refuses_bad_covers() {
    let n = names(5);
    let mut p = TowerPartition::new(Method::Naive, &naive(5, 2).unwrap(), &n).unwrap();
    p.seed = Some(3);
    let text = p.to_json_pretty();
    assert!(
        text.starts_with("{\n  \"mode\": \"naive\",\n  \"towers\": [\n    [\n      \"C1\","),
        "{text}"
    );
    let back = TowerPartition::from_json(&text).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.indices(&n).unwrap(), vec![vec![0, 2, 4], vec![1, 3]]);
    let hand = r#"{"mode":"coherent","towers":[["C1","C2"],["C3","C4","C5"]]}"#;
    assert_eq!(
        TowerPartition::from_json(hand)
            .unwrap()
            .indices(&n)
            .unwrap()[1],
        vec![2, 3, 4]
    );
    for (bad, needle) in [
        (
            r#"{"mode":"coherent","towers":[["C1","C2"],["C3","C4"]]}"#,
            "'C5' is in no tower",
        ),
        (
            r#"{"mode":"coherent","towers":[["C1","C2","C5"],["C3","C4","C1"]]}"#,
            "more than one",
        ),
        (
            r#"{"mode":"coherent","towers":[["C1","C2","C3","C4","C9"]]}"#,
            "'C9' is not one",
        ),
        (
            r#"{"mode":"coherent","towers":[[],["C1","C2","C3","C4","C5"]]}"#,
            "tower 0 is empty",
        ),
    ] {
        let e = TowerPartition::from_json(bad)
            .unwrap()
            .indices(&n)
            .unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
    }
    assert!(TowerPartition::from_json(r#"{"mode":"other","towers":[]}"#).is_err());
    assert!(TowerPartition::from_json(r#"{"mode":"naive","towers":[],"x":1}"#).is_err());
    assert!(TowerPartition::new(Method::Naive, &[vec![0, 1]], &n).is_err());
}

#[test]
fn errors_name_the_problem() {
    let i = grouped(6, 2);
    let e = partition(&i, &PartitionOptions::new(7, Mode::Coherent)).unwrap_err();
    assert!(
        e.to_string().contains("7 towers but only 6 features"),
        "{e}"
    );
    let e = partition(&i, &PartitionOptions::new(0, Mode::Coherent)).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

/// A few hundred features into 16 towers, well within a debug build's patience; the
/// 1,000-into-64 timing is `examples/partition_speed.rs`.
#[test]
fn a_few_hundred_features() {
    let i = random_interaction(200, 1);
    let p = partition(&i, &PartitionOptions::new(16, Mode::Coherent)).unwrap();
    let sizes: Vec<usize> = p.towers.iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|&s| s == 12 || s == 13), "{sizes:?}");
    let a = affinity(&i, &p.towers);
    assert!(a.within.unwrap() > a.between.unwrap(), "{a:?}");
}

/// Features in 20 hidden groups with noisy interactions.
fn random_interaction(f: usize, seed: u64) -> Matrix {
    let mut r = rng::Rng::new(seed);
    let noise: Vec<f64> = (0..f * f).map(|_| r.uniform()).collect();
    Matrix::from_fn(f, |i, j| {
        if i == j {
            return 1.0;
        }
        let n = 0.5 * (noise[i * f + j] + noise[j * f + i]);
        if i % 20 == j % 20 {
            0.6 + 0.3 * n
        } else {
            0.4 * n
        }
    })
}
