//! The writer of the binary format (see the parent module for the layout): one pass
//! over the records, each section spooled to its own temporary file beside the output
//! (`<path>.spool.<section>.tmp.<pid>`), then concatenated into `<path>.tmp.<pid>` and
//! renamed over `<path>`. A writer killed on the way leaves these; the next command that
//! writes into the directory removes them (`towerrec_core::fsio::remove_stale_temporaries`).

use super::{pad8, FeatureLayout, Header, MAGIC, VERSION};
use crate::block::RecordBlock;
use crate::error::{Error, Result};
use crate::record::{Record, Schema};
use crate::stream::RecordStream;
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

/// One sparse feature's spools.
struct FeatureSpool {
    /// Per-row offsets, written only once a row has other than one id.
    offsets: Spool,
    values: Spool,
    /// Bytes per id: 4 or 8.
    id_bytes: u8,
    /// Every row so far had exactly one id (so no offsets are written yet).
    single: bool,
    /// A block's bytes before they are appended (`write_block`).
    scratch: BlockIds,
}

/// One feature's ids of a block, encoded, and its state after them.
#[derive(Default)]
struct BlockIds {
    values: Vec<u8>,
    offsets: Vec<u8>,
    single: bool,
    nnz: u64,
}

/// Writes records into the binary format in one pass.
pub struct BinaryWriter {
    path: PathBuf,
    tmp: PathBuf,
    schema: Schema,
    rows: u64,
    labels: Spool,
    dense: Spool,
    sparse: Vec<FeatureSpool>,
    nnz: Vec<u64>,
    /// Every temporary file, removed on drop.
    temps: Vec<PathBuf>,
    /// Set when a write failed halfway, leaving the spools out of step.
    broken: bool,
    /// The checksum of the vocabulary the ids come from (none: hashed).
    vocab: Option<String>,
    /// A block's labels or dense values as bytes, reused (`write_block`).
    block_bytes: Vec<u8>,
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
        for (f, feature) in schema.sparse.iter().enumerate() {
            sparse.push(FeatureSpool {
                offsets: spool(format!(".spool.{f}.offsets"))?,
                values: spool(format!(".spool.{f}.values"))?,
                id_bytes: FeatureLayout::id_bytes_for(feature.rows),
                single: true,
                scratch: BlockIds::default(),
            });
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
            block_bytes: Vec::new(),
        })
    }

    /// Appends a record; it must match the schema and its ids must fit their tables.
    pub fn write(&mut self, r: &Record) -> Result<()> {
        self.check(r.label, &r.dense, |f| &r.sparse[f], r.sparse.len(), 0)?;
        if self.broken {
            return Err(self.broken_error());
        }
        let appended = self.append(r.label, &r.dense, |f| &r.sparse[f]);
        self.broken = appended.is_err();
        appended
    }

    /// Appends every row of `block`, checked as [`BinaryWriter::write`] checks a record
    /// (nothing is written when one fails).
    pub fn write_block(&mut self, block: &RecordBlock) -> Result<()> {
        // One pass encodes the block and checks it as it goes; only a block that fails
        // is checked again row by row, for the error `write` would give (its first bad
        // row's, in the same order of checks).
        let fits = block.num_dense == self.schema.dense.len()
            && block.num_sparse == self.schema.sparse.len()
            && block.labels.iter().all(|&l| l == 0.0 || l == 1.0)
            && block.dense.iter().all(|x| x.is_finite())
            && self.encode_ids(block);
        if !fits {
            for i in 0..block.len() {
                self.check(
                    block.labels[i],
                    block.dense_of(i),
                    |f| block.ids_of(i, f),
                    block.num_sparse,
                    i as u64,
                )?;
            }
            unreachable!("a bug: write_block's pass and the row checks disagree");
        }
        if self.broken {
            return Err(self.broken_error());
        }
        let appended = self.append_block(block);
        self.broken = appended.is_err();
        appended
    }

    /// Encodes the block's ids into each feature's scratch (values, and offsets where
    /// the feature has them), row by row in the block's order; false if an id is out
    /// of its table's range.
    fn encode_ids(&mut self, b: &RecordBlock) -> bool {
        let rows = self.rows;
        for (s, &nnz) in self.sparse.iter_mut().zip(&self.nnz) {
            s.scratch.values.clear();
            s.scratch.offsets.clear();
            s.scratch.single = s.single;
            s.scratch.nnz = nnz;
        }
        let mut start = 0;
        let rows_ends = b.ends.chunks_exact(b.num_sparse.max(1));
        for (r, ends) in rows_ends.enumerate() {
            for ((s, feature), &end) in self.sparse.iter_mut().zip(&self.schema.sparse).zip(ends) {
                let ids = &b.ids[start..end];
                start = end;
                let limit = feature.rows;
                let e = &mut s.scratch;
                for &id in ids {
                    if id >= limit {
                        return false;
                    }
                    // Checked against the table, whose rows fit the width.
                    if s.id_bytes == 4 {
                        e.values.extend_from_slice(&(id as u32).to_le_bytes());
                    } else {
                        e.values.extend_from_slice(&id.to_le_bytes());
                    }
                }
                if e.single && ids.len() != 1 {
                    // The first row with other than one id: the offsets of the rows before.
                    e.single = false;
                    for k in 0..=rows + r as u64 {
                        e.offsets.extend_from_slice(&k.to_le_bytes());
                    }
                }
                e.nnz += ids.len() as u64;
                if !e.single {
                    e.offsets.extend_from_slice(&e.nnz.to_le_bytes());
                }
            }
        }
        true
    }

    /// Appends a block that [`BinaryWriter::encode_ids`] has encoded to the spools,
    /// section by section.
    fn append_block(&mut self, b: &RecordBlock) -> Result<()> {
        let bytes = &mut self.block_bytes;
        bytes.clear();
        bytes.extend(b.labels.iter().map(|&l| u8::from(l == 1.0)));
        self.labels.put(bytes)?;
        bytes.clear();
        bytes.extend(b.dense.iter().flat_map(|x| x.to_le_bytes()));
        self.dense.put(bytes)?;
        for (s, nnz) in self.sparse.iter_mut().zip(&mut self.nnz) {
            s.values.put(&s.scratch.values)?;
            s.offsets.put(&s.scratch.offsets)?;
            s.single = s.scratch.single;
            *nnz = s.scratch.nnz;
        }
        self.rows += b.len() as u64;
        Ok(())
    }

    /// What the reader checks, so that a file written is a file that reads; `ahead` is
    /// the row's place after the rows written so far (within a block).
    fn check<'a>(
        &self,
        label: f32,
        dense: &[f32],
        ids: impl Fn(usize) -> &'a [u64],
        num_sparse: usize,
        ahead: u64,
    ) -> Result<()> {
        let row = self.rows + ahead;
        if dense.len() != self.schema.dense.len() {
            return Err(towerrec_core::Error::shape(
                "record dense features",
                self.schema.dense.len(),
                dense.len(),
            )
            .into());
        }
        if num_sparse != self.schema.sparse.len() {
            return Err(towerrec_core::Error::shape(
                "record sparse features",
                self.schema.sparse.len(),
                num_sparse,
            )
            .into());
        }
        if label != 0.0 && label != 1.0 {
            return Err(Error::format(
                &self.path,
                format!("row {row}: label {label} is not 0 or 1"),
            ));
        }
        if let Some(k) = dense.iter().position(|x| !x.is_finite()) {
            return Err(Error::format(
                &self.path,
                format!(
                    "row {row}: dense feature '{}' is {}, not a finite number",
                    self.schema.dense[k], dense[k]
                ),
            ));
        }
        for (f, feature) in self.schema.sparse.iter().enumerate() {
            if let Some(&id) = ids(f).iter().find(|&&id| id >= feature.rows) {
                return Err(towerrec_core::Error::IdOutOfRange {
                    table: feature.name.clone(),
                    id,
                    rows: usize::try_from(feature.rows).unwrap_or(usize::MAX),
                }
                .into());
            }
        }
        Ok(())
    }

    fn broken_error(&self) -> Error {
        Error::format(
            &self.path,
            "an earlier write failed; the file cannot be finished",
        )
    }

    /// Appends a validated row to the spools.
    fn append<'a>(
        &mut self,
        label: f32,
        dense: &[f32],
        ids: impl Fn(usize) -> &'a [u64],
    ) -> Result<()> {
        self.labels.put(&[u8::from(label == 1.0)])?;
        for x in dense {
            self.dense.put(&x.to_le_bytes())?;
        }
        for (f, s) in self.sparse.iter_mut().enumerate() {
            let ids = ids(f);
            for &id in ids {
                // Checked against the table, whose rows fit the width.
                if s.id_bytes == 4 {
                    s.values.put(&(id as u32).to_le_bytes())?;
                } else {
                    s.values.put(&id.to_le_bytes())?;
                }
            }
            if s.single && ids.len() != 1 {
                // The first row with other than one id: the offsets of the rows before.
                s.single = false;
                for k in 0..=self.rows {
                    s.offsets.put(&k.to_le_bytes())?;
                }
            }
            self.nnz[f] += ids.len() as u64;
            if !s.single {
                s.offsets.put(&self.nnz[f].to_le_bytes())?;
            }
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
            layout: self
                .sparse
                .iter()
                .map(|s| FeatureLayout {
                    id_bytes: s.id_bytes,
                    offsets: !s.single,
                })
                .collect(),
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
        // (section, padded after it): offsets are 8-byte values, the rest may not be.
        let mut sections = vec![(&mut self.labels, true), (&mut self.dense, true)];
        for s in &mut self.sparse {
            if !s.single {
                sections.push((&mut s.offsets, false));
            }
            sections.push((&mut s.values, true));
        }
        for (s, pad) in sections {
            s.out.flush().map_err(|e| Error::io(&s.path, e))?;
            let mut f = File::open(&s.path).map_err(|e| Error::io(&s.path, e))?;
            pos += std::io::copy(&mut f, &mut out).map_err(|e| Error::io(&s.path, e))?;
            if pad {
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
    let schema = stream.schema().clone();
    let mut writer = BinaryWriter::create(path, schema.clone())?;
    writer.set_vocab(vocab);
    let mut n = 0u64;
    // Streams that read blocks (the text readers) hand over thousands of rows at once.
    let mut block = RecordBlock::new(schema.num_dense(), schema.num_sparse());
    loop {
        block.clear();
        match stream.read_block(BLOCK_ROWS, &mut block)? {
            None => break,
            Some(0) => return finish(writer, stream, path, n),
            Some(k) => {
                writer.write_block(&block)?;
                n += k as u64;
                if progress(n).is_break() {
                    return Err(Error::Interrupted {
                        path: path.to_path_buf(),
                    });
                }
            }
        }
    }
    while let Some(r) = stream.next_record()? {
        writer.write(&r)?;
        n += 1;
        if progress(n).is_break() {
            return Err(Error::Interrupted {
                path: path.to_path_buf(),
            });
        }
    }
    finish(writer, stream, path, n)
}

/// Rows per block [`write_binary`] asks a stream for.
const BLOCK_ROWS: usize = 4096;

/// Finishes a conversion of `n` rows: a stream with none is an error.
fn finish(writer: BinaryWriter, stream: &mut dyn RecordStream, path: &Path, n: u64) -> Result<u64> {
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
/// sparse feature, `ids_per_row` ids on average (the header aside; 4-byte ids, and
/// offsets unless a feature has exactly one id per row).
pub fn estimated_size(rows: u64, num_dense: usize, ids_per_row: &[f64]) -> u128 {
    let feature = |m: f64| if m == 1.0 { 4.0 } else { 8.0 + 4.0 * m };
    let per_row =
        1.0 + 4.0 * num_dense as f64 + ids_per_row.iter().map(|&m| feature(m)).sum::<f64>();
    (rows as f64 * per_row).ceil() as u128 + 64 * 1024
}
