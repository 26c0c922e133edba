//! The vocabulary file reader ([`towerrec_data::vocab::read_bytes`]): valid files
//! mutated anywhere (the safetensors header, the metadata JSON, the key and count
//! tensors) and arbitrary bytes. It returns a vocabulary whose every claim holds, or
//! an error naming the file; it never panics or allocates beyond the guard's limits.

use proptest::prelude::*;
use std::collections::HashSet;
use std::path::Path;
use towerrec_data::vocab::{self, read_bytes, VocabOptions};
use towerrec_data::{Record, RecordStream, Result, Schema, SparseFeature};
use towerrec_fuzz::{arbitrary, config, mutated};

const TOKENS: &[&[u8]] = &[
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
    b"null",
    b"18446744073709551615",
    b"18446744073709551616",
    b"\"U64\"",
    b"\"F32\"",
    b"\"U8\"",
    b"\"shape\":[]",
    b"\"shape\":[1,1]",
    b"\"data_offsets\":[0,0]",
    b"\\\"min_count\\\":0",
    b"\\\"max_rows\\\":1",
    b"\\\"format_version\\\":2",
    b"\\\"kind\\\":\\\"sketch\\\"",
    b"\0\0\0\0\0\0\0\0",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
];

struct Keys(Schema, std::vec::IntoIter<Vec<Vec<u64>>>);

impl RecordStream for Keys {
    fn schema(&self) -> &Schema {
        &self.0
    }
    fn next_record(&mut self) -> Result<Option<Record>> {
        Ok(self.1.next().map(|sparse| Record {
            label: 0.0,
            dense: vec![],
            sparse,
        }))
    }
    fn skipped(&self) -> u64 {
        0
    }
}

/// Valid files: two features (one multi-hot), one feature with an empty vocabulary,
/// a capped one.
fn seeds() -> Vec<Vec<u8>> {
    let build = |features: usize, rows: Vec<Vec<Vec<u64>>>, min_count, max_rows| {
        let schema = Schema {
            dense: vec![],
            sparse: (0..features)
                .map(|i| SparseFeature {
                    name: format!("C{i}"),
                    rows: u64::MAX,
                })
                .collect(),
        };
        let opts = VocabOptions {
            min_count,
            max_rows,
            sketch: None,
        };
        vocab::build(&mut Keys(schema, rows.into_iter()), &opts, |_| {})
            .unwrap()
            .to_bytes()
            .unwrap()
    };
    vec![
        build(
            2,
            vec![
                vec![vec![1, 2], vec![u64::MAX]],
                vec![vec![2], vec![7]],
                vec![vec![3], vec![7]],
            ],
            1,
            None,
        ),
        build(1, vec![vec![vec![5]]], 2, None),
        build(1, (0..20).map(|i| vec![vec![i % 7]]).collect(), 1, Some(4)),
    ]
}

fn check(bytes: Vec<u8>) {
    let Ok(v) = read_bytes(&bytes, Path::new("v.vocab")) else {
        return;
    };
    assert_eq!(v.features.len(), v.info.features.len());
    for f in &v.features {
        assert_eq!(f.keys.len(), f.counts.len());
        let distinct: HashSet<u64> = f.keys.iter().copied().collect();
        assert_eq!(distinct.len(), f.keys.len(), "{f:?}");
        assert!(f.counts.iter().all(|&c| c >= v.info.min_count));
        assert!(v.info.max_rows.is_none_or(|m| f.rows() <= m));
    }
    let ids = v.ids();
    for (f, e) in v.features.iter().zip(&ids) {
        assert_eq!(e.rows(), f.rows());
        for (i, &k) in f.keys.iter().enumerate() {
            assert_eq!(e.id(k), i as u64 + 1);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn vocab_reader(
        bytes in prop_oneof![
            4 => mutated(seeds(), TOKENS, 4096),
            1 => arbitrary(b"{}[]\":,0123456789abcdefU\0\xff", 600),
        ],
    ) {
        check(bytes);
    }
}

#[test]
fn errors_name_the_file() {
    for bytes in [b"".to_vec(), b"\x08\0\0\0\0\0\0\0{}      ".to_vec()] {
        let e = read_bytes(&bytes, Path::new("v.vocab"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("v.vocab: "), "{e}");
    }
    for seed in seeds() {
        check(seed);
    }
}
