use super::*;
use crate::record::{Record, Schema, SparseFeature};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Records of raw keys, as a reader with `FeatureIds::Key` yields them.
struct Keys {
    schema: Schema,
    rows: std::vec::IntoIter<Vec<Vec<u64>>>,
}

fn keys(features: usize, rows: Vec<Vec<Vec<u64>>>) -> Keys {
    Keys {
        schema: Schema {
            dense: vec![],
            sparse: (0..features)
                .map(|i| SparseFeature {
                    name: format!("f{i}"),
                    rows: u64::MAX,
                })
                .collect(),
        },
        rows: rows.into_iter(),
    }
}

impl RecordStream for Keys {
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn next_record(&mut self) -> Result<Option<Record>> {
        Ok(self.rows.next().map(|sparse| Record {
            label: 0.0,
            dense: vec![],
            sparse,
        }))
    }
    fn skipped(&self) -> u64 {
        0
    }
}

fn one_hot(values: &[u64]) -> Vec<Vec<Vec<u64>>> {
    values.iter().map(|&v| vec![vec![v]]).collect()
}

fn opts(min_count: u64, max_rows: Option<u64>) -> VocabOptions {
    VocabOptions {
        min_count,
        max_rows,
        sketch: None,
    }
}

#[test]
fn hottest_keys_come_first_ties_by_key_and_rare_ones_go_to_row_0() {
    // 5 ×3, 9 ×3, 2 ×2, 7 ×1.
    let mut s = keys(1, one_hot(&[9, 5, 2, 5, 9, 7, 2, 9, 5]));
    let v = build(&mut s, &opts(2, None), |_| {}).unwrap();
    let f = &v.features[0];
    assert_eq!(f.keys, [5, 9, 2]);
    assert_eq!(f.counts, [3, 3, 2]);
    assert_eq!((f.distinct, f.occurrences, f.rows()), (Some(4), 9, 4));
    assert!((f.oov_share() - 1.0 / 9.0).abs() < 1e-12);
    let ids = v.ids();
    assert_eq!([5, 9, 2, 7, 1234].map(|k| ids[0].id(k)), [1, 2, 3, 0, 0]);
    assert_eq!(v.info.rows_read, 9);
    // A cap keeps the hottest (OOV row included in the cap).
    let mut s = keys(1, one_hot(&[9, 5, 2, 5, 9, 7, 2, 9, 5]));
    let v = build(&mut s, &opts(1, Some(3)), |_| {}).unwrap();
    assert_eq!(v.features[0].keys, [5, 9]);
    // max_rows 1: only the OOV row.
    let mut s = keys(1, one_hot(&[1, 1]));
    let v = build(&mut s, &opts(1, Some(1)), |_| {}).unwrap();
    assert_eq!(v.rows(), [1]);
    assert_eq!(v.ids()[0].id(1), 0);
}

#[test]
fn bad_options_are_refused() {
    for o in [
        opts(0, None),
        opts(1, Some(0)),
        VocabOptions {
            sketch: Some(SketchOptions::default()),
            ..opts(1, None)
        },
    ] {
        assert!(build(&mut keys(1, vec![]), &o, |_| {}).is_err(), "{o:?}");
    }
}

#[test]
fn multi_hot_rows_count_each_key_and_features_count_apart() {
    let rows = vec![
        vec![vec![1, 2], vec![]],
        vec![vec![2], vec![7]],
        vec![vec![], vec![7, 7]],
    ];
    let v = build(&mut keys(2, rows), &opts(1, None), |_| {}).unwrap();
    assert_eq!(v.features[0].keys, [2, 1]);
    assert_eq!(v.features[0].occurrences, 3);
    assert_eq!(v.features[1].keys, [7]);
    assert_eq!(v.features[1].counts, [3]);
}

#[test]
fn the_sketch_keeps_the_heavy_hitters_within_its_bound() {
    // Key k appears 200 / k times; the sketch keeps the top 4 of 50.
    let mut values = Vec::new();
    for k in 1..=50u64 {
        values.extend(std::iter::repeat_n(k, (200 / k) as usize));
    }
    let n = values.len() as u64;
    let sketch = SketchOptions {
        epsilon: 0.01,
        delta: 0.01,
    };
    let o = VocabOptions {
        min_count: 1,
        max_rows: Some(5),
        sketch: Some(sketch),
    };
    let v = build(&mut keys(1, one_hot(&values)), &o, |_| {}).unwrap();
    let f = &v.features[0];
    assert_eq!(f.keys, [1, 2, 3, 4]);
    for (k, c) in f.keys.iter().zip(&f.counts) {
        let truth = 200 / k;
        assert!(
            *c >= truth && *c as f64 <= truth as f64 + 0.01 * n as f64,
            "{k}: {c}"
        );
    }
    assert_eq!(f.distinct, None);
    assert_eq!(f.occurrences, n);
    // The file says how it was counted and reads back.
    let back = read_bytes(&v.to_bytes().unwrap(), Path::new("v.st")).unwrap();
    assert_eq!(back, v);
    assert!(matches!(back.info.counting, file::Counting::Sketch { .. }));
}

