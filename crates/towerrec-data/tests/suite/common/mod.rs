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

/// How a test's Parquet file stores its columns' values.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dictionary {
    /// The writer's default: a dictionary page per column chunk.
    On,
    /// Plain pages only.
    Off,
    /// A dictionary page of at most 256 bytes: the writer falls back to plain pages
    /// within a column chunk once it fills.
    FallsBack,
}

/// Writes `batch` as a snappy-compressed Parquet file of row groups of `group_rows`.
pub fn write_parquet(path: &Path, batch: &arrow_array::RecordBatch, group_rows: usize) {
    write_parquet_with(path, batch, group_rows, Dictionary::On);
}

/// [`write_parquet`] with the given dictionary encoding.
pub fn write_parquet_with(
    path: &Path,
    batch: &arrow_array::RecordBatch,
    group_rows: usize,
    dictionary: Dictionary,
) {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(group_rows))
        .set_dictionary_enabled(dictionary != Dictionary::Off)
        .set_dictionary_page_size_limit(if dictionary == Dictionary::FallsBack {
            256
        } else {
            1 << 20
        })
        // Small data pages, so that a fallback happens within a column chunk.
        .set_data_page_row_count_limit(64)
        .build();
    let file = std::fs::File::create(path).expect("create parquet file");
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("parquet writer");
    w.write(batch).expect("write parquet");
    w.close().expect("close parquet");
}

/// `n` rows of a click log as an Arrow batch and as the CSV text of the same rows:
/// an int label, float and int dense columns with nulls, a string column with nulls
/// and blanks around values, an int64 id column, a list column (null lists, empty
/// lists, null elements) and a `|`-separated string column. Floats are written with
/// Rust's shortest round-trip formatting, so the CSV parses to the same f64.
pub fn click_log(n: usize) -> (arrow_array::RecordBatch, String) {
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, Float32Array, Float64Array, Int32Array, Int64Array, StringArray};
    use std::sync::Arc;
    let mut csv = String::from("click,price,count,ratio,site,user,tags,cats\n");
    let (mut click, mut price, mut count, mut ratio) = (vec![], vec![], vec![], vec![]);
    let (mut site, mut user, mut cats) = (vec![], vec![], vec![]);
    let mut tags = ListBuilder::new(StringBuilder::new());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..n {
        let r = next();
        let c = (r % 3 == 0) as i64;
        let p = (r % 7 != 0).then(|| (r >> 8) as f64 / 1e6 - 5e6 * (r % 2) as f64);
        let k = (r % 5 != 0).then_some(((r >> 20) % 1000) as i32 - 10);
        let q = ((r >> 30) % 100_000) as f32 / 7.0;
        let s = match r % 6 {
            0 => None,
            1 => Some(String::new()),
            2 => Some(format!(" s{} ", r % 50)),
            _ => Some(format!("site{}", (r >> 3) % 200)),
        };
        let u = (r >> 11) as i64 - (1 << 52);
        let t: Option<Vec<Option<String>>> = match i % 5 {
            0 => None,
            1 => Some(vec![]),
            2 => Some(vec![Some(format!("t{}", r % 9)), None, Some(" x ".into())]),
            _ => Some(
                (0..(r % 4))
                    .map(|j| Some(format!("t{}", (r >> j) % 30)))
                    .collect(),
            ),
        };
        let m = format!("a{}|b{}||", r % 4, (r >> 5) % 6);
        let tag_text = t
            .as_ref()
            .map(|t| t.iter().flatten().cloned().collect::<Vec<_>>().join("|"))
            .unwrap_or_default();
        csv += &format!(
            "{c},{},{},{},{},{u},{tag_text},{m}\n",
            p.map(|p| p.to_string()).unwrap_or_default(),
            k.map(|k| k.to_string()).unwrap_or_default(),
            f64::from(q),
            s.clone().unwrap_or_default(),
        );
        click.push(c);
        price.push(p);
        count.push(k);
        ratio.push(q);
        site.push(s);
        user.push(u);
        match t {
            None => tags.append_null(),
            Some(t) => {
                for e in t {
                    tags.values().append_option(e);
                }
                tags.append(true);
            }
        }
        cats.push(m);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("click", Arc::new(Int64Array::from(click))),
        ("price", Arc::new(Float64Array::from(price))),
        ("count", Arc::new(Int32Array::from(count))),
        ("ratio", Arc::new(Float32Array::from(ratio))),
        ("site", Arc::new(StringArray::from(site))),
        ("user", Arc::new(Int64Array::from(user))),
        ("tags", Arc::new(tags.finish())),
        ("cats", Arc::new(StringArray::from(cats))),
    ];
    let batch = arrow_array::RecordBatch::try_from_iter(columns).expect("record batch");
    (batch, csv)
}

/// The `label`, `dense` and `sparse` tables of a schema for [`click_log`], in TOML.
pub const CLICK_LOG_COLUMNS: &str = r#"label = { column = "click" }
dense = [{ column = "price" }, { column = "count", fill = 3.0 }, { column = "ratio", transform = "none" }]
sparse = [
  { column = "site", rows = 97 },
  { column = "user", rows = 1000 },
  { column = "tags", rows = 50, separator = "|" },
  { column = "cats", rows = 31, separator = "|" },
]
"#;
