//! A preprocessed binary format, memory-mapped, so that epochs after the first do not
//! parse text again and the trainer can gather rows in any (shuffled) order.
//!
//! Layout (format version 2, written since issue 39), little-endian throughout:
//!
//! ```text
//! b"TRECBIN2"                     magic and format version
//! u64                              header length H
//! H bytes                          header JSON: version, schema, num_rows N, num_dense D,
//!                                  nnz per feature, and per feature its id width (4 or 8
//!                                  bytes) and whether it has offsets
//! padding to a multiple of 8
//! u8[N]       labels (0 or 1)      (each section padded to a multiple of 8 bytes)
//! f32[N·D]    dense, row-major
//! per sparse feature f:
//!   u64[N+1]  offsets into values (starting at 0); left out when every row of the
//!             feature has exactly one id (row i's id is then value i, nnz_f = N)
//!   u32[nnz_f] or u64[nnz_f] values: u32 where the table has at most 2^32 rows
//! ```
//!
//! A one-hot Criteo row takes 1 + 13·4 + 26·4 = 157 bytes (472 in version 1).
//!
//! Version 1 (`b"TRECBIN1"`, written before issue 39) is still read: f32 labels, and
//! every feature with u64 offsets and u64 values. Its header has no `layout`.
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
use crate::record::{Record, Schema};
use crate::stream::RecordStream;
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

/// The first 8 bytes of every file the writer writes (format version 2).
pub const MAGIC: &[u8; 8] = b"TRECBIN2";
/// The first 8 bytes of a version 1 file, still read.
pub const MAGIC_V1: &[u8; 8] = b"TRECBIN1";
pub(crate) const VERSION: u32 = 2;

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
    /// Version 2: how each feature's ids are stored (one entry per feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) layout: Vec<FeatureLayout>,
}

/// How one feature's ids are stored (version 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FeatureLayout {
    /// Bytes per id: 4 or 8.
    pub(crate) id_bytes: u8,
    /// Whether the feature has per-row offsets (false: one id per row).
    pub(crate) offsets: bool,
}

impl FeatureLayout {
    /// Version 1's only layout.
    const V1: Self = Self {
        id_bytes: 8,
        offsets: true,
    };

    /// The narrowest width for ids below `rows`.
    pub(crate) fn id_bytes_for(rows: u64) -> u8 {
        if rows <= 1 << 32 {
            4
        } else {
            8
        }
    }
}

/// Byte offsets of the sections, derived from the header.
#[derive(Debug, Clone)]
struct Layout {
    labels: usize,
    /// Bytes per label: 4 (f32, version 1) or 1 (u8).
    label_bytes: usize,
    dense: usize,
    /// Per feature: offsets section (None: one id per row), values section, id width.
    features: Vec<(Option<usize>, usize, usize)>,
    end: u64,
}

pub(crate) fn pad8(n: u64) -> Option<u64> {
    n.checked_add(7).map(|x| x & !7)
}

