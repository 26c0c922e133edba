//! The Criteo TSV reader on generated files: values, hashing, transforms, empty fields,
//! error locations and skipping.

use crate::common::{criteo_line, criteo_row, drain, TempDir};
use towerrec_data::{BadRows, CriteoReader, Error, RecordStream, RowSelect};

const EMPTY_D: [&str; 13] = [""; 13];
const EMPTY_S: [&str; 26] = [""; 26];

#[test]
fn reads_values_transforms_and_hashes() {
    let dir = TempDir::new("criteo-values");
    let mut d = EMPTY_D;
    d[0] = "3";
    d[5] = "-2";
    d[12] = "1000000";
    let mut s = EMPTY_S;
    s[0] = "68fd1e64";
    s[25] = "FFFFFFFF";
    let text = format!(
        "{}\n{}\r\n",
        criteo_line("1", &d, &s),
        criteo_line("0", &EMPTY_D, &EMPTY_S)
    );
    let path = dir.file("day.txt", text);
    let rows: Vec<u64> = (1..=26).map(|k| 1000 + k).collect();
    let mut r = CriteoReader::open(&path, &rows, BadRows::Fail).unwrap();
    assert_eq!(r.schema().dense[0], "I1");
    assert_eq!(r.schema().sparse[25].name, "C26");
    let recs = drain(&mut r);
    assert_eq!(recs.len(), 2);
    let a = &recs[0];
    assert_eq!(a.label, 1.0);
    assert!((a.dense[0] - 4f32.ln()).abs() < 1e-6);
    assert_eq!(a.dense[5], 0.0, "negatives clamp to 0 before ln(1+x)");
    assert!((a.dense[12] - 1_000_001f32.ln()).abs() < 1e-5);
    assert_eq!(a.dense[1], 0.0, "empty dense → 0");
    assert_eq!(a.sparse[0], vec![0x68fd_1e64 % 1001]);
    assert_eq!(a.sparse[25], vec![0xffff_ffff % 1026]);
    assert_eq!(a.sparse[1], vec![0], "empty categorical → id 0");
    assert!(a.sparse.iter().all(|ids| ids.len() == 1));
    assert_eq!(recs[1].label, 0.0);
    assert!(recs[1].dense.iter().all(|&x| x == 0.0));
}

/// Each malformed case → (line text, expected field description, expected snippet).
fn bad_cases() -> Vec<(String, &'static str, &'static str)> {
    let mut s = EMPTY_S;
    s[1] = "zz1";
    let mut d = EMPTY_D;
    d[3] = "1.5";
    let mut huge = EMPTY_S;
    huge[0] = "1234567890abcdef0";
    let full = criteo_line("0", &EMPTY_D, &EMPTY_S);
    let short: Vec<&str> = full.split('\t').take(39).collect();
    vec![
        (
            criteo_line("0", &EMPTY_D, &s),
            "field 15 (C2)",
            r#"expected a hex id, found "zz1""#,
        ),
        (
            criteo_line("0", &d, &EMPTY_S),
            "field 4 (I4)",
            r#"expected an integer, found "1.5""#,
        ),
        (
            criteo_line("2", &EMPTY_D, &EMPTY_S),
            "field 0 (label)",
            r#"expected 0 or 1, found "2""#,
        ),
        (
            criteo_line("", &EMPTY_D, &EMPTY_S),
            "field 0 (label)",
            r#"found """#,
        ),
        (
            criteo_line("0", &EMPTY_D, &huge),
            "field 14 (C1)",
            "expected a hex id",
        ),
        (
            short.join("\t"),
            "row",
            "expected 40 tab-separated fields, found 39 fields",
        ),
        (
            format!("{}\textra", criteo_row(0)),
            "row",
            "found 41 fields",
        ),
    ]
}

