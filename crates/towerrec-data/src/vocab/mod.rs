//! Vocabularies: per sparse feature, the keys ([`crate::encode`]) seen at least
//! `min_count` times in the training data, hottest first. A vocabulary encodes a key as
//! its rank (row 1 is the hottest key) and every other key as row 0, the one
//! out-of-vocabulary (OOV) row; `max_rows` caps a table (the OOV row included).
//!
//! [`build`] counts a stream of raw keys ([`crate::encode::FeatureIds::Key`]) exactly,
//! or in bounded memory with a count-min sketch ([`SketchOptions`]); [`file`] stores a
//! vocabulary (safetensors, with a checksum that also names it in checkpoints and
//! binary headers); [`load`] reads one, cached, for the readers.

pub mod config;
mod count;
pub mod file;

pub use count::SketchOptions;
pub use file::{load, read_bytes, Vocab, FORMAT_VERSION};

use crate::error::{Error, Result};
use crate::stream::RecordStream;

/// How to build a vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct VocabOptions {
    /// Keys seen fewer times go to the OOV row (at least 1).
    pub min_count: u64,
    /// At most this many rows per table, the OOV row included (at least 1).
    pub max_rows: Option<u64>,
    /// Count in bounded memory (needs `max_rows`: the sketch keeps that many keys).
    pub sketch: Option<SketchOptions>,
}

impl Default for VocabOptions {
    fn default() -> Self {
        VocabOptions {
            min_count: 1,
            max_rows: None,
            sketch: None,
        }
    }
}

/// One feature's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureVocab {
    /// The sparse feature's name in the schema.
    pub name: String,
    /// Keys in row order: `keys[i]` has row `i + 1`.
    pub keys: Vec<u64>,
    /// How often each key was seen (with a sketch: an estimate, never below the truth).
    pub counts: Vec<u64>,
    /// Distinct keys seen (exact counting only).
    pub distinct: Option<u64>,
    /// Keys seen in all (a multi-hot row counts each of its keys).
    pub occurrences: u64,
}

impl FeatureVocab {
    /// Rows of the feature's table: its keys and the OOV row.
    pub fn rows(&self) -> u64 {
        self.keys.len() as u64 + 1
    }

    /// The share of occurrences that fall on the OOV row (with a sketch: at least
    /// this, as kept counts are overestimates).
    pub fn oov_share(&self) -> f64 {
        if self.occurrences == 0 {
            return 0.0;
        }
        let kept: u64 = self.counts.iter().sum();
        self.occurrences.saturating_sub(kept) as f64 / self.occurrences as f64
    }
}

impl VocabOptions {
    fn validate(&self) -> Result<()> {
        if self.min_count == 0 {
            return Err(Error::Config("vocab: min_count must be at least 1".into()));
        }
        if self.max_rows == Some(0) {
            return Err(Error::Config(
                "vocab: max_rows must be at least 1 (the OOV row)".into(),
            ));
        }
        if self.sketch.is_some() && self.max_rows.is_none() {
            return Err(Error::Config(
                "vocab: the sketch keeps a fixed number of keys per feature; set max_rows".into(),
            ));
        }
        Ok(())
    }
}

/// Builds a vocabulary from the raw keys `stream` yields (opened with
/// [`crate::encode::FeatureIds::Key`] for every sparse feature). `progress` sees the
/// records read so far, every few thousand.
pub fn build(
    stream: &mut dyn RecordStream,
    opts: &VocabOptions,
    progress: impl FnMut(u64),
) -> Result<Vocab> {
    opts.validate()?;
    let names = stream.schema().sparse_names();
    let (tallies, rows) = match opts.sketch {
        None => count::count_exact(stream, progress)?,
        Some(sketch) => {
            // `validate` checked that max_rows is set.
            let top = opts.max_rows.unwrap_or(1).saturating_sub(1);
            let top = usize::try_from(top).unwrap_or(usize::MAX);
            count::count_sketch(stream, sketch, top, progress)?
        }
    };
    let features = names
        .into_iter()
        .zip(tallies)
        .map(|(name, tally)| count::select(name, tally, opts))
        .collect();
    Ok(Vocab::new(features, opts, rows))
}

#[cfg(test)]
mod tests;
