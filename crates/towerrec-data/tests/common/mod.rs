//! Helpers shared by the integration tests: temporary directories and generated files.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use towerrec_data::{Record, RecordStream};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("towerrec-data-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` inside the directory and returns its path.
    pub fn file(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A Criteo line: label, 13 dense, 26 categoricals.
pub fn criteo_line(label: &str, dense: &[&str; 13], sparse: &[&str; 26]) -> String {
    let mut f = vec![label];
    f.extend_from_slice(dense);
    f.extend_from_slice(sparse);
    f.join("\t")
}

/// A well-formed Criteo line whose values depend on `i`.
pub fn criteo_row(i: u64) -> String {
    let dense: Vec<String> = (0..13).map(|k| ((i * 7 + k) % 50).to_string()).collect();
    let sparse: Vec<String> = (0..26).map(|k| format!("{:08x}", i * 1000 + k)).collect();
    let d: Vec<&str> = dense.iter().map(String::as_str).collect();
    let s: Vec<&str> = sparse.iter().map(String::as_str).collect();
    let mut f = vec![match i % 3 {
        0 => "1",
        _ => "0",
    }];
    f.extend(d);
    f.extend(s);
    f.join("\t")
}

/// Every record of a stream.
pub fn drain(s: &mut dyn RecordStream) -> Vec<Record> {
    let mut out = Vec::new();
    while let Some(r) = s.next_record().expect("next_record") {
        out.push(r);
    }
    out
}
