//! The writer of the binary format (see the parent module for the layout): one pass
//! over the records, each section spooled to its own temporary file beside the output
//! (`<path>.spool.<section>.tmp.<pid>`), then concatenated into `<path>.tmp.<pid>` and
//! renamed over `<path>`. A writer killed on the way leaves these; the next command that
//! writes into the directory removes them (`towerrec_core::fsio::remove_stale_temporaries`).

use super::{pad8, Header, MAGIC, VERSION};
use crate::error::{Error, Result};
use crate::record::{Record, RecordStream, Schema};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use towerrec_core::fsio::{sibling, temporary};

/// A section being spooled to a temporary file.
struct Spool {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Spool {
    fn create(path: PathBuf) -> Result<Self> {
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 16, file),
            path,
        })
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// Writes records into the binary format in one pass.
pub struct BinaryWriter {
    path: PathBuf,
    tmp: PathBuf,
    schema: Schema,
    rows: u64,
    labels: Spool,
    dense: Spool,
    /// Per feature: offsets and values spools.
    sparse: Vec<(Spool, Spool)>,
    nnz: Vec<u64>,
    /// Every temporary file, removed on drop.
    temps: Vec<PathBuf>,
    /// Set when a write failed halfway, leaving the spools out of step.
    broken: bool,
    /// The checksum of the vocabulary the ids come from (none: hashed).
    vocab: Option<String>,
}

impl BinaryWriter {
    /// Starts a file at `path` for records of `schema`.
    pub fn create(path: &Path, schema: Schema) -> Result<Self> {
        if path.file_name().is_none() {
            return Err(Error::Config(format!(
                "output path {} names no file",
                path.display()
            )));
        }
        let mut temps = Vec::new();
        let mut spool = |suffix: String| {
            let p = temporary(&sibling(path, &suffix));
            temps.push(p.clone());
            Spool::create(p)
        };
        let labels = spool(".spool.labels".into())?;
        let dense = spool(".spool.dense".into())?;
        let mut sparse = Vec::with_capacity(schema.sparse.len());
        for f in 0..schema.sparse.len() {
            let mut offsets = spool(format!(".spool.{f}.offsets"))?;
            offsets.put(&0u64.to_le_bytes())?;
            sparse.push((offsets, spool(format!(".spool.{f}.values"))?));
        }
        let tmp = temporary(path);
        temps.push(tmp.clone());
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
            nnz: vec![0; schema.sparse.len()],
            schema,
            rows: 0,
            labels,
            dense,
            sparse,
            temps,
            broken: false,
            vocab: None,
        })
    }

    /// Appends a record; it must match the schema and its ids must fit their tables.
    pub fn write(&mut self, r: &Record) -> Result<()> {
        if r.dense.len() != self.schema.dense.len() {
            return Err(towerrec_core::Error::shape(
                "record dense features",
                self.schema.dense.len(),
                r.dense.len(),
            )
            .into());
        }
        if r.sparse.len() != self.schema.sparse.len() {
            return Err(towerrec_core::Error::shape(
                "record sparse features",
                self.schema.sparse.len(),
                r.sparse.len(),
            )
            .into());
        }
        // What the reader checks, so that a file written is a file that reads.
        if r.label != 0.0 && r.label != 1.0 {
            return Err(Error::format(
                &self.path,
                format!("row {}: label {} is not 0 or 1", self.rows, r.label),
            ));
        }
        if let Some(k) = r.dense.iter().position(|x| !x.is_finite()) {
            return Err(Error::format(
                &self.path,
                format!(
                    "row {}: dense feature '{}' is {}, not a finite number",
                    self.rows, self.schema.dense[k], r.dense[k]
                ),
            ));
        }
        for (f, ids) in r.sparse.iter().enumerate() {
            let feature = &self.schema.sparse[f];
            if let Some(&id) = ids.iter().find(|&&id| id >= feature.rows) {
                return Err(towerrec_core::Error::IdOutOfRange {
                    table: feature.name.clone(),
                    id,
                    rows: usize::try_from(feature.rows).unwrap_or(usize::MAX),
                }
                .into());
            }
        }
        if self.broken {
            return Err(self.broken_error());
        }
        let appended = self.append(r);
        self.broken = appended.is_err();
        appended
    }

    fn broken_error(&self) -> Error {
        Error::format(
            &self.path,
            "an earlier write failed; the file cannot be finished",
        )
    }

    /// Appends a validated record to the spools.
    fn append(&mut self, r: &Record) -> Result<()> {
        self.labels.put(&r.label.to_le_bytes())?;
        for x in &r.dense {
            self.dense.put(&x.to_le_bytes())?;
        }
        for (f, ids) in r.sparse.iter().enumerate() {
            let (offsets, values) = &mut self.sparse[f];
            for id in ids {
                values.put(&id.to_le_bytes())?;
            }
            self.nnz[f] += ids.len() as u64;
            offsets.put(&self.nnz[f].to_le_bytes())?;
        }
        self.rows += 1;
        Ok(())
    }

    /// Records in the header that the ids come from the vocabulary with this checksum
    /// ([`crate::vocab`]); `None` (the default): hashed.
    pub fn set_vocab(&mut self, checksum: Option<String>) {
        self.vocab = checksum;
    }

    /// Assembles the file and moves it into place; returns the number of rows.
    pub fn finish(mut self) -> Result<u64> {
        if self.broken {
            return Err(self.broken_error());
        }
        let header = Header {
            version: VERSION,
            schema: self.schema.clone(),
            num_rows: self.rows,
            num_dense: self.schema.dense.len() as u64,
            nnz: self.nnz.clone(),
            vocab: self.vocab.clone(),
        };
        let json = serde_json::to_vec(&header)
            .map_err(|e| Error::format(&self.path, format!("cannot encode header: {e}")))?;
        let tmp = self.tmp.clone();
        let io = |e| Error::io(&tmp, e);
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(io)?);
        let mut pos = 16 + json.len() as u64;
        out.write_all(MAGIC).map_err(io)?;
        out.write_all(&(json.len() as u64).to_le_bytes())
            .map_err(io)?;
        out.write_all(&json).map_err(io)?;
        let align = |out: &mut BufWriter<File>, pos: &mut u64| -> Result<()> {
            let padded = pad8(*pos).unwrap_or(*pos);
            out.write_all(&[0u8; 8][..(padded - *pos) as usize])
                .map_err(io)?;
            *pos = padded;
            Ok(())
        };
        align(&mut out, &mut pos)?;
        let mut sections = vec![&mut self.labels, &mut self.dense];
        for (o, v) in &mut self.sparse {
            sections.push(o);
            sections.push(v);
        }
        for (k, s) in sections.into_iter().enumerate() {
            s.out.flush().map_err(|e| Error::io(&s.path, e))?;
            let mut f = File::open(&s.path).map_err(|e| Error::io(&s.path, e))?;
            pos += std::io::copy(&mut f, &mut out).map_err(|e| Error::io(&s.path, e))?;
            // Only the f32 sections (labels, dense) can end off an 8-byte boundary.
            if k < 2 {
                align(&mut out, &mut pos)?;
            }
        }
        let file = out
            .into_inner()
            .map_err(|e| Error::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&tmp, &self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(self.rows)
    }
}

