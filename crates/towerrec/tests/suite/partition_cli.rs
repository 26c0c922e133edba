//! `towerrec partition` end to end: a tiny model trained, its features partitioned
//! (coherent, diverse with a looser size ratio, the naive baseline), the JSON checked
//! (every feature exactly once, sizes within the bound), the SVGs present, and bad
//! requests refused with a message that says why.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use towerrec_plan::partition::{naive, sizes_allowed, Method, TowerPartition};

use crate::common;

use crate::common::{assert_fails_with, describe, text, towerrec, TINY};

/// The tiny quickstart's 8 sparse features.
fn names() -> Vec<String> {
    (1..=8).map(|i| format!("C{i}")).collect()
}

/// One tiny training run shared by the tests of this file.
fn run_dir() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let run = common::tmp("partition-cli", "run").join("run");
        let mut args = vec!["train", "--quiet", "--out", run.to_str().unwrap()];
        args.extend(TINY);
        let o = towerrec(&args);
        assert!(o.status.success(), "{}", describe(&o));
        run
    })
}

/// Runs `partition` on the shared run with `args`; the parsed JSON at `out`, checked
/// to hold every feature exactly once with sizes allowed by `max_ratio`.
fn partition(
    out: &Path,
    args: &[&str],
    max_ratio: f64,
) -> (TowerPartition, Vec<Vec<usize>>, String) {
    let run = run_dir().to_str().unwrap();
    let mut all = vec![
        "partition",
        "--checkpoint",
        run,
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend(args);
    let o = towerrec(&all);
    assert!(o.status.success(), "{}", describe(&o));
    let p = TowerPartition::from_json(&std::fs::read_to_string(out).unwrap()).unwrap();
    let towers = p.indices(&names()).expect("every feature exactly once");
    let sizes: Vec<usize> = towers.iter().map(Vec::len).collect();
    assert!(
        sizes_allowed(&sizes, max_ratio),
        "{sizes:?} with K = {max_ratio}"
    );
    for svg in ["interaction.svg", "embedding.svg"] {
        let path = out.with_extension(svg);
        let body =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            body.starts_with("<svg") && body.contains("</svg>"),
            "{}",
            path.display()
        );
    }
    (p, towers, text(&o).0)
}

#[test]
fn coherent_diverse_and_naive_partitions() {
    let dir = common::tmp("partition-cli", "modes");
    let out = dir.join("coherent.json");
    let (p, towers, stdout) = partition(&out, &["--towers", "3", "--batches", "4"], 1.0);
    assert_eq!(p.mode, Method::Coherent);
    assert_eq!(towers.len(), 3);
    assert_eq!(p.samples, Some(4 * 256), "4 batches of the run's 256");
    assert_eq!(p.dims, Some(2));
    let aff = p.affinity.unwrap();
    assert!(aff.within.is_some() && aff.between.is_some());
    assert!(stdout.contains("coherent partition: 3 towers"), "{stdout}");
    // The same seed gives the same file.
    let again = dir.join("again.json");
    partition(&again, &["--towers", "3", "--batches", "4"], 1.0);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());

    let out = dir.join("diverse.json");
    let args = [
        "--towers",
        "3",
        "--mode",
        "diverse",
        "--max-ratio",
        "2",
        "--dims",
        "3",
    ];
    let (p, _, _) = partition(&out, &args, 2.0);
    assert_eq!(
        (p.mode, p.max_ratio, p.dims),
        (Method::Diverse, Some(2.0), Some(3))
    );

    let out = dir.join("naive.json");
    let (p, towers, _) = partition(&out, &["--towers", "3", "--naive"], 1.0);
    assert_eq!(p.mode, Method::Naive);
    assert_eq!(towers, naive(8, 3).unwrap());
    assert_eq!(p.towers[2], vec!["C3", "C6"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn writes_into_the_run_directory_by_default() {
    let run = run_dir();
    let o = towerrec(&[
        "partition",
        "--checkpoint",
        run.to_str().unwrap(),
        "--towers",
        "8",
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    let p =
        TowerPartition::from_json(&std::fs::read_to_string(run.join("partition.json")).unwrap())
            .unwrap();
    assert!(p.towers.iter().all(|t| t.len() == 1));
    assert!(run.join("partition.interaction.svg").is_file());
    assert!(run.join("partition.embedding.svg").is_file());
    assert!(text(&o).1.contains("partition.json"), "{}", describe(&o));
}

/// `--out` in a directory that does not exist yet: the directory and its parents are
/// made, as `towerrec profile` makes its own.
#[test]
fn makes_the_directory_of_its_output() {
    let dir = common::tmp("partition-cli", "mkdir");
    let out = dir.join("new/deeper/towers.json");
    let (p, towers, _) = partition(&out, &["--towers", "2", "--naive"], 1.0);
    assert_eq!(p.mode, Method::Naive);
    assert_eq!(towers.len(), 2);
    assert!(out.with_extension("interaction.svg").is_file());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_requests_say_why() {
    let run = run_dir().to_str().unwrap();
    let dir = common::tmp("partition-cli", "bad");
    let out = dir.join("p.json");
    let out = out.to_str().unwrap();
    // A directory that cannot be made: its parent is a file.
    std::fs::write(dir.join("file"), "").unwrap();
    let blocked = dir.join("file/sub/p.json");
    let blocked = blocked.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--towers", "9", "--out", out],
            &["--towers 9", "9 towers but only 8 features"],
        ),
        (
            &["--towers", "0", "--out", out],
            &["--towers 0", "at least 1"],
        ),
        (
            &["--towers", "2", "--max-ratio", "0.5", "--out", out],
            &["--max-ratio 0.5", "≥ 1"],
        ),
        (
            &["--towers", "2", "--batches", "0", "--out", out],
            &["--batches 0"],
        ),
        (
            &["--towers", "2", "--dims", "0", "--out", out],
            &["--dims 0"],
        ),
        (
            &["--towers", "2", "--out", blocked],
            &[blocked, "creating the directory"],
        ),
    ];
    for (args, needles) in cases {
        let mut all = vec!["partition", "--checkpoint", run];
        all.extend(args);
        assert_fails_with(&towerrec(&all), needles);
    }
    let missing = dir.join("no-run");
    let o = towerrec(&[
        "partition",
        "--checkpoint",
        missing.to_str().unwrap(),
        "--towers",
        "2",
    ]);
    assert_fails_with(&o, &["no checkpoint there", "towerrec train"]);
    // An output onto the checkpoint is refused.
    let ckpt = run_dir().join("checkpoint.safetensors");
    let o = towerrec(&[
        "partition",
        "--checkpoint",
        run,
        "--towers",
        "2",
        "--out",
        ckpt.to_str().unwrap(),
    ]);
    assert_fails_with(&o, &["is the checkpoint"]);
    assert!(!Path::new(out).exists());
    std::fs::remove_dir_all(dir).ok();
}
