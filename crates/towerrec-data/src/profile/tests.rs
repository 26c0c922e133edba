use super::*;
use crate::record::{Record, Schema, SparseFeature};
use crate::stream::RecordStream;
use crate::synthetic::{PoolingFactor, SyntheticConfig, SyntheticStream};
use proptest::prelude::*;
use std::ops::ControlFlow;

/// Records from a list: table `t` of `rows[t]` rows.
struct Listed {
    schema: Schema,
    records: std::vec::IntoIter<Record>,
}

impl Listed {
    fn new(rows: &[u64], ids: Vec<Vec<Vec<u64>>>) -> Self {
        let sparse = rows
            .iter()
            .enumerate()
            .map(|(i, &rows)| SparseFeature {
                name: format!("T{i}"),
                rows,
            })
            .collect();
        let records: Vec<Record> = ids
            .into_iter()
            .map(|sparse| Record {
                label: 0.0,
                dense: vec![],
                sparse,
            })
            .collect();
        Listed {
            schema: Schema {
                dense: vec![],
                sparse,
            },
            records: records.into_iter(),
        }
    }
}

impl RecordStream for Listed {
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn next_record(&mut self) -> crate::Result<Option<Record>> {
        Ok(self.records.next())
    }
    fn skipped(&self) -> u64 {
        0
    }
}

fn profile(stream: &mut dyn RecordStream, opts: ProfileOptions) -> AccessProfile {
    profile_stream(stream, opts, None, "test".into(), |_| {
        ControlFlow::Continue(())
    })
    .unwrap()
}

fn zipf_stream(rows: u64, s: f64, samples: u64) -> SyntheticStream {
    let mut cfg = SyntheticConfig::criteo_like(rows, 2, PoolingFactor::Fixed(1), s);
    cfg.train_samples = samples;
    SyntheticStream::new(&cfg, cfg.train_range()).unwrap()
}

#[test]
fn counts_every_id_of_every_bag() {
    let ids = vec![
        vec![vec![1, 1, 3], vec![]],
        vec![vec![3], vec![0]],
        vec![vec![], vec![0]],
    ];
    let p = profile(&mut Listed::new(&[4, 2], ids), ProfileOptions::default());
    assert_eq!(p.samples, 3);
    assert_eq!(p.tables[0].counts, RowCounts::Exact(vec![0, 2, 0, 2]));
    assert_eq!(p.tables[0].reads, 4);
    assert_eq!(p.tables[1].counts, RowCounts::Exact(vec![2, 0]));
    assert_eq!(p.tables[0].distinct(), Some(2));
    // Ties rank by row.
    assert_eq!(p.tables[0].ranked(), vec![(1, 2), (3, 2)]);
    assert_eq!(p.tables[0].ranking().top_share(0.25), Some(0.5));
    assert_eq!(p.tables[1].ranking().top_share(0.5), Some(1.0));
}

