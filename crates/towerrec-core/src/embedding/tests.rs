//! Tests of the embedding bags: forward against a naive loop, the fused optimizers
//! against a dense f64 reference, and the invariances of the backward.

use super::*;
use crate::batch::KeyedJagged;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn jagged(bags: &[Vec<u64>]) -> KeyedJagged {
    let lengths: Vec<u32> = bags.iter().map(|b| b.len() as u32).collect();
    let values: Vec<u64> = bags.iter().flatten().copied().collect();
    KeyedJagged::from_lengths(vec!["f".into()], bags.len(), &lengths, values).unwrap()
}

const ALL_OPTIMIZERS: [SparseOptimizer; 4] = [
    SparseOptimizer::Sgd,
    SparseOptimizer::RowWiseAdagrad {
        eps: 1e-8,
        initial_accumulator: 0.0,
    },
    SparseOptimizer::RowWiseAdagrad {
        eps: 1e-3,
        initial_accumulator: 0.1,
    },
    SparseOptimizer::Adam {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    },
];

/// `n` bags of 0..=max_len ids in `0..rows`, skewed towards small ids so that
/// duplicates (within and across bags) are common and high rows are often absent.
fn random_bags(rng: &mut StdRng, n: usize, max_len: usize, rows: usize) -> Vec<Vec<u64>> {
    (0..n)
        .map(|_| {
            let len = rng.random_range(0..=max_len);
            (0..len)
                .map(|_| {
                    let u: f64 = rng.random();
                    ((u * u * rows as f64) as u64).min(rows as u64 - 1)
                })
                .collect()
        })
        .collect()
}

fn random_vec(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Pools by the definition, in f64.
fn naive_pool(table: &EmbeddingBag, bag: &[u64]) -> Vec<f64> {
    let dim = table.dim();
    let mut out = vec![0.0f64; dim];
    for &id in bag {
        for (d, o) in out.iter_mut().enumerate() {
            *o += table.weights()[id as usize * dim + d] as f64;
        }
    }
    if table.pooling() == Pooling::Mean && !bag.is_empty() {
        for o in &mut out {
            *o /= bag.len() as f64;
        }
    }
    out
}

/// The textbook optimizers on a materialized dense gradient, in f64. Lazy optimizers
/// update only the rows that appear in the batch.
struct Reference {
    dim: usize,
    pooling: Pooling,
    optimizer: SparseOptimizer,
    w: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
    acc: Vec<f64>,
    t: i32,
}

impl Reference {
    fn of(table: &EmbeddingBag) -> Self {
        let n = table.weights().len();
        let init_acc = match table.optimizer() {
            SparseOptimizer::RowWiseAdagrad {
                initial_accumulator,
                ..
            } => initial_accumulator as f64,
            _ => 0.0,
        };
        Self {
            dim: table.dim(),
            pooling: table.pooling(),
            optimizer: table.optimizer(),
            w: table.weights().iter().map(|&x| x as f64).collect(),
            m: vec![0.0; n],
            v: vec![0.0; n],
            acc: vec![init_acc; table.rows()],
            t: 0,
        }
    }

    fn step(&mut self, bags: &[Vec<u64>], grad: &[f32], stride: usize, offset: usize, lr: f64) {
        let dim = self.dim;
        let rows = self.acc.len();
        self.t += 1;
        let mut g = vec![0.0f64; rows * dim];
        let mut present = vec![false; rows];
        for (b, bag) in bags.iter().enumerate() {
            for &id in bag {
                let r = id as usize;
                present[r] = true;
                let scale = match self.pooling {
                    Pooling::Sum => 1.0,
                    Pooling::Mean => 1.0 / bag.len() as f64,
                };
                for d in 0..dim {
                    g[r * dim + d] += scale * grad[b * stride + offset + d] as f64;
                }
            }
        }
        for r in 0..rows {
            let gr = &g[r * dim..(r + 1) * dim];
            let w = &mut self.w[r * dim..(r + 1) * dim];
            match self.optimizer {
                // Plain SGD is dense: absent rows have a zero gradient.
                SparseOptimizer::Sgd => {
                    for (w, g) in w.iter_mut().zip(gr) {
                        *w -= lr * g;
                    }
                }
                SparseOptimizer::RowWiseAdagrad { eps, .. } => {
                    if !present[r] {
                        continue;
                    }
                    self.acc[r] += gr.iter().map(|g| g * g).sum::<f64>() / dim as f64;
                    for (w, g) in w.iter_mut().zip(gr) {
                        *w -= lr * g / (self.acc[r].sqrt() + eps as f64);
                    }
                }
                SparseOptimizer::Adam { beta1, beta2, eps } => {
                    if !present[r] {
                        continue;
                    }
                    let (b1, b2) = (beta1 as f64, beta2 as f64);
                    for d in 0..dim {
                        let i = r * dim + d;
                        self.m[i] = b1 * self.m[i] + (1.0 - b1) * gr[d];
                        self.v[i] = b2 * self.v[i] + (1.0 - b2) * gr[d] * gr[d];
                        let m_hat = self.m[i] / (1.0 - b1.powi(self.t));
                        let v_hat = self.v[i] / (1.0 - b2.powi(self.t));
                        w[d] -= lr * m_hat / (v_hat.sqrt() + eps as f64);
                    }
                }
            }
        }
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(1.0);
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (diff {:e})",
            (g as f64 - w).abs()
        );
    }
}

