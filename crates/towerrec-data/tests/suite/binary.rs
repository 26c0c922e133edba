//! The preprocessed binary format: round trips, gathering, corrupt files.

use crate::common;

use crate::common::{drain, TempDir};
use std::sync::Arc;
use towerrec_data::binary::is_binary_file;
use towerrec_data::{
    next_batch, write_binary, BinaryDataset, BinaryStream, BinaryWriter, Error, PoolingFactor,
    RecordStream, RowSelect, SyntheticConfig, SyntheticStream,
};

fn synthetic() -> SyntheticConfig {
    let mut c = SyntheticConfig::criteo_like(500, 4, PoolingFactor::Mean { mean: 3.0 }, 1.1);
    c.num_dense = 5;
    c.seed = 9;
    c
}

/// Writes `n` synthetic records to `dir/name` and returns the path and the records.
fn write(dir: &TempDir, name: &str, n: u64) -> (std::path::PathBuf, Vec<towerrec_data::Record>) {
    let cfg = synthetic();
    let path = dir.path().join(name);
    let mut calls = Vec::new();
    let rows = write_binary(&mut SyntheticStream::new(&cfg, 0..n).unwrap(), &path, |k| {
        calls.push(k);
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(rows, n);
    assert_eq!(calls, (1..=n).collect::<Vec<_>>());
    let records = drain(&mut SyntheticStream::new(&cfg, 0..n).unwrap());
    (path, records)
}

#[test]
fn round_trip_reads_back_identical_records() {
    let dir = TempDir::new("bin-rt");
    let (path, records) = write(&dir, "syn.bin", 257);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec!["syn.bin"], "no spool or tmp files remain");
    assert!(is_binary_file(&path).unwrap());
    let ds = Arc::new(BinaryDataset::open(&path).unwrap());
    assert_eq!(ds.len(), 257);
    assert_eq!(ds.schema(), &synthetic().schema().unwrap());
    for (i, r) in records.iter().enumerate() {
        assert_eq!(&ds.record(i as u64).unwrap(), r);
    }
    assert_eq!(
        drain(&mut BinaryStream::new(Arc::clone(&ds), 0..u64::MAX)),
        records
    );
    assert_eq!(
        drain(&mut BinaryStream::new(Arc::clone(&ds), 250..300)),
        records[250..]
    );
    let eval = RowSelect::Hashed {
        seed: 1,
        fraction: 0.3,
        inside: true,
    };
    let train = RowSelect::Hashed {
        seed: 1,
        fraction: 0.3,
        inside: false,
    };
    let e = drain(&mut BinaryStream::with_rows(Arc::clone(&ds), eval)).len();
    let t = drain(&mut BinaryStream::with_rows(Arc::clone(&ds), train)).len();
    assert_eq!(e + t, 257);
    assert!(e > 40 && t > 140, "{e} {t}");
}

#[test]
fn batch_of_arbitrary_rows_matches_records() {
    let dir = TempDir::new("bin-batch");
    let (path, records) = write(&dir, "b.bin", 100);
    let ds = BinaryDataset::open(&path).unwrap();
    let rows = [99u64, 3, 3, 50, 0];
    let b = ds.batch(&rows).unwrap();
    assert_eq!(b.batch_size(), rows.len());
    assert_eq!(b.num_dense, 5);
    for (k, &i) in rows.iter().enumerate() {
        let r = &records[i as usize];
        assert_eq!(b.labels[k], r.label);
        assert_eq!(&b.dense[k * 5..(k + 1) * 5], &r.dense[..]);
        for f in 0..4 {
            assert_eq!(b.sparse.feature(f).ids(k), &r.sparse[f][..]);
        }
    }
    // The same batch through the streaming path.
    let mut s = BinaryStream::new(Arc::new(ds), 0..100);
    let first = next_batch(&mut s, 2).unwrap().unwrap();
    assert_eq!(first.labels, vec![records[0].label, records[1].label]);
    assert!(BinaryDataset::open(&path).unwrap().batch(&[100]).is_err());
}

#[test]
fn empty_files_and_overwrites_work() {
    let dir = TempDir::new("bin-empty");
    // Converting an empty stream is an error that leaves nothing behind ...
    let path = dir.path().join("e.bin");
    let e = write_binary(
        &mut SyntheticStream::new(&synthetic(), 0..0).unwrap(),
        &path,
        |_| std::ops::ControlFlow::Continue(()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("the input yielded no rows"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // ... but the writer itself can make an empty file, which reads as empty.
    let cfg = synthetic();
    let stream = SyntheticStream::new(&cfg, 0..0).unwrap();
    BinaryWriter::create(&path, stream.schema().clone())
        .unwrap()
        .finish()
        .unwrap();
    let ds = BinaryDataset::open(&path).unwrap();
    assert!(ds.is_empty());
    assert!(drain(&mut BinaryStream::new(Arc::new(ds), 0..10)).is_empty());
    // Writing again replaces the file atomically.
    let (path, records) = write(&dir, "e.bin", 3);
    assert_eq!(
        BinaryDataset::open(&path).unwrap().record(2).unwrap(),
        records[2]
    );
}

#[test]
fn an_interrupted_conversion_removes_its_partial_output() {
    let dir = TempDir::new("bin-interrupt");
    let path = dir.path().join("i.bin");
    let e = write_binary(
        &mut SyntheticStream::new(&synthetic(), 0..100).unwrap(),
        &path,
        |n| {
            if n == 10 {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Interrupted { .. }), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn truncated_and_corrupt_files_are_format_errors() {
    let dir = TempDir::new("bin-corrupt");
    let (path, _) = write(&dir, "c.bin", 20);
    let bytes = std::fs::read(&path).unwrap();
    let target = dir.path().join("x.bin");
    let expect_format = |data: &[u8], what: &str| {
        std::fs::write(&target, data).unwrap();
        match BinaryDataset::open(&target) {
            Err(Error::Format { message, .. }) => message,
            Err(e) => panic!("{what}: wrong error {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    };
    for cut in [0, 7, 15, 16, 40, bytes.len() / 2, bytes.len() - 1] {
        expect_format(&bytes[..cut], &format!("cut at {cut}"));
    }
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 8]);
    assert!(expect_format(&longer, "padded").contains("bytes"));
    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(expect_format(&magic, "magic").contains("magic"));
    let mut version = bytes.clone();
    version[7] = b'9';
    assert!(expect_format(&version, "version").contains("version"));
    let mut hlen = bytes.clone();
    hlen[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_format(&hlen, "header length");
    let mut json = bytes.clone();
    json[17] = b'!';
    assert!(expect_format(&json, "json").contains("header"));

    // Corrupt offsets surface when the row is read, not as a panic.
    let ds = BinaryDataset::open(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    // Version 2: u8 labels, then the dense values, then the first feature's offsets
    // (multi-hot, so it has them).
    let sections = (16 + header_len).div_ceil(8) * 8 + 20usize.div_ceil(8) * 8 + 20 * 5 * 4;
    let mut bad = bytes.clone();
    bad[sections + 8..sections + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&target, &bad).unwrap();
    let corrupt = BinaryDataset::open(&target).unwrap();
    assert!(matches!(corrupt.record(0), Err(Error::Format { .. })));
    assert!(corrupt.batch(&[0, 1]).is_err());
    assert!(ds.record(0).is_ok());
    assert!(!is_binary_file(&dir.path().join("missing.bin")).is_ok_and(|b| b));
}

#[test]
fn writer_rejects_records_that_do_not_fit_the_schema() {
    let dir = TempDir::new("bin-writer");
    let schema = synthetic().schema().unwrap();
    let mut w = BinaryWriter::create(&dir.path().join("w.bin"), schema).unwrap();
    let bad = towerrec_data::Record {
        label: 1.0,
        dense: vec![0.0],
        sparse: vec![],
    };
    assert!(w.write(&bad).is_err());
    let mut good = drain(&mut SyntheticStream::new(&synthetic(), 0..1).unwrap()).remove(0);
    w.write(&good).unwrap();
    good.sparse[0] = vec![500];
    assert!(matches!(w.write(&good), Err(Error::Core(_))));
    assert_eq!(w.finish().unwrap(), 1);
}

/// Any feature mix (docs/CONFIG.md): synthetic data without dense features, or without
/// tables, is generated, batched, and round-trips through the binary format.
#[test]
fn data_without_dense_or_without_sparse_features_round_trips() {
    let dir = TempDir::new("bin-mix");
    let mut no_dense = synthetic();
    no_dense.num_dense = 0;
    let mut no_sparse = synthetic();
    no_sparse.tables.clear();
    for (name, cfg, dense, sparse) in [
        ("no-dense.bin", no_dense, 0, 4),
        ("no-sparse.bin", no_sparse, 5, 0),
    ] {
        let schema = cfg.schema().unwrap();
        assert_eq!((schema.dense.len(), schema.sparse.len()), (dense, sparse));
        let n = 300;
        let records = drain(&mut SyntheticStream::new(&cfg, 0..n).unwrap());
        assert!(records
            .iter()
            .all(|r| r.dense.len() == dense && r.sparse.len() == sparse));
        // Labels keep the target rate (0.25) whatever features carry the signal.
        let positives = records.iter().filter(|r| r.label > 0.5).count() as f64;
        assert!(
            (positives / n as f64 - 0.25).abs() < 0.08,
            "{name}: {positives}"
        );
        let mut stream = SyntheticStream::new(&cfg, 0..n).unwrap();
        let b = next_batch(&mut stream, 7).unwrap().unwrap();
        assert_eq!(
            (b.batch_size(), b.num_dense, b.dense.len()),
            (7, dense, 7 * dense)
        );

        let path = dir.path().join(name);
        let rows = write_binary(
            &mut SyntheticStream::new(&cfg, 0..n).unwrap(),
            &path,
            |_| std::ops::ControlFlow::Continue(()),
        )
        .unwrap();
        assert_eq!(rows, n);
        let ds = Arc::new(BinaryDataset::open(&path).unwrap());
        assert_eq!(ds.schema(), &schema);
        assert_eq!(
            drain(&mut BinaryStream::new(Arc::clone(&ds), 0..u64::MAX)),
            records,
            "{name}"
        );
        let b = ds.batch(&[5, 0, 299]).unwrap();
        assert_eq!((b.batch_size(), b.num_dense), (3, dense), "{name}");
        assert_eq!(
            b.labels,
            vec![records[5].label, records[0].label, records[299].label]
        );
    }
}

/// Records of `schema` with ids from `id(row, feature)`, one per row in features below
/// `one_id`, none or several in the others.
fn records_with(
    schema: &towerrec_data::Schema,
    id: impl Fn(u64, usize) -> u64,
) -> Vec<towerrec_data::Record> {
    (0..9u64)
        .map(|i| towerrec_data::Record {
            label: (i % 2) as f32,
            dense: (0..schema.dense.len())
                .map(|k| i as f32 + k as f32)
                .collect(),
            sparse: (0..schema.sparse.len())
                .map(|f| match f {
                    0 => vec![id(i, f)],
                    _ => (0..i % 3).map(|k| id(i + k, f)).collect(),
                })
                .collect(),
        })
        .collect()
}

fn schema_with(rows: u64) -> towerrec_data::Schema {
    towerrec_data::Schema {
        dense: vec!["d".into()],
        sparse: ["one", "multi"]
            .iter()
            .map(|n| towerrec_data::SparseFeature {
                name: n.to_string(),
                rows,
            })
            .collect(),
    }
}

#[test]
fn version_1_files_are_still_read() {
    let dir = TempDir::new("bin-v1");
    let schema = schema_with(1000);
    let records = records_with(&schema, |i, f| i * 37 + f as u64);
    let path = dir.file("old.bin", common::v1_file(&schema, &records));
    assert!(is_binary_file(&path).unwrap());
    let ds = BinaryDataset::open(&path).unwrap();
    assert_eq!(ds.version(), 1);
    assert_eq!(ds.schema(), &schema);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(&ds.record(i as u64).unwrap(), r);
    }
    let b = ds.batch(&[3, 1]).unwrap();
    assert_eq!(b.labels, vec![1.0, 1.0]);
    assert_eq!(b.sparse.feature(0).ids(0), &[3 * 37]);
}

#[test]
fn one_id_features_have_no_offsets_and_ids_take_4_or_8_bytes() {
    let dir = TempDir::new("bin-v2");
    for (rows, id_bytes) in [(1000u64, 4usize), (1 << 32, 4), ((1 << 32) + 1, 8)] {
        let schema = schema_with(rows);
        let records = records_with(&schema, |i, f| (rows - 1).wrapping_sub(i * 37 + f as u64));
        let path = dir.path().join(format!("v2-{rows}.bin"));
        let mut w = BinaryWriter::create(&path, schema.clone()).unwrap();
        for r in &records {
            w.write(r).unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"TRECBIN2");
        let header_len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let header: serde_json::Value =
            serde_json::from_slice(&bytes[16..16 + header_len]).unwrap();
        assert_eq!(header["version"], 2);
        assert_eq!(header["layout"][0]["offsets"], false);
        assert_eq!(header["layout"][1]["offsets"], true);
        assert_eq!(header["layout"][0]["id_bytes"], id_bytes);
        let nnz1: usize = records.iter().map(|r| r.sparse[1].len()).sum();
        // Labels (9 bytes, padded), dense, one id per row, then offsets and ids.
        let want = (16 + header_len).next_multiple_of(8)
            + 16
            + (9 * 4usize).next_multiple_of(8)
            + (9 * id_bytes).next_multiple_of(8)
            + 10 * 8
            + (nnz1 * id_bytes).next_multiple_of(8);
        assert_eq!(bytes.len(), want, "rows {rows}");
        let ds = BinaryDataset::open(&path).unwrap();
        assert_eq!(ds.version(), 2);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(&ds.record(i as u64).unwrap(), r);
        }
        let all: Vec<u64> = (0..9).rev().collect();
        let b = ds.batch(&all).unwrap();
        for (k, &i) in all.iter().enumerate() {
            assert_eq!(
                b.sparse.feature(1).ids(k),
                &records[i as usize].sparse[1][..]
            );
        }
    }
}

#[test]
fn a_truncated_version_2_file_is_an_error_naming_it() {
    let dir = TempDir::new("bin-v2-cut");
    let (path, _) = write(&dir, "c.bin", 30);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.file("cut.bin", &bytes[..bytes.len() - 5]);
    let e = BinaryDataset::open(&cut).unwrap_err().to_string();
    assert!(e.starts_with(&cut.display().to_string()), "{e}");
    assert!(e.contains("truncated or corrupt"), "{e}");
    let mut future = bytes.clone();
    future[7] = b'3';
    let e = BinaryDataset::from_bytes(future, std::path::Path::new("f.bin"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("version \"3\"") && e.contains("towerrec preprocess"),
        "{e}"
    );
}

#[test]
fn blocks_and_records_write_the_same_file() {
    let dir = TempDir::new("bin-blocks");
    let schema = schema_with(1000);
    // The multi-valued feature has one id in its first rows, so offsets start mid-way.
    let mut records = records_with(&schema, |i, f| i * 11 + f as u64);
    for r in &mut records[..4] {
        r.sparse[1] = vec![5];
    }
    let by_record = dir.path().join("r.bin");
    let mut w = BinaryWriter::create(&by_record, schema.clone()).unwrap();
    for r in &records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    for split in [1, 3, 5, 9] {
        let by_block = dir.path().join(format!("b{split}.bin"));
        let mut w = BinaryWriter::create(&by_block, schema.clone()).unwrap();
        for chunk in records.chunks(split) {
            let mut b = towerrec_data::RecordBlock::new(1, 2);
            chunk.iter().for_each(|r| b.push_record(r));
            w.write_block(&b).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(
            std::fs::read(&by_block).unwrap(),
            std::fs::read(&by_record).unwrap(),
            "blocks of {split}"
        );
    }
}

#[test]
fn a_bad_block_fails_as_its_first_bad_record_and_writes_nothing() {
    let dir = TempDir::new("bin-bad-block");
    let schema = schema_with(100);
    let good = records_with(&schema, |i, f| i * 3 + f as u64);
    // Row 5 has an id past its table in the second feature, row 7 a bad label: the
    // block fails as writing row 5 alone does.
    let mut bad = good.clone();
    bad[5].sparse[1] = vec![1, 100];
    bad[7].label = 0.5;
    let first_error = |records: &[towerrec_data::Record]| {
        let mut w = BinaryWriter::create(&dir.path().join("r.bin"), schema.clone()).unwrap();
        records
            .iter()
            .find_map(|r| w.write(r).err())
            .unwrap()
            .to_string()
    };
    let block_of = |records: &[towerrec_data::Record]| {
        let mut b = towerrec_data::RecordBlock::new(1, 2);
        records.iter().for_each(|r| b.push_record(r));
        b
    };
    let out = dir.path().join("b.bin");
    let mut w = BinaryWriter::create(&out, schema.clone()).unwrap();
    w.write_block(&block_of(&good[..3])).unwrap();
    let e = w.write_block(&block_of(&bad)).unwrap_err().to_string();
    assert_eq!(e, first_error(&bad));
    assert!(e.contains("100"), "{e}");
    // Only the bad label left: the label's error, naming its row.
    bad[5] = good[5].clone();
    let e = w.write_block(&block_of(&bad)).unwrap_err().to_string();
    assert!(e.contains("row 10") && e.contains("not 0 or 1"), "{e}");
    // The failed blocks left nothing behind: the file holds the first block's rows.
    w.write_block(&block_of(&good[3..])).unwrap();
    assert_eq!(w.finish().unwrap(), 9);
    let mut whole = BinaryWriter::create(&dir.path().join("w.bin"), schema.clone()).unwrap();
    whole.write_block(&block_of(&good)).unwrap();
    whole.finish().unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(dir.path().join("w.bin")).unwrap()
    );
}

/// A stream's records alone (no batch path), for `next_batch` to assemble.
struct Records(BinaryStream);

impl RecordStream for Records {
    fn schema(&self) -> &towerrec_data::Schema {
        self.0.schema()
    }
    fn next_record(&mut self) -> towerrec_data::Result<Option<towerrec_data::Record>> {
        self.0.next_record()
    }
    fn skipped(&self) -> u64 {
        0
    }
}

#[test]
fn binary_stream_batches_equal_batches_of_its_records() {
    let dir = TempDir::new("bin-batches");
    let (path, _) = write(&dir, "b.bin", 50);
    let ds = Arc::new(BinaryDataset::open(&path).unwrap());
    let selects = [
        RowSelect::All,
        RowSelect::Range(7..31),
        RowSelect::Hashed {
            seed: 3,
            fraction: 0.4,
            inside: true,
        },
    ];
    for select in selects {
        for n in [1, 7, 64] {
            let mut want = Records(BinaryStream::with_rows(Arc::clone(&ds), select.clone()));
            let mut got = BinaryStream::with_rows(Arc::clone(&ds), select.clone());
            loop {
                let w = next_batch(&mut want, n).unwrap();
                let g = next_batch(&mut got, n).unwrap();
                assert_eq!(format!("{g:?}"), format!("{w:?}"), "{select:?} {n}");
                if w.is_none() {
                    break;
                }
            }
        }
    }
}
