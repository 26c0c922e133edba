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

/// The bytes of a version 1 binary file (the format written before issue 39: f32
/// labels, u64 offsets and u64 ids for every feature) holding `records`.
pub fn v1_file(schema: &towerrec_data::Schema, records: &[Record]) -> Vec<u8> {
    let nnz: Vec<u64> = (0..schema.sparse.len())
        .map(|f| records.iter().map(|r| r.sparse[f].len() as u64).sum())
        .collect();
    let header = serde_json::json!({
        "version": 1,
        "schema": schema,
        "num_rows": records.len(),
        "num_dense": schema.dense.len(),
        "nnz": nnz,
    });
    let json = serde_json::to_vec(&header).unwrap();
    let mut out = b"TRECBIN1".to_vec();
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(json);
    let pad = |out: &mut Vec<u8>| out.resize(out.len().next_multiple_of(8), 0);
    pad(&mut out);
    out.extend(records.iter().flat_map(|r| r.label.to_le_bytes()));
    pad(&mut out);
    out.extend(
        records
            .iter()
            .flat_map(|r| r.dense.iter().flat_map(|x| x.to_le_bytes())),
    );
    pad(&mut out);
    for f in 0..schema.sparse.len() {
        let mut end = 0u64;
        out.extend(0u64.to_le_bytes());
        for r in records {
            end += r.sparse[f].len() as u64;
            out.extend(end.to_le_bytes());
        }
        out.extend(
            records
                .iter()
                .flat_map(|r| r.sparse[f].iter().flat_map(|id| id.to_le_bytes())),
        );
    }
    out
}
