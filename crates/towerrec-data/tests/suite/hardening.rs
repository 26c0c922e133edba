//! Inputs that used to exhaust memory, hang or mislead: over-long and endless lines,
//! whitespace-only lines, duplicate header names, and ids outside their table, labels
//! other than 0 or 1 and non-finite dense values in a preprocessed file.

use crate::common::{criteo_row, drain, TempDir};
use std::io::{BufReader, Read};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use towerrec_data::lines::MAX_LINE_BYTES;
use towerrec_data::{
    open, write_binary, BadRows, BinaryDataset, BinaryStream, CriteoReader, CsvReader, CsvSchema,
    DataConfig, Error, Part, Record, RecordStream, Schema, SparseFeature, Split,
};

/// An endless line of NUL bytes, as `/dev/zero` reads.
fn endless_zeros() -> BufReader<std::io::Take<std::io::Repeat>> {
    BufReader::with_capacity(1 << 16, std::io::repeat(0).take(u64::MAX))
}

fn criteo_endless(bad: BadRows) -> CriteoReader {
    CriteoReader::from_reader(endless_zeros(), Path::new("/dev/zero"), &[10], bad).unwrap()
}

#[test]
fn an_endless_line_fails_at_line_1_instead_of_exhausting_memory() {
    let e = criteo_endless(BadRows::Fail).next_record().unwrap_err();
    assert!(matches!(e, Error::Parse { line: 1, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "/dev/zero:1: row: expected a line of at most {MAX_LINE_BYTES} bytes, \
             found a line of more than {MAX_LINE_BYTES} bytes"
        )
    );
    // Skipping gives up on a file whose line never ends, with an error skip does not pass.
    let mut r = criteo_endless(BadRows::Skip);
    let e = r.next_record().unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e}");
    assert!(e.to_string().contains("line 1 runs on"), "{e}");
    assert_eq!(r.skipped(), 1);
}

#[test]
fn an_over_long_line_is_a_bad_row_that_skip_passes() {
    let dir = TempDir::new("hard-long");
    let text = format!(
        "{}\n{}\n{}\n",
        criteo_row(0),
        "7".repeat(MAX_LINE_BYTES + 10),
        criteo_row(2)
    );
    let path = dir.file("long.txt", text);
    let mut r = CriteoReader::open(&path, &[10], BadRows::Fail).unwrap();
    assert!(r.next_record().unwrap().is_some());
    let e = r.next_record().unwrap_err();
    assert!(matches!(e, Error::Parse { line: 2, .. }), "{e}");
    let want = format!("{}:2: row: expected a line of at most", path.display());
    assert!(e.to_string().starts_with(&want), "{e}");

    let mut r = CriteoReader::open(&path, &[10], BadRows::Skip).unwrap();
    assert_eq!(drain(&mut r).len(), 2);
    assert_eq!(r.skipped(), 1);
}

#[test]
fn a_tail_split_over_an_over_long_line_fails_while_counting() {
    let dir = TempDir::new("hard-count");
    let long = "1".repeat(MAX_LINE_BYTES + 1);
    let path = dir.file(
        "t.txt",
        format!("{}\n{long}\n{}\n", criteo_row(0), criteo_row(1)),
    );
    let cfg = |bad| {
        let c = DataConfig::Criteo {
            path: path.clone(),
            eval_path: None,
            table_rows: vec![10],
            vocab: None,
            split: Split::Tail {
                eval_rows: Some(1),
                eval_fraction: None,
            },
        };
        open(&c, Part::Train, bad, dir.path())
    };
    let e = cfg(BadRows::Fail).err().unwrap();
    assert!(matches!(e, Error::Parse { line: 2, .. }), "{e}");
    // Skipped, the long line is still a row: train is rows 0..2, of which 1 is good.
    let mut train = cfg(BadRows::Skip).unwrap();
    assert_eq!(drain(&mut *train).len(), 1);
    assert_eq!(train.skipped(), 1);
}

