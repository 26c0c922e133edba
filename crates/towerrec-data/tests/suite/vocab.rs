//! `data.vocab` end to end: a vocabulary counted over the training part of a Criteo or
//! CSV file (never its evaluation part), then read back through `schema` and `open`,
//! which take the table sizes from it and encode with it; mismatches are refused with
//! the file named; binary files carry the vocabulary's checksum.

use crate::common::{criteo_line, drain, TempDir};
use std::ops::ControlFlow;
use std::path::Path;
use towerrec_data::source::{open_keys, vocab_checksum};
use towerrec_data::vocab::{self, VocabOptions};
use towerrec_data::{open, schema, write_binary_with, BadRows, DataConfig, Part};

fn parse(text: &str) -> DataConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
}

/// A Criteo row whose C1 is `c1` and C2 is `c2` (hex), other categoricals empty.
fn row(label: &str, c1: &str, c2: &str) -> String {
    let mut sparse = [""; 26];
    sparse[0] = c1;
    sparse[1] = c2;
    criteo_line(label, &[""; 13], &sparse)
}

fn build(cfg: &DataConfig, base: &Path, opts: &VocabOptions, out: &Path) -> vocab::Vocab {
    let mut keys = open_keys(cfg, Part::Train, BadRows::Fail, base).unwrap();
    let v = vocab::build(keys.as_mut(), opts, |_| {}).unwrap();
    v.write(out).unwrap();
    v
}

#[test]
fn a_criteo_vocabulary_counts_the_training_part_and_encodes_by_frequency() {
    let dir = TempDir::new("vocab-criteo");
    // Train: C1 = a ×3, b ×2, c ×1; eval (the last 2 rows): d ×2, never in the vocab.
    let rows = [
        row("1", "b", "1"),
        row("0", "a", "1"),
        row("0", "c", "2"),
        row("1", "a", "1"),
        row("0", "b", "1"),
        row("1", "a", "1"),
        row("0", "d", "1"),
        row("1", "d", "1"),
    ];
    dir.file("day.txt", rows.join("\n") + "\n");
    let base = dir.path();
    let hashed = parse(
        "format = \"criteo\"\npath = \"day.txt\"\ntable_rows = [1000]\nsplit = { kind = \"tail\", eval_rows = 2 }",
    );
    let opts = VocabOptions {
        min_count: 2,
        ..Default::default()
    };
    let v = build(&hashed, base, &opts, &base.join("v.vocab"));
    assert_eq!(v.features[0].keys, [0xa, 0xb]);
    // C2: 1 ×5, 2 ×1 (below min_count). Empty fields are key 0, seen 6 times.
    assert_eq!(v.features[1].keys, [1]);
    assert_eq!(v.features[2].keys, [0]);
    assert_eq!(v.info.rows_read, 6);
    let cfg = parse(
        "format = \"criteo\"\npath = \"day.txt\"\nvocab = \"v.vocab\"\nsplit = { kind = \"tail\", eval_rows = 2 }",
    );
    let s = schema(&cfg, base).unwrap();
    assert_eq!(s.sparse[0].rows, 3);
    assert_eq!(s.sparse[1].rows, 2);
    let train = drain(
        open(&cfg, Part::Train, BadRows::Fail, base)
            .unwrap()
            .as_mut(),
    );
    let c1: Vec<u64> = train.iter().map(|r| r.sparse[0][0]).collect();
    assert_eq!(c1, [2, 1, 0, 1, 2, 1]);
    let eval = drain(
        open(&cfg, Part::Eval, BadRows::Fail, base)
            .unwrap()
            .as_mut(),
    );
    assert!(eval.iter().all(|r| r.sparse[0] == [0]));
    assert_eq!(
        vocab_checksum(&cfg, base).unwrap().as_deref(),
        Some(v.checksum())
    );
    assert_eq!(vocab_checksum(&hashed, base).unwrap(), None);

    // Table sizes given and agreeing are fine; disagreeing, refused.
    let agree = parse("format = \"criteo\"\npath = \"day.txt\"\nvocab = \"v.vocab\"\ntable_rows = [3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]\nsplit = { kind = \"tail\", eval_rows = 2 }");
    schema(&agree, base).unwrap();
    let disagree =
        parse("format = \"criteo\"\npath = \"day.txt\"\nvocab = \"v.vocab\"\ntable_rows = [1000]");
    let e = schema(&disagree, base).unwrap_err().to_string();
    assert!(
        e.contains("data.table_rows") && e.contains("v.vocab"),
        "{e}"
    );
    // A missing vocabulary file is named.
    let missing = parse("format = \"criteo\"\npath = \"day.txt\"\nvocab = \"none.vocab\"");
    let e = schema(&missing, base).unwrap_err().to_string();
    assert!(e.contains("none.vocab"), "{e}");
}

