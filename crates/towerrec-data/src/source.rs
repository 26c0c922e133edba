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
use crate::column_split::{self, WithUnread};
use crate::criteo::{criteo_schema, CriteoReader};
use crate::csv_schema::{CsvReader, CsvSchema};
pub use crate::data_config::{DataConfig, Split};
use crate::datafile;
use crate::encode::FeatureIds;
use crate::error::{Error, Result};
use crate::lines::Lines;
use crate::parquet::{ParquetReader, ParquetSchema};
use crate::record::{BadRows, Schema};
use crate::shuffle::{self, Shuffle, ShuffledBinary};
use crate::stream::RecordStream;
use crate::synthetic::SyntheticStream;
use crate::text::{count_lines, RowSelect};
use crate::vocab::{self, config::Applied};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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
                vocab,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Criteo {
                    path,
                    eval_path,
                    table_rows,
                    vocab,
                    split,
                }
            }
            DataConfig::Csv {
                path,
                eval_path,
                schema,
                vocab,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Csv {
                    path,
                    eval_path,
                    schema,
                    vocab,
                    split,
                }
            }
            DataConfig::Parquet {
                path,
                eval_path,
                schema,
                vocab,
                split,
            } => {
                let (path, eval_path, split) =
                    override_paths(path, eval_path, split, data, eval_data);
                DataConfig::Parquet {
                    path,
                    eval_path,
                    schema,
                    vocab,
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
                ..
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
                ..
            } => Some((FileFormat::Csv(schema), path, eval_path.as_deref(), split)),
            DataConfig::Parquet {
                path,
                eval_path,
                schema,
                split,
                ..
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
            Split::Column { column, eval_from } => {
                if column.trim().is_empty() {
                    Err(Error::Config("data.split.column: names no column".into()))
                } else if !eval_from.is_finite() {
                    Err(Error::Config(format!(
                        "data.split.eval_from: must be a finite number, got {eval_from}"
                    )))
                } else {
                    Ok(())
                }
            }
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
            Split::Column { column, eval_from } => {
                format!("the rows whose {column} is at least {eval_from} evaluate")
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
            (Split::Column { .. }, _) => {
                return Err(Error::Config(format!(
                    "data.split: kind = \"column\" reads a column of a CSV file, and {} is not one \
                     (a binary file keeps no column it does not train on, and the Criteo format \
                     has no column to split by); split the CSV file with `towerrec preprocess \
                     --part train` and `--part eval` instead",
                    path.display()
                )))
            }
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

/// Opens a binary file, refusing one written with another encoding than the config's
/// (`vocab`; a `binary` config takes the file as it is).
fn open_binary(
    file: &File,
    path: &Path,
    split: &Split,
    part: Part,
    vocab: VocabCheck<'_>,
    shuffle: Option<Shuffle>,
) -> Result<Box<dyn RecordStream>> {
    let data = Arc::new(BinaryDataset::from_file(file, path)?);
    vocab.check(&data)?;
    let select = split.select(part, path, || Ok(data.len()))?;
    Ok(match shuffle {
        Some(s) => Box::new(ShuffledBinary::new(data, select, s.key())),
        None => Box::new(BinaryStream::with_rows(data, select)),
    })
}

/// Opens one file with its format's reader, or as binary when it has the binary magic:
/// the file is opened once, and its magic, a split's row count and its rows are read
/// through that one handle ([`crate::datafile`]). With `shuffle`, a binary file's rows
/// come in a random order and a text file's through a shuffle buffer.
fn open_file(
    format: FileFormat<'_>,
    path: &Path,
    split: &Split,
    part: Part,
    bad_rows: BadRows,
    ids: Ids<'_>,
    shuffle: Option<Shuffle>,
) -> Result<Box<dyn RecordStream>> {
    let mut file = datafile::open(path)?;
    let binary = matches!(format, FileFormat::Binary) || is_binary(&mut file, path)?;
    if binary {
        return open_binary(&file, path, split, part, ids.check(format), shuffle);
    }
    let stream = open_text(format, file, path, split, part, bad_rows, ids)?;
    Ok(match shuffle {
        Some(s) => shuffle::buffered(stream, s),
        None => stream,
    })
}

/// Opens a text file (not binary) with its format's reader.
fn open_text(
    format: FileFormat<'_>,
    mut file: File,
    path: &Path,
    split: &Split,
    part: Part,
    bad_rows: BadRows,
    ids: Ids<'_>,
) -> Result<Box<dyn RecordStream>> {
    let buffered = |file: File| BufReader::with_capacity(1 << 16, file);
    Ok(match format {
        FileFormat::Criteo(rows) => {
            let select = split.select(part, path, || {
                cached_count(&mut file, path, false, b'\t', bad_rows)
            })?;
            let reader = CriteoReader::from_reader(buffered(file), path, rows, bad_rows)?;
            Box::new(ids.apply(reader, CriteoReader::with_ids)?.with_rows(select))
        }
        FileFormat::Csv(schema) if matches!(split, Split::Column { .. }) => {
            let Split::Column { column, eval_from } = split else {
                unreachable!("matched above")
            };
            schema.validate()?;
            let mask =
                column_split::eval_rows(&mut file, path, schema, column, *eval_from, bad_rows)?;
            let unread = mask.unread;
            let select = RowSelect::Mask {
                mask,
                eval: part == Part::Eval,
            };
            let reader = CsvReader::from_reader(buffered(file), path, schema, bad_rows)?;
            Box::new(WithUnread {
                inner: Box::new(ids.apply(reader, CsvReader::with_ids)?.with_rows(select)),
                unread,
            })
        }
        FileFormat::Csv(schema) => {
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
            Box::new(ids.apply(reader, CsvReader::with_ids)?.with_rows(select))
        }
        FileFormat::Parquet(schema) => {
            let reader = ParquetReader::from_file(&file, path, schema, bad_rows)?;
            let select = split.select(part, path, || Ok(reader.rows()))?;
            Box::new(
                ids.apply(reader, ParquetReader::with_ids)?
                    .with_rows(select),
            )
        }
        FileFormat::Binary => open_binary(&file, path, split, part, ids.check(format), None)?,
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
    open_epoch(cfg, part, bad_rows, base_dir, None)
}

/// [`open`], with the rows in `shuffle`'s order where it is given (one epoch of a
/// shuffled run, [`crate::shuffle`]): a binary file is permuted whole, any other source
/// goes through a shuffle buffer.
pub fn open_epoch(
    cfg: &DataConfig,
    part: Part,
    bad_rows: BadRows,
    base_dir: &Path,
    shuffle: Option<Shuffle>,
) -> Result<Box<dyn RecordStream>> {
    if let DataConfig::Synthetic(s) = cfg {
        return Ok(match (part, &s.eval_path) {
            (Part::Train, _) => {
                let stream: Box<dyn RecordStream> =
                    Box::new(SyntheticStream::new(s, s.train_range())?);
                match shuffle {
                    Some(sh) => shuffle::buffered(stream, sh),
                    None => stream,
                }
            }
            (Part::Eval, Some(p)) => open_file(
                FileFormat::Binary,
                &resolve(base_dir, p),
                &Split::None,
                part,
                bad_rows,
                Ids::Config(None),
                None,
            )?,
            (Part::Eval, None) => Box::new(SyntheticStream::new(s, s.eval_range())?),
        });
    }
    let applied = vocab::config::apply(cfg, base_dir)?;
    let (cfg, applied) = match &applied {
        Some((c, a)) => (c, Some(a)),
        None => (cfg, None),
    };
    let Some((format, path, eval_path, split)) = cfg.files() else {
        return Err(Error::Config("data: unknown format".into()));
    };
    let (file, split) = part_source(path, eval_path, split, part)?;
    open_file(
        format,
        &resolve(base_dir, file),
        split,
        part,
        bad_rows,
        Ids::Config(applied),
        shuffle,
    )
}

/// Opens the train or eval part of text or Parquet data with the raw keys for
/// ids ([`FeatureIds::Key`]), whatever the config's encoding: what a vocabulary is
/// counted from. A binary file holds rows, not keys, and is refused.
pub fn open_keys(
    cfg: &DataConfig,
    part: Part,
    bad_rows: BadRows,
    base_dir: &Path,
) -> Result<Box<dyn RecordStream>> {
    // Table sizes do not matter: the keys replace the rows.
    let mut cfg = cfg.clone();
    match &mut cfg {
        DataConfig::Criteo { table_rows, .. } => *table_rows = vec![1],
        DataConfig::Csv { schema, .. } => schema.sparse.iter_mut().for_each(|s| s.rows = Some(1)),
        DataConfig::Parquet { schema, .. } => {
            schema.sparse.iter_mut().for_each(|s| s.rows = Some(1))
        }
        _ => {
            return Err(Error::Config(
                "vocab: counts the keys of text or Parquet data (format = \"criteo\", \"csv\" \
                 or \"parquet\"); this config's data is neither"
                    .into(),
            ))
        }
    }
    let Some((format, path, eval_path, split)) = cfg.files() else {
        return Err(Error::Config("data: unknown format".into()));
    };
    let (file, split) = part_source(path, eval_path, split, part)?;
    open_file(
        format,
        &resolve(base_dir, file),
        split,
        part,
        bad_rows,
        Ids::Keys,
        None,
    )
}

/// The checksum of the vocabulary the data's ids come from: a Criteo, CSV or Parquet config's
/// `data.vocab` (a binary file read in its place must match it, which [`open`]
/// checks); for a `binary` config, the one its training file's header names; `None`:
/// hashed (or synthetic). A checkpoint records it, so a resumed run, an evaluation or
/// scoring encode as the training did. Reads no text data file (it may be a pipe).
pub fn vocab_checksum(cfg: &DataConfig, base_dir: &Path) -> Result<Option<String>> {
    if let Some((_, a)) = vocab::config::apply(cfg, base_dir)? {
        return Ok(Some(a.checksum().to_string()));
    }
    let DataConfig::Binary { path, .. } = cfg else {
        return Ok(None);
    };
    let path = resolve(base_dir, path);
    let file = datafile::open(&path)?;
    Ok(BinaryDataset::from_file(&file, &path)?
        .vocab()
        .map(str::to_string))
}

/// The ids a text reader gives its keys.
#[derive(Clone, Copy)]
enum Ids<'a> {
    /// The config's: its vocabulary, or hashing into its table sizes.
    Config(Option<&'a Applied>),
    /// The raw keys.
    Keys,
}

impl<'a> Ids<'a> {
    fn apply<R: RecordStream>(
        self,
        reader: R,
        with_ids: impl FnOnce(R, Vec<FeatureIds>) -> Result<R>,
    ) -> Result<R> {
        match self {
            Ids::Config(None) => Ok(reader),
            Ids::Config(Some(a)) => with_ids(reader, a.vocab.ids()),
            Ids::Keys => {
                let n = reader.schema().num_sparse();
                with_ids(reader, vec![FeatureIds::Key; n])
            }
        }
    }

    /// What a binary file read in place of `format`'s text must have been written with.
    fn check(self, format: FileFormat<'_>) -> VocabCheck<'a> {
        match (self, format) {
            (_, FileFormat::Binary) => VocabCheck::Any,
            (Ids::Config(a), _) => VocabCheck::Same(a),
            (Ids::Keys, _) => VocabCheck::Keys,
        }
    }
}

/// What a binary file's ids must come from.
#[derive(Clone, Copy)]
enum VocabCheck<'a> {
    /// Anything (a `binary` config).
    Any,
    /// The config's encoding (a Criteo, CSV or Parquet config naming a binary file).
    Same(Option<&'a Applied>),
    /// Keys: no binary file holds them.
    Keys,
}

impl VocabCheck<'_> {
    fn check(self, data: &BinaryDataset) -> Result<()> {
        match self {
            VocabCheck::Any => Ok(()),
            VocabCheck::Same(a) => vocab::config::check_binary(data.path(), data.vocab(), a),
            VocabCheck::Keys => Err(Error::Config(format!(
                "vocab: {} is a preprocessed binary file, which holds rows, not the values' \
                 keys; count the text file it was made from",
                data.path().display()
            ))),
        }
    }
}

/// The schema of one file: from a binary header, else from the format's config (the
/// file opened once, which also checks that it is a data file and can be read).
fn file_schema(format: FileFormat<'_>, path: &Path, vocab: Option<&Applied>) -> Result<Schema> {
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
        _ => {
            let data = BinaryDataset::from_file(&file, path)?;
            Ids::Config(vocab).check(format).check(&data)?;
            Ok(data.schema().clone())
        }
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
                    file_schema(FileFormat::Binary, &resolve(base_dir, p), None)?,
                )),
                None => None,
            };
            (train, eval)
        }
        _ => {
            let applied = vocab::config::apply(cfg, base_dir)?;
            let (cfg, applied) = match &applied {
                Some((c, a)) => (c, Some(a)),
                None => (cfg, None),
            };
            let Some((format, path, eval_path, split)) = cfg.files() else {
                return Err(Error::Config("data: unknown format".into()));
            };
            part_source(path, eval_path, split, Part::Eval)?;
            let train = file_schema(format, &resolve(base_dir, path), applied)?;
            let eval = match eval_path {
                Some(p) => Some((
                    resolve(base_dir, p),
                    file_schema(format, &resolve(base_dir, p), applied)?,
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
    use crate::synthetic::SyntheticConfig;
    use serde::Deserialize;

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
            vocab: None,
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
