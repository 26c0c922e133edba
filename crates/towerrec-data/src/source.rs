//! The `[data]` section of a run config, and the two functions a trainer needs:
//! [`schema`] (to build the model) and [`open`] (a stream of the train or eval part).
//!
//! ```toml
//! [data]
//! format = "criteo"                  # or "csv", "parquet", "binary", "synthetic"
//! path = "train.txt"                 # relative to the config file's directory
//! table_rows = [1000000]
//! split = { kind = "tail", eval_fraction = 0.1 }
//! ```
//!
//! Any file path may also name a preprocessed binary file (from `towerrec preprocess`):
//! files are recognized by their magic bytes, so `--data train.bin` works with a Criteo
//! or CSV config.

use crate::binary::{is_binary, BinaryDataset, BinaryStream};
use crate::criteo::{criteo_schema, CriteoReader};
use crate::csv_schema::{CsvReader, CsvSchema};
use crate::datafile;
use crate::error::{Error, Result};
use crate::lines::Lines;
use crate::parquet::{ParquetReader, ParquetSchema};
use crate::record::{BadRows, RecordStream, Schema};
use crate::synthetic::{SyntheticConfig, SyntheticStream};
use crate::text::{count_lines, RowSelect};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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
        /// Embedding rows per categorical: 26 entries, or 1 shared by all.
        table_rows: Vec<u64>,
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
}

/// Which part of the data to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Train,
    Eval,
}

/// The reader behind a file-backed format.
#[derive(Clone, Copy)]
enum FileFormat<'a> {
    Criteo(&'a [u64]),
    Csv(&'a CsvSchema),
    Parquet(&'a ParquetSchema),
    Binary,
}

/// `path` relative to the config's directory.
fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    }
}

impl DataConfig {
    /// Applies the CLI's `--data` / `--eval-data` overrides. `data` replaces the data
    /// file (keeping the split); `eval_data` makes eval come from that file whole. On a
    /// synthetic config, `data` must be a preprocessed binary file and turns the config
    /// into a `binary` one.
    pub fn with_paths(self, data: Option<PathBuf>, eval_data: Option<PathBuf>) -> Self {
        match self {
            DataConfig::Synthetic(mut s) => match data {
                Some(path) => DataConfig::Binary {
                    path,
                    eval_path: eval_data.or(s.eval_path),
                    split: Split::None,
                },
                None => {
                    if eval_data.is_some() {
                        s.eval_path = eval_data;
                    }
                    DataConfig::Synthetic(s)
                }
            },
            DataConfig::Criteo {
                path,
                eval_path,
                table_rows,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Criteo {
                    path,
                    eval_path,
                    table_rows,
                    split,
                }
            }
            DataConfig::Csv {
                path,
                eval_path,
                schema,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Csv {
                    path,
                    eval_path,
                    schema,
                    split,
                }
            }
            DataConfig::Parquet {
                path,
                eval_path,
                schema,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Parquet {
                    path,
                    eval_path,
                    schema,
                    split,
                }
            }
            DataConfig::Binary {
                path,
                eval_path,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Binary {
                    path,
                    eval_path,
                    split,
                }
            }
        }
    }

    /// The files the data is read from, resolved against `base_dir`, each with its
    /// role (`"train"`: the data file, which a split may also evaluate on; `"eval"`: a
    /// separate evaluation file). Empty for synthetic data without an evaluation file.
    pub fn input_files(&self, base_dir: &Path) -> Vec<(&'static str, PathBuf)> {
        let (path, eval_path) = match self {
            DataConfig::Synthetic(s) => (None, s.eval_path.as_deref()),
            DataConfig::Criteo {
                path, eval_path, ..
            }
            | DataConfig::Csv {
                path, eval_path, ..
            }
            | DataConfig::Parquet {
                path, eval_path, ..
            }
            | DataConfig::Binary {
                path, eval_path, ..
            } => (Some(path.as_path()), eval_path.as_deref()),
        };
        path.map(|p| ("train", resolve(base_dir, p)))
            .into_iter()
            .chain(eval_path.map(|p| ("eval", resolve(base_dir, p))))
            .collect()
    }

