//! The text readers: Criteo TSV and schema-described CSV/TSV, fed through buffers of
//! random sizes so that lines cross buffer boundaries, with lines longer than the
//! 1 MiB bound now and then.

use super::common::criteo_row;
use super::drain;
use proptest::prelude::*;
use std::io::{BufReader, Cursor};
use std::path::Path;
use towerrec_data::lines::MAX_LINE_BYTES;
use towerrec_data::{BadRows, CriteoReader, CsvReader, CsvSchema, Error};
use towerrec_fuzz::{arbitrary, config, mutated};

/// Bytes that matter to the text parsers, and numbers at the edges of their types.
const TOKENS: &[&[u8]] = &[
    b"\t",
    b"\n",
    b"\r\n",
    b"\r",
    b",",
    b";",
    b"|",
    b" ",
    b"\"",
    b"\"\"",
    b"0",
    b"1",
    b"-",
    b"+1",
    b"1e300",
    b"-1e39",
    b"3.5e38",
    b"1e-320",
    b"nan",
    b"inf",
    b"-inf",
    b"0x10",
    b"18446744073709551616",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"ffffffffffffffff",
    b"1ffffffffffffffff",
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\0",
    "→".as_bytes(),
    b"\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
];

const ALPHABET: &[u8] = b"\t\n\r,;|\" 0123456789abcdef-.e";

/// Long enough to cross the line bound.
const MAX_RUN: usize = MAX_LINE_BYTES + (MAX_LINE_BYTES >> 1);

fn bad_rows() -> impl Strategy<Value = BadRows> {
    prop_oneof![Just(BadRows::Fail), Just(BadRows::Skip)]
}

/// Buffer capacities: tiny ones split every line over many reads.
fn capacity() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..16, Just(1 << 16)]
}

fn reader(bytes: Vec<u8>, cap: usize) -> BufReader<Cursor<Vec<u8>>> {
    BufReader::with_capacity(cap, Cursor::new(bytes))
}

/// A bound on the calls a reader of `bytes` needs: one per line, and the end.
fn calls(bytes: &[u8]) -> usize {
    bytes.len() + 2
}

/// Only a malformed row stops a small input, and only under `Fail`.
fn allowed(e: &Error, bad: BadRows) {
    assert!(
        matches!(e, Error::Parse { .. }) && bad == BadRows::Fail,
        "{bad:?}: {e}"
    );
}

fn criteo_seeds() -> Vec<Vec<u8>> {
    let rows = |n: u64, end: &str| (0..n).map(|i| criteo_row(i) + end).collect::<String>();
    let empty = "\t".repeat(39).replacen('\t', "1\t", 1);
    vec![
        rows(1, "\n").into_bytes(),
        rows(4, "\n").into_bytes(),
        rows(3, "\r\n").into_bytes(),
        format!("{}\n\n  \n{empty}\n{}", criteo_row(5), criteo_row(6)).into_bytes(),
    ]
}

fn criteo(bytes: Vec<u8>, cap: usize, rows: u64, bad: BadRows) {
    let n = calls(&bytes);
    let mut r =
        CriteoReader::from_reader(reader(bytes, cap), Path::new("f.tsv"), &[rows], bad).unwrap();
    if let Err(e) = drain(&mut r, n) {
        allowed(&e, bad);
    }
}

/// Schemas (TOML) with a file each reads.
const CSV: &[(&str, &str)] = &[
    (
        r#"label = { column = "y" }
dense = [{ column = "n" }, { column = "m", transform = "none", fill = 2.5 }]
sparse = [{ column = "c", rows = 10 }, { column = "tags", rows = 7, separator = "|" }]"#,
        "y,n,m,c,tags\n1,2,3.5,a,x|y\n0,,-1e3,\"b,c\",\n1,4,5,\"say \"\"hi\"\"\",z||w\n",
    ),
    (
        r#"delimiter = "\t"
header = false
label = { column = "2", threshold = 4.0 }
dense = [{ column = "0", transform = "none" }]
sparse = [{ column = "1", rows = 1 }, { column = "3", rows = 9223372036854775807, separator = "→" }]"#,
        "1.5\tu1\t5\ta→b\n-2\tu2\t3\t\n",
    ),
    (
        r#"delimiter = ";"
label = { column = "income", positive = [">50K", ">50K."] }
sparse = [{ column = "user_id", rows = 100 }, { column = "user_id", rows = 5, name = "u2" }]"#,
        "\u{feff}user_id:token;income\nu1;>50K\nu2;<=50K\n",
    ),
    (
        r#"delimiter = " "
label = { column = "y" }
dense = [{ column = "x" }]
sparse = [{ column = "s", rows = 3 }]"#,
        "y x s\n1 2 a\n0 -4 b\n",
    ),
];

/// TOML tokens for mutating a schema.
const SCHEMA_TOKENS: &[&[u8]] = &[
    b"\"",
    b"=",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"\n",
    b"0",
    b"-1",
    b"18446744073709551616",
    b"nan",
    b"inf",
    b"true",
    b"false",
    b"\"\"",
    b"\"\\t\"",
    b"\"\\n\"",
    b"\"\\\"\"",
    b"\"\xc3\xa9\"",
    b"separator = \",\"",
    b"threshold = 1e308",
    b"header = false",
    b"positive = []",
    b"name = \"c\"",
    b"rows = 0",
    b"transform = \"none\"",
];

fn csv(schema: &CsvSchema, bytes: Vec<u8>, cap: usize, bad: BadRows) {
    let n = calls(&bytes);
    match CsvReader::from_reader(reader(bytes, cap), Path::new("f.csv"), schema, bad) {
        // Opening reads the header: a bad one (or none) may be any error but I/O.
        Err(e) => assert!(!matches!(e, Error::Io { .. }), "{e}"),
        Ok(mut r) => {
            if let Err(e) = drain(&mut r, n) {
                allowed(&e, bad);
            }
        }
    }
}

fn csv_case() -> impl Strategy<Value = (usize, Vec<u8>)> {
    (0..CSV.len()).prop_flat_map(|k| {
        let seed = CSV[k].1.as_bytes().to_vec();
        prop_oneof![
            mutated(vec![seed], TOKENS, MAX_RUN),
            arbitrary(ALPHABET, 600),
        ]
        .prop_map(move |b| (k, b))
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn criteo_reader(
        bytes in prop_oneof![
            3 => mutated(criteo_seeds(), TOKENS, MAX_RUN),
            1 => arbitrary(ALPHABET, 3000),
        ],
        cap in capacity(),
        rows in prop::sample::select(vec![1u64, 1000, u64::MAX]),
        bad in bad_rows(),
    ) {
        criteo(bytes, cap, rows, bad);
    }

    #[test]
    fn csv_reader((k, bytes) in csv_case(), cap in capacity(), bad in bad_rows()) {
        let schema: CsvSchema = toml::from_str(CSV[k].0).unwrap();
        csv(&schema, bytes, cap, bad);
    }

    #[test]
    fn csv_reader_with_mutated_schemas(
        (k, toml_bytes) in (0..CSV.len()).prop_flat_map(|k| {
            mutated(vec![CSV[k].0.as_bytes().to_vec()], SCHEMA_TOKENS, 64)
                .prop_map(move |b| (k, b))
        }),
        cap in capacity(),
        bad in bad_rows(),
    ) {
        let text = String::from_utf8_lossy(&toml_bytes);
        if let Ok(schema) = toml::from_str::<CsvSchema>(&text) {
            csv(&schema, CSV[k].1.as_bytes().to_vec(), cap, bad);
        }
    }
}
