//! `[data]` configs end to end: every format through `open` / `schema`, splits,
//! relative paths, CLI overrides and binary sniffing.

use crate::common::{criteo_row, drain, TempDir};
use std::path::{Path, PathBuf};
use towerrec_data::{
    open, schema, write_binary, BadRows, DataConfig, Error, Part, Record, RecordStream, Split,
};

fn parse(text: &str) -> DataConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
}

fn read(cfg: &DataConfig, part: Part, base: &Path) -> Vec<Record> {
    drain(open(cfg, part, BadRows::Fail, base).unwrap().as_mut())
}

/// A Criteo file of `n` rows in `dir`, named relative to it.
fn criteo_file(dir: &TempDir, n: u64) -> PathBuf {
    let text: String = (0..n).map(|i| criteo_row(i) + "\n").collect();
    dir.file("day.txt", text)
}

#[test]
fn criteo_tail_head_random_and_none_splits() {
    let dir = TempDir::new("src-criteo");
    criteo_file(&dir, 50);
    let base = dir.path();
    let all = read(
        &parse(
            "format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [1000]\neval_path = \"day.txt\"",
        ),
        Part::Train,
        base,
    );
    assert_eq!(all.len(), 50);
    for (split, train_len) in [
        ("{ kind = \"tail\", eval_rows = 10 }", 40),
        ("{ kind = \"tail\", eval_fraction = 0.3 }", 35),
        ("{ kind = \"head\", train_rows = 20 }", 20),
    ] {
        let cfg = parse(&format!(
            "format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [1000]\nsplit = {split}"
        ));
        let train = read(&cfg, Part::Train, base);
        let eval = read(&cfg, Part::Eval, base);
        assert_eq!(train.len(), train_len, "{split}");
        assert_eq!(
            [train, eval].concat(),
            all,
            "{split}: train then eval is the file"
        );
        assert_eq!(schema(&cfg, base).unwrap().num_sparse(), 26);
    }
    let cfg = parse("format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [1000]\nsplit = { kind = \"random\", eval_fraction = 0.2, seed = 7 }");
    let train = read(&cfg, Part::Train, base);
    let eval = read(&cfg, Part::Eval, base);
    assert_eq!(train.len() + eval.len(), 50);
    assert!(!eval.is_empty() && eval.iter().all(|r| !train.contains(r)));
    assert_eq!(read(&cfg, Part::Eval, base), eval, "reproducible");
}

#[test]
fn no_eval_source_is_reported_before_training() {
    let dir = TempDir::new("src-noeval");
    criteo_file(&dir, 5);
    let cfg = parse("format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [10]");
    assert_eq!(read(&cfg, Part::Train, dir.path()).len(), 5);
    let err = schema(&cfg, dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::Config(_)) && err.to_string().contains("eval_path"),
        "{err}"
    );
    assert!(open(&cfg, Part::Eval, BadRows::Fail, dir.path()).is_err());
}

