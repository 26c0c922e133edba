//! Decoding: the [`Plan`] (which column plays which role, resolved against the file)
//! turns record batches into [`Chunk`]s of model inputs, and the [`Pipeline`] reads
//! row groups on threads of their own, a few at a time, handing their chunks back in
//! file order.

use super::columns::{keys, Col, LabelRule, Val};
use crate::csv_schema::DenseTransform;
use crate::encode::{key_of, FeatureIds};
use crate::error::{Error, Result};
use crate::record::BadRows;
use crate::text::RowSelect;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, FieldRef, Schema as ArrowSchema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

/// Rows per record batch decoded at once: a chunk's size.
const CHUNK_ROWS: usize = 8192;
/// Chunks a row group's thread may have decoded ahead of the reader.
const CHUNKS_AHEAD: usize = 2;

/// One role's column: its name and its position in the projected record batches.
#[derive(Debug, Clone)]
pub(super) struct Column {
    pub name: String,
    pub index: usize,
}

/// What to read from each row, resolved against the file's schema.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// The file's name, for messages.
    pub file: String,
    pub label: (Column, LabelRule),
    pub dense: Vec<(Column, DenseTransform, f32)>,
    pub sparse: Vec<(Column, Option<Vec<u8>>)>,
    /// Per sparse column: its key → its row.
    pub ids: Vec<FeatureIds>,
}

/// Decoded rows, column by column: what [`super::ParquetReader`] hands out.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    pub labels: Vec<f32>,
    /// Row-major, `dense.len()` values a row.
    pub dense: Vec<f32>,
    /// Per sparse feature: `offsets[f][r]..offsets[f][r + 1]` are row `r`'s ids.
    pub offsets: Vec<Vec<usize>>,
    pub values: Vec<Vec<u64>>,
    /// Rows skipped as malformed while decoding this chunk.
    pub skipped: u64,
}

impl Chunk {
    /// An empty chunk with room for `rows` rows of `dense` dense values and one id per
    /// sparse feature (more grow it).
    fn new(features: usize, dense: usize, rows: usize) -> Self {
        // Not `vec![v; n]`: its clones would not keep the capacity.
        let offsets = (0..features)
            .map(|_| {
                let mut o = Vec::with_capacity(rows + 1);
                o.push(0);
                o
            })
            .collect();
        Chunk {
            labels: Vec::with_capacity(rows),
            dense: Vec::with_capacity(rows * dense),
            offsets,
            values: (0..features).map(|_| Vec::with_capacity(rows)).collect(),
            skipped: 0,
        }
    }

    /// Rows in the chunk.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

impl Plan {
    fn parse_error(
        &self,
        row: u64,
        group: usize,
        column: &str,
        expected: &str,
        found: Val<'_>,
    ) -> Error {
        Error::Parse {
            file: self.file.clone(),
            line: row + 1,
            field: format!("row group {group}, column \"{column}\""),
            expected: expected.into(),
            found: found.quoted(),
        }
    }

