//! A preprocessed binary format, memory-mapped, so that epochs after the first do not
//! parse text again and the trainer can gather rows in any (shuffled) order.
//!
//! Layout, little-endian throughout:
//!
//! ```text
//! b"TRECBIN1"                     magic and format version
//! u64                              header length H
//! H bytes                          header JSON: version, schema, num_rows N, num_dense D, nnz per feature
//! padding to a multiple of 8
//! f32[N]      labels               (each section padded to a multiple of 8 bytes)
//! f32[N·D]    dense, row-major
//! per sparse feature f:
//!   u64[N+1]  offsets into values (starting at 0)
//!   u64[nnz_f] values
//! ```
//!
//! The writer spools each section to its own temporary file beside the output (one pass
//! over the input, constant memory), then concatenates them into `<path>.tmp` and renames
//! it over `<path>`, so a reader never sees a half-written file.
//!
//! The reader checks the magic, the header and that the file size matches the header
//! exactly, so no size the header claims is trusted before it is checked against the
//! file; per-row offsets, labels (0 or 1), dense values (finite) and each id against
//! its table's rows are checked when a row is read (an error names the file, the row
//! and what is wrong), so a damaged file cannot pass on values no reader produces. Values are decoded with
//! `from_le_bytes`, so no unsafe casts depend on alignment or host endianness.

use crate::error::{Error, Result};
use crate::record::{Record, RecordStream, Schema};
use crate::text::RowSelect;
use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use towerrec_core::{Batch, KeyedJagged};

mod writer;
pub use writer::{estimated_size, write_binary, write_binary_with, BinaryWriter};

/// The first 8 bytes of every file in this format.
pub const MAGIC: &[u8; 8] = b"TRECBIN1";
pub(crate) const VERSION: u32 = 1;

/// The JSON header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) schema: Schema,
    pub(crate) num_rows: u64,
    pub(crate) num_dense: u64,
    /// Number of sparse values per feature.
    pub(crate) nnz: Vec<u64>,
    /// The checksum of the vocabulary the ids come from; absent: hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) vocab: Option<String>,
}

/// Byte offsets of the sections, derived from the header.
#[derive(Debug, Clone)]
struct Layout {
    labels: usize,
    dense: usize,
    /// Per feature: (offsets section, values section).
    features: Vec<(usize, usize)>,
    end: u64,
}

pub(crate) fn pad8(n: u64) -> Option<u64> {
    n.checked_add(7).map(|x| x & !7)
}

impl Layout {
    /// Section offsets for a header starting after `header_end`; None on overflow.
    fn compute(h: &Header, header_end: u64) -> Option<Self> {
        let n = h.num_rows;
        let mut pos = pad8(header_end)?;
        let labels = pos;
        pos = pad8(pos.checked_add(n.checked_mul(4)?)?)?;
        let dense = pos;
        pos = pad8(pos.checked_add(n.checked_mul(h.num_dense)?.checked_mul(4)?)?)?;
        let mut features = Vec::with_capacity(h.nnz.len());
        for &nnz in &h.nnz {
            let offsets = pos;
            pos = pos.checked_add(n.checked_add(1)?.checked_mul(8)?)?;
            let values = pos;
            pos = pos.checked_add(nnz.checked_mul(8)?)?;
            features.push((
                usize::try_from(offsets).ok()?,
                usize::try_from(values).ok()?,
            ));
        }
        usize::try_from(pos).ok()?;
        Some(Self {
            labels: usize::try_from(labels).ok()?,
            dense: usize::try_from(dense).ok()?,
            features,
            end: pos,
        })
    }
}

/// Whether `path` starts with the binary format's magic (so a `--data` override may name
/// a preprocessed file whatever the config's format).
pub fn is_binary_file(path: &Path) -> Result<bool> {
    let mut file = crate::datafile::open(path)?;
    is_binary(&mut file, path)
}

/// Whether the open `file` starts with the binary format's magic; reads its first
/// bytes and puts its position back at the start.
pub(crate) fn is_binary(file: &mut File, path: &Path) -> Result<bool> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    Ok(got == head.len() && &head == MAGIC)
}

