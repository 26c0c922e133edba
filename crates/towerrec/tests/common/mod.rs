//! Helpers shared by the binary's end-to-end tests: run `towerrec`, read what it
//! printed, and make a fresh scratch directory.
#![allow(dead_code)] // each test file uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the built `towerrec` with `args` from the repository root, so that paths such
/// as `bench/kaggle.toml` resolve.
pub fn towerrec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_towerrec"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("the binary runs")
}

/// (stdout, stderr) as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Status, stdout and stderr, for assertion messages.
pub fn describe(o: &Output) -> String {
    let (out, err) = text(o);
    format!("status {}\n--- stdout\n{out}--- stderr\n{err}", o.status)
}

/// An empty directory `towerrec-<suite>-<pid>-<name>` under the system's temp dir.
pub fn tmp(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("towerrec-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