impl Drop for BinaryWriter {
    fn drop(&mut self) {
        for p in &self.temps {
            // Best effort: a leftover spool file is harmless, and drop cannot report.
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Converts a whole stream into a binary file at `path`; `progress` gets the number of
/// rows written so far after each row and may stop the conversion (then nothing is
/// left at `path` and the error is [`Error::Interrupted`]). Returns the number of rows;
/// a stream with none is an error, and writes nothing.
pub fn write_binary(
    stream: &mut dyn RecordStream,
    path: &Path,
    progress: impl FnMut(u64) -> ControlFlow<()>,
) -> Result<u64> {
    write_binary_with(stream, path, None, progress)
}

/// [`write_binary`] for a stream whose ids come from the vocabulary with the checksum
/// `vocab` (recorded in the header, [`BinaryWriter::set_vocab`]).
pub fn write_binary_with(
    stream: &mut dyn RecordStream,
    path: &Path,
    vocab: Option<String>,
    mut progress: impl FnMut(u64) -> ControlFlow<()>,
) -> Result<u64> {
    let mut writer = BinaryWriter::create(path, stream.schema().clone())?;
    writer.set_vocab(vocab);
    let mut n = 0u64;
    while let Some(r) = stream.next_record()? {
        writer.write(&r)?;
        n += 1;
        if progress(n).is_break() {
            return Err(Error::Interrupted {
                path: path.to_path_buf(),
            });
        }
    }
    if n == 0 {
        return Err(Error::format(
            path,
            format!(
                "nothing written: the input yielded no rows{}",
                match stream.skipped() {
                    0 => String::new(),
                    k => format!(" ({k} malformed rows were skipped)"),
                }
            ),
        ));
    }
    writer.finish()
}

/// Bytes of a binary file of `rows` rows with `num_dense` dense features and, per
/// sparse feature, `ids_per_row` ids on average (the header aside).
pub fn estimated_size(rows: u64, num_dense: usize, ids_per_row: &[f64]) -> u128 {
    let per_row =
        4.0 + 4.0 * num_dense as f64 + ids_per_row.iter().map(|m| 8.0 + 8.0 * m).sum::<f64>();
    (rows as f64 * per_row).ceil() as u128 + 64 * 1024
}