    /// How the data file divides into train and eval rows (none for synthetic data).
    pub fn split(&self) -> &Split {
        const NONE: &Split = &Split::None;
        self.files().map_or(NONE, |(_, _, _, split)| split)
    }

    /// What `part` reads, for messages: a file, or a part of one, or synthetic data.
    pub fn describe(&self, part: Part, base_dir: &Path) -> String {
        let name = match part {
            Part::Train => "training",
            Part::Eval => "evaluation",
        };
        if let DataConfig::Synthetic(s) = self {
            return match (part, &s.eval_path) {
                (Part::Eval, Some(p)) => resolve(base_dir, p).display().to_string(),
                (Part::Train, _) => format!(
                    "the synthetic training data (data.train_samples = {})",
                    s.train_samples
                ),
                (Part::Eval, None) => format!(
                    "the synthetic evaluation data (data.eval_samples = {})",
                    s.eval_samples
                ),
            };
        }
        let Some((_, path, eval_path, split)) = self.files() else {
            return "the data".into();
        };
        match (part, eval_path, split) {
            (Part::Eval, Some(e), _) => resolve(base_dir, e).display().to_string(),
            (_, _, Split::None) => resolve(base_dir, path).display().to_string(),
            (_, _, split) => format!(
                "the {name} part of {} ({})",
                resolve(base_dir, path).display(),
                split.describe()
            ),
        }
    }

    /// The file-backed parts: (format, path, eval_path, split); None for synthetic.
    fn files(&self) -> Option<(FileFormat<'_>, &Path, Option<&Path>, &Split)> {
        match self {
            DataConfig::Synthetic(_) => None,
            DataConfig::Criteo {
                path,
                eval_path,
                table_rows,
                split,
            } => Some((
                FileFormat::Criteo(table_rows),
                path,
                eval_path.as_deref(),
                split,
            )),
            DataConfig::Csv {
                path,
                eval_path,
                schema,
                split,
            } => Some((FileFormat::Csv(schema), path, eval_path.as_deref(), split)),
            DataConfig::Parquet {
                path,
                eval_path,
                schema,
                split,
            } => Some((
                FileFormat::Parquet(schema),
                path,
                eval_path.as_deref(),
                split,
            )),
            DataConfig::Binary {
                path,
                eval_path,
                split,
            } => Some((FileFormat::Binary, path, eval_path.as_deref(), split)),
        }
    }
}

fn override_paths(
    path: PathBuf,
    eval_path: Option<PathBuf>,
    split: Split,
    data: Option<PathBuf>,
    eval_data: Option<PathBuf>,
) -> (PathBuf, Option<PathBuf>, Split) {
    let path = data.unwrap_or(path);
    match eval_data {
        Some(e) => (path, Some(e), Split::None),
        None => (path, eval_path, split),
    }
}

