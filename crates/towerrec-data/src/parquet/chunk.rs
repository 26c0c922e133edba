//! Decoding: the [`Plan`] (which column plays which role, resolved against the file)
//! turns record batches into [`Chunk`]s of model inputs, and the [`Pipeline`] reads
//! row groups on threads of their own, a few at a time, handing their chunks back in
//! file order.

use super::columns::{keys, Col, LabelRule, Val};
use crate::csv_schema::DenseTransform;
use crate::encode::FeatureIds;
use crate::error::{Error, Result};
use crate::record::BadRows;
use crate::text::RowSelect;
use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
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
    fn new(features: usize) -> Self {
        Chunk {
            offsets: vec![vec![0]; features],
            values: vec![Vec::new(); features],
            ..Chunk::default()
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
    pub fn decode(
        &self,
        batch: &RecordBatch,
        first: u64,
        group: usize,
        select: &RowSelect,
        bad_rows: BadRows,
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
        for i in 0..batch.num_rows() {
            let row = first + i as u64;
            if !select.contains(row) {
                continue;
            }
            match self.row(i, row, group, &label, &dense, &sparse, chunk) {
                Ok(()) => {}
                Err(e) if bad_rows == BadRows::Skip && e.is_bad_row() => chunk.skipped += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Appends row `i` of the batch (file row `row`), or nothing on an error.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        i: usize,
        row: u64,
        group: usize,
        label: &Col<'_>,
        dense: &[Col<'_>],
        sparse: &[Col<'_>],
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
        for (f, (col, (_, sep))) in sparse.iter().zip(&self.sparse).enumerate() {
            let (values, ids) = (&mut chunk.values[f], &self.ids[f]);
            keys(col, i, sep.as_deref(), |k| values.push(ids.id(k)));
        }
        for (offsets, values) in chunk.offsets.iter_mut().zip(&chunk.values) {
            offsets.push(values.len());
        }
        chunk.labels.push(y);
        Ok(())
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
            self.meta.clone(),
        )
        .with_row_groups(vec![group])
        .with_projection(self.mask.clone())
        .with_batch_size(CHUNK_ROWS)
        .build()
        .map_err(|e| self.format_error(group, e))?;
        let mut row = first;
        for batch in reader {
            if row >= self.select.end() {
                break;
            }
            let batch = batch.map_err(|e| self.format_error(group, e))?;
            let mut chunk = Chunk::new(plan.sparse.len());
            let decoded = plan.decode(&batch, row, group, &self.select, self.bad_rows, &mut chunk);
            row += batch.num_rows() as u64;
            let any = chunk.len() > 0 || chunk.skipped > 0;
            if any && tx.send(Msg::Chunk(chunk)).is_err() {
                return Ok(false);
            }
            decoded?;
        }
        Ok(true)
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