#[test]
fn a_file_round_trips_and_damage_is_named() {
    let rows = vec![vec![vec![3], vec![4, 5]], vec![vec![3], vec![]]];
    let v = build(&mut keys(2, rows), &opts(1, None), |_| {}).unwrap();
    let bytes = v.to_bytes().unwrap();
    let back = read_bytes(&bytes, Path::new("v.st")).unwrap();
    assert_eq!(back, v);
    assert_eq!(back.checksum(), v.checksum());
    // A flipped key byte: the checksum no longer matches.
    let at = bytes
        .windows(8)
        .rposition(|w| w == 5u64.to_le_bytes())
        .unwrap();
    let mut damaged = bytes.clone();
    damaged[at] ^= 0x40;
    let e = read_bytes(&damaged, Path::new("v.st"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("v.st:") && e.contains("checksum"), "{e}");
    // Not a vocabulary at all.
    let e = read_bytes(b"hello", Path::new("x.st"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.st:"), "{e}");
    // A different vocabulary has a different checksum; names are checked.
    let w = build(
        &mut keys(2, vec![vec![vec![3], vec![5]]]),
        &opts(1, None),
        |_| {},
    )
    .unwrap();
    assert_ne!(w.checksum(), v.checksum());
    let e = v
        .check_names(&["f0".into(), "g".into()], Path::new("v.st"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("v.st") && e.contains("f0, f1") && e.contains("f0, g"),
        "{e}"
    );
    v.check_names(&["f0".into(), "f1".into()], Path::new("v.st"))
        .unwrap();
}

#[test]
fn load_reads_a_file_and_sees_it_change() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.st");
    let v = build(&mut keys(1, one_hot(&[1, 2, 2])), &opts(1, None), |_| {}).unwrap();
    v.write(&p).unwrap();
    assert_eq!(load(&p).unwrap().features[0].keys, [2, 1]);
    let w = build(&mut keys(1, one_hot(&[1, 1, 2, 3])), &opts(1, None), |_| {}).unwrap();
    w.write(&p).unwrap();
    assert_eq!(load(&p).unwrap().features[0].keys, [1, 2, 3]);
    let e = load(&dir.path().join("none.st")).unwrap_err().to_string();
    assert!(e.contains("none.st"), "{e}");
}

proptest! {
    /// Against a brute-force count: the kept keys are exactly those seen at least
    /// min_count times, hottest first, ties by key, at most max_rows - 1 of them.
    #[test]
    fn matches_a_brute_force_count(
        rows in prop::collection::vec(prop::collection::vec(0u64..20, 0..4), 0..200),
        min_count in 1u64..5,
        max_rows in prop::option::of(1u64..12),
    ) {
        let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
        for r in &rows {
            for &k in r {
                *counts.entry(k).or_default() += 1;
            }
        }
        let mut want: Vec<(u64, u64)> = counts.iter().map(|(&k, &c)| (k, c)).filter(|p| p.1 >= min_count).collect();
        want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(m) = max_rows {
            want.truncate(m as usize - 1);
        }
        let stream_rows: Vec<Vec<Vec<u64>>> = rows.iter().map(|r| vec![r.clone()]).collect();
        let v = build(&mut keys(1, stream_rows), &opts(min_count, max_rows), |_| {}).unwrap();
        let f = &v.features[0];
        prop_assert_eq!(&f.keys, &want.iter().map(|p| p.0).collect::<Vec<_>>());
        prop_assert_eq!(&f.counts, &want.iter().map(|p| p.1).collect::<Vec<_>>());
        prop_assert_eq!(f.distinct, Some(counts.len() as u64));
        let ids = v.ids();
        for &k in counts.keys() {
            let row = want.iter().position(|p| p.0 == k).map_or(0, |i| i as u64 + 1);
            prop_assert_eq!(ids[0].id(k), row);
        }
        let back = read_bytes(&v.to_bytes().unwrap(), Path::new("v")).unwrap();
        prop_assert_eq!(back, v);
    }
}
