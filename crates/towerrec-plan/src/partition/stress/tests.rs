//! The stress and its gradient against direct formulas, and fits with known answers.

use super::*;

/// The distances between points on a plane.
fn planar(points: &[(f64, f64)]) -> Matrix {
    Matrix::from_fn(points.len(), |i, j| {
        let (a, b) = (points[i], points[j]);
        ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
    })
}

fn grid(n: usize) -> Vec<(f64, f64)> {
    (0..n)
        .map(|k| {
            (
                (k % 7) as f64 * 0.1,
                (k / 7) as f64 * 0.13 + (k % 3) as f64 * 0.01,
            )
        })
        .collect()
}

#[test]
fn recovers_planar_distances() {
    let d = planar(&grid(30));
    let e = embed(&d, &StressOptions::default(), 1).unwrap();
    assert_eq!(e.features(), 30);
    assert!(e.normalized_stress < 1e-3, "{e:?}");
}

#[test]
fn fits_a_non_euclidean_distance_better_than_its_start() {
    // 1 − |cos| of random-ish vectors: no exact planar fit exists.
    let f = 40;
    let d = Matrix::from_fn(f, |i, j| {
        if i == j {
            0.0
        } else {
            let h = ((i * 31 + j * 31 + i * j * 7) % 97) as f64 / 97.0;
            0.2 + 0.8 * h
        }
    });
    let e0 = embed(
        &d,
        &StressOptions {
            max_iters: 0,
            ..Default::default()
        },
        3,
    )
    .unwrap();
    let e = embed(&d, &StressOptions::default(), 3).unwrap();
    assert_eq!(e0.iterations, 0);
    assert!(e.stress < 0.8 * e0.stress, "{} vs {}", e.stress, e0.stress);
    let mut g = vec![0.0; e.coords.len()];
    let cols: Vec<f64> = (0..2 * f).map(|p| e.coords[(p % f) * 2 + p / f]).collect();
    assert!((stress_and_grad(&d, &cols, 2, &mut g) - e.stress).abs() < 1e-9);
    // Same seed, same result.
    assert_eq!(e, embed(&d, &StressOptions::default(), 3).unwrap());
}

#[test]
fn gradient_matches_finite_differences_in_every_dimension_count() {
    let f = 9;
    let d = Matrix::from_fn(f, |i, j| {
        if i == j {
            0.0
        } else {
            0.3 + ((i + j) % 4) as f64 * 0.2
        }
    });
    for k in 1..=4 {
        let mut rng = Rng::new(k as u64);
        let x: Vec<f64> = (0..f * k).map(|_| rng.uniform()).collect();
        let mut g = vec![0.0; x.len()];
        let s = stress_and_grad(&d, &x, k, &mut g);
        let naive: f64 = pairs(f)
            .map(|(i, j)| {
                let sq: f64 = (0..k).map(|c| (x[c * f + i] - x[c * f + j]).powi(2)).sum();
                (sq.sqrt() - d.get(i, j)).powi(2)
            })
            .sum();
        assert!((s - naive).abs() < 1e-12, "k {k}: {s} vs {naive}");
        for p in 0..x.len() {
            let h = 1e-6;
            let (mut up, mut dn) = (x.clone(), x.clone());
            up[p] += h;
            dn[p] -= h;
            let mut scratch = vec![0.0; x.len()];
            let num = (stress_and_grad(&d, &up, k, &mut scratch)
                - stress_and_grad(&d, &dn, k, &mut scratch))
                / (2.0 * h);
            assert!((num - g[p]).abs() < 1e-5, "k {k} p {p}: {num} vs {}", g[p]);
        }
    }
}

#[test]
fn small_and_bad_inputs() {
    let one = embed(
        &Matrix::from_fn(1, |_, _| 0.0),
        &StressOptions::default(),
        0,
    )
    .unwrap();
    assert_eq!(one.coords.len(), 2);
    let zeros = embed(
        &Matrix::from_fn(3, |_, _| 0.0),
        &StressOptions::default(),
        0,
    )
    .unwrap();
    assert_eq!(zeros.normalized_stress, 0.0);
    let d = Matrix::from_fn(2, |i, j| if i == j { 0.0 } else { 1.0 });
    let opts = StressOptions {
        dims: 0,
        ..Default::default()
    };
    assert!(embed(&d, &opts, 0).is_err());
    let asym = Matrix::from_fn(2, |i, j| (i + 2 * j) as f64);
    let e = embed(&asym, &StressOptions::default(), 0).unwrap_err();
    assert!(e.to_string().contains("symmetric"), "{e}");
}
