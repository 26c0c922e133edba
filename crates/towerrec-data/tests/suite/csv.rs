//! The schema-described CSV/TSV reader: headers, indices, quoting, multi-hot, label rules.

use crate::common::{drain, TempDir};
use towerrec_data::hash::fnv1a64;
use towerrec_data::{BadRows, CsvReader, CsvSchema, Error, RecordStream};

fn schema(toml_text: &str) -> CsvSchema {
    toml::from_str(toml_text).unwrap()
}

#[test]
fn header_names_dense_sparse_and_positive_label() {
    let dir = TempDir::new("csv-header");
    let path = dir.file(
        "adult.csv",
        "age,workclass,income,hours\n25,Private,<=50K,40\n38, Self-emp ,>50K.,\n",
    );
    let s = schema(
        r#"
label = { column = "income", positive = [">50K", ">50K."] }
dense = [{ column = "age" }, { column = "hours", transform = "none", fill = 7.5 }]
sparse = [{ column = "workclass", rows = 100, name = "work" }]
"#,
    );
    let mut r = CsvReader::open(&path, &s, BadRows::Fail).unwrap();
    assert_eq!(r.schema().dense, vec!["age", "hours"]);
    assert_eq!(r.schema().sparse_names(), vec!["work"]);
    let recs = drain(&mut r);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].label, 0.0);
    assert_eq!(recs[1].label, 1.0);
    assert!((recs[0].dense[0] - 26f32.ln()).abs() < 1e-6);
    assert_eq!(recs[0].dense[1], 40.0);
    assert_eq!(recs[1].dense[1], 7.5, "empty → fill");
    assert_eq!(recs[0].sparse[0], vec![fnv1a64(b"Private") % 100]);
    assert_eq!(
        recs[1].sparse[0],
        vec![fnv1a64(b"Self-emp") % 100],
        "fields are trimmed"
    );
}

#[test]
fn no_header_uses_indices_and_threshold_labels() {
    let dir = TempDir::new("csv-noheader");
    let path = dir.file("r.tsv", "196\t242\t3\n186\t302\t4.5\n22\t377\t1\n");
    let s = schema(
        r#"
delimiter = "\t"
header = false
label = { column = "2", threshold = 4.0 }
sparse = [{ column = "0", rows = 1000, name = "user" }, { column = "1", rows = 5000, name = "item" }]
"#,
    );
    let recs = drain(&mut CsvReader::open(&path, &s, BadRows::Fail).unwrap());
    assert_eq!(
        recs.iter().map(|r| r.label).collect::<Vec<_>>(),
        vec![0.0, 1.0, 0.0]
    );
    assert_eq!(recs[1].sparse[1], vec![fnv1a64(b"302") % 5000]);
}

#[test]
fn typed_recbole_headers_match_by_base_name() {
    let dir = TempDir::new("csv-typed");
    let path = dir.file(
        "ml.inter",
        "user_id:token\titem_id:token\trating:float\n1\t2\t5\n",
    );
    let s = schema(
        r#"
delimiter = "\t"
label = { column = "rating", threshold = 4 }
sparse = [{ column = "user_id", rows = 10 }, { column = "item_id:token", rows = 10 }]
"#,
    );
    let recs = drain(&mut CsvReader::open(&path, &s, BadRows::Fail).unwrap());
    assert_eq!(recs[0].label, 1.0);
}

#[test]
fn quoted_fields_keep_delimiters_and_escaped_quotes() {
    let dir = TempDir::new("csv-quoted");
    let path = dir.file(
        "q.csv",
        "y,title,n\n1,\"Hello, world\",2\n0,\"say \"\"hi\"\"\",\"3\"\n",
    );
    let s = schema(
        r#"
label = { column = "y" }
dense = [{ column = "n", transform = "none" }]
sparse = [{ column = "title", rows = 1000000007 }]
"#,
    );
    let recs = drain(&mut CsvReader::open(&path, &s, BadRows::Fail).unwrap());
    assert_eq!(
        recs[0].sparse[0],
        vec![fnv1a64(b"Hello, world") % 1_000_000_007]
    );
    assert_eq!(
        recs[1].sparse[0],
        vec![fnv1a64(b"say \"hi\"") % 1_000_000_007]
    );
    assert_eq!(recs[1].dense[0], 3.0);
}