#[test]
fn init_is_uniform_within_dlrm_bound() {
    let mut rng = StdRng::seed_from_u64(1);
    let t = EmbeddingBag::new("t", 100, 8, Pooling::Sum, SparseOptimizer::Sgd, &mut rng);
    let bound = (1.0f32 / 100.0).sqrt();
    assert_eq!(t.weights().len(), 800);
    assert!(t.weights().iter().all(|w| w.abs() <= bound));
    let max = t.weights().iter().fold(0.0f32, |a, w| a.max(w.abs()));
    assert!(
        max > 0.9 * bound,
        "weights should fill the range, max {max}"
    );
    let mean: f32 = t.weights().iter().sum::<f32>() / 800.0;
    assert!(mean.abs() < 0.01, "mean {mean}");
    assert_eq!(t.step(), 0);
}

#[test]
fn forward_matches_naive_pooling_in_strided_slots() {
    let mut rng = StdRng::seed_from_u64(2);
    for pooling in [Pooling::Sum, Pooling::Mean] {
        let (rows, dim, stride, offset) = (10, 5, 9, 3);
        let t = EmbeddingBag::new("t", rows, dim, pooling, SparseOptimizer::Sgd, &mut rng);
        let bags = vec![vec![1, 2, 2], vec![], vec![9], vec![0, 3, 4, 5, 6], vec![]];
        let kj = jagged(&bags);
        let mut out = vec![7.0f32; bags.len() * stride];
        t.forward(kj.feature(0), &mut out, stride, offset).unwrap();
        for (b, bag) in bags.iter().enumerate() {
            let row = &out[b * stride..(b + 1) * stride];
            assert_close(
                &format!("{pooling:?} sample {b}"),
                &row[offset..offset + dim],
                &naive_pool(&t, bag),
                1e-6,
            );
            // Outside the slot nothing is touched.
            assert!(row[..offset].iter().all(|&x| x == 7.0));
            assert!(row[offset + dim..].iter().all(|&x| x == 7.0));
        }
        // Empty bags pool to exact zeros.
        assert!(out[stride + offset..stride + offset + dim]
            .iter()
            .all(|&x| x == 0.0));
    }
}