    /// Appends the rows of `batch` that `select` picks to `chunk`; `first` is the file
    /// row of the batch's first row. Under [`BadRows::Skip`] a malformed row is
    /// counted and left out; under `Fail` it stops the decoding with its error, after
    /// the rows before it.
    ///
    /// The label and dense columns are read row by row (a row's error is that of its
    /// first bad column); the sparse columns, which cannot be malformed, then column
    /// by column over the rows kept, with dictionary columns looked up through
    /// `dictionaries` (each dictionary value encoded once per row group).
    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &self,
        batch: &RecordBatch,
        first: u64,
        group: usize,
        select: &RowSelect,
        bad_rows: BadRows,
        dictionaries: &mut [DictionaryIds],
        chunk: &mut Chunk,
    ) -> Result<()> {
        let view = |c: &Column| {
            batch
                .columns()
                .get(c.index)
                .and_then(Col::new)
                .ok_or_else(|| Error::Format {
                    file: self.file.clone(),
                    message: format!(
                        "row group {group}, column \"{}\": not the type the file's schema gives it",
                        c.name
                    ),
                })
        };
        let label = view(&self.label.0)?;
        let dense = self
            .dense
            .iter()
            .map(|d| view(&d.0))
            .collect::<Result<Vec<_>>>()?;
        let sparse = self
            .sparse
            .iter()
            .map(|s| view(&s.0))
            .collect::<Result<Vec<_>>>()?;
        let mut kept = Vec::with_capacity(batch.num_rows());
        let mut failure = None;
        for i in 0..batch.num_rows() {
            let row = first + i as u64;
            if !select.contains(row) {
                continue;
            }
            match self.dense_row(i, row, group, &label, &dense, chunk) {
                Ok(()) => kept.push(i),
                Err(e) if bad_rows == BadRows::Skip && e.is_bad_row() => chunk.skipped += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        for (f, col) in sparse.iter().enumerate() {
            let (offsets, values) = (&mut chunk.offsets[f], &mut chunk.values[f]);
            let (ids, sep) = (&self.ids[f], self.sparse[f].1.as_deref());
            match (col, sep) {
                (Col::Dict { array, keys, .. }, None) => {
                    let null = ids.id(key_of(b""));
                    let nulls = array.logical_nulls();
                    let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
                    let table = dictionaries[f].of(col, ids);
                    look_up(table, keys, valid, null, &kept, offsets, values);
                }
                (Col::Str(a), None) if a.null_count() == 0 => {
                    for &i in &kept {
                        values.push(ids.id(key_of(a.value(i).as_bytes().trim_ascii())));
                        offsets.push(values.len());
                    }
                }
                _ => {
                    for &i in &kept {
                        keys(col, i, sep, |k| values.push(ids.id(k)));
                        offsets.push(values.len());
                    }
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Appends the label and dense values of row `i` of the batch (file row `row`),
    /// or nothing on an error.
    fn dense_row(
        &self,
        i: usize,
        row: u64,
        group: usize,
        label: &Col<'_>,
        dense: &[Col<'_>],
        chunk: &mut Chunk,
    ) -> Result<()> {
        let v = label.get(i);
        let y =
            self.label.1.label(v).map_err(|expected| {
                self.parse_error(row, group, &self.label.0.name, expected, v)
            })?;
        let start = chunk.dense.len();
        for (col, (c, transform, fill)) in dense.iter().zip(&self.dense) {
            let v = col.get(i);
            let x = match v {
                Val::Null => f64::from(*fill),
                _ => match v.number() {
                    Some(x) => x,
                    None => {
                        chunk.dense.truncate(start);
                        return Err(self.parse_error(row, group, &c.name, "a finite number", v));
                    }
                },
            };
            // Finite as an f64 is not enough: the model reads f32.
            let value = transform.apply(x);
            if !value.is_finite() {
                chunk.dense.truncate(start);
                return Err(self.parse_error(
                    row,
                    group,
                    &c.name,
                    "a number within the range of f32 (about ±3.4e38)",
                    v,
                ));
            }
            chunk.dense.push(value);
        }
        chunk.labels.push(y);
        Ok(())
    }
}

/// Appends the ids of the `rows` of a dictionary column: `keys[i]` is row `i`'s
/// position in the dictionary, `table` the ids of the dictionary's values, `null` the
/// id of a null row.
fn look_up(
    table: &[u64],
    keys: &[usize],
    valid: impl Fn(usize) -> bool,
    null: u64,
    rows: &[usize],
    offsets: &mut Vec<usize>,
    values: &mut Vec<u64>,
) {
    for &i in rows {
        let id = match keys.get(i) {
            Some(&k) if valid(i) => table.get(k).copied().unwrap_or(null),
            _ => null,
        };
        values.push(id);
        offsets.push(values.len());
    }
}

/// A sparse column's dictionary, encoded: the ids of its values, computed once for
/// all the batches of a row group that share it (the Arrow reader hands each batch
/// the column chunk's dictionary itself, not a copy).
#[derive(Default)]
pub(super) struct DictionaryIds {
    /// The dictionary encoded last (held, so its address cannot be reused) and its ids.
    last: Option<(ArrayRef, Vec<u64>)>,
}

impl DictionaryIds {
    /// The ids of the values of `col`'s dictionary (`col` is a [`Col::Dict`]).
    fn of(&mut self, col: &Col<'_>, ids: &FeatureIds) -> &[u64] {
        let Col::Dict { array, values, .. } = col else {
            return &[];
        };
        let Some(dictionary) = array.as_any_dictionary_opt().map(|d| d.values()) else {
            return &[];
        };
        let fresh = !matches!(&self.last, Some((d, _)) if Arc::ptr_eq(d, dictionary));
        if fresh {
            let table = (0..dictionary.len())
                .map(|j| {
                    let mut id = 0;
                    keys(values, j, None, |k| id = ids.id(k));
                    id
                })
                .collect();
            self.last = Some((Arc::clone(dictionary), table));
        }
        self.last.as_ref().map_or(&[], |(_, t)| t)
    }
}

/// What a row group's thread sends.
enum Msg {
    Chunk(Chunk),
    Error(Error),
    /// The row group is read whole; without it, the thread died (a panic in the decoder).
    Done,
}

/// What every row group's thread needs: the file, its metadata and the plan.
#[derive(Clone)]
pub(super) struct Source {
    pub data: Bytes,
    pub meta: ArrowReaderMetadata,
    pub mask: ProjectionMask,
    pub plan: Arc<Plan>,
    pub select: RowSelect,
    pub bad_rows: BadRows,
    /// Root columns read as one id per row from strings or bytes: read as Arrow
    /// dictionaries in row groups where the file stores them with one.
    pub dictionary_roots: Vec<usize>,
}

impl Source {
    /// Reads row group `group` (file rows from `first`) and sends its chunks in order.
    fn read_group(&self, group: usize, first: u64, tx: &SyncSender<Msg>) {
        let msg = match self.try_read_group(group, first, tx) {
            Ok(true) => Msg::Done,
            Ok(false) => return,
            Err(e) => Msg::Error(e),
        };
        let _ = tx.send(msg);
    }

    /// Ok(false) when the reader has gone (nothing left to send to).
    fn try_read_group(&self, group: usize, first: u64, tx: &SyncSender<Msg>) -> Result<bool> {
        let plan = &self.plan;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.data.clone(),
            self.metadata(group)
                .map_err(|e| self.format_error(group, e))?,
        )
        .with_row_groups(vec![group])
        .with_projection(self.mask.clone())
        .with_batch_size(CHUNK_ROWS)
        .build()
        .map_err(|e| self.format_error(group, e))?;
        let mut dictionaries: Vec<DictionaryIds> = plan
            .sparse
            .iter()
            .map(|_| DictionaryIds::default())
            .collect();
        let mut row = first;
        for batch in reader {
            if row >= self.select.end() {
                break;
            }
            let batch = batch.map_err(|e| self.format_error(group, e))?;
            let mut chunk = Chunk::new(plan.sparse.len(), plan.dense.len(), batch.num_rows());
            let decoded = plan.decode(
                &batch,
                row,
                group,
                &self.select,
                self.bad_rows,
                &mut dictionaries,
                &mut chunk,
            );
            row += batch.num_rows() as u64;
            let any = chunk.len() > 0 || chunk.skipped > 0;
            if any && tx.send(Msg::Chunk(chunk)).is_err() {
                return Ok(false);
            }
            decoded?;
        }
        Ok(true)
    }

    /// The file's metadata for reading row group `group`: its dictionary-encoded
    /// string columns among [`Source::dictionary_roots`] read as Arrow dictionaries,
    /// so that each distinct value is encoded once ([`DictionaryIds`]).
    fn metadata(&self, group: usize) -> std::result::Result<ArrowReaderMetadata, ParquetError> {
        let chunks = self.meta.metadata().row_group(group);
        let leaves = self.meta.parquet_schema();
        let dictionary = |root: usize| {
            (0..chunks.num_columns()).any(|c| {
                leaves.get_column_root_idx(c) == root
                    && chunks.column(c).dictionary_page_offset().is_some()
            })
        };
        let roots: Vec<usize> = self
            .dictionary_roots
            .iter()
            .copied()
            .filter(|&r| dictionary(r))
            .collect();
        if roots.is_empty() {
            return Ok(self.meta.clone());
        }
        let schema = self.meta.schema();
        let fields: Vec<FieldRef> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if !roots.contains(&i) {
                    return Arc::clone(f);
                }
                let keyed = DataType::Dictionary(
                    Box::new(DataType::Int32),
                    Box::new(f.data_type().clone()),
                );
                Arc::new(f.as_ref().clone().with_data_type(keyed))
            })
            .collect();
        let hinted = Arc::new(ArrowSchema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        ));
        ArrowReaderMetadata::try_new(
            Arc::clone(self.meta.metadata()),
            ArrowReaderOptions::new().with_schema(hinted),
        )
    }

    fn format_error(&self, group: usize, e: impl std::fmt::Display) -> Error {
        Error::Format {
            file: self.plan.file.clone(),
            message: format!("row group {group}: cannot decode: {e}"),
        }
    }
}

/// Row groups read on threads of their own, `width` at a time, chunks in file order.
/// Memory: at most `width` row groups in flight, each with [`CHUNKS_AHEAD`] decoded
/// chunks waiting and one being decoded.
pub(super) struct Pipeline {
    source: Arc<Source>,
    /// Row groups not started yet: (index, first file row).
    pending: VecDeque<(usize, u64)>,
    running: VecDeque<(usize, Receiver<Msg>)>,
    width: usize,
}

impl Pipeline {
    pub fn new(source: Source, groups: Vec<(usize, u64)>, width: usize) -> Self {
        Pipeline {
            source: Arc::new(source),
            pending: groups.into(),
            running: VecDeque::new(),
            width: width.max(1),
        }
    }

    /// The next chunk in file order; `None` at the end.
    pub fn next_chunk(&mut self) -> Option<Result<Chunk>> {
        loop {
            while self.running.len() < self.width {
                let Some((group, first)) = self.pending.pop_front() else {
                    break;
                };
                let (tx, rx) = sync_channel(CHUNKS_AHEAD);
                let source = Arc::clone(&self.source);
                let spawned = std::thread::Builder::new()
                    .name(format!("parquet-rg{group}"))
                    .spawn(move || source.read_group(group, first, &tx));
                if let Err(e) = spawned {
                    return Some(Err(Error::Format {
                        file: self.source.plan.file.clone(),
                        message: format!("row group {group}: cannot start a reading thread: {e}"),
                    }));
                }
                self.running.push_back((group, rx));
            }
            let (group, rx) = self.running.front()?;
            match rx.recv() {
                Ok(Msg::Chunk(c)) => return Some(Ok(c)),
                Ok(Msg::Error(e)) => {
                    self.stop();
                    return Some(Err(e));
                }
                Ok(Msg::Done) => {
                    self.running.pop_front();
                }
                Err(_) => {
                    let e = Error::Format {
                        file: self.source.plan.file.clone(),
                        message: format!(
                            "row group {group}: the Parquet decoder failed (it panicked; the file is likely damaged)"
                        ),
                    };
                    self.stop();
                    return Some(Err(e));
                }
            }
        }
    }

    /// Ends the reading: running threads stop at their next send.
    fn stop(&mut self) {
        self.pending.clear();
        self.running.clear();
    }
}