#[test]
fn an_id_outside_its_table_is_an_error() {
    let mut s = Listed::new(&[4], vec![vec![vec![4]]]);
    let e = profile_stream(
        &mut s,
        ProfileOptions::default(),
        None,
        String::new(),
        |_| ControlFlow::Continue(()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("outside its 4 rows"), "{e}");
}

#[test]
fn max_samples_and_progress_stop_early() {
    let mut s = zipf_stream(1000, 1.0, 100);
    let p = profile_stream(
        &mut s,
        ProfileOptions::default(),
        Some(10),
        String::new(),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
    assert_eq!(p.samples, 10);
    let mut s = zipf_stream(1000, 1.0, 100);
    let p = profile_stream(
        &mut s,
        ProfileOptions::default(),
        None,
        String::new(),
        |n| {
            if n == 7 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    )
    .unwrap();
    assert_eq!(p.samples, 7);
}

#[test]
fn the_synthetic_zipf_exponent_shows_in_the_profile() {
    for s in [0.8, 1.05, 1.3] {
        let p = profile(
            &mut zipf_stream(20_000, s, 100_000),
            ProfileOptions::default(),
        );
        for t in &p.tables {
            let fit = t.ranking().zipf_exponent().unwrap();
            assert!((fit - s).abs() < 0.1, "Zipf({s}): fitted {fit}");
        }
    }
    // Uniform: no skew (or too few counts to fit).
    let p = profile(
        &mut zipf_stream(100, 0.0, 100_000),
        ProfileOptions::default(),
    );
    let fit = p.tables[0].ranking().zipf_exponent().unwrap();
    assert!(fit.abs() < 0.05, "uniform: fitted {fit}");
}

#[test]
fn skewed_tables_send_most_reads_to_few_rows() {
    let p = profile(
        &mut zipf_stream(100_000, 1.05, 50_000),
        ProfileOptions::default(),
    );
    let r = p.tables[0].ranking();
    let shares: Vec<f64> = [0.001, 0.01, 0.1]
        .iter()
        .map(|&f| r.top_share(f).unwrap())
        .collect();
    assert!(
        shares[0] > 0.3 && shares[0] < shares[1] && shares[1] < shares[2],
        "{shares:?}"
    );
    let cdf = r.cdf(50);
    assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    let last = cdf.last().unwrap();
    assert_eq!(last.0, p.tables[0].distinct().unwrap() as f64 / 100_000.0);
    assert!((last.1 - 1.0).abs() < 1e-12);
}

#[test]
fn the_sketch_finds_the_hot_rows_within_its_bound() {
    let exact = profile(
        &mut zipf_stream(50_000, 1.05, 50_000),
        ProfileOptions::default(),
    );
    let opts = ProfileOptions {
        exact_max_rows: 1000,
        sketch_top: 200,
        ..ProfileOptions::default()
    };
    let sketch = profile(&mut zipf_stream(50_000, 1.05, 50_000), opts);
    for (e, s) in exact.tables.iter().zip(&sketch.tables) {
        assert!(!s.is_exact());
        assert_eq!(e.reads, s.reads);
        let RowCounts::Sketch { hot, epsilon, .. } = &s.counts else {
            unreachable!()
        };
        assert_eq!(hot.len(), 200);
        let slack = (epsilon * s.reads as f64).ceil() as u64;
        for &(row, est) in hot {
            let truth = e.count(row).unwrap();
            assert!(
                est >= truth && est <= truth + slack,
                "row {row}: {est} vs {truth}"
            );
        }
        let top = |t: &TableAccess| -> Vec<u64> { t.ranked()[..20].iter().map(|r| r.0).collect() };
        assert_eq!(top(e), top(s));
        // A sketch cannot say what it did not keep.
        assert_eq!(s.ranking().top_share(0.1), None);
        assert!(s.ranking().top_share(0.001).is_some());
    }
}

fn round_trip(p: &AccessProfile) -> AccessProfile {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.profile");
    p.save(&path).unwrap();
    AccessProfile::load(&path).unwrap()
}

#[test]
fn files_round_trip_in_every_layout() {
    // Dense (every row read), sparse (few rows read) and sketched tables.
    let ids = vec![vec![vec![0, 1], vec![7]], vec![vec![1, 2], vec![]]];
    let p = profile(&mut Listed::new(&[3, 1000], ids), ProfileOptions::default());
    assert_eq!(round_trip(&p), p);
    let opts = ProfileOptions {
        exact_max_rows: 10,
        sketch_top: 5,
        ..ProfileOptions::default()
    };
    let p = profile(&mut zipf_stream(1000, 1.0, 2000), opts);
    assert_eq!(round_trip(&p), p);
}

#[test]
fn a_file_whose_counts_do_not_add_up_is_refused() {
    let ids = vec![vec![vec![0, 1]]];
    let mut p = profile(&mut Listed::new(&[3], ids), ProfileOptions::default());
    p.tables[0].reads = 3;
    let dir = std::env::temp_dir();
    let path = dir.join(format!("towerrec-bad-{}.profile", std::process::id()));
    p.save(&path).unwrap();
    let e = AccessProfile::load(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(
        e.to_string().contains("add up to 2, not its 3 reads"),
        "{e}"
    );
}

proptest! {
    #[test]
    fn any_exact_profile_round_trips(
        tables in prop::collection::vec(prop::collection::vec(0u32..5, 0..60), 1..4),
        samples in 0u64..1000,
    ) {
        let p = AccessProfile {
            samples,
            source: "prop".into(),
            tables: tables.into_iter().enumerate().map(|(i, c)| TableAccess {
                name: format!("T{i}"),
                rows: c.len() as u64,
                reads: c.iter().map(|&n| u64::from(n)).sum(),
                counts: RowCounts::Exact(c),
            }).collect(),
        };
        prop_assert_eq!(round_trip(&p), p);
    }

    #[test]
    fn log_cuts_rise_to_n(n in 1usize..100_000, points in 1usize..300) {
        let cuts = stats::log_cuts(n, points);
        prop_assert!(cuts.len() <= points + 1);
        prop_assert_eq!(*cuts.last().unwrap(), n);
        prop_assert!(cuts[0] >= 1);
        prop_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn rotating_zipf_moves_the_hot_rows() {
    let mut cfg = SyntheticConfig::criteo_like(1000, 1, PoolingFactor::Fixed(1), 1.05);
    cfg.train_samples = 20_000;
    cfg.zipf_rotate_every = 10_000;
    let hottest = |skip: u64| {
        let mut s = SyntheticStream::new(&cfg, cfg.train_range()).unwrap();
        s.skip_records(skip).unwrap();
        let p = profile_stream(
            &mut s,
            ProfileOptions::default(),
            Some(10_000),
            String::new(),
            |_| ControlFlow::Continue(()),
        )
        .unwrap();
        p.tables[0].ranked()[0].0
    };
    assert_ne!(hottest(0), hottest(10_000));
    // Within a window the map holds still.
    assert_eq!(hottest(0), hottest(5_000));
}
