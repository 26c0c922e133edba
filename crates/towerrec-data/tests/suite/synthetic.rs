//! The synthetic generator: reproducibility, random access, skew, label rate, signal.

use crate::common::drain;
use std::collections::HashMap;
use std::sync::Arc;
use towerrec_data::synthetic::SyntheticGenerator;
use towerrec_data::{next_batch, PoolingFactor, RecordStream, SyntheticConfig, SyntheticStream};

fn config(rows: u64, tables: usize, zipf: f64) -> SyntheticConfig {
    let mut c = SyntheticConfig::criteo_like(rows, tables, PoolingFactor::Fixed(1), zipf);
    c.train_samples = 2_000;
    c.eval_samples = 500;
    c.seed = 42;
    c
}

/// AUC by ranks: the probability a random positive outscores a random negative.
fn auc(scores: &[f64], labels: &[f32]) -> f64 {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut neg, mut pairs, mut pos) = (0f64, 0f64, 0f64);
    for &i in &idx {
        if labels[i] > 0.5 {
            pairs += neg;
            pos += 1.0;
        } else {
            neg += 1.0;
        }
    }
    pairs / (pos * neg)
}

#[test]
fn same_seed_and_index_give_the_same_record() {
    let cfg = config(1000, 4, 1.1);
    let a = SyntheticGenerator::new(&cfg).unwrap();
    let b = SyntheticGenerator::new(&cfg).unwrap();
    for i in [0, 1, 17, 1_000_000_007] {
        assert_eq!(a.sample(i), b.sample(i));
    }
    assert_ne!(a.sample(0), a.sample(1));
    let mut other = cfg.clone();
    other.seed = 43;
    let c = SyntheticGenerator::new(&other).unwrap();
    assert_ne!(a.sample(0), c.sample(0));
}

#[test]
fn ranges_agree_with_random_access_and_parallel_generation() {
    let cfg = config(1000, 3, 0.0);
    let whole = drain(&mut SyntheticStream::new(&cfg, 0..300).unwrap());
    let tail = drain(&mut SyntheticStream::new(&cfg, 200..300).unwrap());
    assert_eq!(&whole[200..], &tail[..]);
    let g = Arc::new(SyntheticGenerator::new(&cfg).unwrap());
    let parts: Vec<_> = (0..3u64)
        .map(|k| {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                drain(&mut SyntheticStream::from_generator(
                    g,
                    k * 100..(k + 1) * 100,
                ))
            })
        })
        .collect();
    let joined: Vec<_> = parts.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(joined, whole);
    assert_eq!(cfg.train_range(), 0..2000);
    assert_eq!(cfg.eval_range(), 2000..2500);
}

#[test]
fn records_fit_the_schema_and_tables() {
    let mut cfg = config(37, 5, 1.05);
    cfg.num_dense = 4;
    cfg.tables[0].pooling = PoolingFactor::Mean { mean: 4.0 };
    let mut s = SyntheticStream::new(&cfg, 0..500).unwrap();
    let schema = s.schema().clone();
    let recs = drain(&mut s);
    let mut total_ids = 0;
    for r in &recs {
        assert!(schema.fits(r));
        assert!(r.label == 0.0 || r.label == 1.0);
        assert!(r.dense.iter().all(|x| x.is_finite() && *x > 0.0));
        for ids in &r.sparse {
            assert!(!ids.is_empty());
            assert!(ids.iter().all(|&id| id < 37));
            total_ids += ids.len();
        }
    }
    let mean = total_ids as f64 / (recs.len() * 5) as f64;
    assert!((3.5..4.5).contains(&mean), "mean pooling {mean}");
    let mut s = SyntheticStream::new(&cfg, 0..10).unwrap();
    let b = next_batch(&mut s, 4).unwrap().unwrap();
    assert_eq!(b.batch_size(), 4);
    assert_eq!(b.sparse.num_keys(), 5);
}