impl Split {
    /// Checks fractions and that exactly one tail size is set; a split that leaves
    /// either part empty by construction is refused.
    fn validate(&self) -> Result<()> {
        let fraction = |f: f64| {
            if f > 0.0 && f < 1.0 {
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "data.split.eval_fraction: must be between 0 and 1 (exclusive: both parts need rows), got {f}"
                )))
            }
        };
        match self {
            Split::None => Ok(()),
            Split::Head { train_rows: 0 } => Err(Error::Config(
                "data.split.train_rows: must be at least 1 (nothing to train on)".into(),
            )),
            Split::Head { .. } => Ok(()),
            Split::Tail {
                eval_rows,
                eval_fraction,
            } => match (eval_rows, eval_fraction) {
                (Some(0), None) => Err(Error::Config(
                    "data.split.eval_rows: must be at least 1 (nothing to evaluate on)".into(),
                )),
                (Some(_), None) => Ok(()),
                (None, Some(f)) => fraction(*f),
                _ => Err(Error::Config(
                    "data.split: kind = \"tail\" needs exactly one of eval_rows and eval_fraction"
                        .into(),
                )),
            },
            Split::Random { eval_fraction, .. } => fraction(*eval_fraction),
        }
    }

    /// The split in words, for messages.
    pub fn describe(&self) -> String {
        match self {
            Split::None => "no split".into(),
            Split::Tail {
                eval_rows: Some(n), ..
            } => format!("the last {n} rows evaluate"),
            Split::Tail {
                eval_fraction: Some(f),
                ..
            } => format!("the last {f} of the rows evaluate"),
            Split::Tail { .. } => "a tail split".into(),
            Split::Head { train_rows } => format!("the first {train_rows} rows train"),
            Split::Random { eval_fraction, .. } => {
                format!("a random {eval_fraction} of the rows evaluate")
            }
        }
    }

    /// The rows of `part` of `path`; `count` gives the file's row count when the split
    /// needs it. A tail that takes the whole file (or more) is refused: it would leave
    /// nothing to train on.
    fn select(
        &self,
        part: Part,
        path: &Path,
        count: impl FnOnce() -> Result<u64>,
    ) -> Result<RowSelect> {
        Ok(match (self, part) {
            (Split::None, _) => RowSelect::All,
            (Split::Head { train_rows }, Part::Train) => RowSelect::Range(0..*train_rows),
            (Split::Head { train_rows }, Part::Eval) => RowSelect::Range(*train_rows..u64::MAX),
            (
                Split::Tail {
                    eval_rows,
                    eval_fraction,
                },
                _,
            ) => {
                let n = count()?;
                let eval = match (eval_rows, eval_fraction) {
                    (Some(r), _) => *r,
                    (None, Some(f)) => (n as f64 * f).round() as u64,
                    (None, None) => 0,
                };
                if eval >= n || eval == 0 {
                    return Err(Error::Config(format!(
                        "data.split: the tail of {eval} evaluation rows leaves {} of the {n} rows of {} to train on; \
                         both parts need at least one row",
                        n.saturating_sub(eval),
                        path.display()
                    )));
                }
                match part {
                    Part::Train => RowSelect::Range(0..n - eval),
                    Part::Eval => RowSelect::Range(n - eval..n),
                }
            }
            (
                Split::Random {
                    eval_fraction,
                    seed,
                },
                _,
            ) => RowSelect::Hashed {
                seed: *seed,
                fraction: *eval_fraction,
                inside: part == Part::Eval,
            },
        })
    }
}

/// Row counts of text files, so that re-opening a file for every evaluation does not
/// re-count it; keyed by size and modification time so an edited file is recounted.
/// Counts through `file` (a duplicate of its handle) and puts it back at the start.
fn cached_count(
    file: &mut File,
    path: &Path,
    header: bool,
    delimiter: u8,
    bad_rows: BadRows,
) -> Result<u64> {
    type Key = (PathBuf, bool, u8, u64, Option<SystemTime>);
    static COUNTS: Mutex<Option<HashMap<Key, u64>>> = Mutex::new(None);
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    // `bad_rows` only decides whether counting fails, so successful counts are shared.
    let key = (
        path.to_path_buf(),
        header,
        delimiter,
        meta.len(),
        meta.modified().ok(),
    );
    if let Ok(guard) = COUNTS.lock() {
        if let Some(&n) = guard.as_ref().and_then(|m| m.get(&key)) {
            return Ok(n);
        }
    }
    let twin = file.try_clone().map_err(|e| Error::io(path, e))?;
    let n = count_lines(Lines::from_file(twin, path, delimiter), header, bad_rows)?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    if let Ok(mut guard) = COUNTS.lock() {
        guard.get_or_insert_with(HashMap::new).insert(key, n);
    }
    Ok(n)
}

fn open_binary(
    file: &File,
    path: &Path,
    split: &Split,
    part: Part,
) -> Result<Box<dyn RecordStream>> {
    let data = Arc::new(BinaryDataset::from_file(file, path)?);
    let select = split.select(part, path, || Ok(data.len()))?;
    Ok(Box::new(BinaryStream::with_rows(data, select)))
}

