//! The split by a column's value (`split = { kind = "column", column = "day",
//! eval_from = 23 }`, docs/DATA.md): rows whose value is below `eval_from` train, the
//! others evaluate, as a day or time column divides a log into past and future.
//!
//! One pass over the file reads the column alone (through the CSV reader itself, so
//! rows are counted, quoted and judged malformed exactly as the data pass will) and
//! marks each row's part in a [`RowMask`], one bit per row; the mask is kept for the
//! process's later passes (keyed by the file's size and modification time). A row
//! whose column is not a number is an error under `bad_rows = "fail"`; under `"skip"`
//! it is in neither part and counts as skipped in both.

use crate::csv_schema::{CsvReader, CsvSchema, LabelSpec};
use crate::error::{Error, Result};
use crate::record::{BadRows, Record, Schema};
use crate::stream::RecordStream;
use crate::text::RowMask;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Reads `column` of every data row of the CSV `file` and marks the rows whose value
/// is at least `eval_from` as evaluating. Reads through a duplicate of `file`'s handle
/// and puts it back at the start.
pub(crate) fn eval_rows(
    file: &mut File,
    path: &Path,
    csv: &CsvSchema,
    column: &str,
    eval_from: f64,
    bad_rows: BadRows,
) -> Result<Arc<RowMask>> {
    type Key = (PathBuf, String, u64, u64, Option<SystemTime>, bool);
    static MASKS: Mutex<Option<HashMap<Key, Arc<RowMask>>>> = Mutex::new(None);
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    let key = (
        path.to_path_buf(),
        column.to_string(),
        eval_from.to_bits(),
        meta.len(),
        meta.modified().ok(),
        bad_rows == BadRows::Skip,
    );
    if let Ok(guard) = MASKS.lock() {
        if let Some(m) = guard.as_ref().and_then(|m| m.get(&key)) {
            return Ok(Arc::clone(m));
        }
    }
    // The column read as a label against a threshold: 1 from `eval_from` on.
    let only = CsvSchema {
        label: LabelSpec {
            column: column.to_string(),
            positive: Vec::new(),
            threshold: Some(eval_from),
        },
        dense: Vec::new(),
        sparse: Vec::new(),
        ..csv.clone()
    };
    let twin = file.try_clone().map_err(|e| Error::io(path, e))?;
    let mut reader = CsvReader::from_reader(
        BufReader::with_capacity(1 << 16, twin),
        path,
        &only,
        bad_rows,
    )
    .map_err(|e| rename(e, column))?
    // One row at a time, so that the row each record came from is known.
    .sequential();
    let mut mask = RowMask::default();
    let mut read = 0u64;
    while let Some(r) = reader.next_record().map_err(|e| rename(e, column))? {
        mask.mark(reader.last_row(), r.label == 1.0);
        read += 1;
    }
    mask.unread = reader.skipped();
    mask.rows = read + mask.unread;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    let mask = Arc::new(mask);
    if let Ok(mut guard) = MASKS.lock() {
        guard
            .get_or_insert_with(HashMap::new)
            .insert(key, Arc::clone(&mask));
    }
    Ok(mask)
}

/// An error of the column's pass names the split's key, not the label the pass reads
/// the column as.
fn rename(e: Error, column: &str) -> Error {
    match e {
        Error::Parse {
            file,
            line,
            expected,
            found,
            ..
        } => Error::Parse {
            file,
            line,
            field: format!("data.split.column \"{column}\""),
            expected: if expected == "a number" {
                "a number (the split compares it with data.split.eval_from)".into()
            } else {
                expected
            },
            found,
        },
        Error::Config(m) => Error::Config(m.replace("data.schema.label", "data.split.column")),
        e => e,
    }
}

/// A stream whose skipped rows include those the column's pass could not read.
pub(crate) struct WithUnread {
    pub inner: Box<dyn RecordStream>,
    pub unread: u64,
}

impl RecordStream for WithUnread {
    fn schema(&self) -> &Schema {
        self.inner.schema()
    }
    fn next_record(&mut self) -> Result<Option<Record>> {
        self.inner.next_record()
    }
    fn skipped(&self) -> u64 {
        self.inner.skipped() + self.unread
    }
    fn remaining(&self) -> Option<u64> {
        self.inner.remaining()
    }
    fn skip_records(&mut self, n: u64) -> Result<u64> {
        self.inner.skip_records(n)
    }
    fn read_batch(&mut self, n: usize) -> Result<Option<towerrec_core::Batch>> {
        self.inner.read_batch(n)
    }
    fn read_block(
        &mut self,
        max: usize,
        out: &mut crate::block::RecordBlock,
    ) -> Result<Option<usize>> {
        self.inner.read_block(max, out)
    }
}