#[test]
fn zipf_concentrates_ids_on_a_few_scattered_rows() {
    let rows = 10_000u64;
    let cfg = config(rows, 1, 1.1);
    let g = SyntheticGenerator::new(&cfg).unwrap();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let n = 50_000u64;
    for i in 0..n {
        *counts.entry(g.sample(i).sparse[0][0]).or_default() += 1;
    }
    let mut c: Vec<(u64, u64)> = counts.into_iter().collect();
    c.sort_by_key(|x| std::cmp::Reverse(x.1));
    let top: u64 = c.iter().take((rows / 100) as usize).map(|x| x.1).sum();
    let share = top as f64 / n as f64;
    assert!(share > 0.5, "top 1% of rows got {share:.2} of the ids");
    // The hottest rows are permuted away from 0..k.
    let hottest: Vec<u64> = c.iter().take(10).map(|x| x.0).collect();
    assert!(hottest.iter().any(|&r| r >= 100), "{hottest:?}");

    let uniform = SyntheticGenerator::new(&config(rows, 1, 0.0)).unwrap();
    let mut u: HashMap<u64, u64> = HashMap::new();
    for i in 0..n {
        *u.entry(uniform.sample(i).sparse[0][0]).or_default() += 1;
    }
    let mut uc: Vec<u64> = u.into_values().collect();
    uc.sort_unstable_by(|a, b| b.cmp(a));
    let ushare = uc.iter().take(100).sum::<u64>() as f64 / n as f64;
    assert!(ushare < 0.05, "uniform top 1% share {ushare:.3}");
}

#[test]
fn positive_rate_is_near_the_target_and_labels_carry_signal() {
    for (zipf, target) in [(0.0, 0.25), (1.05, 0.25), (0.0, 0.1)] {
        let mut cfg = config(100_000, 26, zipf);
        cfg.positive_rate = target;
        let g = SyntheticGenerator::new(&cfg).unwrap();
        let n = 20_000u64;
        let (mut scores, mut labels) = (Vec::new(), Vec::new());
        for i in 0..n {
            let (r, logit) = g.sample_with_logit(i);
            scores.push(logit);
            labels.push(r.label);
        }
        let rate = labels.iter().sum::<f32>() as f64 / n as f64;
        assert!((rate - target).abs() < 0.04, "zipf {zipf}: rate {rate}");
        let a = auc(&scores, &labels);
        assert!((0.8..0.93).contains(&a), "zipf {zipf}: true-logit AUC {a}");
    }
    let mut noise = config(1000, 4, 0.0);
    noise.signal = 0.0;
    let g = SyntheticGenerator::new(&noise).unwrap();
    let (s, l): (Vec<f64>, Vec<f32>) = (0..20_000)
        .map(|i| {
            let r = g.sample(i);
            (f64::from(r.dense[0]) + r.sparse[0][0] as f64, r.label)
        })
        .unzip();
    assert!((auc(&s, &l) - 0.5).abs() < 0.03, "signal 0 must be noise");
}

#[test]
fn dense_features_predict_labels_alone() {
    // A model that only sees the dense features must beat chance: the signal is not
    // all in the (harder to learn) embeddings.
    let cfg = config(100_000, 26, 0.0);
    let g = SyntheticGenerator::new(&cfg).unwrap();
    let n = 20_000u64;
    let recs: Vec<_> = (0..n).map(|i| g.sample(i)).collect();
    // Least-squares direction on the dense features, fitted on half, scored on the rest.
    let d = recs[0].dense.len();
    let mut w = vec![0f64; d];
    for r in &recs[..10_000] {
        for (wk, x) in w.iter_mut().zip(&r.dense) {
            *wk += f64::from(*x) * (f64::from(r.label) - 0.25);
        }
    }
    let (s, l): (Vec<f64>, Vec<f32>) = recs[10_000..]
        .iter()
        .map(|r| {
            (
                (0..d).map(|k| w[k] * f64::from(r.dense[k])).sum::<f64>(),
                r.label,
            )
        })
        .unzip();
    assert!(auc(&s, &l) > 0.6, "dense-only AUC {}", auc(&s, &l));
}
