//! Shuffled training (`train.shuffle`, docs/DATA.md): a resumed run is bitwise the run
//! never stopped, a 2 × 2 cluster trains on the same global order as one process, and
//! the order changes the result (so the option does something).

use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use towerrec_train::checkpoint::CHECKPOINT_FILE;
use towerrec_train::{Config, Silent, Summary, TrainOptions};

use crate::common::DLRM;

fn config(data: &str, extra_train: &str, cluster: &str) -> Config {
    let text = format!(
        r#"
[model]
{DLRM}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.002
sparse = {{ kind = "adam" }}
sparse_lr = 0.02

[train]
batch_size = 128
epochs = 2
log_every = 10
seed = 3
{extra_train}

{data}

{cluster}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config parses")
}

const SYNTHETIC: &str = r#"[data]
format = "synthetic"
train_samples = 6_000
eval_samples = 2_000
num_dense = 4
seed = 7
tables = [{ rows = 500, zipf_exponent = 1.1, pooling = { mean = 2.0 }, count = 4 }]"#;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("towerrec-shuffle-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(cfg: &Config, out: &Path, resume: bool, stop_after: Option<u64>) -> Summary {
    let opts = TrainOptions {
        out_dir: out.to_path_buf(),
        resume,
        stop_after,
        ..Default::default()
    };
    towerrec_train::cluster::train_configured(cfg, &opts, 2, &mut Silent).expect("training runs")
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

/// The synthetic config's training part written to a binary file, read back with a
/// tail split.
fn binary_data(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("train.bin");
    let cfg = config(SYNTHETIC, "", "");
    let mut s = towerrec_data::open(
        &cfg.data,
        towerrec_data::Part::Train,
        Default::default(),
        Path::new("."),
    )
    .unwrap();
    towerrec_data::write_binary(s.as_mut(), &path, |_| std::ops::ControlFlow::Continue(()))
        .unwrap();
    format!(
        "[data]\nformat = \"binary\"\npath = {:?}\nsplit = {{ kind = \"tail\", eval_rows = 1500 }}",
        path.display().to_string()
    )
}

/// Stopped in either epoch and resumed, a shuffled run ends bitwise where the run never
/// stopped ends: the position within an epoch's order is the whole shuffle state.
#[test]
fn a_shuffled_run_resumes_bitwise() {
    let dir = tmp("data");
    for (what, data) in [
        ("streamed (buffer)", SYNTHETIC.to_string()),
        ("binary (permuted)", binary_data(&dir)),
    ] {
        let cfg = config(&data, "shuffle = true\nshuffle_buffer = 500", "");
        let a = tmp("full");
        let full = run(&cfg, &a, false, None);
        for stop in [17, 61] {
            let b = tmp("stopped");
            let stopped = run(&cfg, &b, false, Some(stop));
            assert!(stopped.stopped_early);
            let resumed = run(&cfg, &b, true, None);
            assert_eq!(resumed.steps, full.steps, "{what}");
            assert_eq!(resumed.auc, full.auc, "{what}, stopped at {stop}");
            let (ta, tb) = (
                tensors(&a.join(CHECKPOINT_FILE)),
                tensors(&b.join(CHECKPOINT_FILE)),
            );
            assert!(
                ta == tb,
                "{what}: the checkpoints differ after a stop at {stop}"
            );
            let _ = std::fs::remove_dir_all(&b);
        }
        let _ = std::fs::remove_dir_all(&a);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every rank of a 2 × 2 cluster reads the same global order: the cluster's result
/// equals one process's, and both differ from training in file order.
#[test]
fn a_cluster_trains_on_the_same_shuffled_order_as_one_process() {
    let dir = tmp("cluster-data");
    for (what, data) in [
        ("streamed (buffer)", SYNTHETIC.to_string()),
        ("binary (permuted)", binary_data(&dir)),
    ] {
        let losses = |shuffle: &str, cluster: &str| {
            let out = tmp("cluster");
            let s = run(&config(&data, shuffle, cluster), &out, false, None);
            let _ = std::fs::remove_dir_all(&out);
            (s.logloss, s.auc.expect("both classes"))
        };
        let one = losses("shuffle = true", "");
        let four = losses("shuffle = true", "[cluster]\nhosts = 2\nranks_per_host = 2");
        let plain = losses("", "");
        eprintln!("{what}: one process {one:?}, 2 x 2 {four:?}, file order {plain:?}");
        assert!((one.0 - four.0).abs() < 1e-5, "{what}: {one:?} vs {four:?}");
        assert!(
            (one.0 - plain.0).abs() > 1e-4,
            "{what}: shuffling changed nothing: {one:?} vs {plain:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