#[test]
fn forward_output_may_end_at_the_last_slot() {
    let mut rng = StdRng::seed_from_u64(3);
    let t = EmbeddingBag::new("t", 4, 2, Pooling::Sum, SparseOptimizer::Sgd, &mut rng);
    let kj = jagged(&[vec![0], vec![1, 3]]);
    let mut out = vec![0.0f32; 6 + 1 + 2];
    t.forward(kj.feature(0), &mut out, 6, 1).unwrap();
    assert_close("last slot", &out[7..9], &naive_pool(&t, &[1, 3]), 1e-6);
    let mut short = vec![0.0f32; 8];
    assert!(matches!(
        t.forward(kj.feature(0), &mut short, 6, 1),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn large_batch_forward_matches_naive() {
    // Big enough to take the parallel path.
    let mut rng = StdRng::seed_from_u64(4);
    for pooling in [Pooling::Sum, Pooling::Mean] {
        let (rows, dim) = (500, 16);
        let t = EmbeddingBag::new("t", rows, dim, pooling, SparseOptimizer::Sgd, &mut rng);
        let bags = random_bags(&mut rng, 4096, 6, rows);
        let kj = jagged(&bags);
        let mut out = vec![0.0f32; bags.len() * dim];
        t.forward(kj.feature(0), &mut out, dim, 0).unwrap();
        let want: Vec<f64> = bags.iter().flat_map(|bag| naive_pool(&t, bag)).collect();
        assert_close("large batch", &out, &want, 1e-6);
    }
}

#[test]
fn a_table_too_large_to_allocate_is_an_error_not_an_abort() {
    // 2^40 rows of dim 64 is 256 TiB (no machine maps that), and usize::MAX rows
    // overflow the byte count: both must come back as errors.
    for (rows, opt) in [
        (1usize << 40, SparseOptimizer::Sgd),
        (usize::MAX / 2, SparseOptimizer::Sgd),
        (
            1usize << 40,
            SparseOptimizer::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            },
        ),
    ] {
        let err = EmbeddingBag::try_from_fn("huge", rows, 64, Pooling::Sum, opt, |_, _| {})
            .expect_err("cannot be allocated");
        let msg = err.to_string();
        assert!(
            matches!(err, Error::OutOfMemory { .. }) && msg.contains("'huge'"),
            "{msg}"
        );
    }
    // A table that fits still builds.
    let ok = EmbeddingBag::try_from_fn(
        "small",
        10,
        4,
        Pooling::Sum,
        SparseOptimizer::Sgd,
        |r, row| row.fill(r as f32),
    )
    .expect("a small table");
    assert_eq!(ok.weights()[4 * 7], 7.0);
}

#[test]
fn out_of_range_id_is_an_error_and_changes_nothing() {
    let mut rng = StdRng::seed_from_u64(5);
    for opt in ALL_OPTIMIZERS {
        let mut t = EmbeddingBag::new("cat", 8, 3, Pooling::Sum, opt, &mut rng);
        let kj = jagged(&[vec![1], vec![2, 8], vec![3]]);
        let mut out = vec![5.0f32; 9];
        match t.forward(kj.feature(0), &mut out, 3, 0) {
            Err(Error::IdOutOfRange { table, id, rows }) => {
                assert_eq!((table.as_str(), id, rows), ("cat", 8, 8));
            }
            other => panic!("expected IdOutOfRange, got {other:?}"),
        }
        assert!(
            out.iter().all(|&x| x == 5.0),
            "forward wrote before failing"
        );

        let before = t.clone();
        let grad = vec![1.0f32; 9];
        assert!(matches!(
            t.backward_update(kj.feature(0), &grad, 3, 0, 0.1),
            Err(Error::IdOutOfRange { id: 8, .. })
        ));
        assert_eq!(t.weights(), before.weights());
        assert_eq!(t.optimizer_state(), before.optimizer_state());
        assert_eq!(t.step(), 0);
    }
}

#[test]
fn bad_layouts_are_shape_errors() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut t = EmbeddingBag::new("t", 4, 3, Pooling::Sum, SparseOptimizer::Sgd, &mut rng);
    let kj = jagged(&[vec![0], vec![1]]);
    let mut out = vec![0.0f32; 20];
    // The slot would spill into the next sample.
    assert!(matches!(
        t.forward(kj.feature(0), &mut out, 4, 2),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        t.backward_update(kj.feature(0), &out, 4, 2, 0.1),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        t.backward_update(kj.feature(0), &out[..5], 3, 0, 0.1),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        t.forward(kj.feature(0), &mut out, usize::MAX, 0),
        Err(Error::Shape { .. })
    ));
    assert_eq!(t.step(), 0);
}

/// Runs several fused steps and the dense reference side by side.
fn check_against_reference(opt: SparseOptimizer, pooling: Pooling, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (rows, dim, stride, offset, lr) = (16, 4, 7, 2, 0.05f32);
    let mut t = EmbeddingBag::new("t", rows, dim, pooling, opt, &mut rng);
    let mut reference = Reference::of(&t);
    for step in 0..6 {
        let bags = random_bags(&mut rng, 6, 5, rows);
        let grad = random_vec(&mut rng, bags.len() * stride);
        let kj = jagged(&bags);
        t.backward_update(kj.feature(0), &grad, stride, offset, lr)
            .unwrap();
        reference.step(&bags, &grad, stride, offset, lr as f64);
        let what = format!("{opt:?} {pooling:?} seed {seed} step {step}");
        assert_close(&format!("{what} weights"), &t.weights(), &reference.w, 1e-6);
        for (name, buf) in t.optimizer_state() {
            let want = match name.as_str() {
                "momentum1" => &reference.m,
                "momentum2" => &reference.v,
                "accumulator" => &reference.acc,
                other => panic!("unexpected state {other}"),
            };
            assert_close(&format!("{what} {name}"), buf, want, 1e-6);
        }
    }
    assert_eq!(t.step(), 6);
}

#[test]
fn fused_sgd_matches_dense_reference() {
    for seed in 0..4 {
        for pooling in [Pooling::Sum, Pooling::Mean] {
            check_against_reference(ALL_OPTIMIZERS[0], pooling, seed);
        }
    }
}

#[test]
fn fused_rowwise_adagrad_matches_dense_reference() {
    for seed in 0..4 {
        for pooling in [Pooling::Sum, Pooling::Mean] {
            check_against_reference(ALL_OPTIMIZERS[1], pooling, seed);
            check_against_reference(ALL_OPTIMIZERS[2], pooling, seed);
        }
    }
}

#[test]
fn fused_lazy_adam_matches_dense_reference() {
    for seed in 0..4 {
        for pooling in [Pooling::Sum, Pooling::Mean] {
            check_against_reference(ALL_OPTIMIZERS[3], pooling, seed);
        }
    }
}

#[test]
fn duplicates_are_aggregated_before_the_update() {
    // Adam's first step moves a row by ≈ lr per element whatever the gradient's size;
    // updating once per occurrence would move the row twice as far.
    let mut rng = StdRng::seed_from_u64(7);
    let opt = ALL_OPTIMIZERS[3];
    let mut t = EmbeddingBag::new("t", 3, 2, Pooling::Sum, opt, &mut rng);
    let before = t.weights().to_vec();
    let kj = jagged(&[vec![1, 1], vec![1]]);
    t.backward_update(kj.feature(0), &[1.0, -1.0, 0.5, -0.5], 2, 0, 0.01)
        .unwrap();
    let moved: Vec<f32> = t.weights()[2..4]
        .iter()
        .zip(&before[2..4])
        .map(|(a, b)| a - b)
        .collect();
    assert!(
        (moved[0] + 0.01).abs() < 1e-6 && (moved[1] - 0.01).abs() < 1e-6,
        "{moved:?}"
    );
    // Untouched rows and their moments stay as they were.
    assert_eq!(&t.weights()[..2], &before[..2]);
    assert_eq!(&t.weights()[4..], &before[4..]);
    let state = t.optimizer_state();
    assert_eq!(&state[0].1[..2], &[0.0, 0.0]);
}

#[test]
fn batch_without_ids_counts_a_step_and_changes_no_weight() {
    let mut rng = StdRng::seed_from_u64(8);
    let mut t = EmbeddingBag::new("t", 5, 3, Pooling::Mean, ALL_OPTIMIZERS[3], &mut rng);
    let before = t.weights().to_vec();
    let kj = jagged(&[vec![], vec![]]);
    t.backward_update(kj.feature(0), &[1.0; 6], 3, 0, 0.1)
        .unwrap();
    assert_eq!(t.weights(), &before[..]);
    assert_eq!(t.step(), 1);
    t.set_step(41);
    assert_eq!(t.step(), 41);
}

#[test]
fn optimizer_state_has_the_documented_names_and_sizes() {
    let mut rng = StdRng::seed_from_u64(9);
    let mut sizes = Vec::new();
    for opt in [ALL_OPTIMIZERS[0], ALL_OPTIMIZERS[2], ALL_OPTIMIZERS[3]] {
        let mut t = EmbeddingBag::new("t", 6, 4, Pooling::Sum, opt, &mut rng);
        let state: Vec<(String, usize)> = t
            .optimizer_state_mut()
            .into_iter()
            .map(|(n, b)| (n, b.len()))
            .collect();
        sizes.push(state);
    }
    assert_eq!(sizes[0], vec![]);
    assert_eq!(sizes[1], vec![("accumulator".to_string(), 6)]);
    assert_eq!(
        sizes[2],
        vec![("momentum1".to_string(), 24), ("momentum2".to_string(), 24)]
    );
    // Writes through the mutable view are what the table then uses.
    let mut t = EmbeddingBag::new("t", 6, 4, Pooling::Sum, ALL_OPTIMIZERS[2], &mut rng);
    t.optimizer_state_mut()[0].1.fill(3.0);
    assert!(t.optimizer_state()[0].1.iter().all(|&a| a == 3.0));
}

#[test]
fn backward_is_bitwise_identical_across_thread_counts() {
    let mut rng = StdRng::seed_from_u64(10);
    let (rows, dim) = (300, 16);
    let bags = random_bags(&mut rng, 8192, 5, rows);
    let grad = random_vec(&mut rng, bags.len() * dim);
    let kj = jagged(&bags);
    for opt in ALL_OPTIMIZERS {
        let t0 = EmbeddingBag::new("t", rows, dim, Pooling::Mean, opt, &mut rng);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut t = t0.clone();
            pool.install(|| {
                for _ in 0..2 {
                    t.backward_update(kj.feature(0), &grad, dim, 0, 0.1)
                        .unwrap();
                }
            });
            t
        };
        let (a, b) = (run(1), run(4));
        let bits = |t: &EmbeddingBag| t.weights().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "{opt:?}");
        assert_ne!(a.weights(), t0.weights());
    }
}