#[test]
fn malformed_rows_name_file_line_and_field() {
    let dir = TempDir::new("criteo-bad");
    for (k, (bad, field, snippet)) in bad_cases().into_iter().enumerate() {
        // Two good rows and a blank line first: the bad row is physical line 4.
        let text = format!(
            "{}\n{}\n\n{bad}\n{}\n",
            criteo_row(1),
            criteo_row(2),
            criteo_row(3)
        );
        let name = format!("bad{k}.txt");
        let path = dir.file(&name, text);
        let mut r = CriteoReader::open(&path, &[100], BadRows::Fail).unwrap();
        assert!(r.next_record().unwrap().is_some());
        assert!(r.next_record().unwrap().is_some());
        let err = r.next_record().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Parse { line: 4, .. }), "{msg}");
        assert!(
            msg.contains(&format!("{name}:4: {field}: ")),
            "case {k}: {msg}"
        );
        assert!(msg.contains(snippet), "case {k}: {msg}");
    }
}

#[test]
fn long_bad_values_are_truncated_in_messages() {
    let dir = TempDir::new("criteo-long");
    let long = "g".repeat(5000);
    let mut s = EMPTY_S;
    s[2] = &long;
    let path = dir.file("long.txt", criteo_line("0", &EMPTY_D, &s));
    let mut r = CriteoReader::open(&path, &[100], BadRows::Fail).unwrap();
    let msg = r.next_record().unwrap_err().to_string();
    assert!(msg.len() < 200, "{msg}");
    assert!(msg.contains("field 16 (C3)"), "{msg}");
}

#[test]
fn invalid_utf8_is_a_parse_error_at_its_field() {
    let dir = TempDir::new("criteo-utf8");
    let mut line = criteo_row(0).into_bytes();
    let at = line.len() - 2;
    line[at] = 0xff;
    let path = dir.file("utf8.txt", line);
    let mut r = CriteoReader::open(&path, &[100], BadRows::Fail).unwrap();
    let msg = r.next_record().unwrap_err().to_string();
    assert!(msg.contains("field 39 (C26)"), "{msg}");
}

#[test]
fn skip_counts_malformed_rows_and_keeps_good_ones() {
    let dir = TempDir::new("criteo-skip");
    let mut text = String::new();
    let cases = bad_cases();
    for (k, (bad, _, _)) in cases.iter().enumerate() {
        text += &criteo_row(k as u64);
        text += "\n";
        text += bad;
        text += "\n";
    }
    let path = dir.file("mixed.txt", text);
    let mut r = CriteoReader::open(&path, &[100], BadRows::Skip).unwrap();
    let recs = drain(&mut r);
    assert_eq!(recs.len(), cases.len());
    assert_eq!(r.skipped(), cases.len() as u64);
}

#[test]
fn row_selection_counts_malformed_rows() {
    let dir = TempDir::new("criteo-select");
    let text = format!(
        "{}\nbad\n{}\n{}\n",
        criteo_row(0),
        criteo_row(1),
        criteo_row(2)
    );
    let path = dir.file("sel.txt", text);
    let r = CriteoReader::open(&path, &[100], BadRows::Skip).unwrap();
    let mut r = r.with_rows(RowSelect::Range(2..4));
    let recs = drain(&mut r);
    assert_eq!(recs.len(), 2, "rows 2 and 3 are the 3rd and 4th lines");
    assert_eq!(r.skipped(), 0, "the bad row 1 is outside the selection");
    assert_eq!(recs[0].label, 0.0);
}

#[test]
fn bad_table_rows_and_missing_files_are_errors() {
    let dir = TempDir::new("criteo-cfg");
    let path = dir.file("ok.txt", criteo_row(0));
    assert!(matches!(
        CriteoReader::open(&path, &[1, 2], BadRows::Fail),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        CriteoReader::open(&path, &[0], BadRows::Fail),
        Err(Error::Config(_))
    ));
    let missing = dir.path().join("missing.txt");
    let err = CriteoReader::open(&missing, &[10], BadRows::Fail)
        .err()
        .unwrap();
    assert!(matches!(err, Error::Io { .. }));
    assert!(err.to_string().contains("missing.txt"));
}
