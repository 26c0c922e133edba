//! A Parquet reader driven by a schema from the run config, the same `label`, `dense`
//! and `sparse` tables as the CSV schema ([`crate::csv_schema`]): a Parquet file and a
//! CSV of the same rows give the same records, bit for bit (docs/DATA.md, "Parquet").
//!
//! The file is memory-mapped; its metadata gives the row count (a tail split needs no
//! counting pass) and the Arrow schema, against which every column's type is checked
//! when the file is opened. Row groups are decoded on threads of their own, a few at a
//! time, in file order ([`chunk`]); the cell rules live in [`columns`].

mod chunk;
mod columns;

use self::chunk::{Chunk, Column, Pipeline, Plan, Source};
use self::columns::{LabelRule, Role};
use crate::csv_schema::{columns_schema, validate_columns, DenseColumn, LabelSpec, SparseColumn};
use crate::encode::{hashing, FeatureIds};
use crate::error::{Error, Result};
use crate::record::{BadRows, Record, Schema};
use crate::stream::RecordStream;
use crate::text::RowSelect;
use ::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use ::parquet::arrow::ProjectionMask;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use towerrec_core::{Batch, KeyedJagged};

/// How to read a Parquet file (the `schema` table of a `format = "parquet"` config):
/// the CSV schema's `label`, `dense` and `sparse` tables, with columns named as in the
/// file. A sparse column with a `separator` is multi-valued: a list column gives one id
/// per element, a string column is split on the separator as in a CSV.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetSchema {
    /// The label column and how its values map to 0/1.
    pub label: LabelSpec,
    /// Numeric columns.
    #[serde(default)]
    pub dense: Vec<DenseColumn>,
    /// Categorical columns, each with its own embedding table.
    #[serde(default)]
    pub sparse: Vec<SparseColumn>,
}

impl ParquetSchema {
    /// The record schema this Parquet schema produces (no file needed).
    pub fn schema(&self) -> Result<Schema> {
        self.validate()?;
        columns_schema(&self.dense, &self.sparse)
    }

    /// Checks what needs no file: the label rule, table sizes, unique names.
    pub fn validate(&self) -> Result<()> {
        validate_columns(&self.label, &self.dense, &self.sparse)
    }
}

/// Rows of the Parquet file at `path`, from its metadata.
pub fn file_rows(path: &Path) -> Result<u64> {
    let file = crate::datafile::open(path)?;
    let meta = ::parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .map_err(|e| Error::format(path, format!("not a readable Parquet file: {e}")))?;
    Ok(meta
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
        .sum())
}

/// Reads records from a Parquet file described by a [`ParquetSchema`].
pub struct ParquetReader {
    source: Source,
    schema: Schema,
    /// Per row group: rows.
    groups: Vec<u64>,
    width: usize,
    pipeline: Option<Pipeline>,
    /// The chunk being handed out, and its next row.
    chunk: Chunk,
    next: usize,
    skipped: u64,
    /// An error ended the stream.
    failed: bool,
}

impl ParquetReader {
    /// Opens `path` (memory-mapped), reads its metadata and checks every column.
    pub fn open(path: &Path, pq: &ParquetSchema, bad_rows: BadRows) -> Result<Self> {
        Self::from_file(&crate::datafile::open(path)?, path, pq, bad_rows)
    }

