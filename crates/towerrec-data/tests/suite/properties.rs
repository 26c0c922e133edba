//! Property tests: no input file, however malformed, makes a reader panic.

use crate::common::{criteo_row, TempDir};
use proptest::prelude::*;
use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;
use towerrec_data::{
    write_binary, BadRows, BinaryDataset, CriteoReader, CsvReader, CsvSchema, Error, Record,
    RecordStream, Schema, SparseFeature, SyntheticConfig, SyntheticStream,
};

/// Bytes biased towards the characters that matter to the parsers.
fn text_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => Just(b'\t'),
            3 => Just(b'\n'),
            2 => Just(b','),
            2 => Just(b'"'),
            1 => Just(b'\r'),
            4 => b'0'..=b'9',
            3 => b'a'..=b'g',
            1 => Just(b'-'),
            2 => any::<u8>(),
        ],
        0..max,
    )
}

/// Valid Criteo lines with random bytes overwritten.
fn mutated_criteo() -> impl Strategy<Value = Vec<u8>> {
    (
        1u64..6,
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    )
        .prop_map(|(n, edits)| {
            let mut bytes: Vec<u8> = (0..n)
                .flat_map(|i| (criteo_row(i) + "\n").into_bytes())
                .collect();
            for (at, b) in edits {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            bytes
        })
}

/// Drains a stream; returns the error if one ends it. Checks every record's shape.
fn run(mut s: impl RecordStream, bad: BadRows) -> Option<Error> {
    let schema: Schema = s.schema().clone();
    for _ in 0..100_000 {
        match s.next_record() {
            Ok(Some(r)) => check(&schema, &r),
            Ok(None) => return None,
            Err(e) => {
                assert!(matches!(e, Error::Parse { .. }), "{e}");
                assert_eq!(
                    bad,
                    BadRows::Fail,
                    "Skip mode must not return row errors: {e}"
                );
                return Some(e);
            }
        }
    }
    panic!("stream did not end");
}

fn check(schema: &Schema, r: &Record) {
    assert!(schema.fits(r));
    assert!(r.label == 0.0 || r.label == 1.0);
    for (f, ids) in r.sparse.iter().enumerate() {
        assert!(ids.iter().all(|&id| id < schema.sparse[f].rows));
    }
}

fn criteo(bytes: Vec<u8>, bad: BadRows) {
    let r = CriteoReader::from_reader(Cursor::new(bytes), Path::new("p.txt"), &[97], bad).unwrap();
    run(r, bad);
}

fn csv_schema(header: bool) -> CsvSchema {
    let label = if header { "y" } else { "0" };
    let (a, b, c) = if header {
        ("a", "b", "c")
    } else {
        ("1", "2", "3")
    };
    toml::from_str(&format!(
        r#"
header = {header}
label = {{ column = "{label}", threshold = 0.5 }}
dense = [{{ column = "{a}" }}]
sparse = [{{ column = "{b}", rows = 13 }}, {{ column = "{c}", rows = 7, separator = "|" }}]
"#
    ))
    .unwrap()
}

fn csv(bytes: Vec<u8>, header: bool, bad: BadRows) {
    let mut text = if header {
        b"y,a,b,c\n".to_vec()
    } else {
        Vec::new()
    };
    text.extend(bytes);
    match CsvReader::from_reader(
        Cursor::new(text),
        Path::new("p.csv"),
        &csv_schema(header),
        bad,
    ) {
        Ok(r) => {
            run(r, bad);
        }
        Err(e) => panic!("opening with a good header failed: {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn criteo_never_panics_on_arbitrary_bytes(bytes in text_bytes(3000), skip in any::<bool>()) {
        criteo(bytes, if skip { BadRows::Skip } else { BadRows::Fail });
    }

    #[test]
    fn criteo_never_panics_on_mutated_rows(bytes in mutated_criteo(), skip in any::<bool>()) {
        criteo(bytes, if skip { BadRows::Skip } else { BadRows::Fail });
    }

    #[test]
    fn csv_never_panics_on_arbitrary_bytes(bytes in text_bytes(2000), header in any::<bool>(), skip in any::<bool>()) {
        csv(bytes, header, if skip { BadRows::Skip } else { BadRows::Fail });
    }

    #[test]
    fn csv_header_may_be_anything(bytes in text_bytes(300)) {
        // A garbage header is an error (missing columns), never a panic.
        let _ = CsvReader::from_reader(Cursor::new(bytes), Path::new("h.csv"), &csv_schema(true), BadRows::Skip)
            .map(|r| run(r, BadRows::Skip));
    }
}

/// A valid binary file to mutate, written once.
fn valid_binary() -> &'static Vec<u8> {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = TempDir::new("prop-bin-src");
        let mut cfg = SyntheticConfig::criteo_like(
            50,
            3,
            towerrec_data::PoolingFactor::Mean { mean: 2.0 },
            1.1,
        );
        cfg.num_dense = 2;
        let path = dir.path().join("v.bin");
        write_binary(
            &mut SyntheticStream::new(&cfg, 0..12).unwrap(),
            &path,
            |_| std::ops::ControlFlow::Continue(()),
        )
        .unwrap();
        std::fs::read(path).unwrap()
    })
}

/// Opens `bytes` as a binary file and, if that works, reads every row both ways.
fn binary(dir: &TempDir, bytes: &[u8]) {
    let path = dir.file("p.bin", bytes);
    if let Ok(ds) = BinaryDataset::open(&path) {
        let n = ds.len().min(1000);
        for i in 0..n {
            if let Ok(r) = ds.record(i) {
                assert!(ds.schema().fits(&r));
            }
        }
        let rows: Vec<u64> = (0..n).rev().collect();
        let _ = ds.batch(&rows);
        assert!(ds.record(n.max(ds.len())).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn binary_never_panics_on_arbitrary_bytes(mut bytes in prop::collection::vec(any::<u8>(), 0..400), magic in any::<bool>()) {
        if magic && bytes.len() >= 16 {
            bytes[..8].copy_from_slice(b"TRECBIN1");
        }
        binary(&TempDir::new("prop-bin"), &bytes);
    }

    #[test]
    fn binary_never_panics_on_mutated_files(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = valid_binary().clone();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        binary(&TempDir::new("prop-binmut"), &bytes);
    }

    #[test]
    fn binary_round_trips_arbitrary_records(
        recs in prop::collection::vec(
            (any::<bool>(), prop::collection::vec(-1e6f32..1e6, 2), prop::collection::vec(prop::collection::vec(0u64..9, 0..5), 3)),
            0..40,
        )
    ) {
        let schema = Schema {
            dense: vec!["a".into(), "b".into()],
            sparse: (0..3).map(|k| SparseFeature { name: format!("f{k}"), rows: 9 }).collect(),
        };
        let dir = TempDir::new("prop-rt");
        let path = dir.path().join("rt.bin");
        let mut w = towerrec_data::BinaryWriter::create(&path, schema).unwrap();
        let records: Vec<Record> = recs
            .into_iter()
            .map(|(l, dense, sparse)| Record { label: if l { 1.0 } else { 0.0 }, dense, sparse })
            .collect();
        for r in &records {
            w.write(r).unwrap();
        }
        prop_assert_eq!(w.finish().unwrap(), records.len() as u64);
        let ds = BinaryDataset::open(&path).unwrap();
        for (i, r) in records.iter().enumerate() {
            prop_assert_eq!(&ds.record(i as u64).unwrap(), r);
        }
    }
}
