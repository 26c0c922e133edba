//! `towerrec vocab` end to end: a vocabulary counted over a config's training part,
//! then train → eval (text and preprocessed binary) with the same encoding, and a
//! resume or an evaluation under another vocabulary refused.

use std::path::Path;

use crate::common;

use crate::common::{assert_fails_with, text, towerrec, TINY_MODEL};

/// A Criteo TSV of `n` rows whose categoricals are Zipf-ish (low ids frequent).
fn criteo_file(path: &Path, n: u64) {
    let mut s = String::new();
    for i in 0..n {
        let label = u8::from(i % 3 == 0);
        let ints: Vec<String> = (0..13).map(|j| ((i + j) % 9).to_string()).collect();
        let cats: Vec<String> = (0..26u64)
            .map(|j| format!("{:x}", (i * (j + 1)) % (i % 17 + 1)))
            .collect();
        s += &format!("{label}\t{}\t{}\n", ints.join("\t"), cats.join("\t"));
    }
    std::fs::write(path, s).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn vocab_then_train_eval_and_a_resume_under_another_vocabulary_is_refused() {
    let dir = common::tmp("vocab", "criteo");
    criteo_file(&dir.join("d.tsv"), 400);
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "{TINY_MODEL}[data]\nformat = \"criteo\"\npath = \"d.tsv\"\nvocab = \"v.vocab\"\n\
             split = {{ kind = \"tail\", eval_rows = 80 }}\n"
        ),
    )
    .unwrap();
    let vocab = dir.join("v.vocab");

    // The output may not replace an input.
    let o = towerrec(&["vocab", "--config", s(&cfg), "--out", s(&dir.join("d.tsv"))]);
    assert_fails_with(&o, &["d.tsv"]);

    let o = towerrec(&[
        "vocab",
        "--config",
        s(&cfg),
        "--min-count",
        "2",
        "--out",
        s(&vocab),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains("C1: ") && stdout.contains("OOV"),
        "{stdout}"
    );
    assert!(stdout.contains("320 rows read"), "{stdout}");
    assert!(stdout.contains("exact counts"), "{stdout}");
    let checksum = stdout.split("checksum ").nth(1).unwrap().trim().to_string();

    // Train, then eval: the same encoding gives the same AUC.
    let run = dir.join("run");
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        s(&cfg),
        "--out",
        s(&run),
        "--stop-after",
        "5",
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = towerrec(&["train", "-q", "--resume", s(&run)]);
    assert!(o.status.success(), "{}", text(&o).1);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let o = towerrec(&["eval", "--checkpoint", s(&run)]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let m: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(m["auc"], summary["auc"]);
    assert_eq!(m["count"], 80);

    // The evaluation part preprocessed under the vocabulary scores the same.
    let bin = dir.join("eval.bin");
    let o = towerrec(&[
        "preprocess",
        "--config",
        s(&cfg),
        "--part",
        "eval",
        "--out",
        s(&bin),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = towerrec(&["eval", "--checkpoint", s(&run), "--data", s(&bin)]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let m: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(m["auc"], summary["auc"]);

    // A stopped run resumed after
    // the vocabulary was rebuilt otherwise is refused, naming both and the file.
    let run2 = dir.join("run2");
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        s(&cfg),
        "--out",
        s(&run2),
        "--stop-after",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = towerrec(&[
        "vocab",
        "--config",
        s(&cfg),
        "--max-rows",
        "3",
        "--out",
        s(&vocab),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let other = stdout.split("checksum ").nth(1).unwrap().trim().to_string();
    assert_ne!(other, checksum);
    let o = towerrec(&["train", "-q", "--resume", s(&run2)]);
    let e = assert_fails_with(&o, &[&checksum, &other, "v.vocab"]);
    assert!(!e.contains("panicked"), "{e}");
    let o = towerrec(&["eval", "--checkpoint", s(&run)]);
    assert_fails_with(&o, &[&checksum, &other]);
    // The binary written under the first vocabulary is refused under the second.
    let o = towerrec(&["eval", "--checkpoint", s(&run), "--data", s(&bin)]);
    assert_fails_with(&o, &["eval.bin"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_csv_config_takes_its_table_sizes_from_the_vocabulary_and_the_sketch_states_its_bound() {
    let dir = common::tmp("vocab", "csv");
    let cfg = common::csv_config(&dir, 200, None);
    // Drop the rows: the vocabulary gives them.
    let text_cfg = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(", rows = 10", "")
        .replace("[data.schema]", "vocab = \"v.vocab\"\n[data.schema]");
    std::fs::write(&cfg, text_cfg).unwrap();
    let vocab = dir.join("v.vocab");
    let o = towerrec(&[
        "vocab",
        "--config",
        s(&cfg),
        "--sketch",
        "--max-rows",
        "4",
        "--sketch-epsilon",
        "0.01",
        "--out",
        s(&vocab),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains("a: ? distinct (sketched), 3 kept (4 rows)"),
        "{stdout}"
    );
    assert!(stdout.contains("overestimates by at most 0.01"), "{stdout}");
    // Without --max-rows the sketch is refused.
    let o = towerrec(&[
        "vocab",
        "--config",
        s(&cfg),
        "--sketch",
        "--out",
        s(&dir.join("w")),
    ]);
    assert_fails_with(&o, &["max_rows"]);
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        s(&cfg),
        "--out",
        s(&dir.join("run")),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("final eval"), "{stdout}");
    std::fs::remove_dir_all(dir).ok();
}
