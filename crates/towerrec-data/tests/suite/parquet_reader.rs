//! The Parquet reader against the CSV reader on the same rows (bit for bit, through
//! every split), and its errors on files that do not fit the schema.

use crate::common::{
    click_log, write_parquet, write_parquet_with, Dictionary, TempDir, CLICK_LOG_COLUMNS,
};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use std::path::Path;
use std::sync::Arc;
use towerrec_core::Batch;
use towerrec_data::source::{open, Part};
use towerrec_data::{next_batch, BadRows, DataConfig, ParquetReader, ParquetSchema, RecordStream};

fn config(text: &str) -> DataConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

/// Every batch of `s`, at `batch_size`.
fn batches(s: &mut dyn RecordStream, batch_size: usize) -> Vec<Batch> {
    let mut out = vec![];
    while let Some(b) = next_batch(s, batch_size).unwrap() {
        out.push(b);
    }
    out
}

/// Equal bit for bit (f32 `==` would let 0.0 match -0.0).
fn assert_same(a: &[Batch], b: &[Batch]) {
    assert_eq!(a.len(), b.len(), "batch counts");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&x.dense), bits(&y.dense), "batch {i}: dense");
        assert_eq!(bits(&x.labels), bits(&y.labels), "batch {i}: labels");
        assert_eq!(x.sparse, y.sparse, "batch {i}: sparse");
        assert_eq!(x, y, "batch {i}");
    }
}

#[test]
fn parquet_and_csv_of_the_same_rows_give_the_same_batches() {
    let dir = TempDir::new("pq-csv");
    let (batch, csv) = click_log(1000);
    write_parquet(&dir.path().join("a.parquet"), &batch, 128);
    dir.file("a.csv", csv);
    for split in [
        "{ kind = \"none\" }",
        "{ kind = \"head\", train_rows = 300 }",
        "{ kind = \"tail\", eval_rows = 333 }",
        "{ kind = \"tail\", eval_fraction = 0.25 }",
        "{ kind = \"random\", eval_fraction = 0.3, seed = 7 }",
    ] {
        let pq = config(&format!(
            "format = \"parquet\"\npath = \"a.parquet\"\nsplit = {split}\n[schema]\n{CLICK_LOG_COLUMNS}"
        ));
        let cs = config(&format!(
            "format = \"csv\"\npath = \"a.csv\"\nsplit = {split}\n[schema]\n{CLICK_LOG_COLUMNS}"
        ));
        let parts: &[Part] = if split.contains("none") {
            &[Part::Train]
        } else {
            assert_eq!(
                towerrec_data::schema(&pq, dir.path()).unwrap(),
                towerrec_data::schema(&cs, dir.path()).unwrap()
            );
            &[Part::Train, Part::Eval]
        };
        for &part in parts {
            let mut p = open(&pq, part, BadRows::Fail, dir.path()).unwrap();
            let mut c = open(&cs, part, BadRows::Fail, dir.path()).unwrap();
            // 50 does not divide the 128-row groups: batches straddle them.
            let (pb, cb) = (batches(&mut *p, 50), batches(&mut *c, 50));
            assert!(!pb.is_empty(), "{split} {part:?}");
            assert_same(&pb, &cb);
        }
    }
    // Record by record as well (no batch path), and a reader on one thread.
    let schema: ParquetSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    let mut p = ParquetReader::open(&dir.path().join("a.parquet"), &schema, BadRows::Fail)
        .unwrap()
        .with_threads(1);
    let mut c = open(
        &config(&format!(
            "format = \"csv\"\npath = \"a.csv\"\n[schema]\n{CLICK_LOG_COLUMNS}"
        )),
        Part::Train,
        BadRows::Fail,
        dir.path(),
    )
    .unwrap();
    let mut n = 0;
    while let Some(r) = p.next_record().unwrap() {
        assert_eq!(Some(r), c.next_record().unwrap(), "row {n}");
        n += 1;
    }
    assert_eq!(n, 1000);
    assert!(c.next_record().unwrap().is_none());
}

/// Row groups larger than a decoded chunk (8,192 rows), so that several record
/// batches share a column chunk's dictionary, under each way of storing the values:
/// with a dictionary, without one, and with a dictionary the writer gives up on
/// part-way through a column chunk. The CSV's batches every time.
#[test]
fn dictionary_encoded_plain_and_fallback_columns_read_as_the_csv() {
    let dir = TempDir::new("pq-dict");
    let (b, csv) = click_log(20_000);
    let csv = dir.file("a.csv", csv);
    let cs: towerrec_data::CsvSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    let expected = batches(
        &mut towerrec_data::CsvReader::open(&csv, &cs, BadRows::Fail).unwrap(),
        1000,
    );
    let schema: ParquetSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    for dictionary in [Dictionary::On, Dictionary::Off, Dictionary::FallsBack] {
        for group in [20_000, 9_000] {
            let path = dir.path().join(format!("{dictionary:?}-{group}.parquet"));
            write_parquet_with(&path, &b, group, dictionary);
            let (dict, plain) = site_pages(&path);
            assert_eq!(
                (dict, plain),
                match dictionary {
                    Dictionary::On => (true, false),
                    Dictionary::Off => (false, true),
                    Dictionary::FallsBack => (true, true),
                },
                "{dictionary:?}: the data pages of \"site\" (dictionary-encoded, plain)"
            );
            let mut p = ParquetReader::open(&path, &schema, BadRows::Fail).unwrap();
            let got = batches(&mut p, 1000);
            assert_same(&got, &expected);
        }
    }
}

