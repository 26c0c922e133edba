//! The binary format, read from memory: valid files (written by the writer) mutated
//! anywhere, with header numbers replaced by arbitrary ones (sizes the file cannot
//! hold must be refused before anything is allocated for them), and arbitrary bytes
//! after the magic.

use super::check;
use super::common::TempDir;
use proptest::prelude::*;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use towerrec_data::binary::MAGIC;
use towerrec_data::{
    write_binary, BinaryDataset, BinaryStream, CriteoReader, PoolingFactor, RecordStream,
    SyntheticConfig, SyntheticStream,
};
use towerrec_fuzz::{config, mutated};

const TOKENS: &[&[u8]] = &[
    b"TRECBIN1",
    b"TRECBIN2",
    b"\"layout\":[]",
    b"{\"id_bytes\":4,\"offsets\":false}",
    b"{\"id_bytes\":8,\"offsets\":true}",
    b"\"offsets\":true",
    b"\"offsets\":false",
    b"\"id_bytes\":3",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"0",
    b"1",
    b"-1",
    b"1e999",
    b"null",
    b"18446744073709551615",
    b"18446744073709551616",
    b"4294967296",
    b"\"num_rows\":",
    b"\"nnz\":[]",
    b"\"rows\":0",
    b"\"dense\":[]",
    b"\0\0\0\0\0\0\0\0",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\0\0\xc0\x7f",
    b"\0\0\0\x40",
];

/// Valid files: synthetic multi-hot with dense features, no dense, one row, Criteo
/// (the writer refuses an empty file; zero rows come from mutating `num_rows`).
fn seeds() -> Vec<Vec<u8>> {
    let dir = TempDir::new("fuzz-bin-seeds");
    let write = |name: &str, s: &mut dyn towerrec_data::RecordStream| {
        let path = dir.path().join(name);
        write_binary(s, &path, |_| ControlFlow::Continue(())).unwrap();
        std::fs::read(path).unwrap()
    };
    let synthetic = |dense: usize, rows: u64| {
        let mut c = SyntheticConfig::criteo_like(40, 3, PoolingFactor::Mean { mean: 2.0 }, 1.1);
        c.num_dense = dense;
        SyntheticStream::new(&c, 0..rows).unwrap()
    };
    let criteo = (0..5)
        .map(|i| super::common::criteo_row(i) + "\n")
        .collect::<String>();
    let criteo_reader = |rows: u64| {
        CriteoReader::from_reader(
            std::io::Cursor::new(criteo.clone().into_bytes()),
            Path::new("c.tsv"),
            &[rows],
            towerrec_data::BadRows::Fail,
        )
        .unwrap()
    };
    // Version 1 (still read), and version 2 with one-id features and 8-byte ids.
    let mut syn = synthetic(2, 6);
    let v1 = super::common::v1_file(&syn.schema().clone(), &super::common::drain(&mut syn));
    let mut seeds = vec![
        v1,
        write("e.bin", &mut criteo_reader(1 << 33)),
        write("f.bin", &mut criteo_reader(7)),
    ];
    seeds.extend([
        write("a.bin", &mut synthetic(2, 12)),
        write("b.bin", &mut synthetic(0, 5)),
        write("c.bin", &mut synthetic(1, 1)),
        write(
            "d.bin",
            &mut CriteoReader::from_reader(
                std::io::Cursor::new(criteo.into_bytes()),
                Path::new("c.tsv"),
                &[50],
                towerrec_data::BadRows::Fail,
            )
            .unwrap(),
        ),
    ]);
    seeds
}

/// Replaces the `which`-th number of the header JSON with `value`, padding with spaces
/// to keep the header's length where the new number is shorter (so the file stays
/// consistent in size and the number itself is what is tested).
fn replace_number(mut bytes: Vec<u8>, which: usize, value: u64) -> Vec<u8> {
    let header_len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let header = 16..16 + header_len;
    let mut numbers = Vec::new();
    let mut i = header.start;
    while i < header.end {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < header.end && bytes[i].is_ascii_digit() {
                i += 1;
            }
            numbers.push(start..i);
        } else {
            i += 1;
        }
    }
    if numbers.is_empty() {
        return bytes;
    }
    let r = numbers[which % numbers.len()].clone();
    let mut new = value.to_string().into_bytes();
    if new.len() < r.len() {
        new.resize(r.len(), b' ');
    }
    let grown = new.len() - r.len();
    bytes.splice(r, new);
    let len = (header_len + grown) as u64;
    bytes[8..16].copy_from_slice(&len.to_le_bytes());
    bytes
}

fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..64,
        Just(u64::MAX),
        Just(u64::MAX / 4),
        Just(u64::MAX / 8 + 1),
        Just(1 << 32),
        Just(1 << 40),
        any::<u64>(),
    ]
}

/// Opens `bytes`; if that works, reads every row every way, checking each record.
fn read(bytes: Vec<u8>) {
    let len = bytes.len() as u64;
    let Ok(ds) = BinaryDataset::from_bytes(bytes, Path::new("f.bin")) else {
        return;
    };
    // Every row holds at least its label (4 bytes in version 1, 1 in version 2).
    let label_bytes = if ds.version() == 1 { 4 } else { 1 };
    assert!(
        ds.len() <= len / label_bytes,
        "{} rows in {len} bytes",
        ds.len()
    );
    let schema = ds.schema().clone();
    for i in 0..ds.len() {
        if let Ok(r) = ds.record(i) {
            check(&schema, &r);
        }
    }
    assert!(ds.record(ds.len()).is_err());
    let all: Vec<u64> = (0..ds.len()).rev().collect();
    if let Ok(b) = ds.batch(&all) {
        assert_eq!(b.labels.len(), all.len());
    }
    let ds = Arc::new(ds);
    let mut s = BinaryStream::new(ds, 0..u64::MAX);
    let _ = super::drain(&mut s, len as usize + 1);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn binary_reader(
        bytes in prop_oneof![
            3 => mutated(seeds(), TOKENS, 4096),
            2 => (prop::sample::select(seeds()), any::<usize>(), extreme())
                .prop_map(|(b, which, v)| replace_number(b, which, v)),
            1 => (prop::collection::vec(any::<u8>(), 0..600), extreme()).prop_map(|(mut b, h)| {
                // The magic, a header length, then anything.
                b.splice(0..0, MAGIC.iter().copied().chain(h.to_le_bytes()));
                b
            }),
        ],
    ) {
        read(bytes);
    }
}
