//! Fuzzing the request parser (docs/SERVING.md, "Requests"): `RequestParser::parse` on
//! mutated valid bodies (JSON rows and Criteo and CSV lines) and on arbitrary bytes.
//! Whatever the body, it returns a batch of 1 to the row limit with the model's
//! features, or an error that maps to a 4xx; it never panics, hangs or allocates beyond
//! the guard's limits. Run long with
//! `PROPTEST_CASES=1000000 cargo test --release -p towerrec-serve --test fuzz`.

use proptest::prelude::*;
use std::path::Path;
use towerrec_data::csv_schema::{DenseColumn, DenseTransform, LabelSpec, SparseColumn};
use towerrec_data::{CsvSchema, DataConfig, RowEncoder, Split};
use towerrec_fuzz::{arbitrary, config, mutated, AllocGuard};
use towerrec_serve::request::{BodyKind, RequestParser};

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

const MAX_ROWS: usize = 16;

fn criteo() -> RequestParser {
    let cfg = DataConfig::Criteo {
        path: "unused".into(),
        eval_path: None,
        table_rows: vec![101],
        vocab: None,
        split: Split::None,
    };
    RequestParser::new(RowEncoder::new(&cfg, Path::new(".")).unwrap())
}

fn csv() -> RequestParser {
    let schema = CsvSchema {
        delimiter: ',',
        header: true,
        label: LabelSpec {
            column: "y".into(),
            positive: vec![],
            threshold: None,
        },
        dense: vec![DenseColumn {
            column: "d".into(),
            transform: DenseTransform::Log1p,
            fill: 0.0,
        }],
        sparse: vec![
            SparseColumn {
                column: "a".into(),
                rows: Some(10),
                separator: None,
                name: None,
            },
            SparseColumn {
                column: "t".into(),
                rows: Some(10),
                separator: Some('|'),
                name: None,
            },
        ],
    };
    let cfg = DataConfig::Csv {
        path: "unused".into(),
        eval_path: None,
        schema,
        vocab: None,
        split: Split::None,
    };
    RequestParser::new(RowEncoder::new(&cfg, Path::new(".")).unwrap())
}

fn criteo_line(r: usize) -> String {
    let dense = (1..=13).map(|i| ((i * 7 + r) % 50).to_string());
    let sparse = (1..=26).map(|i| format!("{:x}", i * 977 + r));
    std::iter::once("1".to_string())
        .chain(dense)
        .chain(sparse)
        .collect::<Vec<_>>()
        .join("\t")
}

fn criteo_json(r: usize) -> String {
    let dense = (1..=13).map(|i| format!("\"I{i}\": {}", (i * 7 + r) % 50));
    let sparse = (1..=26).map(|i| format!("\"C{i}\": \"{:x}\"", i * 977 + r));
    format!("{{{}}}", dense.chain(sparse).collect::<Vec<_>>().join(", "))
}

fn seeds() -> Vec<Vec<u8>> {
    let lines: Vec<String> = (0..3).map(criteo_line).collect();
    let rows: Vec<String> = (0..3).map(criteo_json).collect();
    vec![
        (lines.join("\n") + "\n").into_bytes(),
        format!("{{\"rows\": [{}]}}", rows.join(", ")).into_bytes(),
        b"y,d,a,t\n1,3,x,p|q\n0,,\"y,z\",\n".to_vec(),
        br#"{"rows": [{"d": 3, "a": "x", "t": ["p", "q"]}, {"d": null, "a": "y", "t": []}]}"#
            .to_vec(),
    ]
}

const TOKENS: &[&[u8]] = &[
    b"\t",
    b"\n",
    b"\r",
    b",",
    b"\"",
    b"|",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b"null",
    b"1e999",
    b"-1",
    b"\"rows\"",
    b"\"I1\"",
    b"\"C26\"",
    b"\"a\"",
    b"\"t\"",
    b"ffffffffffffffffff",
    b"\xff\xfe",
    b"\\u0000",
    b"18446744073709551616",
];

fn check(body: &[u8]) {
    for parser in [criteo(), csv()] {
        for kind in [BodyKind::Json, BodyKind::Lines] {
            match parser.parse(kind, body, MAX_ROWS) {
                Ok(batch) => {
                    let schema = parser.encoder().schema();
                    assert!((1..=MAX_ROWS).contains(&batch.batch_size()));
                    assert_eq!(batch.num_dense, schema.num_dense());
                    assert_eq!(batch.sparse.keys(), schema.sparse_names());
                    for (f, feature) in schema.sparse.iter().enumerate() {
                        let ids = batch.sparse.feature(f).values;
                        assert!(ids.iter().all(|&id| id < feature.rows));
                    }
                }
                Err(e) => {
                    assert!(e.status().is_client_error(), "{e} is not a 4xx");
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_bodies_parse_or_fail_with_a_client_error(body in mutated(seeds(), TOKENS, 1 << 12)) {
        check(&body);
    }

    #[test]
    fn arbitrary_bytes_parse_or_fail_with_a_client_error(
        body in arbitrary(b"{}[]\":,0123456789abcdefIC\t\n\"|rows null", 600)
    ) {
        check(&body);
    }
}

#[test]
fn the_seeds_parse() {
    let (c, v) = (criteo(), csv());
    let s = seeds();
    assert_eq!(
        c.parse(BodyKind::Lines, &s[0], MAX_ROWS)
            .unwrap()
            .batch_size(),
        3
    );
    assert_eq!(
        c.parse(BodyKind::Json, &s[1], MAX_ROWS)
            .unwrap()
            .batch_size(),
        3
    );
    assert_eq!(
        v.parse(BodyKind::Lines, &s[2], MAX_ROWS)
            .unwrap()
            .batch_size(),
        2
    );
    assert_eq!(
        v.parse(BodyKind::Json, &s[3], MAX_ROWS)
            .unwrap()
            .batch_size(),
        2
    );
}
