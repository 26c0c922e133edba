//! The parallel text readers against the sequential ones (one line at a time on the
//! calling thread): the same records, skips and errors, in the same order, for random
//! files with malformed, blank, CRLF and over-long lines, under both bad-row policies,
//! every kind of split, and blocks as small as one byte (so that blocks end everywhere).

use crate::common::criteo_row;
use proptest::prelude::*;
use std::io::Cursor;
use std::path::Path;
use towerrec_data::lines::MAX_LINE_BYTES;
use towerrec_data::{
    BadRows, CriteoReader, CsvReader, CsvSchema, Record, RecordBlock, RecordStream, RowSelect,
};

/// What a stream yields, call by call, up to its end or its first hard error.
#[derive(Debug, PartialEq)]
enum Step {
    Row(Record),
    Err(String),
}

/// Reads `s` record by record: what it yields, and its skip count at the end.
fn steps(s: &mut dyn RecordStream) -> (Vec<Step>, u64) {
    let mut out = Vec::new();
    loop {
        match s.next_record() {
            Ok(Some(r)) => out.push(Step::Row(r)),
            Ok(None) => break,
            Err(e) => {
                out.push(Step::Err(e.to_string()));
                break;
            }
        }
    }
    (out, s.skipped())
}

/// Reads `s` in blocks of `max` rows.
fn block_steps(s: &mut dyn RecordStream, max: usize) -> (Vec<Step>, u64) {
    let schema = s.schema().clone();
    let mut out = Vec::new();
    loop {
        let mut b = RecordBlock::new(schema.num_dense(), schema.num_sparse());
        match s.read_block(max, &mut b) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => {
                assert!(n <= max);
                assert_eq!(n, b.len());
                out.extend((0..n).map(|i| Step::Row(b.record(i))));
            }
            Ok(None) => panic!("a text reader reads blocks"),
            Err(e) => {
                out.push(Step::Err(e.to_string()));
                break;
            }
        }
    }
    (out, s.skipped())
}

/// A stream's records alone (no block or batch path), for `next_batch` to assemble.
struct Records<S>(S);

impl<S: RecordStream> RecordStream for Records<S> {
    fn schema(&self) -> &towerrec_data::Schema {
        self.0.schema()
    }
    fn next_record(&mut self) -> towerrec_data::Result<Option<Record>> {
        self.0.next_record()
    }
    fn skipped(&self) -> u64 {
        self.0.skipped()
    }
}

/// One line of a test file.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u64..1000).prop_map(criteo_row),
        1 => Just(String::new()),
        1 => Just("   ".to_string()),
        1 => (0u64..1000).prop_map(|i| criteo_row(i) + "\r"),
        1 => (0u64..1000).prop_map(|i| criteo_row(i).replacen('\t', "\tx", 3)),
        1 => (0u64..1000).prop_map(|i| criteo_row(i).replacen('\t', "", 1)),
        1 => (0u64..1000).prop_map(|i| format!("2{}", &criteo_row(i)[1..])),
        1 => Just("\t\t".to_string()),
    ]
}

fn select() -> impl Strategy<Value = RowSelect> {
    prop_oneof![
        Just(RowSelect::All),
        (0u64..20, 0u64..40).prop_map(|(a, b)| RowSelect::Range(a..a + b)),
        (0u64..100, 0.1f64..0.9, any::<bool>()).prop_map(|(seed, fraction, inside)| {
            RowSelect::Hashed {
                seed,
                fraction,
                inside,
            }
        }),
    ]
}

fn criteo(text: &[u8], bad: BadRows, select: &RowSelect) -> CriteoReader {
    CriteoReader::from_reader(Cursor::new(text.to_vec()), Path::new("p.tsv"), &[97], bad)
        .unwrap()
        .with_rows(select.clone())
}

fn csv_schema() -> CsvSchema {
    toml::from_str(
        r#"
        delimiter = ","
        label = { column = "y" }
        dense = [{ column = "a" }]
        sparse = [{ column = "b", rows = 13 }, { column = "c", rows = 7, separator = "|" }]
        "#,
    )
    .unwrap()
}

fn csv(text: &[u8], bad: BadRows, select: &RowSelect) -> CsvReader {
    CsvReader::from_reader(
        Cursor::new(text.to_vec()),
        Path::new("p.csv"),
        &csv_schema(),
        bad,
    )
    .unwrap()
    .with_rows(select.clone())
}

