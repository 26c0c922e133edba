//! `data.vocab`: a config's vocabulary applied to its `[data]` section. The table sizes
//! come from the vocabulary (`table_rows` and a sparse column's `rows` become optional;
//! given, they must agree), the readers encode with it, and a preprocessed binary file
//! read under it must have been written with the same vocabulary (its header names it).

use super::{load, Vocab};
use crate::criteo::{criteo_schema, NUM_SPARSE};
use crate::csv_schema::CsvSchema;
use crate::data_config::DataConfig;
use crate::error::{Error, Result};
use crate::parquet::ParquetSchema;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A config's vocabulary, loaded.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The file, resolved against the config's directory.
    pub path: PathBuf,
    pub vocab: Arc<Vocab>,
}

impl Applied {
    /// The vocabulary's checksum.
    pub fn checksum(&self) -> &str {
        self.vocab.checksum()
    }
}

/// The vocabulary file a config names, resolved against `base_dir`.
pub fn vocab_path(cfg: &DataConfig, base_dir: &Path) -> Option<PathBuf> {
    let p = match cfg {
        DataConfig::Criteo { vocab, .. }
        | DataConfig::Csv { vocab, .. }
        | DataConfig::Parquet { vocab, .. } => vocab.as_deref()?,
        _ => return None,
    };
    Some(if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    })
}

/// `cfg` with its table sizes taken from its vocabulary, and the vocabulary; `None`
/// when the config hashes. Refuses a vocabulary whose features are not the config's
/// sparse features, and table sizes that disagree with it.
pub fn apply(cfg: &DataConfig, base_dir: &Path) -> Result<Option<(DataConfig, Applied)>> {
    let Some(path) = vocab_path(cfg, base_dir) else {
        return Ok(None);
    };
    let vocab = load(&path)?;
    let rows = vocab.rows();
    let disagree = |key: &str, given: String| {
        Error::Config(format!(
            "{key}: {given} disagrees with the table sizes of the vocabulary {} ({}); \
             leave it out to take the vocabulary's",
            path.display(),
            join(&rows)
        ))
    };
    let mut cfg = cfg.clone();
    match &mut cfg {
        DataConfig::Criteo { table_rows, .. } => {
            let names: Vec<String> = (1..=NUM_SPARSE).map(|i| format!("C{i}")).collect();
            vocab.check_names(&names, &path)?;
            if !table_rows.is_empty() {
                let given: Vec<u64> = criteo_schema(table_rows)?
                    .sparse
                    .iter()
                    .map(|f| f.rows)
                    .collect();
                if given != rows {
                    return Err(disagree(
                        "data.table_rows",
                        format!("[{}]", join(table_rows)),
                    ));
                }
            }
            *table_rows = rows;
        }
        DataConfig::Csv {
            schema: CsvSchema { sparse, .. },
            ..
        }
        | DataConfig::Parquet {
            schema: ParquetSchema { sparse, .. },
            ..
        } => {
            let names: Vec<String> = sparse
                .iter()
                .map(|s| s.feature_name().to_string())
                .collect();
            vocab.check_names(&names, &path)?;
            for (s, &r) in sparse.iter_mut().zip(&rows) {
                if let Some(given) = s.rows.filter(|&g| g != r) {
                    return Err(disagree(
                        &format!("data.schema.sparse: column \"{}\": rows", s.column),
                        format!("{given} (the vocabulary has {r})"),
                    ));
                }
                s.rows = Some(r);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some((cfg, Applied { path, vocab })))
}

/// Refuses a binary file (`file`, whose header names the vocabulary it was written
/// with, `written`) read under a config that encodes otherwise (`applied`: the config's
/// vocabulary, `None` when it hashes).
pub fn check_binary(file: &Path, written: Option<&str>, applied: Option<&Applied>) -> Result<()> {
    let refuse = |m: String| Err(Error::Config(format!("{}: {m}", file.display())));
    match (written, applied) {
        (None, None) => Ok(()),
        (Some(w), Some(a)) if w == a.checksum() => Ok(()),
        (Some(w), Some(a)) => refuse(format!(
            "written with the vocabulary {w}, but data.vocab {} is {}; preprocess the data \
             again with this config",
            a.path.display(),
            a.checksum()
        )),
        (None, Some(a)) => refuse(format!(
            "written with hashing, but the config encodes with the vocabulary {} ({}); \
             preprocess the data again with this config",
            a.path.display(),
            a.checksum()
        )),
        (Some(w), None) => refuse(format!(
            "written with the vocabulary {w}, but the config hashes; set data.vocab to that \
             vocabulary (or read the file with format = \"binary\")"
        )),
    }
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}