#[test]
fn multi_hot_splits_and_drops_empty_pieces() {
    let dir = TempDir::new("csv-multihot");
    let path = dir.file("m.csv", "y,genres,city\n1,a|b||c,\n0,,x\n1, a | ,y\n");
    let s = schema(
        r#"
label = { column = "y" }
sparse = [{ column = "genres", rows = 50, separator = "|" }, { column = "city", rows = 50 }]
"#,
    );
    let recs = drain(&mut CsvReader::open(&path, &s, BadRows::Fail).unwrap());
    let h = |s: &str| fnv1a64(s.as_bytes()) % 50;
    assert_eq!(recs[0].sparse[0], vec![h("a"), h("b"), h("c")]);
    assert_eq!(
        recs[1].sparse[0],
        Vec::<u64>::new(),
        "empty multi-hot → no ids"
    );
    assert_eq!(recs[2].sparse[0], vec![h("a")]);
    assert_eq!(
        recs[0].sparse[1],
        vec![h("")],
        "empty single-valued → hash of \"\""
    );
}

#[test]
fn missing_columns_are_config_errors_naming_them() {
    let dir = TempDir::new("csv-missing");
    let path = dir.file("a.csv", "click,site\n1,x\n");
    let s = schema(
        r#"
label = { column = "click" }
sparse = [{ column = "site_id", rows = 10 }]
"#,
    );
    let err = CsvReader::open(&path, &s, BadRows::Fail).err().unwrap();
    assert!(matches!(err, Error::Config(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("site_id") && msg.contains("data.schema.sparse"),
        "{msg}"
    );
    let empty = dir.file("empty.csv", "");
    assert!(matches!(
        CsvReader::open(&empty, &s, BadRows::Fail),
        Err(Error::Format { .. })
    ));
}

#[test]
fn malformed_rows_name_line_and_field_or_are_skipped() {
    let dir = TempDir::new("csv-bad");
    let text = "y,n,c\n1,2,a\n2,3,b\n0,x,c\n1,\"open,d\n1,2\n0,1,e\n";
    let path = dir.file("bad.csv", text);
    let s = schema(
        r#"
label = { column = "y" }
dense = [{ column = "n" }]
sparse = [{ column = "c", rows = 10 }]
"#,
    );
    let mut r = CsvReader::open(&path, &s, BadRows::Fail).unwrap();
    assert!(r.next_record().unwrap().is_some());
    let msg = r.next_record().unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!(
            "{}:3: field 0 (y): expected 0 or 1",
            path.display()
        )),
        "{msg}"
    );

    let mut r = CsvReader::open(&path, &s, BadRows::Skip).unwrap();
    let recs = drain(&mut r);
    assert_eq!(recs.len(), 2);
    assert_eq!(r.skipped(), 4);

    let expectations = [
        (
            "y,n,c\n0,x,c\n",
            "bad.csv:2: field 1 (n): expected a number, found \"x\"",
        ),
        (
            "y,n,c\n1,\"open,d\n",
            "bad.csv:2: row: expected a closing quote",
        ),
        (
            "y,n,c\n1,2\n",
            "bad.csv:2: row: expected 3 fields (as in the header), found 2 fields",
        ),
        ("y,n,c\n1,inf,a\n", "field 1 (n): expected a number"),
    ];
    for (text, want) in expectations {
        let path = dir.file("bad.csv", text);
        let msg = CsvReader::open(&path, &s, BadRows::Fail)
            .unwrap()
            .next_record()
            .unwrap_err()
            .to_string();
        assert!(msg.contains(want), "{msg} lacks {want}");
    }
}

#[test]
fn threshold_labels_must_be_numbers() {
    let dir = TempDir::new("csv-threshold");
    let path = dir.file("t.csv", "r\nfive\n");
    let s = schema("label = { column = \"r\", threshold = 4.0 }");
    let msg = CsvReader::open(&path, &s, BadRows::Fail)
        .unwrap()
        .next_record()
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("t.csv:2: field 0 (r): expected a number, found \"five\""),
        "{msg}"
    );
}