    /// Reads an open file; `path` is its name in errors.
    pub fn from_file(
        file: &File,
        path: &Path,
        pq: &ParquetSchema,
        bad_rows: BadRows,
    ) -> Result<Self> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let data = if len == 0 {
            Bytes::new()
        } else {
            // SAFETY: the map is read only; a file truncated by another process while
            // it is read ends the process (SIGBUS), as for the binary format.
            let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
            Bytes::from_owner(map)
        };
        Self::from_bytes(data, path, pq, bad_rows)
    }

    /// Reads a file held in memory; `name` is its name in errors.
    pub fn from_bytes(
        data: Bytes,
        name: &Path,
        pq: &ParquetSchema,
        bad_rows: BadRows,
    ) -> Result<Self> {
        let schema = pq.schema()?;
        let file = name.display().to_string();
        let meta = ArrowReaderMetadata::load(&data, ArrowReaderOptions::new())
            .map_err(|e| Error::format(name, format!("not a readable Parquet file: {e}")))?;
        let fields = meta.schema().fields().clone();
        let mut roots: Vec<usize> = Vec::new();
        let mut resolve = |column: &str, role: Role| -> Result<usize> {
            let Some(root) = fields.iter().position(|f| f.name() == column) else {
                let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
                return Err(Error::format(
                    name,
                    format!(
                        "{}: column \"{column}\" is not in the file (columns: {})",
                        role.key(),
                        names.join(", ")
                    ),
                ));
            };
            role.check(fields[root].data_type()).map_err(|expected| {
                Error::format(
                    name,
                    format!(
                        "{}: column \"{column}\": expected {expected}, found {}",
                        role.key(),
                        fields[root].data_type()
                    ),
                )
            })?;
            if !roots.contains(&root) {
                roots.push(root);
            }
            Ok(root)
        };
        let rule = if let Some(t) = pq.label.threshold {
            LabelRule::Threshold(t)
        } else if !pq.label.positive.is_empty() {
            LabelRule::Positive(
                pq.label
                    .positive
                    .iter()
                    .map(|p| p.trim().as_bytes().to_vec())
                    .collect(),
            )
        } else {
            LabelRule::ZeroOne
        };
        let positive = matches!(rule, LabelRule::Positive(_));
        let label = resolve(&pq.label.column, Role::Label { positive })?;
        let dense = pq
            .dense
            .iter()
            .map(|d| Ok((resolve(&d.column, Role::Dense)?, d)))
            .collect::<Result<Vec<_>>>()?;
        let sparse = pq
            .sparse
            .iter()
            .map(|s| {
                let multi = s.separator.is_some();
                Ok((resolve(&s.column, Role::Sparse { multi })?, s))
            })
            .collect::<Result<Vec<_>>>()?;
        // A projected batch holds the chosen root columns in file order.
        roots.sort_unstable();
        let column = |root: usize, name: &str| Column {
            name: name.to_string(),
            index: roots.binary_search(&root).unwrap_or(0),
        };
        let plan = Plan {
            file,
            label: (column(label, &pq.label.column), rule),
            dense: dense
                .iter()
                .map(|&(r, d)| (column(r, &d.column), d.transform, d.fill))
                .collect(),
            sparse: sparse
                .iter()
                .map(|&(r, s)| {
                    let sep = s.separator.map(|c| c.to_string().into_bytes());
                    (column(r, &s.column), sep)
                })
                .collect(),
            ids: hashing(&schema),
        };
        let dictionary_roots = sparse
            .iter()
            .filter(|(r, s)| {
                s.separator.is_none()
                    && matches!(
                        fields[*r].data_type(),
                        arrow_schema::DataType::Utf8 | arrow_schema::DataType::Binary
                    )
            })
            .map(|&(r, _)| r)
            .collect();
        let mask = ProjectionMask::roots(meta.parquet_schema(), roots.iter().copied());
        let groups = meta
            .metadata()
            .row_groups()
            .iter()
            .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
            .collect();
        let width = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
        Ok(ParquetReader {
            source: Source {
                data,
                meta,
                mask,
                plan: Arc::new(plan),
                select: RowSelect::All,
                bad_rows,
                dictionary_roots,
            },
            schema,
            groups,
            width,
            pipeline: None,
            chunk: Chunk::default(),
            next: 0,
            skipped: 0,
            failed: false,
        })
    }

    /// Rows in the file, from its metadata.
    pub fn rows(&self) -> u64 {
        self.groups.iter().sum()
    }

    /// Yields only the rows `select` picks (a train or eval split). Before reading.
    pub fn with_rows(mut self, select: RowSelect) -> Self {
        self.source.select = select;
        self
    }

    /// Maps each sparse column's keys with `ids` (one per column) instead of hashing
    /// into its `rows`; the schema's table sizes follow. Before reading.
    pub fn with_ids(mut self, ids: Vec<FeatureIds>) -> Result<Self> {
        if ids.len() != self.schema.sparse.len() {
            return Err(Error::Config(format!(
                "the schema has {} sparse columns, got {} encodings",
                self.schema.sparse.len(),
                ids.len()
            )));
        }
        for (f, e) in self.schema.sparse.iter_mut().zip(&ids) {
            f.rows = e.rows();
        }
        let mut plan = (*self.source.plan).clone();
        plan.ids = ids;
        self.source.plan = Arc::new(plan);
        Ok(self)
    }

    /// Reads `n` threads' worth of row groups at a time (default: the cores, 2 to 8).
    pub fn with_threads(mut self, n: usize) -> Self {
        self.width = n.max(1);
        self
    }

    /// Makes the current chunk one with rows left; false at the end.
    fn fill(&mut self) -> Result<bool> {
        while self.next >= self.chunk.len() {
            if self.failed {
                return Ok(false);
            }
            let pipeline = self.pipeline.get_or_insert_with(|| {
                let select = &self.source.select;
                let mut first = 0u64;
                let mut groups = Vec::new();
                for (g, &n) in self.groups.iter().enumerate() {
                    let wanted = match select {
                        RowSelect::Range(r) => r.start < first + n && first < r.end,
                        // A column split is refused for Parquet before a reader exists.
                        RowSelect::All | RowSelect::Hashed { .. } | RowSelect::Mask { .. } => true,
                    };
                    if wanted && n > 0 {
                        groups.push((g, first));
                    }
                    first += n;
                }
                Pipeline::new(self.source.clone(), groups, self.width)
            });
            match pipeline.next_chunk() {
                None => return Ok(false),
                Some(Ok(chunk)) => {
                    self.skipped += chunk.skipped;
                    self.chunk = chunk;
                    self.next = 0;
                }
                Some(Err(e)) => {
                    self.failed = true;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }
}

impl RecordStream for ParquetReader {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        if !self.fill()? {
            return Ok(None);
        }
        let (c, i, d) = (&self.chunk, self.next, self.schema.dense.len());
        let record = Record {
            label: c.labels[i],
            dense: c.dense[i * d..(i + 1) * d].to_vec(),
            sparse: c
                .offsets
                .iter()
                .zip(&c.values)
                .map(|(o, v)| v[o[i]..o[i + 1]].to_vec())
                .collect(),
        };
        self.next += 1;
        Ok(Some(record))
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Copies whole runs of rows out of the decoded chunks, without a [`Record`] each.
    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        let (d, f) = (self.schema.dense.len(), self.schema.sparse.len());
        if n > 0 && self.fill()? && self.chunk.len() - self.next >= n {
            // The batch lies in one chunk (the usual case: chunks are 8,192 rows):
            // one copy of each part.
            let (c, i) = (&self.chunk, self.next);
            let mut offsets = Vec::with_capacity(f * n + 1);
            offsets.push(0usize);
            let mut flat =
                Vec::with_capacity(c.offsets.iter().map(|o| o[i + n] - o[i]).sum::<usize>());
            for (o, v) in c.offsets.iter().zip(&c.values) {
                let (base, start) = (flat.len(), o[i]);
                offsets.extend(o[i + 1..=i + n].iter().map(|&x| x - start + base));
                flat.extend_from_slice(&v[o[i]..o[i + n]]);
            }
            let labels = c.labels[i..i + n].to_vec();
            let dense = c.dense[i * d..(i + n) * d].to_vec();
            self.next += n;
            let sparse = KeyedJagged::from_offsets(self.schema.sparse_names(), n, offsets, flat)?;
            return Ok(Some(Batch::new(dense, d, sparse, labels)?));
        }
        let mut labels = Vec::with_capacity(n.min(1 << 16));
        let mut dense = Vec::with_capacity(labels.capacity() * d);
        // Per feature: lengths of the rows' id lists, and the ids.
        let mut lens: Vec<Vec<usize>> = vec![Vec::new(); f];
        let mut values: Vec<Vec<u64>> = vec![Vec::new(); f];
        while labels.len() < n && self.fill()? {
            let (c, i) = (&self.chunk, self.next);
            let take = (n - labels.len()).min(c.len() - i);
            labels.extend_from_slice(&c.labels[i..i + take]);
            dense.extend_from_slice(&c.dense[i * d..(i + take) * d]);
            for k in 0..f {
                let o = &c.offsets[k];
                lens[k].extend(o[i..=i + take].windows(2).map(|w| w[1] - w[0]));
                values[k].extend_from_slice(&c.values[k][o[i]..o[i + take]]);
            }
            self.next += take;
        }
        let b = labels.len();
        let mut offsets = Vec::with_capacity(f * b + 1);
        offsets.push(0usize);
        let mut flat = Vec::with_capacity(values.iter().map(Vec::len).sum());
        for (l, v) in lens.iter().zip(values) {
            let base = flat.len();
            let mut at = base;
            for len in l {
                at += len;
                offsets.push(at);
            }
            flat.extend(v);
        }
        let sparse = KeyedJagged::from_offsets(self.schema.sparse_names(), b, offsets, flat)?;
        Ok(Some(Batch::new(dense, d, sparse, labels)?))
    }
}