fn csv_line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u8..2, -50i32..50, "[a-z]{0,3}", "[a-z|]{0,6}")
            .prop_map(|(y, a, b, c)| format!("{y},{a},{b},{c}")),
        1 => Just(String::new()),
        1 => Just("1,2,\"q,r\",\"s\"\"t\"".to_string()),
        1 => Just("1,2,\"open,x".to_string()),
        1 => Just("5,1,b,c".to_string()),
        1 => Just("1,zz,b,c".to_string()),
        1 => Just("1,2,3".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn criteo_parallel_equals_sequential(
        lines in prop::collection::vec(line(), 0..60),
        skip in any::<bool>(),
        select in select(),
        block in prop_oneof![Just(1usize), 1usize..600, Just(1 << 22)],
        max in 1usize..9,
        crlf_end in any::<bool>(),
    ) {
        let mut text = lines.join("\n");
        if crlf_end { text.push_str("\r\n"); }
        let bad = if skip { BadRows::Skip } else { BadRows::Fail };
        let want = steps(&mut criteo(text.as_bytes(), bad, &select).sequential());
        let got = steps(&mut criteo(text.as_bytes(), bad, &select).with_block_bytes(block));
        prop_assert_eq!(&got, &want);
        let blocks = block_steps(&mut criteo(text.as_bytes(), bad, &select).with_block_bytes(block), max);
        prop_assert_eq!(&blocks, &want);
    }

    #[test]
    fn criteo_batches_equal_batches_of_sequential_records(
        lines in prop::collection::vec(line(), 0..60),
        skip in any::<bool>(),
        block in prop_oneof![Just(1usize), 1usize..600],
        batch in 1usize..9,
    ) {
        let text = lines.join("\n");
        let bad = if skip { BadRows::Skip } else { BadRows::Fail };
        let mut want = Records(criteo(text.as_bytes(), bad, &RowSelect::All).sequential());
        let mut got = criteo(text.as_bytes(), bad, &RowSelect::All).with_block_bytes(block);
        loop {
            // `Records` has no batch path: next_batch assembles its records.
            let w = towerrec_data::next_batch(&mut want, batch).map_err(|e| e.to_string());
            let g = towerrec_data::next_batch(&mut got, batch).map_err(|e| e.to_string());
            let end = !matches!(w, Ok(Some(_)));
            prop_assert_eq!(format!("{g:?}"), format!("{w:?}"));
            if end {
                break;
            }
        }
        prop_assert_eq!(got.skipped(), want.skipped());
    }

    #[test]
    fn csv_parallel_equals_sequential(
        lines in prop::collection::vec(csv_line(), 0..60),
        bom in any::<bool>(),
        skip in any::<bool>(),
        select in select(),
        block in prop_oneof![Just(1usize), 1usize..300, Just(1 << 22)],
        max in 1usize..9,
    ) {
        let text = format!("{}y,a,b,c\n{}", if bom { "\u{feff}" } else { "" }, lines.join("\n"));
        let bad = if skip { BadRows::Skip } else { BadRows::Fail };
        let want = steps(&mut csv(text.as_bytes(), bad, &select).sequential());
        let got = steps(&mut csv(text.as_bytes(), bad, &select).with_block_bytes(block));
        prop_assert_eq!(&got, &want);
        let blocks = block_steps(&mut csv(text.as_bytes(), bad, &select).with_block_bytes(block), max);
        prop_assert_eq!(&blocks, &want);
    }
}

#[test]
fn over_long_lines_are_bad_rows_in_place() {
    let mut text = criteo_row(1) + "\n";
    text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
    text.push('\n');
    text.push_str(&(criteo_row(2) + "\n"));
    for bad in [BadRows::Fail, BadRows::Skip] {
        let want = steps(&mut criteo(text.as_bytes(), bad, &RowSelect::All).sequential());
        let got = steps(&mut criteo(text.as_bytes(), bad, &RowSelect::All).with_block_bytes(100));
        assert_eq!(got, want);
        match bad {
            BadRows::Fail => {
                assert_eq!(want.0.len(), 2);
                let Step::Err(e) = &want.0[1] else {
                    panic!("{:?}", want.0[1])
                };
                assert!(e.starts_with("p.tsv:2: row:"), "{e}");
            }
            BadRows::Skip => assert_eq!((want.0.len(), want.1), (2, 1)),
        }
    }
}

#[test]
fn a_failing_row_names_file_line_and_field_after_the_rows_before_it() {
    let text = format!(
        "{}\n\n{}\n{}\n",
        criteo_row(0),
        criteo_row(1).replacen("\t", "\tzz", 20),
        criteo_row(2)
    );
    let (got, _) = steps(&mut criteo(text.as_bytes(), BadRows::Fail, &RowSelect::All));
    assert_eq!(got.len(), 2);
    assert!(matches!(got[0], Step::Row(_)));
    assert_eq!(
        got[1],
        Step::Err(r#"p.tsv:3: field 1 (I1): expected an integer, found "zz7""#.into())
    );
}
