//! The `[data]` section of a run config: where the data come from ([`DataConfig`]) and
//! how a file divides into training and evaluation rows ([`Split`]). What the section
//! does (opening its streams, reading its schema) is [`crate::source`]'s.

use crate::csv_schema::CsvSchema;
use crate::parquet::ParquetSchema;
use crate::synthetic::SyntheticConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where training and evaluation data come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case", deny_unknown_fields)]
pub enum DataConfig {
    /// Generated on the fly (see [`SyntheticConfig`] for the fields).
    Synthetic(SyntheticConfig),
    /// Criteo Kaggle/Terabyte TSV.
    Criteo {
        /// The data file.
        path: PathBuf,
        /// A separate evaluation file, read whole (then `split` must be none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_path: Option<PathBuf>,
        /// Embedding rows per categorical: 26 entries, or 1 shared by all. Optional
        /// with `vocab`, which gives the table sizes (if both are set they must agree).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        table_rows: Vec<u64>,
        /// A vocabulary file (`towerrec vocab`), relative to the config's directory:
        /// categoricals are encoded with it instead of hashed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vocab: Option<PathBuf>,
        /// How `path` divides into train and eval rows (default: none).
        #[serde(default)]
        split: Split,
    },
    /// Delimited text described by a schema.
    Csv {
        /// The data file.
        path: PathBuf,
        /// A separate evaluation file, read whole (then `split` must be none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_path: Option<PathBuf>,
        /// Columns and how to read them.
        schema: CsvSchema,
        /// A vocabulary file (`towerrec vocab`), relative to the config's directory:
        /// categoricals are encoded with it instead of hashed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vocab: Option<PathBuf>,
        /// How `path` divides into train and eval rows (default: none).
        #[serde(default)]
        split: Split,
    },
    /// A Parquet file described by a schema (the CSV schema's label, dense and sparse
    /// tables).
    Parquet {
        /// The data file.
        path: PathBuf,
        /// A separate evaluation file, read whole (then `split` must be none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_path: Option<PathBuf>,
        /// Columns and how to read them.
        schema: ParquetSchema,
        /// A vocabulary file (`towerrec vocab`), relative to the config's directory:
        /// categoricals are encoded with it instead of hashed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vocab: Option<PathBuf>,
        /// How `path` divides into train and eval rows (default: none). A tail split
        /// takes the row count from the file's metadata.
        #[serde(default)]
        split: Split,
    },
    /// A preprocessed binary file (`towerrec preprocess` / `towerrec datagen`).
    Binary {
        /// The data file.
        path: PathBuf,
        /// A separate evaluation file, read whole (then `split` must be none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_path: Option<PathBuf>,
        /// How `path` divides into train and eval rows (default: none).
        #[serde(default)]
        split: Split,
    },
}

/// How one file divides into train and eval rows. Rows are counted from 0 over the
/// non-blank data lines (malformed ones included), so a split never depends on
/// `bad_rows`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Split {
    /// All rows train; eval comes only from `eval_path`.
    #[default]
    None,
    /// The last rows evaluate: `eval_rows` of them, or `eval_fraction` of the file
    /// (set one). Text files are counted once to find the tail.
    Tail {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_rows: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval_fraction: Option<f64>,
    },
    /// The first `train_rows` rows train, the rest evaluate.
    Head { train_rows: u64 },
    /// Row `i` evaluates iff `hash(seed, i) < eval_fraction`: reproducible, and needs no
    /// count, but train and eval rows interleave in time.
    Random {
        eval_fraction: f64,
        #[serde(default)]
        seed: u64,
    },
    /// Rows whose `column` holds a number below `eval_from` train, the others evaluate:
    /// a day or time column divides a log into past and future. CSV files only (a
    /// binary file keeps no column it does not train on: split before `preprocess`).
    Column { column: String, eval_from: f64 },
}