fn too_short(path: &Path, len: u64) -> Error {
    Error::format(
        path,
        format!("too short ({len} bytes) to be a towerrec binary file"),
    )
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le_f32(b: &[u8], at: usize) -> f32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    f32::from_le_bytes(a)
}

/// The bytes of a data set: its file mapped read-only, or a copy in memory.
enum Bytes {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A memory-mapped binary data set.
pub struct BinaryDataset {
    path: PathBuf,
    map: Bytes,
    header: Header,
    layout: Layout,
}

impl std::fmt::Debug for BinaryDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinaryDataset")
            .field("path", &self.path)
            .field("rows", &self.header.num_rows)
            .finish()
    }
}

impl BinaryDataset {
    /// Maps `path` and validates its header and size.
    pub fn open(path: &Path) -> Result<Self> {
        Self::from_file(&crate::datafile::open(path)?, path)
    }

    /// Maps the open `file`, named `path` in errors, and validates it.
    pub(crate) fn from_file(file: &File, path: &Path) -> Result<Self> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < 16 {
            return Err(too_short(path, len));
        }
        // Safety: the map is read-only; the one hazard, another process truncating the
        // file while it is mapped, is documented for users of preprocessed files.
        let map = unsafe { Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
        Self::parse(Bytes::Map(map), path)
    }

    /// Reads a file's bytes held in memory, checked as [`BinaryDataset::open`] checks a
    /// file; `name` is the file name shown in errors. The fuzz tests' way in.
    #[doc(hidden)]
    pub fn from_bytes(bytes: Vec<u8>, name: &Path) -> Result<Self> {
        Self::parse(Bytes::Owned(bytes), name)
    }