impl Layout {
    /// Section offsets for a header starting after `header_end`; None on overflow.
    fn compute(h: &Header, layouts: &[FeatureLayout], header_end: u64) -> Option<Self> {
        let n = h.num_rows;
        let label_bytes: u64 = if h.version == 1 { 4 } else { 1 };
        let mut pos = pad8(header_end)?;
        let labels = pos;
        pos = pad8(pos.checked_add(n.checked_mul(label_bytes)?)?)?;
        let dense = pos;
        pos = pad8(pos.checked_add(n.checked_mul(h.num_dense)?.checked_mul(4)?)?)?;
        let mut features = Vec::with_capacity(h.nnz.len());
        for (&nnz, l) in h.nnz.iter().zip(layouts) {
            let offsets = if l.offsets {
                let at = pos;
                pos = pos.checked_add(n.checked_add(1)?.checked_mul(8)?)?;
                Some(usize::try_from(at).ok()?)
            } else {
                None
            };
            let values = pos;
            pos = pad8(pos.checked_add(nnz.checked_mul(u64::from(l.id_bytes))?)?)?;
            features.push((
                offsets,
                usize::try_from(values).ok()?,
                usize::from(l.id_bytes),
            ));
        }
        usize::try_from(pos).ok()?;
        Some(Self {
            labels: usize::try_from(labels).ok()?,
            label_bytes: label_bytes as usize,
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
    Ok(got == head.len() && (&head == MAGIC || &head == MAGIC_V1))
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

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
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
    /// The format version of the file (1 or 2).
    version: u32,
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
        let magic_version = match &map[..8] {
            m if m == MAGIC => 2,
            m if m == MAGIC_V1 => 1,
            m => {
                return if m.starts_with(b"TRECBIN") {
                    fail(format!(
                        "unsupported binary format version {:?} (this build reads versions 1 \
                         and 2); convert the text data again with `towerrec preprocess`",
                        String::from_utf8_lossy(&m[7..8])
                    ))
                } else {
                    fail(
                        "not a towerrec binary file (bad magic); write one with `towerrec preprocess`"
                            .into(),
                    )
                }
            }
        };
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
        if header.version != magic_version {
            return fail(format!(
                "header version {} does not match the format version {magic_version} of the magic",
                header.version
            ));
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
        let layouts = if header.version == 1 {
            if !header.layout.is_empty() {
                return fail("a version 1 header has no `layout`".into());
            }
            vec![FeatureLayout::V1; header.nnz.len()]
        } else {
            header.layout.clone()
        };
        if layouts.len() != header.nnz.len() {
            return fail(format!(
                "header has {} id layouts for {} sparse features",
                layouts.len(),
                header.nnz.len()
            ));
        }
        for (k, l) in layouts.iter().enumerate() {
            let name = &header.schema.sparse[k].name;
            if !matches!(l.id_bytes, 4 | 8) {
                return fail(format!(
                    "feature '{name}': ids of {} bytes (expected 4 or 8)",
                    l.id_bytes
                ));
            }
            if l.id_bytes == 4 && header.schema.sparse[k].rows > 1 << 32 {
                return fail(format!(
                    "feature '{name}': 4-byte ids for a table of {} rows",
                    header.schema.sparse[k].rows
                ));
            }
            if !l.offsets && header.nnz[k] != header.num_rows {
                return fail(format!(
                    "feature '{name}' has one id per row but {} ids for {} rows",
                    header.nnz[k], header.num_rows
                ));
            }
        }
        let Some(layout) = Layout::compute(&header, &layouts, header_end) else {
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
            version: header.version,
            header,
            layout,
        })
    }

    /// The file's format version: 1 (read for compatibility) or 2.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Bytes of the file per row (header included).
    pub fn bytes_per_row(&self) -> f64 {
        self.map.len() as f64 / self.header.num_rows.max(1) as f64
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

    /// Index range (in values) of row `i` (checked) of feature `f`.
    #[inline]
    fn sparse_range(&self, f: usize, i: usize) -> Result<Range<usize>> {
        let Some(offsets) = self.layout.features[f].0 else {
            return Ok(i..i + 1);
        };
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
        // Below nnz, whose values the file holds.
        Ok(start as usize..end as usize)
    }

    /// The label of row `i`, which must be 0 or 1.
    #[inline]
    fn label(&self, i: usize) -> Result<f32> {
        let label = if self.layout.label_bytes == 1 {
            match self.map[self.layout.labels + i] {
                0 => 0.0,
                1 => 1.0,
                b => f32::from(b),
            }
        } else {
            le_f32(&self.map, self.layout.labels + 4 * i)
        };
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
    #[inline]
    fn push_ids(&self, f: usize, i: usize, out: &mut Vec<u64>) -> Result<()> {
        let feature = &self.header.schema.sparse[f];
        let (_, values, width) = self.layout.features[f];
        for k in self.sparse_range(f, i)? {
            let at = values + width * k;
            let id = if width == 4 {
                u64::from(le_u32(&self.map, at))
            } else {
                le_u64(&self.map, at)
            };
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

    /// The next `n` selected rows gathered straight from the file ([`BinaryDataset::batch`]),
    /// without a [`Record`] each.
    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        let mut rows = Vec::with_capacity(n.min(1 << 16));
        while rows.len() < n && self.next < self.end {
            let i = self.next;
            self.next += 1;
            if self.select.contains(i) {
                rows.push(i);
            }
        }
        self.data.batch(&rows).map(Some)
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
