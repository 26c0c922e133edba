//! The `towerrec` binary end to end: the quickstart, bad input, eval, resume.

use std::path::{Path, PathBuf};

use crate::common;

use crate::common::{text, towerrec};

/// A fresh scratch directory for this file's tests.
fn tmp_dir(name: &str) -> std::path::PathBuf {
    common::tmp("cli", name)
}

/// The quickstart shrunk to seconds.
const SMALL: [&str; 6] = [
    "--set",
    "data.train_samples=6000",
    "--set",
    "data.eval_samples=2000",
    "--set",
    "train.eval_every=0",
];

#[test]
fn quickstart_trains_and_prints_the_final_auc() {
    let dir = tmp_dir("quickstart");
    let out = dir.join("run");
    let mut args = vec!["train", "--quiet", "--out", out.to_str().unwrap()];
    args.extend(SMALL);
    let o = towerrec(&args);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("final eval: auc 0."), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["model"], "dlrm");
    assert!(summary["auc"].as_f64().unwrap() > 0.6);

    // `eval` on the saved model scores the same held-out data to the same AUC.
    let o = towerrec(&["eval", "--checkpoint", out.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let m: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(m["auc"], summary["auc"]);
    assert_eq!(m["count"], 2000);

    // datagen writes the same held-out data as a binary file; eval reads it.
    let bin = dir.join("eval.bin");
    let mut args = vec!["datagen", "--part", "eval", "--out", bin.to_str().unwrap()];
    args.extend(SMALL);
    assert!(towerrec(&args).status.success());
    let o = towerrec(&[
        "eval",
        "--checkpoint",
        out.to_str().unwrap(),
        "--data",
        bin.to_str().unwrap(),
    ]);
    let m: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(m["auc"], summary["auc"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn quantize_writes_an_int8_checkpoint_that_eval_scores() {
    let dir = tmp_dir("quantize");
    let out = dir.join("run");
    let mut args = vec!["train", "--quiet", "--out", out.to_str().unwrap()];
    args.extend(SMALL);
    assert!(towerrec(&args).status.success());
    let o = towerrec(&["eval", "--checkpoint", out.to_str().unwrap()]);
    let fp32: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();

    let q = dir.join("int8.safetensors");
    let o = towerrec(&[
        "quantize",
        "--checkpoint",
        out.to_str().unwrap(),
        "--out",
        q.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("quantized 26 tables to int8 row-wise"),
        "{stderr}"
    );
    let tables: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(tables.as_array().unwrap().len(), 26);
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(size(&q) * 2 < size(&out.join("checkpoint.safetensors")));

    // eval scores it: the AUC moves by little.
    let o = towerrec(&["eval", "--checkpoint", q.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let int8: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let (a, b) = (fp32["auc"].as_f64().unwrap(), int8["auc"].as_f64().unwrap());
    assert!((a - b).abs() < 0.003, "fp32 {a}, int8 {b}");
    assert_eq!(int8["count"], 2000);

    // Quantizing it again finds nothing to do; training from it is refused.
    let again = dir.join("again.safetensors");
    let o = towerrec(&[
        "quantize",
        "--checkpoint",
        q.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("int8 already"), "{}", text(&o).1);
    let o = towerrec(&[
        "quantize",
        "--checkpoint",
        out.to_str().unwrap(),
        "--out",
        q.to_str().unwrap(),
        "--tables",
        "C1,nope",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("no table is called 'nope'"),
        "{}",
        text(&o).1
    );
    let o = towerrec(&[
        "bench",
        "model",
        "--mode",
        "train",
        "--set",
        "model.table_precision=\"int8\"",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("training needs fp32, fp16 or bf16"),
        "{}",
        text(&o).1
    );
}

#[test]
fn stop_and_resume_through_the_cli() {
    let dir = tmp_dir("resume");
    let out = dir.join("run");
    let mut args = vec![
        "train",
        "-q",
        "--out",
        out.to_str().unwrap(),
        "--stop-after",
        "10",
    ];
    args.extend(SMALL);
    let o = towerrec(&args);
    assert!(o.status.success());
    assert!(text(&o).0.contains("stopped at step 10"));
    assert!(!out.join("summary.json").exists());
    let o = towerrec(&["train", "-q", "--resume", out.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("final eval"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"], 6000u64.div_ceil(256));
    std::fs::remove_dir_all(dir).ok();
}

/// A Criteo TSV of `n` rows with a malformed row at line `bad_line` (1-based), if any.
fn criteo_file(path: &Path, n: usize, bad: Option<(usize, &str)>) {
    let mut s = String::new();
    for i in 1..=n {
        if let Some((line, row)) = bad {
            if line == i {
                s.push_str(row);
                s.push('\n');
                continue;
            }
        }
        let label = (i * 7 % 5 == 0) as u8;
        let ints: Vec<String> = (0..13)
            .map(|j| ((i * 31 + j * 17) % 50).to_string())
            .collect();
        let cats: Vec<String> = (0..26)
            .map(|j| format!("{:08x}", (i * 2654435761 + j * 97) % 1000))
            .collect();
        s.push_str(&format!(
            "{label}\t{}\t{}\n",
            ints.join("\t"),
            cats.join("\t")
        ));
    }
    std::fs::write(path, s).unwrap();
}

fn criteo_config(dir: &Path, data: &Path) -> PathBuf {
    let cfg = format!(
        r#"{}
[data]
format = "criteo"
path = "{}"
table_rows = [100]
split = {{ kind = "tail", eval_rows = 20 }}
"#,
        common::TINY_MODEL,
        data.file_name().unwrap().to_str().unwrap()
    );
    let path = dir.join("c.toml");
    std::fs::write(&path, cfg).unwrap();
    path
}

#[test]
fn a_bad_row_stops_the_run_naming_file_line_and_field_or_is_skipped() {
    let dir = tmp_dir("badrows");
    let data = dir.join("d.tsv");
    let mut fields: Vec<String> = vec!["1".into()];
    fields.extend((0..13).map(|_| "3".to_string()));
    fields.extend((0..26).map(|_| "0a1b".to_string()));
    fields[15] = "zz!".into(); // C2
    let bad_row = fields.join("\t");
    criteo_file(&data, 100, Some((42, &bad_row)));
    let cfg = criteo_config(&dir, &data);
    let out = dir.join("run");
    let base = [
        "train",
        "-q",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        // Each run replaces the failed one before it.
        "--overwrite",
    ];

    let o = towerrec(&base);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("d.tsv:42"), "{stderr}");
    assert!(stderr.contains("C2"), "{stderr}");
    assert!(stderr.contains("zz!"), "{stderr}");

    // One bad row of the 80 training rows is 1.25%: past the default 1% limit ...
    let mut skip = base.to_vec();
    skip.extend(["--bad-rows", "skip"]);
    let o = towerrec(&skip);
    assert!(!o.status.success());
    let (_, stderr) = text(&o);
    assert!(
        stderr.contains("1 of 80 training rows (1.25%) were malformed"),
        "{stderr}"
    );
    assert!(!out.join("summary.json").exists());
    // ... and within a 2% one.
    skip.extend(["--max-bad-fraction", "0.02"]);
    let o = towerrec(&skip);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains("skipped malformed rows: 1 in training data"),
        "{stdout}"
    );

    // 39 fields: the message says what was expected.
    let short: Vec<&str> = bad_row.split('\t').take(39).collect();
    criteo_file(&data, 100, Some((7, &short.join("\t"))));
    let (_, stderr) = text(&towerrec(&base));
    assert!(
        stderr.contains("d.tsv:7") && stderr.contains("40"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn config_and_file_errors_name_what_is_wrong() {
    let dir = tmp_dir("errors");
    let (_, stderr) = text(&towerrec(&["train", "--config", "/nonexistent/x.toml"]));
    assert!(stderr.contains("/nonexistent/x.toml"), "{stderr}");

    let good = std::fs::read_to_string(criteo_config(&dir, &dir.join("d.tsv"))).unwrap();
    let cfg = dir.join("bad.toml");
    assert!(good.contains("batch_size = 16"));
    std::fs::write(
        &cfg,
        good.replace("batch_size = 16", "batch_size = \"big\""),
    )
    .unwrap();
    let o = towerrec(&["train", "--config", cfg.to_str().unwrap()]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(
        stderr.contains("bad.toml") && stderr.contains("batch_size"),
        "{stderr}"
    );

    let data = dir.join("missing.tsv");
    let cfg = criteo_config(&dir, &data);
    let (_, stderr) = text(&towerrec(&[
        "train",
        "-q",
        "--config",
        cfg.to_str().unwrap(),
    ]));
    assert!(stderr.contains("missing.tsv"), "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}

/// An endless line (`/dev/zero`) used to be read until memory ran out; now the row is
/// refused once it passes the line bound, naming line 1.
#[cfg(unix)]
#[test]
fn an_endless_data_file_fails_at_line_1() {
    let dir = tmp_dir("devzero");
    let out = dir.join("run");
    let cfg = criteo_config(&dir, &dir.join("d.tsv"));
    let o = towerrec(&[
        "train",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--data",
        "/dev/zero",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(
        stderr.contains("/dev/zero:1: row: expected a line of at most 1048576 bytes"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// A click log with categorical columns only (`click,user,item,tags`): `n` rows whose
/// click depends on the user and the item (a hidden score per user and per item), with
/// a multi-hot `tags` column; generated here, deterministically.
fn categorical_csv(path: &Path, n: usize) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    };
    let score = |kind: u64, id: u64| -> f64 {
        let h = (id.wrapping_add(kind * 1_000_003)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        (h % 1000) as f64 / 1000.0 * 4.0 - 2.0
    };
    let mut s = String::from("click,user,item,tags\n");
    for _ in 0..n {
        let (user, item) = (next() % 60, next() % 40);
        let tags: Vec<String> = (0..1 + next() % 3)
            .map(|_| format!("t{}", next() % 12))
            .collect();
        let p = 1.0 / (1.0 + (-(score(1, user) + score(2, item) - 1.0)).exp());
        let click = ((next() % 10_000) as f64 / 10_000.0) < p;
        s.push_str(&format!(
            "{},u{user},i{item},{}\n",
            u8::from(click),
            tags.join("|")
        ));
    }
    std::fs::write(path, s).unwrap();
}

/// `towerrec train` on a click log without dense columns: DLRM with `bottom_mlp = []`
/// (the default) interacts the embeddings alone and learns; `eval` scores its
/// checkpoint to the same AUC, and a run stopped and resumed ends at it; a DMT model trains on a 2 × 2 in-process cluster; a
/// bottom MLP on this data is refused saying what to write.
#[test]
fn train_on_a_categorical_only_csv() {
    let dir = tmp_dir("categorical");
    categorical_csv(&dir.join("clicks.csv"), 4000);
    let cfg = dir.join("clicks.toml");
    std::fs::write(
        &cfg,
        r#"[model]
kind = "dlrm"
embedding_dim = 8
top_mlp = [16, 1]

[optimizer]
dense = { kind = "adam" }
dense_lr = 0.01
sparse = { kind = "adam" }
sparse_lr = 0.05

[train]
batch_size = 64
epochs = 3
eval_every = 0

[data]
format = "csv"
path = "clicks.csv"
split = { kind = "tail", eval_rows = 800 }

[data.schema]
label = { column = "click", positive = ["1"] }
sparse = [
  { column = "user", rows = 100 },
  { column = "item", rows = 100 },
  { column = "tags", rows = 30, separator = "|" },
]
"#,
    )
    .unwrap();
    let (cfg, run) = (cfg.to_str().unwrap(), dir.join("run"));
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        cfg,
        "--out",
        run.to_str().unwrap(),
    ]);
    let (stdout, _) = text(&o);
    assert!(o.status.success(), "{}", common::describe(&o));
    assert!(stdout.contains("final eval: auc 0."), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let auc = summary["auc"].as_f64().unwrap();
    assert!(auc > 0.65, "AUC {auc}");
    let o = towerrec(&["eval", "--checkpoint", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::describe(&o));
    let m: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(m["auc"], summary["auc"]);
    assert_eq!(m["count"], 800);

    // Stopped and resumed, it ends where the run never stopped did.
    let resumed = dir.join("resumed");
    let resumed = resumed.to_str().unwrap();
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        cfg,
        "--out",
        resumed,
        "--stop-after",
        "30",
    ]);
    assert!(o.status.success(), "{}", common::describe(&o));
    let o = towerrec(&["train", "-q", "--resume", resumed]);
    assert!(o.status.success(), "{}", common::describe(&o));
    let again: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("resumed").join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(again["auc"], summary["auc"]);

    let cluster = dir.join("cluster");
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        cfg,
        "--out",
        cluster.to_str().unwrap(),
        "--set",
        "model.towers={ module = \"dlrm\", count = 2, d = 4, c = 1 }",
        "--set",
        "cluster.hosts=2",
        "--set",
        "cluster.ranks_per_host=2",
    ]);
    assert!(o.status.success(), "{}", common::describe(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cluster.join("summary.json")).unwrap())
            .unwrap();
    assert!(summary["auc"].as_f64().unwrap() > 0.6, "{summary}");

    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        cfg,
        "--out",
        dir.join("refused").to_str().unwrap(),
        "--set",
        "model.bottom_mlp=[16, 8]",
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(
        stderr.contains("clicks.toml")
            && stderr.contains("no dense features")
            && stderr.contains("write bottom_mlp = []"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `bench data` reads a part whole, without a model, and says how many rows it read.
#[test]
fn bench_data_reads_each_part_whole() {
    let dir = tmp_dir("bench-data");
    let config = common::csv_config(&dir, 100, None);
    let config = config.to_str().unwrap();
    for (part, rows) in [("train", 80), ("eval", 20)] {
        let o = towerrec(&[
            "bench", "data", "--config", config, "--part", part, "--reps", "2", "--json",
        ]);
        let (out, _) = text(&o);
        assert!(o.status.success(), "{}", common::describe(&o));
        let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(j["rows"], rows, "{part}: {out}");
        assert_eq!(j["rows_per_sec"].as_array().unwrap().len(), 2);
    }
    std::fs::remove_dir_all(dir).ok();
}

/// The rows of a [`categorical_csv`] file as a snappy Parquet file in row groups of 500
/// rows: `click` an integer, `user` and `item` strings, `tags` a list of strings.
fn parquet_of_csv(csv: &Path, out: &Path) {
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;
    let text = std::fs::read_to_string(csv).unwrap();
    let (mut click, mut user, mut item) = (vec![], vec![], vec![]);
    let mut tags = ListBuilder::new(StringBuilder::new());
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        click.push(f[0].parse::<i64>().unwrap());
        user.push(f[1].to_string());
        item.push(f[2].to_string());
        for t in f[3].split('|') {
            tags.values().append_value(t);
        }
        tags.append(true);
    }
    let batch = RecordBatch::try_from_iter([
        ("click", Arc::new(Int64Array::from(click)) as ArrayRef),
        ("user", Arc::new(StringArray::from(user))),
        ("item", Arc::new(StringArray::from(item))),
        ("tags", Arc::new(tags.finish())),
    ])
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(500))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(out).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A Parquet config and the CSV config of the same rows: `preprocess` writes the same
/// binary file from both, `train` reads the Parquet file itself to the CSV run's AUC,
/// and a schema column the file lacks is refused naming the file and the column.
#[test]
fn parquet_input_preprocesses_and_trains_as_its_csv() {
    let dir = tmp_dir("parquet");
    categorical_csv(&dir.join("clicks.csv"), 2000);
    parquet_of_csv(&dir.join("clicks.csv"), &dir.join("clicks.parquet"));
    let config = |format: &str, path: &str, item: &str| {
        format!(
            r#"[model]
kind = "dlrm"
embedding_dim = 8
top_mlp = [16, 1]

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

[train]
batch_size = 64
epochs = 1
eval_every = 0

[data]
format = "{format}"
path = "{path}"
split = {{ kind = "tail", eval_rows = 400 }}

[data.schema]
label = {{ column = "click" }}
sparse = [
  {{ column = "user", rows = 100 }},
  {{ column = "{item}", rows = 100 }},
  {{ column = "tags", rows = 30, separator = "|" }},
]
"#
        )
    };
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let csv = write("csv.toml", config("csv", "clicks.csv", "item"));
    let pq = write("pq.toml", config("parquet", "clicks.parquet", "item"));
    for (cfg, out) in [(&csv, "csv.bin"), (&pq, "pq.bin")] {
        let out = dir.join(out);
        let o = towerrec(&[
            "preprocess",
            "--config",
            cfg,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::describe(&o));
    }
    let (a, b) = (
        std::fs::read(dir.join("csv.bin")).unwrap(),
        std::fs::read(dir.join("pq.bin")).unwrap(),
    );
    assert!(
        a == b,
        "the binary files differ ({} and {} bytes)",
        a.len(),
        b.len()
    );

    let mut aucs = vec![];
    for (cfg, out) in [(&csv, "run-csv"), (&pq, "run-pq")] {
        let run = dir.join(out);
        let o = towerrec(&[
            "train",
            "-q",
            "--config",
            cfg,
            "--out",
            run.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::describe(&o));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        aucs.push(s["auc"].clone());
    }
    assert!(aucs[0].as_f64().is_some_and(f64::is_finite), "{aucs:?}");
    assert_eq!(aucs[0], aucs[1]);

    let bad = write("bad.toml", config("parquet", "clicks.parquet", "itme"));
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        &bad,
        "--out",
        dir.join("bad").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let (_, stderr) = text(&o);
    assert!(
        stderr.contains("clicks.parquet") && stderr.contains("column \"itme\" is not in the file"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// A vocabulary counted from a Parquet file is the one counted from the CSV of the same
/// rows, and the Parquet config encodes with it as the CSV config does: `preprocess`
/// writes the same binary file from both (its header holds the vocabulary's checksum,
/// over the names and keys in order; the vocabulary files differ only in the source
/// file they name).
#[test]
fn a_parquet_vocabulary_equals_its_csv_one_and_encodes_the_same() {
    let dir = tmp_dir("parquet-vocab");
    categorical_csv(&dir.join("clicks.csv"), 1500);
    parquet_of_csv(&dir.join("clicks.csv"), &dir.join("clicks.parquet"));
    let config = |format: &str, path: &str| {
        format!(
            r#"[model]
kind = "dlrm"
embedding_dim = 8
top_mlp = [16, 1]

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

[train]
batch_size = 64
epochs = 1
eval_every = 0

[data]
format = "{format}"
path = "{path}"
vocab = "{format}.vocab"
split = {{ kind = "tail", eval_rows = 300 }}

[data.schema]
label = {{ column = "click" }}
sparse = [{{ column = "user" }}, {{ column = "item" }}, {{ column = "tags", separator = "|" }}]
"#
        )
    };
    let mut bins = vec![];
    for (format, path) in [("csv", "clicks.csv"), ("parquet", "clicks.parquet")] {
        let cfg = dir.join(format!("{format}.toml"));
        std::fs::write(&cfg, config(format, path)).unwrap();
        let cfg = cfg.to_str().unwrap();
        let vocab = dir.join(format!("{format}.vocab"));
        let o = towerrec(&[
            "vocab",
            "--config",
            cfg,
            "--min-count",
            "2",
            "--out",
            vocab.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::describe(&o));
        let out = dir.join(format!("{format}.bin"));
        let o = towerrec(&[
            "preprocess",
            "--config",
            cfg,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::describe(&o));
        bins.push(std::fs::read(out).unwrap());
    }
    assert!(bins[0] == bins[1], "the binary files differ");
    std::fs::remove_dir_all(dir).ok();
}