/// Opens one file with its format's reader, or as binary when it has the binary magic:
/// the file is opened once, and its magic, a split's row count and its rows are read
/// through that one handle ([`crate::datafile`]).
fn open_file(
    format: FileFormat<'_>,
    path: &Path,
    split: &Split,
    part: Part,
    bad_rows: BadRows,
) -> Result<Box<dyn RecordStream>> {
    let mut file = datafile::open(path)?;
    let binary = matches!(format, FileFormat::Binary) || is_binary(&mut file, path)?;
    let buffered = |file: File| BufReader::with_capacity(1 << 16, file);
    Ok(match format {
        FileFormat::Criteo(rows) if !binary => {
            let select = split.select(part, path, || {
                cached_count(&mut file, path, false, b'\t', bad_rows)
            })?;
            let reader = CriteoReader::from_reader(buffered(file), path, rows, bad_rows)?;
            Box::new(reader.with_rows(select))
        }
        FileFormat::Csv(schema) if !binary => {
            // Before counting, which splits lines on the delimiter.
            schema.validate()?;
            let select = split.select(part, path, || {
                cached_count(
                    &mut file,
                    path,
                    schema.header,
                    schema.delimiter as u8,
                    bad_rows,
                )
            })?;
            let reader = CsvReader::from_reader(buffered(file), path, schema, bad_rows)?;
            Box::new(reader.with_rows(select))
        }
        FileFormat::Parquet(schema) if !binary => {
            let reader = ParquetReader::from_file(&file, path, schema, bad_rows)?;
            let select = split.select(part, path, || Ok(reader.rows()))?;
            Box::new(reader.with_rows(select))
        }
        _ => open_binary(&file, path, split, part)?,
    })
}

/// The file and split that `part` reads.
fn part_source<'a>(
    path: &'a Path,
    eval_path: Option<&'a Path>,
    split: &'a Split,
    part: Part,
) -> Result<(&'a Path, &'a Split)> {
    split.validate()?;
    const WHOLE: &Split = &Split::None;
    match (part, eval_path, split) {
        (_, Some(_), s) if *s != Split::None => Err(Error::Config(
            "data.split: must be none (or left out) when data.eval_path is set; the eval file is read whole".into(),
        )),
        (Part::Eval, Some(e), _) => Ok((e, WHOLE)),
        (Part::Eval, None, Split::None) => Err(Error::Config(
            "data: no evaluation data; set data.eval_path, or a data.split such as { kind = \"tail\", eval_fraction = 0.1 }".into(),
        )),
        _ => Ok((path, split)),
    }
}

/// Opens the train or eval part of the data as a stream. Relative paths resolve against
/// `base_dir` (the config file's directory). `Tail` counts a text file's rows once;
/// `Random` assigns row `i` to eval iff `hash(seed, i) < eval_fraction`.
pub fn open(
    cfg: &DataConfig,
    part: Part,
    bad_rows: BadRows,
    base_dir: &Path,
) -> Result<Box<dyn RecordStream>> {
    if let DataConfig::Synthetic(s) = cfg {
        return Ok(match (part, &s.eval_path) {
            (Part::Train, _) => Box::new(SyntheticStream::new(s, s.train_range())?),
            (Part::Eval, Some(p)) => open_file(
                FileFormat::Binary,
                &resolve(base_dir, p),
                &Split::None,
                part,
                bad_rows,
            )?,
            (Part::Eval, None) => Box::new(SyntheticStream::new(s, s.eval_range())?),
        });
    }
    let Some((format, path, eval_path, split)) = cfg.files() else {
        return Err(Error::Config("data: unknown format".into()));
    };
    let (file, split) = part_source(path, eval_path, split, part)?;
    open_file(format, &resolve(base_dir, file), split, part, bad_rows)
}

/// The schema of one file: from a binary header, else from the format's config (the
/// file opened once, which also checks that it is a data file and can be read).
fn file_schema(format: FileFormat<'_>, path: &Path) -> Result<Schema> {
    let mut file = datafile::open(path)?;
    let binary = matches!(format, FileFormat::Binary) || is_binary(&mut file, path)?;
    match format {
        FileFormat::Criteo(rows) if !binary => criteo_schema(rows),
        // Reading the header checks that the columns exist.
        FileFormat::Csv(schema) if !binary => {
            let reader = CsvReader::from_reader(BufReader::new(file), path, schema, BadRows::Fail)?;
            Ok(reader.schema().clone())
        }
        // Reading the metadata checks that the columns exist and have fitting types.
        FileFormat::Parquet(schema) if !binary => {
            let reader = ParquetReader::from_file(&file, path, schema, BadRows::Fail)?;
            Ok(reader.schema().clone())
        }
        _ => Ok(BinaryDataset::from_file(&file, path)?.schema().clone()),
    }
}

