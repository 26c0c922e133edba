//! The Parquet reader, on valid files (written by the Arrow writer, snappy, several row
//! groups, dictionary-encoded strings and list columns) mutated anywhere, and on
//! arbitrary bytes between the `PAR1` magics. The Parquet decoder is the `parquet`
//! crate's; whatever it makes of the bytes, the reader yields records that fit the
//! schema or an error.

use super::common::{click_log, write_parquet, TempDir, CLICK_LOG_COLUMNS};
use bytes::Bytes;
use proptest::prelude::*;
use std::path::Path;
use towerrec_data::{next_batch, BadRows, ParquetReader, ParquetSchema, RecordStream};
use towerrec_fuzz::{config, mutated};

const TOKENS: &[&[u8]] = &[
    b"PAR1",
    b"\0\0\0\0",
    b"\xff\xff\xff\xff",
    b"\xff\xff\xff\x7f",
    b"\x15\x00",
    b"\x15\x02",
    b"\x19\x1c",
    b"\x16\x80\x80\x80\x80\x10",
    b"\x01\x00\x00\x00",
];

/// Valid files: 40 rows in groups of 16, and 5 rows in one group.
fn seeds() -> Vec<Vec<u8>> {
    let dir = TempDir::new("fuzz-pq-seeds");
    [(40, 16), (5, 100)]
        .into_iter()
        .map(|(rows, group)| {
            let path = dir.path().join("s.parquet");
            write_parquet(&path, &click_log(rows).0, group);
            std::fs::read(path).unwrap()
        })
        .collect()
}

/// Opens `bytes`; if that works, reads every row, by records and by batches.
fn read(bytes: Vec<u8>, bad: BadRows) {
    let schema: ParquetSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    let bytes = Bytes::from(bytes);
    let name = Path::new("f.parquet");
    let Ok(mut r) = ParquetReader::from_bytes(bytes.clone(), name, &schema, bad) else {
        return;
    };
    let rows = r.rows();
    let s = r.schema().clone();
    if let Ok(n) = super::drain(&mut r, 1 << 20) {
        assert!(n as u64 <= rows, "{n} records from {rows} rows");
    }
    let mut r = ParquetReader::from_bytes(bytes, name, &schema, bad).unwrap();
    for _ in 0..1 << 10 {
        match next_batch(&mut r, 7) {
            Ok(Some(b)) => {
                assert_eq!(b.num_dense, s.num_dense());
                assert!(b.labels.iter().all(|&y| y == 0.0 || y == 1.0));
                assert!(b.dense.iter().all(|x| x.is_finite()));
                for (f, t) in s.sparse.iter().enumerate() {
                    let v = b.sparse.feature(f);
                    assert!((0..v.batch_size()).all(|i| v.ids(i).iter().all(|&id| id < t.rows)));
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parquet_reader(
        bytes in prop_oneof![
            4 => mutated(seeds(), TOKENS, 256),
            1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(|mut b| {
                b.splice(0..0, *b"PAR1");
                b.extend_from_slice(&(b.len() as u32 / 2).to_le_bytes());
                b.extend_from_slice(b"PAR1");
                b
            }),
        ],
        bad in prop_oneof![Just(BadRows::Fail), Just(BadRows::Skip)],
    ) {
        read(bytes, bad);
    }
}
