//! The run's files as it goes: the metrics log (one JSON object per line, appended and
//! flushed line by line) and the summary (written atomically).

use crate::error::{Error, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The metrics log; a sink on ranks other than 0.
pub(super) struct MetricsLog {
    path: PathBuf,
    out: Option<BufWriter<File>>,
}

impl MetricsLog {
    /// Appends to `path` (which [`crate::rundir::begin`] has emptied for a new run and
    /// cut back to the checkpoint for a resumed one), or writes nowhere if `!write`.
    pub(super) fn open(path: PathBuf, write: bool) -> Result<Self> {
        if !write {
            return Ok(Self { path, out: None });
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Self {
            path,
            out: Some(BufWriter::new(file)),
        })
    }

    pub(super) fn write<T: Serialize>(&mut self, record: &T) -> Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let line = serde_json::to_string(record).map_err(|e| Error::io(&self.path, e.into()))?;
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub(super) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::io(path, e.into()))?;
    towerrec_core::fsio::write_atomic(path, (text + "\n").as_bytes())
        .map_err(|e| Error::io(path, e))
}