    fn parse(map: Bytes, path: &Path) -> Result<Self> {
        let fail = |m: String| Err(Error::format(path, m));
        let len = map.len() as u64;
        if len < 16 {
            return Err(too_short(path, len));
        }
        if &map[..8] != MAGIC {
            return if map.starts_with(b"TRECBIN") {
                fail("unsupported binary format version; re-run `towerrec preprocess`".into())
            } else {
                fail(
                    "not a towerrec binary file (bad magic); write one with `towerrec preprocess`"
                        .into(),
                )
            };
        }
        let header_len = le_u64(&map, 8);
        let header_end = match header_len.checked_add(16) {
            Some(e) if e <= len => e,
            _ => {
                return fail(format!(
                    "header length {header_len} exceeds the file size {len}"
                ))
            }
        };
        // header_end ≤ len, and len fits in memory because it is mapped.
        let header: Header = match serde_json::from_slice(&map[16..header_end as usize]) {
            Ok(h) => h,
            Err(e) => return fail(format!("bad header: {e}")),
        };
        if header.version != VERSION {
            return fail(format!("unsupported header version {}", header.version));
        }
        if header.num_dense != header.schema.dense.len() as u64 {
            return fail(format!(
                "header says {} dense features but its schema names {}",
                header.num_dense,
                header.schema.dense.len()
            ));
        }
        if header.nnz.len() != header.schema.sparse.len() {
            return fail(format!(
                "header has {} nnz counts for {} sparse features",
                header.nnz.len(),
                header.schema.sparse.len()
            ));
        }
        if let Some(f) = header.schema.sparse.iter().find(|f| f.rows == 0) {
            return fail(format!("feature '{}' has 0 rows", f.name));
        }
        let Some(layout) = Layout::compute(&header, header_end) else {
            return fail("header sizes overflow".into());
        };
        if layout.end != len {
            return fail(format!(
                "file is {len} bytes but its header describes {} (truncated or corrupt)",
                layout.end
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            map,
            header,
            layout,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> u64 {
        self.header.num_rows
    }

    /// Whether the file has no rows.
    pub fn is_empty(&self) -> bool {
        self.header.num_rows == 0
    }

    /// The features of every row.
    pub fn schema(&self) -> &Schema {
        &self.header.schema
    }

    /// The checksum of the vocabulary the file's ids come from (`None`: hashed).
    pub fn vocab(&self) -> Option<&str> {
        self.header.vocab.as_deref()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_row(&self, i: u64) -> Result<usize> {
        if i >= self.header.num_rows {
            return Err(Error::Config(format!(
                "row {i} out of range: {} has {} rows",
                self.path.display(),
                self.header.num_rows
            )));
        }
        // Every row index fits in usize: the sections holding them are mapped.
        Ok(i as usize)
    }

    /// Value range of row `i` (checked) of feature `f`.
    fn sparse_range(&self, f: usize, i: usize) -> Result<Range<usize>> {
        let (offsets, values) = self.layout.features[f];
        let start = le_u64(&self.map, offsets + 8 * i);
        let end = le_u64(&self.map, offsets + 8 * (i + 1));
        if start > end || end > self.header.nnz[f] {
            return Err(Error::format(
                &self.path,
                format!(
                    "corrupt offsets of feature '{}' at row {i}",
                    self.header.schema.sparse[f].name
                ),
            ));
        }
        Ok(values + 8 * start as usize..values + 8 * end as usize)
    }

    /// The label of row `i`, which must be 0 or 1.
    fn label(&self, i: usize) -> Result<f32> {
        let label = le_f32(&self.map, self.layout.labels + 4 * i);
        if label != 0.0 && label != 1.0 {
            return Err(Error::format(
                &self.path,
                format!("row {i}: label {label} is not 0 or 1"),
            ));
        }
        Ok(label)
    }

    /// Appends the dense values of row `i`, which must be finite.
    fn push_dense(&self, i: usize, out: &mut Vec<f32>) -> Result<()> {
        let d = self.header.num_dense as usize;
        let base = self.layout.dense + 4 * d * i;
        for k in 0..d {
            let x = le_f32(&self.map, base + 4 * k);
            if !x.is_finite() {
                return Err(Error::format(
                    &self.path,
                    format!(
                        "row {i}: dense feature '{}' is {x}, not a finite number",
                        self.header.schema.dense[k]
                    ),
                ));
            }
            out.push(x);
        }
        Ok(())
    }

    /// Appends the ids of row `i` of feature `f`, checked against the feature's table.
    fn push_ids(&self, f: usize, i: usize, out: &mut Vec<u64>) -> Result<()> {
        let feature = &self.header.schema.sparse[f];
        for at in self.sparse_range(f, i)?.step_by(8) {
            let id = le_u64(&self.map, at);
            if id >= feature.rows {
                return Err(Error::format(
                    &self.path,
                    format!(
                        "row {i}: feature '{}' id {id} out of range (table has {} rows)",
                        feature.name, feature.rows
                    ),
                ));
            }
            out.push(id);
        }
        Ok(())
    }

    /// Row `i`.
    pub fn record(&self, i: u64) -> Result<Record> {
        let i = self.check_row(i)?;
        let mut dense = Vec::with_capacity(self.header.num_dense as usize);
        self.push_dense(i, &mut dense)?;
        let sparse = (0..self.header.nnz.len())
            .map(|f| {
                let mut ids = Vec::new();
                self.push_ids(f, i, &mut ids)?;
                Ok(ids)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Record {
            label: self.label(i)?,
            dense,
            sparse,
        })
    }

    /// A batch of the given rows, in the given order (any order, repeats allowed).
    pub fn batch(&self, rows: &[u64]) -> Result<Batch> {
        let idx = rows
            .iter()
            .map(|&i| self.check_row(i))
            .collect::<Result<Vec<_>>>()?;
        let labels = idx
            .iter()
            .map(|&i| self.label(i))
            .collect::<Result<Vec<_>>>()?;
        let mut dense = Vec::with_capacity(idx.len() * self.header.num_dense as usize);
        for &i in &idx {
            self.push_dense(i, &mut dense)?;
        }
        let mut offsets = Vec::with_capacity(self.header.nnz.len() * idx.len() + 1);
        offsets.push(0);
        let mut values = Vec::new();
        for f in 0..self.header.nnz.len() {
            for &i in &idx {
                self.push_ids(f, i, &mut values)?;
                offsets.push(values.len());
            }
        }
        let sparse =
            KeyedJagged::from_offsets(self.schema().sparse_names(), idx.len(), offsets, values)?;
        Ok(Batch::new(
            dense,
            self.header.num_dense as usize,
            sparse,
            labels,
        )?)
    }
}

/// Rows of a [`BinaryDataset`], in order.
pub struct BinaryStream {
    data: Arc<BinaryDataset>,
    next: u64,
    end: u64,
    select: RowSelect,
}

impl BinaryStream {
    /// Rows `range` (clamped to the file).
    pub fn new(data: Arc<BinaryDataset>, range: Range<u64>) -> Self {
        Self::with_rows(data, RowSelect::Range(range))
    }

    /// The rows `select` picks.
    pub fn with_rows(data: Arc<BinaryDataset>, select: RowSelect) -> Self {
        let next = match &select {
            RowSelect::Range(r) => r.start,
            _ => 0,
        };
        let end = select.end().min(data.len());
        Self {
            data,
            next,
            end,
            select,
        }
    }
}

impl RecordStream for BinaryStream {
    fn schema(&self) -> &Schema {
        self.data.schema()
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        while self.next < self.end {
            let i = self.next;
            self.next += 1;
            if self.select.contains(i) {
                return self.data.record(i).map(Some);
            }
        }
        Ok(None)
    }

    fn skipped(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SparseFeature;

    /// `name` in a scratch directory removed when the guard drops.
    fn temp(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    #[test]
    fn round_trips_multi_hot_rows() {
        let schema = Schema {
            dense: vec!["a".into()],
            sparse: vec![
                SparseFeature {
                    name: "x".into(),
                    rows: 10,
                },
                SparseFeature {
                    name: "y".into(),
                    rows: 5,
                },
            ],
        };
        let recs = vec![
            Record {
                label: 1.0,
                dense: vec![0.5],
                sparse: vec![vec![1, 2, 3], vec![]],
            },
            Record {
                label: 0.0,
                dense: vec![-1.0],
                sparse: vec![vec![], vec![4]],
            },
            Record {
                label: 1.0,
                dense: vec![2.0],
                sparse: vec![vec![9], vec![0, 0]],
            },
        ];
        let (_dir, path) = temp("rt.bin");
        let mut w = BinaryWriter::create(&path, schema.clone()).unwrap();
        for r in &recs {
            w.write(r).unwrap();
        }
        assert_eq!(w.finish().unwrap(), 3);
        // No spool or temporary file is left beside the output.
        assert_eq!(std::fs::read_dir(_dir.path()).unwrap().count(), 1);
        assert!(is_binary_file(&path).unwrap());
        let ds = BinaryDataset::open(&path).unwrap();
        assert_eq!(ds.schema(), &schema);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(&ds.record(i as u64).unwrap(), r);
        }
        let b = ds.batch(&[2, 0]).unwrap();
        assert_eq!(b.labels, vec![1.0, 1.0]);
        assert_eq!(b.dense, vec![2.0, 0.5]);
        assert_eq!(b.sparse.feature(0).ids(1), &[1, 2, 3]);
        assert_eq!(b.sparse.feature(1).ids(0), &[0, 0]);
        assert!(ds.record(3).is_err());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn writer_rejects_ids_outside_their_table() {
        let schema = Schema {
            dense: vec![],
            sparse: vec![SparseFeature {
                name: "x".into(),
                rows: 3,
            }],
        };
        let (_dir, path) = temp("bad-id.bin");
        let mut w = BinaryWriter::create(&path, schema).unwrap();
        let r = Record {
            label: 0.0,
            dense: vec![],
            sparse: vec![vec![3]],
        };
        assert!(w.write(&r).is_err());
        drop(w);
        assert_eq!(std::fs::read_dir(_dir.path()).unwrap().count(), 0);
    }
}