/// The schema of the data `cfg` describes, to build a model for it. Also checks what can
/// be checked before training: that the files open, that an eval part exists (a run
/// fails now rather than after training), and that an eval file's schema matches.
pub fn schema(cfg: &DataConfig, base_dir: &Path) -> Result<Schema> {
    let (train, eval) = match cfg {
        DataConfig::Synthetic(s) => {
            let train = s.schema()?;
            let eval = match &s.eval_path {
                Some(p) => Some((
                    resolve(base_dir, p),
                    file_schema(FileFormat::Binary, &resolve(base_dir, p))?,
                )),
                None => None,
            };
            (train, eval)
        }
        _ => {
            let Some((format, path, eval_path, split)) = cfg.files() else {
                return Err(Error::Config("data: unknown format".into()));
            };
            part_source(path, eval_path, split, Part::Eval)?;
            let train = file_schema(format, &resolve(base_dir, path))?;
            let eval = match eval_path {
                Some(p) => Some((
                    resolve(base_dir, p),
                    file_schema(format, &resolve(base_dir, p))?,
                )),
                None => None,
            };
            (train, eval)
        }
    };
    if let Some((path, eval)) = eval {
        if eval != train {
            return Err(Error::Config(format!(
                "data.eval_path: {} has different features than the training data",
                path.display()
            )));
        }
    }
    Ok(train)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<DataConfig, String> {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Top {
            data: DataConfig,
        }
        toml::from_str::<Top>(text)
            .map(|t| t.data)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_each_format_from_toml() {
        let c = parse(
            "[data]\nformat = \"criteo\"\npath = \"a.txt\"\ntable_rows = [100]\nsplit = { kind = \"tail\", eval_rows = 10 }\n",
        )
        .unwrap();
        assert!(matches!(
            c,
            DataConfig::Criteo {
                split: Split::Tail {
                    eval_rows: Some(10),
                    ..
                },
                ..
            }
        ));
        let c = parse(
            "[data]\nformat = \"synthetic\"\ntrain_samples = 100\neval_samples = 10\ntables = [{ rows = 50, count = 3, pooling = { mean = 2.0 } }]\n",
        )
        .unwrap();
        let DataConfig::Synthetic(s) = &c else {
            panic!("{c:?}")
        };
        assert_eq!(s.schema().unwrap().num_sparse(), 3);
        let c = parse(
            "[data]\nformat = \"csv\"\npath = \"a.csv\"\nsplit = { kind = \"random\", eval_fraction = 0.2 }\n[data.schema]\nlabel = { column = \"click\" }\nsparse = [{ column = \"site\", rows = 10 }]\n",
        )
        .unwrap();
        assert!(matches!(c, DataConfig::Csv { .. }));
        let c = parse("[data]\nformat = \"binary\"\npath = \"a.bin\"\neval_path = \"b.bin\"\n")
            .unwrap();
        assert_eq!(
            c,
            DataConfig::Binary {
                path: "a.bin".into(),
                eval_path: Some("b.bin".into()),
                split: Split::None
            }
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse("[data]\nformat = \"binary\"\npath = \"a\"\nsplt = 1\n").unwrap_err();
        assert!(e.contains("splt"), "{e}");
        let e = parse("[data]\nformat = \"synthetic\"\ntrain_samples = 1\neval_samples = 1\ntables = []\nsede = 3\n")
            .unwrap_err();
        assert!(e.contains("sede"), "{e}");
        let e = parse("[data]\nformat = \"csv\"\npath = \"a\"\n[data.schema]\nlabel = { column = \"y\", positve = [\"1\"] }\n")
            .unwrap_err();
        assert!(e.contains("positve"), "{e}");
        let e = parse("[data]\nformat = \"avro\"\npath = \"a\"\n").unwrap_err();
        assert!(e.contains("avro"), "{e}");
        let e = parse("[data]\nformat = \"parquet\"\npath = \"a\"\n[data.schema]\ndelimiter = \",\"\nlabel = { column = \"y\" }\n")
            .unwrap_err();
        assert!(e.contains("delimiter"), "{e}");
    }

    #[test]
    fn round_trips_through_toml() {
        for text in [
            "format = \"binary\"\npath = \"a.bin\"\n",
            "format = \"criteo\"\npath = \"a.txt\"\ntable_rows = [100]\nsplit = { kind = \"tail\", eval_fraction = 0.5 }\n",
            "format = \"synthetic\"\ntrain_samples = 100\neval_samples = 10\ntables = [{ rows = 50, count = 3, pooling = { mean = 2.0 } }, { name = \"u\", rows = 5, zipf_exponent = 1.1 }]\n",
            "format = \"parquet\"\npath = \"a.parquet\"\neval_path = \"b.parquet\"\nschema = { label = { column = \"y\", positive = [\"yes\"] }, dense = [{ column = \"d\", fill = 1.5 }], sparse = [{ column = \"g\", rows = 9, separator = \"|\" }] }\n",
            "format = \"csv\"\npath = \"a.csv\"\nschema = { delimiter = \"\\t\", label = { column = \"y\", threshold = 4.0 }, dense = [{ column = \"d\" }], sparse = [{ column = \"g\", rows = 9, separator = \"|\" }] }\n",
        ] {
            let c: DataConfig = toml::from_str(text).unwrap();
            let back = toml::to_string(&c).unwrap();
            let again: DataConfig = toml::from_str(&back).unwrap_or_else(|e| panic!("{back}\n{e}"));
            assert_eq!(c, again);
        }
    }

    #[test]
    fn overrides_replace_paths_and_splits() {
        let c = DataConfig::Criteo {
            path: "a".into(),
            eval_path: None,
            table_rows: vec![10],
            split: Split::Head { train_rows: 5 },
        };
        let d = c.clone().with_paths(Some("b".into()), None);
        assert!(
            matches!(&d, DataConfig::Criteo { path, split: Split::Head { .. }, .. } if path == Path::new("b"))
        );
        let e = c.with_paths(None, Some("e".into()));
        assert!(matches!(
            &e,
            DataConfig::Criteo {
                eval_path: Some(_),
                split: Split::None,
                ..
            }
        ));
        let s = DataConfig::Synthetic(SyntheticConfig::criteo_like(10, 2, Default::default(), 0.0));
        assert!(matches!(
            s.with_paths(Some("t.bin".into()), None),
            DataConfig::Binary { .. }
        ));
    }

    #[test]
    fn splits_select_disjoint_rows() {
        let tail = Split::Tail {
            eval_rows: None,
            eval_fraction: Some(0.25),
        };
        assert_eq!(
            tail.select(Part::Train, Path::new("f"), || Ok(8)).unwrap(),
            RowSelect::Range(0..6)
        );
        assert_eq!(
            tail.select(Part::Eval, Path::new("f"), || Ok(8)).unwrap(),
            RowSelect::Range(6..8)
        );
        let big = Split::Tail {
            eval_rows: Some(100),
            eval_fraction: None,
        };
        let e = big
            .select(Part::Train, Path::new("f"), || Ok(8))
            .unwrap_err()
            .to_string();
        assert!(e.contains("leaves 0 of the 8 rows of f"), "{e}");
        for bad in [
            Split::Tail {
                eval_rows: Some(0),
                eval_fraction: None,
            },
            Split::Tail {
                eval_rows: None,
                eval_fraction: Some(0.0),
            },
            Split::Tail {
                eval_rows: None,
                eval_fraction: Some(1.0),
            },
            Split::Head { train_rows: 0 },
            Split::Random {
                eval_fraction: 0.0,
                seed: 1,
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(Split::Tail {
            eval_rows: Some(1),
            eval_fraction: Some(0.1)
        }
        .validate()
        .is_err());
        assert!(Split::Random {
            eval_fraction: 1.5,
            seed: 0
        }
        .validate()
        .is_err());
        assert!(part_source(Path::new("a"), None, &Split::None, Part::Eval).is_err());
        assert!(part_source(Path::new("a"), None, &Split::None, Part::Train).is_ok());
        assert!(part_source(Path::new("a"), Some(Path::new("b")), &tail, Part::Train).is_err());
    }
}