#[test]
fn a_csv_vocabulary_names_its_features_and_binary_files_carry_its_checksum() {
    let dir = TempDir::new("vocab-csv");
    dir.file("d.csv", "y,user,tags\n1,u1,a|b\n0,u2,b\n1,u1,\n0,u3,b|c\n");
    let base = dir.path();
    let csv = |extra: &str, user_rows: &str| {
        parse(&format!(
            "format = \"csv\"\npath = \"d.csv\"\neval_path = \"d.csv\"\n{extra}\n[schema]\nlabel = {{ column = \"y\" }}\nsparse = [{{ column = \"user\"{user_rows} }}, {{ column = \"tags\", separator = \"|\", name = \"t\"{user_rows} }}]"
        ))
    };
    let v = build(
        &csv("", ""),
        base,
        &VocabOptions::default(),
        &base.join("v.vocab"),
    );
    assert_eq!(v.names(), ["user", "t"]);
    assert_eq!(v.rows(), [4, 4]);
    let cfg = csv("vocab = \"v.vocab\"", "");
    let s = schema(&cfg, base).unwrap();
    assert_eq!(s.sparse[1].rows, 4);
    let rows = drain(
        open(&cfg, Part::Train, BadRows::Fail, base)
            .unwrap()
            .as_mut(),
    );
    // user: u1 ×2 → 1; tags: b ×3 → 1, then a, c by key.
    assert_eq!(rows[0].sparse[0], [1]);
    assert_eq!(rows[0].sparse[1].len(), 2);
    assert!(rows[0].sparse[1].contains(&1));
    assert_eq!(rows[2].sparse[1], Vec::<u64>::new());
    // Without rows and without a vocabulary: a clear error.
    let e = schema(&csv("", ""), base).unwrap_err().to_string();
    assert!(e.contains("needs `rows`"), "{e}");
    // A column's rows that disagree.
    let e = schema(&csv("vocab = \"v.vocab\"", ", rows = 9"), base)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"user\"") && e.contains("v.vocab"), "{e}");
    // Another feature set: the vocabulary file and both lists are named.
    let other = parse("format = \"csv\"\npath = \"d.csv\"\neval_path = \"d.csv\"\nvocab = \"v.vocab\"\n[schema]\nlabel = { column = \"y\" }\nsparse = [{ column = \"user\" }]");
    let e = schema(&other, base).unwrap_err().to_string();
    assert!(
        e.contains("v.vocab") && e.contains("[user, t]") && e.contains("[user]"),
        "{e}"
    );

    // A binary file written under the vocabulary records it; read under the same
    // config it is fine, under another vocabulary or hashing refused.
    let bin = base.join("d.bin");
    let mut stream = open(&cfg, Part::Train, BadRows::Fail, base).unwrap();
    write_binary_with(
        stream.as_mut(),
        &bin,
        vocab_checksum(&cfg, base).unwrap(),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
    let on_bin = cfg.clone().with_paths(Some(bin.clone()), None);
    assert_eq!(
        drain(
            open(&on_bin, Part::Train, BadRows::Fail, base)
                .unwrap()
                .as_mut()
        ),
        rows
    );
    assert_eq!(
        vocab_checksum(&parse("format = \"binary\"\npath = \"d.bin\""), base)
            .unwrap()
            .as_deref(),
        Some(v.checksum())
    );
    let hashed_cfg = csv("", ", rows = 4").with_paths(Some(bin.clone()), None);
    let e = schema(&hashed_cfg, base).unwrap_err().to_string();
    assert!(
        e.contains("d.bin") && e.contains("the config hashes"),
        "{e}"
    );
    let w = build(
        &csv("", ""),
        base,
        &VocabOptions {
            max_rows: Some(2),
            ..Default::default()
        },
        &base.join("w.vocab"),
    );
    let other = csv("vocab = \"w.vocab\"", "").with_paths(Some(bin.clone()), None);
    let e = open(&other, Part::Train, BadRows::Fail, base)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(v.checksum()) && e.contains(w.checksum()), "{e}");
    // A hashed binary under a vocabulary config.
    let hashed_bin = base.join("h.bin");
    let mut s = open(&csv("", ", rows = 4"), Part::Train, BadRows::Fail, base).unwrap();
    write_binary_with(s.as_mut(), &hashed_bin, None, |_| ControlFlow::Continue(())).unwrap();
    let e = schema(&cfg.clone().with_paths(Some(hashed_bin), None), base)
        .unwrap_err()
        .to_string();
    assert!(e.contains("written with hashing"), "{e}");
    // Keys cannot be counted from a binary file.
    let e = open_keys(&on_bin, Part::Train, BadRows::Fail, base)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("d.bin") && e.contains("binary"), "{e}");
}