/// Whether the first row group's "site" column has dictionary-encoded data pages,
/// and whether it has plain ones.
fn site_pages(path: &Path) -> (bool, bool) {
    use parquet::basic::Encoding;
    use parquet::column::page::Page;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let group = reader.get_row_group(0).unwrap();
    let column = (0..group.num_columns())
        .find(|&c| group.metadata().column(c).column_path().string() == "site")
        .unwrap();
    let (mut dict, mut plain) = (false, false);
    for page in group.get_column_page_reader(column).unwrap() {
        if let Page::DataPage { encoding, .. } | Page::DataPageV2 { encoding, .. } = page.unwrap() {
            dict |= matches!(
                encoding,
                Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY
            );
            plain |= encoding == Encoding::PLAIN;
        }
    }
    (dict, plain)
}

/// A one-row-group file of the given columns.
fn file(dir: &TempDir, name: &str, columns: Vec<(&str, ArrayRef)>) -> std::path::PathBuf {
    let path = dir.path().join(name);
    write_parquet(
        &path,
        &RecordBatch::try_from_iter(columns).unwrap(),
        1 << 20,
    );
    path
}

fn schema(text: &str) -> ParquetSchema {
    toml::from_str(text).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

fn open_err(path: &Path, s: &str) -> String {
    match ParquetReader::open(path, &schema(s), BadRows::Fail) {
        Ok(_) => panic!("{} opened with {s}", path.display()),
        Err(e) => e.to_string(),
    }
}

fn read_err(path: &Path, s: &str) -> String {
    let mut r = ParquetReader::open(path, &schema(s), BadRows::Fail).unwrap();
    loop {
        match r.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("{} read whole with {s}", path.display()),
            Err(e) => return e.to_string(),
        }
    }
}

#[test]
fn columns_that_do_not_fit_the_schema_are_named() {
    let dir = TempDir::new("pq-errors");
    let list = Arc::new(arrow_array::ListArray::from_iter_primitive::<
        arrow_array::types::Int64Type,
        _,
        _,
    >(vec![Some(vec![Some(1)]), None]));
    let path = file(
        &dir,
        "a.parquet",
        vec![
            ("y", Arc::new(Int64Array::from(vec![0, 2])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["1.5", "x"]))),
            ("f", Arc::new(Float64Array::from(vec![1.0, f64::INFINITY]))),
            ("l", list),
        ],
    );
    let name = path.display().to_string();
    let e = open_err(&path, "label = { column = \"nope\" }");
    assert!(
        e.contains(&name) && e.contains("column \"nope\" is not in the file (columns: y, s, f, l)"),
        "{e}"
    );
    let e = open_err(
        &path,
        "label = { column = \"y\" }\ndense = [{ column = \"s\" }]",
    );
    assert!(
        e.contains(&name) && e.contains("data.schema.dense: column \"s\": expected an integer or floating-point column, found Utf8"),
        "{e}"
    );
    let e = open_err(
        &path,
        "label = { column = \"y\" }\nsparse = [{ column = \"l\", rows = 5 }]",
    );
    assert!(
        e.contains("column \"l\"") && e.contains("set `separator`"),
        "{e}"
    );
    let e = open_err(
        &path,
        "label = { column = \"y\" }\nsparse = [{ column = \"f\", rows = 5 }]",
    );
    assert!(
        e.contains("column \"f\"") && e.contains("found Float64"),
        "{e}"
    );
    let e = open_err(&path, "label = { column = \"f\", positive = [\"1\"] }");
    assert!(e.contains("data.schema.label: column \"f\""), "{e}");
    // Row errors name the file, the row (from 1), its row group and the column.
    let e = read_err(&path, "label = { column = \"y\" }");
    assert_eq!(
        e,
        format!("{name}:2: row group 0, column \"y\": expected 0 or 1, found 2")
    );
    let e = read_err(
        &path,
        "label = { column = \"y\", threshold = 1.0 }\ndense = [{ column = \"f\" }]",
    );
    assert_eq!(
        e,
        format!("{name}:2: row group 0, column \"f\": expected a finite number, found inf")
    );
    let e = read_err(&path, "label = { column = \"s\", threshold = 1.0 }");
    assert_eq!(
        e,
        format!("{name}:2: row group 0, column \"s\": expected a number, found \"x\"")
    );
    // Skipping bad rows counts them.
    let mut r =
        ParquetReader::open(&path, &schema("label = { column = \"y\" }"), BadRows::Skip).unwrap();
    assert!(r.next_record().unwrap().is_some());
    assert!(r.next_record().unwrap().is_none());
    assert_eq!(r.skipped(), 1);
}