#[test]
fn whitespace_lines_are_blank_but_a_line_of_tabs_is_a_criteo_row() {
    let dir = TempDir::new("hard-blank");
    let text = format!("{}\n   \r\n \n{}\n", criteo_row(0), criteo_row(1));
    let path = dir.file("ws.txt", text);
    let mut r = CriteoReader::open(&path, &[10], BadRows::Fail).unwrap();
    assert_eq!(drain(&mut r).len(), 2);

    let tabs = "\t".repeat(39);
    let path = dir.file("tabs.txt", format!("{}\n{tabs}\n", criteo_row(0)));
    let mut r = CriteoReader::open(&path, &[10], BadRows::Fail).unwrap();
    assert!(r.next_record().unwrap().is_some());
    let e = r.next_record().unwrap_err().to_string();
    assert!(e.contains(":2: field 0 (label): expected 0 or 1"), "{e}");

    let s: CsvSchema = toml::from_str(
        r#"
label = { column = "y" }
sparse = [{ column = "c", rows = 10 }]
"#,
    )
    .unwrap();
    let path = dir.file("ws.csv", "y,c\n1,a\n \t \n\t\r\n0,b\n");
    let mut r = CsvReader::open(&path, &s, BadRows::Fail).unwrap();
    assert_eq!(drain(&mut r).len(), 2);
}

#[test]
fn duplicate_header_names_are_an_error_naming_the_column() {
    let dir = TempDir::new("hard-dup");
    let s: CsvSchema = toml::from_str(
        r#"
label = { column = "y" }
sparse = [{ column = "c", rows = 10 }]
"#,
    )
    .unwrap();
    let path = dir.file("dup.csv", "y,c,x,c\n1,a,b,c\n");
    let e = CsvReader::open(&path, &s, BadRows::Fail).err().unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:1: header: expected distinct column names, found column \"c\" twice \
             (columns 1 and 3)",
            path.display()
        )
    );
    // Unnamed columns (trailing delimiters) may repeat.
    let path = dir.file("empty.csv", "y,c,,\n1,a,,\n");
    let mut r = CsvReader::open(&path, &s, BadRows::Fail).unwrap();
    assert_eq!(drain(&mut r).len(), 1);
}

#[test]
fn an_id_outside_its_table_names_file_row_feature_and_id() {
    let dir = TempDir::new("hard-id");
    let schema = Schema {
        dense: vec![],
        sparse: vec![SparseFeature {
            name: "f".into(),
            rows: 100,
        }],
    };
    let records: Vec<Record> = [3u64, 7, 42]
        .iter()
        .map(|&id| Record {
            label: 1.0,
            dense: vec![],
            sparse: vec![vec![id]],
        })
        .collect();
    let path = dir.path().join("ids.bin");
    let mut stream = VecStream(schema, records.into_iter());
    write_binary(&mut stream, &path, |_| ControlFlow::Continue(())).unwrap();
    // Shrink the table in the header, keeping its length: id 42 now lies outside.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = find(&bytes, b"\"rows\":100").unwrap();
    bytes[at..at + 10].copy_from_slice(b"\"rows\":10 ");
    std::fs::write(&path, bytes).unwrap();

    let ds = Arc::new(BinaryDataset::open(&path).unwrap());
    assert_eq!(ds.record(1).unwrap().sparse, vec![vec![7]]);
    let want = format!(
        "{}: row 2: feature 'f' id 42 out of range (table has 10 rows)",
        path.display()
    );
    assert_eq!(ds.record(2).unwrap_err().to_string(), want);
    assert_eq!(ds.batch(&[0, 2]).unwrap_err().to_string(), want);
    let mut s = BinaryStream::new(ds, 0..3);
    assert!(s.next_record().unwrap().is_some());
    assert!(s.next_record().unwrap().is_some());
    assert_eq!(s.next_record().unwrap_err().to_string(), want);
}

/// Found by fuzzing: a CSV number finite as an f64 but not as an f32 became an
/// infinite dense value.
#[test]
fn csv_numbers_beyond_f32_are_bad_values() {
    let dir = TempDir::new("hard-f32");
    let s: CsvSchema = toml::from_str(
        r#"
label = { column = "y" }
dense = [{ column = "x", transform = "none" }]
sparse = [{ column = "c", rows = 10 }]
"#,
    )
    .unwrap();
    let path = dir.file("big.csv", "y,x,c\n1,3e38,a\n1,3.51e300,a\n");
    let mut r = CsvReader::open(&path, &s, BadRows::Fail).unwrap();
    assert_eq!(r.next_record().unwrap().unwrap().dense, vec![3e38]);
    let e = r.next_record().unwrap_err().to_string();
    assert!(
        e.ends_with(":3: field 1 (x): expected a number within the range of f32 (about ±3.4e38), found \"3.51e300\""),
        "{e}"
    );
    let nan_fill: CsvSchema = toml::from_str(
        r#"
label = { column = "y" }
dense = [{ column = "x", fill = nan }]
"#,
    )
    .unwrap();
    let e = CsvReader::open(&path, &nan_fill, BadRows::Fail)
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("column \"x\": fill must be a finite number"),
        "{e}"
    );
}

