//! Bad inputs end with a clear error, never exit 0 with a wrong result (issue 11, items
//! 1–5 and 11; docs/RELIABILITY.md lists each case): config paths, non-finite numbers,
//! out-of-range values, empty data, memory too large for the machine, message wording.

use crate::common;

use crate::common::{assert_fails_with, describe, text, towerrec, towerrec_in, TINY};
use std::path::Path;

fn tmp(name: &str) -> std::path::PathBuf {
    common::tmp("inputs", name)
}

/// `train` on the tiny quickstart with `extra` arguments, into `dir/run`.
fn train(dir: &Path, extra: &[&str]) -> std::process::Output {
    let out = dir.join("run");
    let mut args = vec!["train", "-q", "--out", out.to_str().unwrap()];
    args.extend(TINY);
    args.extend(extra);
    towerrec(&args)
}

#[test]
fn a_config_named_by_its_bare_file_name_loads() {
    let dir = tmp("bare");
    let cfg = include_str!("../../../../examples/quickstart.toml")
        .replace("train_samples = 200_000", "train_samples = 2_000")
        .replace("eval_samples = 20_000", "eval_samples = 500");
    std::fs::write(dir.join("q.toml"), cfg).unwrap();
    let o = towerrec_in(&dir, &["train", "-q", "--config", "q.toml", "--out", "run"]);
    assert!(o.status.success(), "{}", describe(&o));
    let o = towerrec_in(
        &dir,
        &[
            "plan",
            "--config",
            "q.toml",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
        ],
    );
    assert!(o.status.success(), "{}", describe(&o));
    let o = towerrec_in(&dir, &["simulate", "--config", "q.toml", "--gpus", "16"]);
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

/// SGD at a learning rate of 1e5 overflows within a few steps.
const DIVERGE: [&str; 8] = [
    "--set",
    "optimizer.dense={ kind = \"sgd\" }",
    "--set",
    "optimizer.sparse={ kind = \"sgd\" }",
    "--set",
    "optimizer.dense_lr=1e5",
    "--set",
    "optimizer.sparse_lr=1e5",
];

#[test]
fn a_diverging_run_stops_naming_the_step_and_writes_no_summary() {
    for topology in [["1", "1"], ["2", "2"]] {
        let dir = tmp(&format!("nan-{}", topology[0]));
        let mut extra = DIVERGE.to_vec();
        extra.extend(["--hosts", topology[0], "--ranks-per-host", topology[1]]);
        let o = train(&dir, &extra);
        let err = assert_fails_with(&o, &["non-finite loss", "at step ", "(epoch 1, batch "]);
        if topology[0] == "2" {
            assert!(err.contains("rank "), "{err}");
        }
        assert!(!dir.join("run/summary.json").exists(), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }
}

#[test]
fn out_of_range_numbers_are_refused_naming_the_key() {
    let dir = tmp("ranges");
    for (extra, needle) in [
        (
            &["--set", "optimizer.dense={ kind = \"adagrad\", eps = 0 }"][..],
            "optimizer.dense.eps",
        ),
        (
            &[
                "--set",
                "optimizer.dense={ kind = \"adam\", weight_decay = nan }",
            ],
            "optimizer.dense.weight_decay",
        ),
        (
            &["--set", "train.batch_size=4611686018427387904"],
            "train.batch_size",
        ),
        (
            &["--set", "train.eval_batch_size=0"],
            "train.eval_batch_size",
        ),
        (&["--stop-after", "0"], "--stop-after"),
        (&["--max-steps", "0"], "--max-steps"),
        (&["--threads", "100000"], "--threads"),
        (&["--max-bad-fraction", "2"], "--max-bad-fraction"),
        (
            &["--hosts", "64", "--ranks-per-host", "64"],
            "in-process cluster",
        ),
    ] {
        let o = train(&dir, extra);
        assert_ne!(o.status.code(), Some(0), "{extra:?}: {}", describe(&o));
        let (_, err) = text(&o);
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!dir.join("run").join("summary.json").exists());
    }
    let o = towerrec(&["simulate", "--compression", "nan"]);
    assert_ne!(o.status.code(), Some(0), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

/// A tiny DLRM over the CSV file `data`, divided by `split`.
fn csv_config(dir: &Path, data: &str, split: &str) -> std::path::PathBuf {
    let cfg = format!(
        r#"{}
[data]
format = "csv"
path = "{data}"
split = {split}
[data.schema]
label = {{ column = "y", positive = ["1"] }}
dense = [{{ column = "x" }}]
sparse = [{{ column = "c", rows = 10 }}]
"#,
        common::TINY_MODEL
    );
    let p = dir.join("c.toml");
    std::fs::write(&p, cfg).unwrap();
    p
}

fn csv_rows(n: usize, bad_every: usize) -> String {
    let mut s = String::from("y,x,c\n");
    for i in 0..n {
        let x = if bad_every > 0 && i % bad_every == 0 {
            "oops".to_string()
        } else {
            format!("{}", i % 7)
        };
        s.push_str(&format!("{},{x},c{}\n", i % 2, i % 10));
    }
    s
}

#[test]
fn empty_data_is_an_error_saying_what_was_empty() {
    let dir = tmp("empty");
    let tail = "{ kind = \"tail\", eval_rows = 10 }";
    std::fs::write(dir.join("empty.csv"), "").unwrap();
    std::fs::write(dir.join("header.csv"), "y,x,c\n").unwrap();
    std::fs::write(dir.join("bad.csv"), csv_rows(200, 1)).unwrap();
    std::fs::write(dir.join("good.csv"), csv_rows(200, 0)).unwrap();
    let run = |cfg: &Path, extra: &[&str]| {
        let out = dir.join("run");
        let mut args = vec![
            "train",
            "-q",
            "--overwrite",
            "--config",
            cfg.to_str().unwrap(),
        ];
        args.extend(["--out", out.to_str().unwrap()]);
        args.extend(extra);
        towerrec(&args)
    };
    let cfg = csv_config(&dir, "empty.csv", tail);
    assert_fails_with(&run(&cfg, &[]), &["empty.csv", "empty file"]);
    let criteo = dir.join("criteo.toml");
    let text = std::fs::read_to_string(csv_config(&dir, "x", "{ kind = \"none\" }")).unwrap();
    let data_section = text.find("[data]").unwrap();
    std::fs::write(
        &criteo,
        format!(
            "{}[data]\nformat = \"criteo\"\npath = \"/dev/null\"\neval_path = \"/dev/null\"\ntable_rows = [100]\n",
            &text[..data_section]
        ),
    )
    .unwrap();
    assert_fails_with(
        &run(&criteo, &[]),
        &["no training samples", "/dev/null yielded no rows"],
    );
    let cfg = csv_config(&dir, "header.csv", tail);
    assert_fails_with(&run(&cfg, &[]), &["header.csv", "rows"]);
    let cfg = csv_config(&dir, "bad.csv", tail);
    let o = run(&cfg, &["--bad-rows", "skip", "--max-bad-fraction", "1"]);
    assert_fails_with(&o, &["no training samples", "malformed rows were skipped"]);
    let cfg = csv_config(&dir, "good.csv", "{ kind = \"tail\", eval_rows = 0 }");
    assert_fails_with(&run(&cfg, &[]), &["data.split.eval_rows"]);
    let cfg = csv_config(&dir, "good.csv", "{ kind = \"tail\", eval_rows = 5000 }");
    assert_fails_with(&run(&cfg, &[]), &["leaves 0 of the 200 rows"]);
    let cfg = csv_config(&dir, "good.csv", "{ kind = \"head\", train_rows = 200 }");
    assert_fails_with(&run(&cfg, &[]), &["no evaluation samples"]);
    let o = train(&dir, &["--set", "data.eval_samples=0"]);
    assert_fails_with(&o, &["data.eval_samples"]);
    assert!(!dir.join("run/summary.json").exists());

    // eval of a good model on an empty file.
    let cfg = csv_config(&dir, "good.csv", tail);
    assert!(run(&cfg, &[]).status.success());
    let o = towerrec(&[
        "eval",
        "--checkpoint",
        dir.join("run").to_str().unwrap(),
        "--data",
        dir.join("header.csv").to_str().unwrap(),
    ]);
    assert_fails_with(&o, &["no evaluation samples", "header.csv yielded no rows"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn layers_too_large_for_the_machine_are_an_error_before_allocating() {
    let dir = tmp("memory");
    let o = train(&dir, &["--set", "model.bottom_mlp=[2147483648, 16]"]);
    assert_fails_with(
        &o,
        &[
            "not enough memory for the run",
            "GiB needed",
            "dense layers",
        ],
    );
    let o = train(
        &dir,
        &[
            "--set",
            "model.bottom_mlp=[2147483648, 16]",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
        ],
    );
    assert_fails_with(&o, &["GiB", "the 4 ranks of this process"]);
    assert!(!dir.join("run").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn messages_say_each_thing_once() {
    let dir = tmp("messages");
    let plan = dir.join("bad.json");
    std::fs::write(&plan, "{bad").unwrap();
    let hw = dir.join("hw.toml");
    std::fs::write(&hw, "name = \"x\"\n").unwrap();
    let out = dir.join("run");
    let out = out.to_str().unwrap();
    for (args, once) in [
        (
            vec!["train", "--plan", plan.to_str().unwrap(), "--out", out],
            "key must be a string",
        ),
        (
            vec!["simulate", "--hardware", hw.to_str().unwrap()],
            "missing field",
        ),
        (
            vec!["train", "--resume", dir.join("none").to_str().unwrap()],
            "none",
        ),
        (
            vec!["train", "--set", "data.train_samples=0", "--out", out],
            "data.train_samples",
        ),
    ] {
        let o = towerrec(&args);
        let err = assert_fails_with(&o, &[once]);
        assert_eq!(err.matches(once).count(), 1, "{args:?}: {err}");
        assert!(
            !Path::new(out).exists(),
            "a failed start leaves no directory"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}