#[test]
fn damaged_and_foreign_files_are_refused() {
    let dir = TempDir::new("pq-damaged");
    let (batch, csv) = click_log(300);
    let path = dir.path().join("a.parquet");
    write_parquet(&path, &batch, 100);
    let bytes = std::fs::read(&path).unwrap();
    let s = schema(CLICK_LOG_COLUMNS);
    let csv_path = dir.file("a.csv", csv);
    let e = ParquetReader::open(&csv_path, &s, BadRows::Fail)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with(&csv_path.display().to_string()) && e.contains("not a readable Parquet file"),
        "{e}"
    );
    let empty = dir.file("empty.parquet", b"");
    assert!(ParquetReader::open(&empty, &s, BadRows::Fail).is_err());
    for cut in [bytes.len() / 2, bytes.len() - 3, 8] {
        let t = dir.file("t.parquet", &bytes[..cut]);
        let e = ParquetReader::open(&t, &s, BadRows::Fail)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("t.parquet") && e.contains("not a readable Parquet file"),
            "{e}"
        );
    }
}

#[test]
fn a_tail_split_takes_the_row_count_from_the_metadata() {
    let dir = TempDir::new("pq-tail");
    let (batch, _) = click_log(500);
    write_parquet(&dir.path().join("a.parquet"), &batch, 64);
    assert_eq!(
        towerrec_data::parquet::file_rows(&dir.path().join("a.parquet")).unwrap(),
        500
    );
    let c = config(&format!(
        "format = \"parquet\"\npath = \"a.parquet\"\nsplit = {{ kind = \"tail\", eval_rows = 70 }}\n[schema]\n{CLICK_LOG_COLUMNS}"
    ));
    let count = |part| {
        let mut s = open(&c, part, BadRows::Fail, dir.path()).unwrap();
        batches(&mut *s, 1000)
            .iter()
            .map(Batch::batch_size)
            .sum::<usize>()
    };
    assert_eq!(count(Part::Train), 430);
    assert_eq!(count(Part::Eval), 70);
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(24))]

    /// Any row count, row-group size, batch size and thread count: the CSV's batches.
    #[test]
    fn any_layout_reads_as_the_csv(
        rows in 1usize..400,
        group in 1usize..90,
        batch in 1usize..70,
        threads in 1usize..4,
    ) {
        let dir = TempDir::new("pq-prop");
        let (b, csv) = click_log(rows);
        write_parquet(&dir.path().join("a.parquet"), &b, group);
        let csv = dir.file("a.csv", csv);
        let schema: ParquetSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
        let mut p = ParquetReader::open(&dir.path().join("a.parquet"), &schema, BadRows::Fail)
            .unwrap()
            .with_threads(threads);
        let cs: towerrec_data::CsvSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
        let mut c = towerrec_data::CsvReader::open(&csv, &cs, BadRows::Fail).unwrap();
        assert_same(&batches(&mut p, batch), &batches(&mut c, batch));
    }
}

/// Not a test (ignored; no timing is asserted): reads `PARQUET_SPEED_ROWS` rows (default
/// 500000) of the click log as Parquet (snappy, row groups of 131072) and as the binary
/// format, both from the page cache, three times each alternated, and prints rows/s.
/// Run by `bench/parquet_speed.sh`.
#[test]
#[ignore]
fn parquet_speed() {
    use std::time::Instant;
    let rows: usize = std::env::var("PARQUET_SPEED_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let dir = TempDir::new("pq-speed");
    let (b, csv) = click_log(rows);
    let pq = dir.path().join("a.parquet");
    write_parquet(&pq, &b, 131_072);
    let csv = dir.file("a.csv", csv);
    let cs: towerrec_data::CsvSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    let bin = dir.path().join("a.bin");
    let mut reader = towerrec_data::CsvReader::open(&csv, &cs, BadRows::Fail).unwrap();
    towerrec_data::write_binary(&mut reader, &bin, |_| std::ops::ControlFlow::Continue(()))
        .unwrap();
    let schema: ParquetSchema = toml::from_str(CLICK_LOG_COLUMNS).unwrap();
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    println!(
        "{rows} rows; parquet {} bytes, binary {} bytes; batches of 2048 through next_batch",
        size(&pq),
        size(&bin)
    );
    for round in 0..3 {
        let t = Instant::now();
        let mut p = ParquetReader::open(&pq, &schema, BadRows::Fail).unwrap();
        let n: usize = batches(&mut p, 2048).iter().map(Batch::batch_size).sum();
        let tp = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let ds = Arc::new(towerrec_data::BinaryDataset::open(&bin).unwrap());
        let mut s = towerrec_data::BinaryStream::new(ds, 0..u64::MAX);
        let m: usize = batches(&mut s, 2048).iter().map(Batch::batch_size).sum();
        let tb = t.elapsed().as_secs_f64();
        assert_eq!((n, m), (rows, rows));
        println!(
            "round {round}: parquet {:.0} rows/s ({tp:.3} s), binary {:.0} rows/s ({tb:.3} s)",
            rows as f64 / tp,
            rows as f64 / tb
        );
    }
}