#[test]
fn eval_override_reads_the_whole_file_and_data_override_may_be_binary() {
    let dir = TempDir::new("src-override");
    criteo_file(&dir, 30);
    let base = dir.path();
    let cfg = parse("format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [1000]\nsplit = { kind = \"tail\", eval_rows = 10 }");
    // Preprocess the eval part to binary, then point --data at it.
    let bin = base.join("eval.bin");
    let mut eval_stream = open(&cfg, Part::Eval, BadRows::Fail, base).unwrap();
    assert_eq!(
        write_binary(eval_stream.as_mut(), &bin, |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap(),
        10
    );
    let eval_text = read(&cfg, Part::Eval, base);

    let over = cfg.clone().with_paths(None, Some(bin.clone()));
    assert!(matches!(
        &over,
        DataConfig::Criteo {
            split: Split::None,
            ..
        }
    ));
    assert_eq!(
        read(&over, Part::Train, base).len(),
        30,
        "eval override → train on the whole file"
    );
    assert_eq!(
        read(&over, Part::Eval, base),
        eval_text,
        "a binary eval file under a criteo config"
    );
    schema(&over, base).unwrap();

    // A tail of 10 rows of a 10-row file leaves nothing to train on: refused, for
    // either part, rather than an empty stream.
    let swapped = cfg.with_paths(Some(bin), None);
    for part in [Part::Train, Part::Eval] {
        let e = open(&swapped, part, BadRows::Fail, base).err().unwrap();
        assert!(e.to_string().contains("leaves 0 of the 10 rows"), "{e}");
    }
}

#[test]
fn csv_config_resolves_relative_paths_and_checks_columns() {
    let dir = TempDir::new("src-csv");
    let sub = dir.path().join("data");
    std::fs::create_dir_all(&sub).unwrap();
    let text: String = std::iter::once("id,click,site,n\n".to_string())
        .chain((0..20).map(|i| format!("{i},{},s{},{}\n", i % 2, i % 5, i * 3)))
        .collect();
    std::fs::write(sub.join("a.csv"), text).unwrap();
    let cfg = parse(
        r#"
format = "csv"
path = "data/a.csv"
split = { kind = "tail", eval_fraction = 0.25 }
[schema]
label = { column = "click" }
dense = [{ column = "n" }]
sparse = [{ column = "site", rows = 100 }]
"#,
    );
    let s = schema(&cfg, dir.path()).unwrap();
    assert_eq!(s.sparse_names(), vec!["site"]);
    assert_eq!(read(&cfg, Part::Train, dir.path()).len(), 15);
    assert_eq!(read(&cfg, Part::Eval, dir.path()).len(), 5);
    let bad = parse(
        r#"
format = "csv"
path = "data/a.csv"
split = { kind = "head", train_rows = 3 }
[schema]
label = { column = "clicked" }
"#,
    );
    let err = schema(&bad, dir.path()).unwrap_err().to_string();
    assert!(err.contains("clicked"), "{err}");
    let abs = parse(&format!(
        "format = \"csv\"\npath = {:?}\nsplit = {{ kind = \"head\", train_rows = 3 }}\n[schema]\nlabel = {{ column = \"click\" }}",
        sub.join("a.csv").display().to_string()
    ));
    assert_eq!(read(&abs, Part::Train, Path::new("/nonexistent")).len(), 3);
}

#[test]
fn synthetic_and_binary_configs() {
    let dir = TempDir::new("src-syn");
    let cfg = parse(
        r#"
format = "synthetic"
train_samples = 300
eval_samples = 50
num_dense = 2
seed = 5
tables = [{ rows = 100, count = 3, zipf_exponent = 1.1 }, { name = "tags", rows = 20, pooling = { mean = 3.0 } }]
"#,
    );
    let s = schema(&cfg, dir.path()).unwrap();
    assert_eq!(s.sparse_names(), vec!["C1", "C2", "C3", "tags"]);
    let train = read(&cfg, Part::Train, dir.path());
    let eval = read(&cfg, Part::Eval, dir.path());
    assert_eq!((train.len(), eval.len()), (300, 50));
    assert!(eval.iter().all(|r| !train.contains(r)));

    let mut train_stream = open(&cfg, Part::Train, BadRows::Fail, dir.path()).unwrap();
    write_binary(train_stream.as_mut(), &dir.path().join("t.bin"), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let mut eval_stream = open(&cfg, Part::Eval, BadRows::Fail, dir.path()).unwrap();
    write_binary(eval_stream.as_mut(), &dir.path().join("e.bin"), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let bin = parse("format = \"binary\"\npath = \"t.bin\"\neval_path = \"e.bin\"");
    assert_eq!(schema(&bin, dir.path()).unwrap(), s);
    assert_eq!(read(&bin, Part::Train, dir.path()), train);
    assert_eq!(read(&bin, Part::Eval, dir.path()), eval);

    let over = cfg
        .clone()
        .with_paths(Some("t.bin".into()), Some("e.bin".into()));
    assert_eq!(read(&over, Part::Eval, dir.path()), eval);
    let eval_only = cfg.with_paths(None, Some("e.bin".into()));
    assert_eq!(read(&eval_only, Part::Train, dir.path()), train);
    assert_eq!(read(&eval_only, Part::Eval, dir.path()), eval);
    schema(&eval_only, dir.path()).unwrap();

    let split = parse(
        "format = \"binary\"\npath = \"t.bin\"\nsplit = { kind = \"tail\", eval_rows = 100 }",
    );
    assert_eq!(read(&split, Part::Eval, dir.path()), train[200..]);
    let mismatch = parse("format = \"binary\"\npath = \"t.bin\"\neval_path = \"day.txt\"");
    dir.file("day.txt", criteo_row(0));
    assert!(schema(&mismatch, dir.path()).is_err());
}

#[test]
fn bad_rows_policy_reaches_the_readers() {
    let dir = TempDir::new("src-badrows");
    dir.file(
        "day.txt",
        format!("{}\nnot a row\n{}\n", criteo_row(0), criteo_row(1)),
    );
    let cfg = parse("format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [100]\nsplit = { kind = \"tail\", eval_rows = 1 }");
    assert!(drain_err(
        open(&cfg, Part::Train, BadRows::Fail, dir.path())
            .unwrap()
            .as_mut()
    ));
    let mut s = open(&cfg, Part::Train, BadRows::Skip, dir.path()).unwrap();
    assert_eq!(drain(s.as_mut()).len(), 1);
    assert_eq!(s.skipped(), 1);
}

fn drain_err(s: &mut dyn RecordStream) -> bool {
    loop {
        match s.next_record() {
            Ok(Some(_)) => continue,
            Ok(None) => return false,
            Err(e) => return e.to_string().contains("day.txt:2: row"),
        }
    }
}

/// A CSV log with a day column, rows not sorted by day: `split = { kind = "column" }`
/// trains on the days before `eval_from` and evaluates on the rest, each part in file
/// order; with or without a header.
#[test]
fn a_column_split_divides_rows_by_the_columns_value() {
    let dir = TempDir::new("src-column");
    let days = [0, 3, 1, 2, 3, 0, 4, 2, 1, 4, 3];
    let body: String = days
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{},{},u{i},{d}\n", i % 2, i))
        .collect();
    dir.file("log.csv", format!("label,x,user,day\n{body}"));
    dir.file("bare.csv", body);
    for (file, header, day, user) in [
        ("log.csv", "true", "day", "user"),
        ("bare.csv", "false", "3", "2"),
    ] {
        let cfg = parse(&format!(
            r#"format = "csv"
path = "{file}"
split = {{ kind = "column", column = "{day}", eval_from = 3 }}
schema = {{ header = {header}, label = {{ column = "0" }}, dense = [{{ column = "1", transform = "none" }}], sparse = [{{ column = "{user}", rows = 100 }}] }}"#
        )
        .replace("\"0\" }", if header == "true" { "\"label\" }" } else { "\"0\" }" })
        .replace("column = \"1\"", if header == "true" { "column = \"x\"" } else { "column = \"1\"" }));
        let rows = |part| -> Vec<usize> {
            read(&cfg, part, dir.path())
                .iter()
                .map(|r| r.dense[0] as usize)
                .collect()
        };
        let want = |eval: bool| -> Vec<usize> {
            (0..days.len())
                .filter(|&i| (days[i] >= 3) == eval)
                .collect()
        };
        assert_eq!(rows(Part::Train), want(false), "{file}");
        assert_eq!(rows(Part::Eval), want(true), "{file}");
    }
}

/// A day that is not a number stops the run naming the file, the line and the split's
/// column; skipped, its row is in neither part and counted in both.
#[test]
fn an_unreadable_split_column_is_named_or_skipped_and_counted() {
    let dir = TempDir::new("src-column-bad");
    dir.file("log.csv", "label,user,day\n1,a,1\n0,b,x7\n1,c,5\n0,d,2\n");
    let cfg = parse(
        r#"format = "csv"
path = "log.csv"
split = { kind = "column", column = "day", eval_from = 5 }
schema = { label = { column = "label" }, sparse = [{ column = "user", rows = 10 }] }"#,
    );
    let Err(e) = open(&cfg, Part::Train, BadRows::Fail, dir.path()) else {
        panic!("a bad day is an error");
    };
    let e = e.to_string();
    assert!(
        e.contains("log.csv:3") && e.contains("data.split.column \"day\"") && e.contains("\"x7\""),
        "{e}"
    );
    let mut train = open(&cfg, Part::Train, BadRows::Skip, dir.path()).unwrap();
    assert_eq!(drain(train.as_mut()).len(), 2);
    assert_eq!(train.skipped(), 1);
    let mut eval = open(&cfg, Part::Eval, BadRows::Skip, dir.path()).unwrap();
    assert_eq!(drain(eval.as_mut()).len(), 1);
    assert_eq!(eval.skipped(), 1);
    // A column that is not in the header is named with the header's columns.
    let missing = parse(
        r#"format = "csv"
path = "log.csv"
split = { kind = "column", column = "week", eval_from = 5 }
schema = { label = { column = "label" }, sparse = [{ column = "user", rows = 10 }] }"#,
    );
    let e = open(&missing, Part::Train, BadRows::Fail, dir.path())
        .err()
        .expect("no such column")
        .to_string();
    assert!(
        e.contains("data.split.column") && e.contains("\"week\"") && e.contains("label, user, day"),
        "{e}"
    );
}

/// Formats without columns to read refuse the split and say what to do instead.
#[test]
fn a_column_split_of_a_criteo_or_binary_file_is_refused() {
    let dir = TempDir::new("src-column-refused");
    criteo_file(&dir, 5);
    let cfg = parse(
        "format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [10]\nsplit = { kind = \"column\", column = \"0\", eval_from = 1 }",
    );
    let e = open(&cfg, Part::Train, BadRows::Fail, dir.path())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("kind = \"column\"") && e.contains("--part train"),
        "{e}"
    );
    let e = parse("format = \"csv\"\npath = \"x.csv\"\nsplit = { kind = \"column\", column = \"d\", eval_from = inf }\nschema = { label = { column = \"l\" } }");
    let e = open(&e, Part::Train, BadRows::Fail, dir.path())
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("data.split.eval_from"), "{e}");
}