/// Found by fuzzing: without a header, a column index such as 11111110 built a name
/// for every column up to it (10^16 bytes for a bigger one).
#[test]
fn a_column_index_beyond_any_row_is_a_config_error() {
    let dir = TempDir::new("hard-index");
    let path = dir.file("n.csv", "1,a\n");
    let schema = |column: &str| -> CsvSchema {
        toml::from_str(&format!(
            "header = false\nlabel = {{ column = \"0\" }}\nsparse = [{{ column = \"{column}\", rows = 3 }}]"
        ))
        .unwrap()
    };
    let e = CsvReader::open(&path, &schema("11111110"), BadRows::Fail)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "invalid data configuration: data.schema.sparse: column 11111110 is beyond any row \
         (a line holds at most 1048576 bytes)"
    );
    // The largest index a line can reach opens; a short row is then a bad row.
    let mut r = CsvReader::open(&path, &schema("1048576"), BadRows::Fail).unwrap();
    let e = r.next_record().unwrap_err().to_string();
    assert!(
        e.ends_with("row: expected at least 1048577 fields, found 2 fields"),
        "{e}"
    );
    let mut r = CsvReader::open(&path, &schema("1"), BadRows::Fail).unwrap();
    assert_eq!(drain(&mut r).len(), 1);
}

/// Found by fuzzing: a damaged label or dense value used to be passed on as read.
#[test]
fn labels_other_than_0_or_1_and_non_finite_dense_values_are_refused() {
    let dir = TempDir::new("hard-label");
    let schema = Schema {
        dense: vec!["d".into()],
        sparse: vec![],
    };
    let good = Record {
        label: 1.0,
        dense: vec![0.5],
        sparse: vec![],
    };
    let path = dir.path().join("l.bin");
    write_binary(
        &mut VecStream(schema.clone(), vec![good.clone(); 2].into_iter()),
        &path,
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // The labels (one byte each) start at the first multiple of 8 after the header; then
    // the dense values.
    let header_len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let labels = (16 + header_len).next_multiple_of(8);
    let dense = labels + 8;
    for (at, value, want) in [
        (labels + 1, vec![7u8], "row 1: label 7 is not 0 or 1"),
        (
            dense + 4,
            f32::NAN.to_le_bytes().to_vec(),
            "row 1: dense feature 'd' is NaN, not a finite number",
        ),
    ] {
        let mut damaged = bytes.clone();
        damaged[at..at + value.len()].copy_from_slice(&value);
        let ds = BinaryDataset::from_bytes(damaged, Path::new("l.bin")).unwrap();
        assert_eq!(ds.record(0).unwrap(), good);
        assert_eq!(
            ds.record(1).unwrap_err().to_string(),
            format!("l.bin: {want}")
        );
        assert!(ds.batch(&[0, 1]).is_err());
    }
    // The writer refuses what the reader would.
    let mut bad = good.clone();
    bad.label = 2.0;
    let mut s = VecStream(schema.clone(), vec![bad].into_iter());
    let e = write_binary(&mut s, &dir.path().join("w.bin"), |_| {
        ControlFlow::Continue(())
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("row 0: label 2 is not 0 or 1"),
        "{e}"
    );
    let mut bad = good;
    bad.dense[0] = f32::INFINITY;
    let mut s = VecStream(schema, vec![bad].into_iter());
    let e = write_binary(&mut s, &dir.path().join("w.bin"), |_| {
        ControlFlow::Continue(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("dense feature 'd' is inf"), "{e}");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Records from memory.
struct VecStream(Schema, std::vec::IntoIter<Record>);

impl RecordStream for VecStream {
    fn schema(&self) -> &Schema {
        &self.0
    }
    fn next_record(&mut self) -> towerrec_data::Result<Option<Record>> {
        Ok(self.1.next())
    }
    fn skipped(&self) -> u64 {
        0
    }
}