#[test]
fn optimizer_config_defaults_and_unknown_fields() {
    use serde::de::value::{Error as DeError, MapDeserializer};
    let parse = |pairs: &[(&'static str, &'static str)]| {
        SparseOptimizer::deserialize(MapDeserializer::<_, DeError>::new(pairs.iter().copied()))
    };
    assert_eq!(
        parse(&[("kind", "adam")]).unwrap(),
        SparseOptimizer::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8
        }
    );
    assert_eq!(
        parse(&[("kind", "row_wise_adagrad")]).unwrap(),
        SparseOptimizer::RowWiseAdagrad {
            eps: 1e-8,
            initial_accumulator: 0.0
        }
    );
    assert_eq!(parse(&[("kind", "sgd")]).unwrap(), SparseOptimizer::Sgd);
    assert!(parse(&[("kind", "adam"), ("betas", "x")]).is_err());
    assert!(parse(&[("kind", "adagrad")]).is_err());
    assert!(parse(&[("kind", "sgd"), ("lr", "x")]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Shuffling the samples of a batch (ids and gradients together) only changes the
    /// order in which a row's contributions are summed.
    #[test]
    fn backward_does_not_depend_on_sample_order(
        bags in prop::collection::vec(prop::collection::vec(0u64..12, 0..5), 1..24),
        seed in any::<u64>(),
        opt_index in 0usize..4,
        mean in any::<bool>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (rows, dim) = (12, 3);
        let pooling = if mean { Pooling::Mean } else { Pooling::Sum };
        let t0 = EmbeddingBag::new("t", rows, dim, pooling, ALL_OPTIMIZERS[opt_index], &mut rng);
        let grad = random_vec(&mut rng, bags.len() * dim);
        let mut order: Vec<usize> = (0..bags.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        let shuffled_bags: Vec<Vec<u64>> = order.iter().map(|&b| bags[b].clone()).collect();
        let shuffled_grad: Vec<f32> = order
            .iter()
            .flat_map(|&b| grad[b * dim..(b + 1) * dim].iter().copied())
            .collect();
        let (mut a, mut b) = (t0.clone(), t0);
        for _ in 0..2 {
            a.backward_update(jagged(&bags).feature(0), &grad, dim, 0, 0.05).unwrap();
            b.backward_update(jagged(&shuffled_bags).feature(0), &shuffled_grad, dim, 0, 0.05)
                .unwrap();
        }
        for (x, y) in a.weights().iter().zip(b.weights().iter()) {
            prop_assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{} vs {}", x, y);
        }
        prop_assert_eq!(a.step(), b.step());
    }
}

/// Bit patterns, to compare results exactly.
fn bits_of(x: &[f32]) -> Vec<u32> {
    x.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn forward_is_bitwise_identical_across_kernel_compilations_and_threads() {
    // Dims that exercise every column block (64, 32, 16, 8, 4, 1) and their tails.
    let mut rng = StdRng::seed_from_u64(11);
    for dim in [1, 3, 4, 7, 8, 16, 24, 64, 100, 131] {
        for pooling in [Pooling::Sum, Pooling::Mean] {
            let rows = 300;
            let t = EmbeddingBag::new("t", rows, dim, pooling, SparseOptimizer::Sgd, &mut rng);
            let bags = random_bags(&mut rng, 1500, 25, rows);
            let kj = jagged(&bags);
            let stride = dim + 5;
            let run = |isa: Isa, threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut out = vec![0.0f32; bags.len() * stride];
                pool.install(|| t.forward_with(isa, kj.feature(0), &mut out, stride, 2))
                    .unwrap();
                out
            };
            let want = run(Isa::Portable, 1);
            assert_eq!(bits_of(&run(Isa::detect(), 1)), bits_of(&want), "dim {dim}");
            assert_eq!(bits_of(&run(Isa::detect(), 3)), bits_of(&want), "dim {dim}");
            let naive: Vec<f64> = bags.iter().flat_map(|bag| naive_pool(&t, bag)).collect();
            let got: Vec<f32> = want
                .chunks(stride)
                .flat_map(|row| row[2..2 + dim].iter().copied())
                .collect();
            assert_close(&format!("dim {dim} {pooling:?}"), &got, &naive, 1e-5);
        }
    }
}

#[test]
fn backward_is_bitwise_identical_across_kernels_and_groupings() {
    // The AVX2 compilation, the portable one and the comparison-sort fallback agree
    // exactly, serial and parallel, for every optimizer and dims with odd tails.
    let mut rng = StdRng::seed_from_u64(12);
    for dim in [1, 5, 16, 64, 70] {
        let rows = 700;
        let bags = random_bags(&mut rng, 2000, 12, rows);
        let grad = random_vec(&mut rng, bags.len() * (dim + 1));
        let kj = jagged(&bags);
        for opt in ALL_OPTIMIZERS {
            for pooling in [Pooling::Sum, Pooling::Mean] {
                let t0 = EmbeddingBag::new("t", rows, dim, pooling, opt, &mut rng);
                let run = |isa: Isa, grouping: update::Grouping, threads: usize| {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut t = t0.clone();
                    pool.install(|| {
                        for _ in 0..2 {
                            t.backward_update_with(
                                isa,
                                grouping,
                                kj.feature(0),
                                &grad,
                                (dim + 1, 1, true),
                                0.1,
                            )
                            .unwrap();
                        }
                    });
                    let mut all = bits_of(&t.weights());
                    for (_, s) in t.optimizer_state() {
                        all.extend(bits_of(s));
                    }
                    all
                };
                let want = run(Isa::Portable, update::Grouping::Pairs, 1);
                let what = format!("dim {dim} {opt:?} {pooling:?}");
                assert_eq!(
                    run(Isa::Portable, update::Grouping::Auto, 1),
                    want,
                    "{what}"
                );
                assert_eq!(
                    run(Isa::detect(), update::Grouping::Auto, 1),
                    want,
                    "{what}"
                );
                assert_eq!(
                    run(Isa::detect(), update::Grouping::Auto, 3),
                    want,
                    "{what}"
                );
                assert_eq!(
                    run(Isa::detect(), update::Grouping::Pairs, 2),
                    want,
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn grouping_handles_extreme_ids_and_tiny_batches() {
    // Every id 0 (no row bits), one sample (no sample bits), and ids near the top of a
    // table, against the dense reference.
    let mut rng = StdRng::seed_from_u64(13);
    for bags in [
        vec![vec![0, 0, 0]],
        vec![vec![0], vec![0, 0], vec![]],
        vec![vec![4095, 0, 4095, 2048]],
        vec![vec![4095; 40], vec![1; 40], (0..40).collect()],
    ] {
        for opt in ALL_OPTIMIZERS {
            let (rows, dim) = (4096, 3);
            let mut t = EmbeddingBag::new("t", rows, dim, Pooling::Mean, opt, &mut rng);
            let mut reference = Reference::of(&t);
            let grad = random_vec(&mut rng, bags.len() * dim);
            t.backward_update(jagged(&bags).feature(0), &grad, dim, 0, 0.05)
                .unwrap();
            reference.step(&bags, &grad, dim, 0, 0.05);
            assert_close(
                &format!("{bags:?} {opt:?}"),
                &t.weights(),
                &reference.w,
                1e-6,
            );
        }
    }
}

#[test]
fn large_tables_live_on_huge_page_aligned_storage() {
    // 2 MiB of weights and more: 2 MiB-aligned mappings advised for huge pages.
    let mut rng = StdRng::seed_from_u64(14);
    let adam = ALL_OPTIMIZERS[3];
    let t = EmbeddingBag::new("t", 1 << 15, 16, Pooling::Sum, adam, &mut rng);
    assert_eq!(
        t.weights().as_ptr() as usize % crate::probe::HUGE_PAGE_BYTES,
        0
    );
    for (name, s) in t.optimizer_state() {
        assert_eq!(
            s.as_ptr() as usize % crate::probe::HUGE_PAGE_BYTES,
            0,
            "{name}"
        );
        assert!(s.iter().all(|&x| x == 0.0), "{name}");
    }
    // A clone is a deep copy on its own storage.
    let c = t.clone();
    assert_eq!(c.weights(), t.weights());
    assert_ne!(c.weights().as_ptr(), t.weights().as_ptr());
}

/// Row gradients summed elsewhere update each row as the fused backward would with the
/// same gradient, without counting a step.
#[test]
fn apply_row_grads_matches_single_id_bags() {
    for opt in [
        SparseOptimizer::Sgd,
        SparseOptimizer::RowWiseAdagrad {
            eps: 1e-8,
            initial_accumulator: 0.0,
        },
        SparseOptimizer::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
    ] {
        let dim = 5;
        let fill = |r: usize, row: &mut [f32]| {
            for (c, v) in row.iter_mut().enumerate() {
                *v = ((r * 7 + c) % 11) as f32 * 0.1 - 0.5;
            }
        };
        let mut a = EmbeddingBag::try_from_fn("t", 9, dim, Pooling::Sum, opt, fill).unwrap();
        let mut b = a.clone();
        let rows = [4u64, 0, 7];
        let grads: Vec<f32> = (0..rows.len() * dim)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        // b: one backward of three single-id bags; a: an empty backward (counts the
        // step), then the row gradients.
        let offsets: Vec<usize> = (0..=rows.len()).collect();
        b.backward_update(
            JaggedView::new(&offsets, &rows).unwrap(),
            &grads,
            dim,
            0,
            0.05,
        )
        .unwrap();
        let empty = [0usize];
        a.backward_update(JaggedView::new(&empty, &[]).unwrap(), &[], dim, 0, 0.05)
            .unwrap();
        a.apply_row_grads(&rows, &grads, 0.05).unwrap();
        assert_eq!(a.step(), b.step());
        assert_eq!(bits_of(&a.weights()), bits_of(&b.weights()), "{opt:?}");
        for ((_, x), (_, y)) in a.optimizer_state().iter().zip(b.optimizer_state()) {
            assert_eq!(bits_of(x), bits_of(y), "{opt:?}");
        }
    }
}

/// `t`'s rows in `precision`, rounded to nearest (the same optimizer, step 0).
fn in_precision(t: &EmbeddingBag, precision: TablePrecision) -> EmbeddingBag {
    let w = t.weights();
    let dim = t.dim();
    EmbeddingBag::try_from_fn_in(
        precision,
        t.name(),
        t.rows(),
        dim,
        t.pooling(),
        t.optimizer(),
        |r, row| row.copy_from_slice(&w[r * dim..(r + 1) * dim]),
    )
    .unwrap()
}

#[test]
fn reduced_precision_tables_pool_their_widened_rows_on_every_kernel() {
    // An fp16, bf16 or int8 table pools exactly what an fp32 table holding its widened
    // (dequantized) rows pools, on both compilations and several threads.
    let mut rng = StdRng::seed_from_u64(21);
    for precision in [
        TablePrecision::Fp16,
        TablePrecision::Bf16,
        TablePrecision::Int8,
    ] {
        for dim in [1, 7, 16, 64, 100] {
            let rows = 300;
            let t32 = EmbeddingBag::new(
                "t",
                rows,
                dim,
                Pooling::Mean,
                SparseOptimizer::Sgd,
                &mut rng,
            );
            let half = in_precision(&t32, precision);
            assert_eq!(half.precision(), precision);
            let widened = in_precision(&half, TablePrecision::Fp32);
            // (A one-value int8 row is its bias: exact.)
            if precision != TablePrecision::Int8 || dim > 1 {
                assert_ne!(
                    bits_of(&widened.weights()),
                    bits_of(&t32.weights()),
                    "rounded"
                );
            }
            let bags = random_bags(&mut rng, 900, 25, rows);
            let kj = jagged(&bags);
            let stride = dim + 3;
            let run = |t: &EmbeddingBag, isa: Isa, threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut out = vec![0.0f32; bags.len() * stride];
                pool.install(|| t.forward_with(isa, kj.feature(0), &mut out, stride, 1))
                    .unwrap();
                bits_of(&out)
            };
            let want = run(&widened, Isa::Portable, 1);
            for (isa, threads) in [(Isa::Portable, 1), (Isa::detect(), 1), (Isa::detect(), 3)] {
                assert_eq!(run(&half, isa, threads), want, "{precision} dim {dim}");
            }
        }
    }
}

#[test]
fn reduced_precision_updates_round_stochastically_keyed_by_global_row() {
    // The update of a reduced-precision table is the fp32 update of its widened rows,
    // rounded stochastically: the same bits on both compilations and any thread count,
    // and a row-wise shard keyed by its first global row updates its rows exactly as
    // the whole table does (placement does not change the rounding).
    let mut rng = StdRng::seed_from_u64(22);
    let (rows, dim, split) = (200, 24, 77);
    for precision in [TablePrecision::Fp16, TablePrecision::Bf16] {
        for opt in ALL_OPTIMIZERS {
            let t32 = EmbeddingBag::new("t", rows, dim, Pooling::Sum, opt, &mut rng);
            let whole = in_precision(&t32, precision);
            let bags = random_bags(&mut rng, 500, 6, rows);
            let grad = random_vec(&mut rng, bags.len() * dim);
            let kj = jagged(&bags);
            let run = |t0: &EmbeddingBag, isa: Isa, threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut t = t0.clone();
                pool.install(|| {
                    for _ in 0..3 {
                        t.backward_update_with(
                            isa,
                            update::Grouping::Auto,
                            kj.feature(0),
                            &grad,
                            (dim, 0, true),
                            0.05,
                        )
                        .unwrap();
                    }
                });
                t
            };
            let want = run(&whole, Isa::Portable, 1);
            let what = format!("{precision} {opt:?}");
            for (isa, threads) in [(Isa::detect(), 1), (Isa::detect(), 4)] {
                let got = run(&whole, isa, threads);
                assert_eq!(bits_of(&got.weights()), bits_of(&want.weights()), "{what}");
            }
            // Every stored value is representable, and the update moved the rows.
            let again = in_precision(&want, precision);
            assert_eq!(
                bits_of(&again.weights()),
                bits_of(&want.weights()),
                "{what}"
            );
            assert_ne!(
                bits_of(&want.weights()),
                bits_of(&whole.weights()),
                "{what}"
            );
            // The rows `split..` as a shard: ids renumbered from 0, keyed by `split`.
            let w = whole.weights();
            let mut shard = EmbeddingBag::try_from_fn_in(
                precision,
                "t",
                rows - split,
                dim,
                Pooling::Sum,
                opt,
                |r, row| row.copy_from_slice(&w[(split + r) * dim..(split + r + 1) * dim]),
            )
            .unwrap();
            shard.set_rounding(EmbeddingBag::rounding_key("t"), split as u64, 0);
            let local: Vec<Vec<u64>> = bags
                .iter()
                .map(|b| {
                    b.iter()
                        .filter(|&&id| id >= split as u64)
                        .map(|&id| id - split as u64)
                        .collect()
                })
                .collect();
            let lj = jagged(&local);
            for _ in 0..3 {
                shard
                    .backward_update(lj.feature(0), &grad, dim, 0, 0.05)
                    .unwrap();
            }
            assert_eq!(
                bits_of(&shard.weights()),
                bits_of(&want.weights()[split * dim..]),
                "{what}: a shard rounds its rows as the whole table does"
            );
        }
    }
}

#[test]
fn tiny_updates_survive_stochastic_rounding_on_average() {
    // SGD steps far below a bf16 ulp: rounding to nearest would keep the row as it is,
    // stochastic rounding moves it by the right amount on average.
    let (rows, dim) = (1, 4096);
    let mut t = EmbeddingBag::try_from_fn_in(
        TablePrecision::Bf16,
        "t",
        rows,
        dim,
        Pooling::Sum,
        SparseOptimizer::Sgd,
        |_, row| row.fill(1.0),
    )
    .unwrap();
    let kj = jagged(&[vec![0]]);
    let grad = vec![1.0f32; dim];
    // 1 − 20 × 1e-4 = 0.998, while bf16's ulp below 1 is 2⁻⁸ ≈ 0.0039.
    for _ in 0..20 {
        t.backward_update(kj.feature(0), &grad, dim, 0, 1e-4)
            .unwrap();
    }
    let mean: f64 = t.weights().iter().map(|&w| w as f64).sum::<f64>() / dim as f64;
    assert!((mean - 0.998).abs() < 3e-4, "mean {mean}");
}

#[test]
fn an_int8_table_is_read_only_and_keeps_its_bytes() {
    let mut rng = StdRng::seed_from_u64(5);
    let (rows, dim) = (50, 12);
    let opt = SparseOptimizer::RowWiseAdagrad {
        eps: 1e-8,
        initial_accumulator: 0.0,
    };
    let mut t32 = EmbeddingBag::new("t", rows, dim, Pooling::Sum, opt, &mut rng);
    t32.set_step(7);
    let mut q = t32.quantized().unwrap();
    assert_eq!(q.precision(), TablePrecision::Int8);
    assert_eq!(q.step(), 7);
    assert!(q.optimizer_state().is_empty(), "no optimizer state");
    let packed = q.packed_rows().unwrap().to_vec();
    assert_eq!(packed.len(), rows * TablePrecision::Int8.row_bytes(dim));
    assert_eq!(TablePrecision::Int8.row_bytes(dim), dim + 8);
    // The same bytes as building the table in int8 from the fp32 rows.
    let built = in_precision(&t32, TablePrecision::Int8);
    assert_eq!(built.packed_rows().unwrap(), &packed[..]);
    // Every value within half a step of its row's range.
    let (w32, wq) = (t32.weights().into_owned(), q.weights().into_owned());
    for r in 0..rows {
        let row = &w32[r * dim..(r + 1) * dim];
        let (lo, hi) = row
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        for c in 0..dim {
            let err = (row[c] - wq[r * dim + c]).abs();
            assert!(
                err <= (hi - lo) / 510.0 * 1.001 + 1e-7,
                "row {r} col {c}: {err}"
            );
        }
    }
    // Updates are refused and change nothing.
    let kj = jagged(&[vec![1, 2], vec![3]]);
    let grad = vec![1.0; 2 * dim];
    let err = q
        .backward_update(kj.feature(0), &grad, dim, 0, 0.1)
        .unwrap_err();
    assert!(err.to_string().contains("inference only"), "{err}");
    assert_eq!(q.packed_rows().unwrap(), &packed[..]);
    // Stored rows load back, and only at their length, only into int8 tables.
    let mut other = in_precision(&t32, TablePrecision::Int8);
    other.set_packed_rows(&vec![0u8; packed.len()]).unwrap();
    other.set_packed_rows(&packed).unwrap();
    assert_eq!(bits_of(&other.weights()), bits_of(&wq));
    assert!(other.set_packed_rows(&packed[1..]).is_err());
    assert!(t32.set_packed_rows(&packed).is_err());
    // A diverged table is not quantized.
    let mut bad = t32.weights().into_owned();
    bad[3] = f32::NAN;
    t32.set_weights(&bad).unwrap();
    assert!(t32.quantized().is_err());
}
