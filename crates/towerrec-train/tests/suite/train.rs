//! End-to-end training: learning real signal, bitwise resume, config errors.

use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use towerrec_train::checkpoint::CHECKPOINT_FILE;
use towerrec_train::{train, Config, Silent, TrainOptions};

fn config(model: &str, sparse: &str, extra_train: &str) -> Config {
    let text = format!(
        r#"
[model]
{model}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.002
sparse = {sparse}
sparse_lr = 0.02

[train]
batch_size = 128
log_every = 10
{extra_train}

[data]
format = "synthetic"
train_samples = 20_000
eval_samples = 4_000
num_dense = 4
seed = 7
tables = [{{ rows = 500, zipf_exponent = 1.1, pooling = {{ mean = 2.0 }}, count = 4 }}]
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config parses")
}

use crate::common;
use crate::common::{DCN, DLRM};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("towerrec-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(cfg: &Config, out: &Path, resume: bool, stop_after: Option<u64>) -> towerrec_train::Summary {
    let opts = TrainOptions {
        out_dir: out.to_path_buf(),
        resume,
        stop_after,
        ..Default::default()
    };
    train(cfg, &opts, &mut Silent).expect("training runs")
}

#[test]
fn dlrm_learns_synthetic_signal() {
    let cfg = config(DLRM, r#"{ kind = "row_wise_adagrad" }"#, "epochs = 2");
    let out = tmp("dlrm");
    let s = run(&cfg, &out, false, None);
    let auc = s.auc.expect("both classes present");
    assert!(auc > 0.70, "DLRM eval AUC {auc}");
    assert_eq!(s.steps, 2 * 20_000u64.div_ceil(128));
    let steady = s
        .steady_train_samples_per_sec
        .expect("steps after each pass's first");
    assert!(steady.is_finite() && steady > 0.0, "steady rate {steady}");
    for f in [
        "summary.json",
        "metrics.jsonl",
        CHECKPOINT_FILE,
        "config.toml",
    ] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "auc",
        "logloss",
        "ne",
        "train_samples_per_sec",
        "steady_train_samples_per_sec",
        "steps",
        "model",
        "params",
    ] {
        assert!(summary.get(key).is_some(), "summary.json has {key}");
    }
    let log = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines
        .iter()
        .any(|l| l.get("loss").is_some() && l.get("samples_per_sec").is_some()));
    assert!(lines
        .iter()
        .any(|l| l.get("split").is_some() && l.get("ne").is_some()));
    // Loss falls: the last logged training loss is below the first.
    let losses: Vec<f64> = lines
        .iter()
        .filter_map(|l| l.get("loss")?.as_f64())
        .collect();
    assert!(losses.last().unwrap() < losses.first().unwrap());
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn a_one_step_run_has_no_steady_rate() {
    let cfg = config(DLRM, r#"{ kind = "sgd" }"#, "max_steps = 1");
    let out = tmp("one-step");
    let s = run(&cfg, &out, false, None);
    assert_eq!(s.steps, 1);
    assert!(s.train_samples_per_sec > 0.0);
    assert_eq!(s.steady_train_samples_per_sec, None);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(summary["steady_train_samples_per_sec"].is_null());
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn dcn_learns_synthetic_signal() {
    let cfg = config(DCN, r#"{ kind = "adam" }"#, "epochs = 2");
    let out = tmp("dcn");
    let auc = run(&cfg, &out, false, None)
        .auc
        .expect("both classes present");
    assert!(auc > 0.70, "DCN eval AUC {auc}");
    std::fs::remove_dir_all(out).ok();
}

fn tensors(path: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.data().to_vec()))
        .collect();
    out.sort();
    out
}

/// A run stopped at step k and resumed ends bitwise identical to one never stopped,
/// for every optimizer's state, across an epoch boundary.
#[test]
fn resumed_run_is_bitwise_identical() {
    // fp16 and bf16 tables too: the checkpoint holds their values (exact in f32) and
    // the stochastic rounding is keyed by step, so a resume continues it exactly.
    let fp16 = format!("{DLRM}\ntable_precision = \"fp16\"");
    let bf16 = format!("{DLRM}\ntable_precision = \"bf16\"");
    for (model, sparse, stop) in [
        (DLRM, r#"{ kind = "adam" }"#, 170),
        (DLRM, r#"{ kind = "row_wise_adagrad" }"#, 157),
        (DLRM, r#"{ kind = "sgd" }"#, 40),
        (fp16.as_str(), r#"{ kind = "adam" }"#, 170),
        (bf16.as_str(), r#"{ kind = "sgd" }"#, 40),
    ] {
        let cfg = config(
            model,
            sparse,
            "epochs = 2\neval_every = 100\n[optimizer.schedule]\nwarmup_steps = 20",
        );
        let (a, b) = (tmp("resume-a"), tmp("resume-b"));
        let full = run(&cfg, &a, false, None);
        let stopped = run(&cfg, &b, false, Some(stop));
        assert!(stopped.stopped_early);
        assert_eq!(stopped.steps, stop);
        let resumed = run(&cfg, &b, true, None);
        assert_eq!(resumed.steps, full.steps);
        assert_eq!(resumed.auc, full.auc, "{sparse}");
        let (ta, tb) = (
            tensors(&a.join(CHECKPOINT_FILE)),
            tensors(&b.join(CHECKPOINT_FILE)),
        );
        assert_eq!(ta.len(), tb.len());
        for ((na, da), (nb, db)) in ta.iter().zip(&tb) {
            assert_eq!(na, nb);
            assert!(
                da == db,
                "tensor {na} differs after resume ({model} {sparse})"
            );
        }
        std::fs::remove_dir_all(a).ok();
        std::fs::remove_dir_all(b).ok();
    }
}

fn config_error(text: &str) -> String {
    match Config::from_toml(text, "bad.toml", Path::new(".")) {
        Ok(_) => panic!("config should be rejected:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn config_errors_name_the_key() {
    let good = towerrec_train::config::QUICKSTART_TOML;
    let wrong_type = good.replace("embedding_dim = 16", "embedding_dim = \"sixteen\"");
    let msg = config_error(&wrong_type);
    assert!(
        msg.contains("embedding_dim") && msg.contains("bad.toml"),
        "{msg}"
    );

    let unknown = good.replace("batch_size = 256", "batch_size = 256\nbatch_sise = 3");
    let msg = config_error(&unknown);
    assert!(msg.contains("batch_sise"), "{msg}");

    let mismatch = good.replace("bottom_mlp = [64, 16]", "bottom_mlp = [64, 8]");
    let msg = config_error(&mismatch);
    assert!(msg.contains("model.bottom_mlp"), "{msg}");

    let top = good.replace("top_mlp = [128, 64, 1]", "top_mlp = [128, 64]");
    assert!(config_error(&top).contains("model.top_mlp"));

    let lr = good.replace("dense_lr = 0.001", "dense_lr = -1.0");
    assert!(config_error(&lr).contains("optimizer.dense_lr"));
}

#[test]
fn missing_checkpoint_is_an_error_naming_the_file() {
    let cfg = config(DLRM, r#"{ kind = "sgd" }"#, "");
    let out = tmp("missing");
    let opts = TrainOptions {
        out_dir: out.clone(),
        resume: true,
        stop_after: None,
        ..Default::default()
    };
    let err = train(&cfg, &opts, &mut Silent).expect_err("no checkpoint to resume");
    assert!(err.to_string().contains(CHECKPOINT_FILE), "{err}");
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn tables_larger_than_the_machine_are_refused_before_allocating() {
    // The quickstart with one table of 10^11 rows: terabytes of weights.
    let huge = "data.tables=[{ rows = 100_000_000_000, pooling = 1 }]".to_string();
    let cfg = Config::quickstart(&[huge]).expect("quickstart config");
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).expect("schema");
    let err = common::single(&cfg, &schema, 1).err().expect("too large");
    let msg = err.to_string();
    // Refused by the check against available memory, or, where that is unknown, by the
    // allocation itself: either way an error that says how much, not an abort.
    assert!(
        msg.contains("GiB") && msg.contains("embedding table"),
        "{msg}"
    );
}

/// The checkpoint in `out` with the metadata `edits` made (each a `(from, to)` of the
/// same length in its header) and its checksums sealed again, as a forger would.
fn forge(out: &Path, edits: &[(&str, &str)]) {
    let path = out.join(CHECKPOINT_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header = String::from_utf8(bytes[8..8 + header_len].to_vec()).unwrap();
    for (from, to) in edits {
        assert_eq!(from.len(), to.len());
        assert!(header.contains(from), "{from} in {header}");
        header = header.replacen(from, to, 1);
    }
    bytes[8..8 + header_len].copy_from_slice(header.as_bytes());
    let sealed = towerrec_train::checkpoint::reseal(&bytes).expect("a checkpoint reseals");
    std::fs::write(&path, sealed).unwrap();
}

#[test]
fn forged_progress_is_refused_on_resume() {
    let cfg = config(DLRM, r#"{ kind = "row_wise_adagrad" }"#, "epochs = 2");
    let steps_per_epoch = 20_000u64.div_ceil(128);
    let resume = |out: &Path| {
        let opts = TrainOptions {
            out_dir: out.to_path_buf(),
            resume: true,
            ..Default::default()
        };
        train(&cfg, &opts, &mut Silent).map(|s| s.steps)
    };
    // Three forgeries of a checkpoint at step 3 (epoch 0, batch 3, 384 samples): the
    // step alone; step, batch and samples together, consistent with each other but not
    // with the data's 157 batches an epoch; and a second epoch of another length.
    let cases: [&[(&str, &str)]; 3] = [
        &[("\"step\":\"3\"", "\"step\":\"4\"")],
        &[
            ("\"step\":\"3\"", "\"step\":\"9\""),
            ("\"batch_in_epoch\":\"3\"", "\"batch_in_epoch\":\"9\""),
            ("\"samples\":\"384\"", "\"samples\":\"999\""),
        ],
        &[
            ("\"epoch\":\"0\"", "\"epoch\":\"1\""),
            ("\"samples\":\"384\"", "\"samples\":\"385\""),
        ],
    ];
    for (i, edits) in cases.into_iter().enumerate() {
        let out = tmp(&format!("forged-{i}"));
        run(&cfg, &out, false, Some(3));
        forge(&out, edits);
        let e = resume(&out).unwrap_err().to_string();
        assert!(
            e.contains("its progress") && e.contains("was edited"),
            "{edits:?}: {e}"
        );
        std::fs::remove_dir_all(&out).ok();
    }
    // Untouched, it resumes to the end.
    let out = tmp("forged-none");
    run(&cfg, &out, false, Some(3));
    forge(&out, &[]);
    assert_eq!(resume(&out).unwrap(), 2 * steps_per_epoch);
    std::fs::remove_dir_all(&out).ok();
}
