//! What a resume and the commands on a trained run check (docs/RELIABILITY.md, "Resume
//! checks"): a run keeps its split, an edit anywhere in a data file up to the hashing
//! limit is seen, `--stop-after` counts from the checkpoint, and `partition` refuses
//! changed data as a resume does.

use crate::common;

use crate::common::{assert_fails_with, csv_config, describe, text, towerrec, TINY};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    common::tmp("resume", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_resume_keeps_its_split_and_takes_no_other_evaluation_file() {
    let dir = tmp("split");
    let config = csv_config(&dir, 200, None);
    let out = dir.join("run");
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        s(&config),
        "--out",
        s(&out),
        "--stop-after",
        "2",
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    let other = dir.join("other.csv");
    std::fs::copy(dir.join("d.csv"), &other).unwrap();
    let o = towerrec(&["train", "-q", "--resume", s(&out), "--eval-data", s(&other)]);
    assert_fails_with(
        &o,
        &[
            "--eval-data",
            "the last 20 rows evaluate",
            "keeps that split",
        ],
    );
    // The same data under another name is accepted, and checked.
    let o = towerrec(&["train", "-q", "--resume", s(&out), "--data", s(&other)]);
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}

/// A Criteo TSV of more than 64 MiB (what was hashed whole before), label, 13 integers
/// and 26 hex categoricals per row.
fn large_criteo(path: &Path) -> usize {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut bytes = 0;
    let mut i = 0u64;
    while bytes < 72 << 20 {
        let mut row = format!("{}", i % 2);
        for d in 0..13 {
            row += &format!("\t{}", (i * 7 + d) % 1000);
        }
        for c in 0..26 {
            row += &format!("\t{:08x}", (i * 31 + c * 17) % 4099);
        }
        row.push('\n');
        out.write_all(row.as_bytes()).unwrap();
        bytes += row.len();
        i += 1;
    }
    bytes
}

#[test]
fn a_one_digit_edit_in_a_large_data_file_is_seen_on_resume() {
    let dir = tmp("large");
    let data = dir.join("day.tsv");
    let size = large_criteo(&data);
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "{}[data]\nformat = \"criteo\"\npath = \"day.tsv\"\ntable_rows = [100]\nsplit = {{ kind = \"tail\", eval_rows = 1000 }}\n",
            common::TINY_MODEL
        ),
    )
    .unwrap();
    let out = dir.join("run");
    let o = towerrec(&[
        "train",
        "-q",
        "--config",
        s(&config),
        "--out",
        s(&out),
        "--stop-after",
        "1",
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    // One digit of a dense value, far from the 64 blocks of 64 KiB a sampled hash reads
    // (evenly spaced from the first byte to the last).
    let mut bytes = std::fs::read(&data).unwrap();
    let block = 64 << 10;
    let last = (size - block) as u64;
    let starts: Vec<u64> = (0..64).map(|i| last * i / 63).collect();
    let at = (size as u64 / 2..)
        .find(|&p| {
            starts.iter().all(|&s| p < s || p >= s + block as u64)
                && bytes[p as usize].is_ascii_digit()
                && bytes[p as usize - 1] == b'\t'
                && bytes[p as usize + 1] == b'\t'
        })
        .unwrap() as usize;
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&data, bytes).unwrap();
    let o = towerrec(&["train", "-q", "--resume", s(&out)]);
    assert_fails_with(&o, &["day.tsv", "content changed", "--allow-data-change"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stop_after_on_a_resume_counts_from_the_checkpoint() {
    let dir = tmp("stop-after");
    let out = dir.join("run");
    let mut args = vec!["train", "-q", "--out", s(&out), "--stop-after", "2"];
    args.extend(TINY);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", describe(&o));
    let o = towerrec(&["train", "-q", "--resume", s(&out), "--stop-after", "3"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        text(&o).0.contains("stopped at step 5 as asked"),
        "{}",
        describe(&o)
    );
    assert!(!out.join("summary.json").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn partition_refuses_data_that_changed_since_the_checkpoint() {
    let dir = tmp("partition");
    let config = csv_config(&dir, 200, None);
    let out = dir.join("run");
    let o = towerrec(&["train", "-q", "--config", s(&config), "--out", s(&out)]);
    assert!(o.status.success(), "{}", describe(&o));
    // Same size, one label flipped.
    let text_before = std::fs::read_to_string(dir.join("d.csv")).unwrap();
    let edited = text_before.replacen("\n0,", "\n1,", 1);
    assert_eq!(edited.len(), text_before.len());
    std::fs::write(dir.join("d.csv"), edited).unwrap();
    let json = dir.join("p.json");
    let args = [
        "partition",
        "--checkpoint",
        s(&out),
        "--towers",
        "2",
        "--out",
        s(&json),
    ];
    let o = towerrec(&args);
    assert_fails_with(
        &o,
        &[
            "d.csv",
            "is not what the run trained on",
            "--allow-data-change",
        ],
    );
    assert!(!json.exists());
    let o = towerrec(&[&args[..], &["--allow-data-change"]].concat());
    assert!(o.status.success(), "{}", describe(&o));
    std::fs::remove_dir_all(dir).ok();
}
