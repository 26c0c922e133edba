//! Rows handed over in memory (a scoring request, docs/SERVING.md), encoded exactly as
//! the config's file reader encodes its file: the same dense transforms, the same
//! hashing or vocabulary, an unseen value where training sends it (the OOV row, or its
//! hash bucket).
//!
//! Two shapes of request body:
//! - **Lines** in the training file's format (a Criteo TSV line with its label field; a
//!   CSV body starts with the header line when the schema has one): parsed by the
//!   format's own reader.
//! - **Values** by column name ([`RowEncoder::columns`]): each row is written as one line
//!   of the format (every CSV field quoted, so a value is taken verbatim) and parsed by
//!   the same reader, so both shapes encode as a file does.
//!
//! Criteo and CSV data only: a Parquet file's values are typed columns, and binary or
//! synthetic data hold no raw values to encode; [`RowEncoder::new`] refuses them by name.

use crate::batcher::read_records;
use crate::criteo::{criteo_schema, CriteoReader, NUM_DENSE, NUM_SPARSE};
use crate::csv_schema::{CsvReader, CsvSchema, LabelSpec};
use crate::data_config::DataConfig;
use crate::encode::FeatureIds;
use crate::error::{Error, Result};
use crate::record::{BadRows, Schema};
use crate::stream::RecordStream;
use crate::vocab;
use std::io::Cursor;
use std::path::Path;
use towerrec_core::Batch;

/// The name a request's rows carry in error messages (`request:3: field 15 (C2): …`).
const REQUEST: &str = "request";

/// One value of a row given by column name.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An empty field (what a file's empty field gives: the fill, or an empty key).
    Empty,
    /// The field's text, as the file's reader sees it after unquoting.
    Text(String),
    /// A multi-hot column's values, joined with its separator.
    List(Vec<String>),
}

/// A column a row given by name must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The name a request uses: Criteo's `I1`…`I13`, `C1`…`C26`; a CSV schema's
    /// `column` (its header name, or 0-based index without a header).
    pub name: String,
    /// Whether it is a numeric column (else categorical).
    pub dense: bool,
    /// A multi-hot column's separator.
    pub separator: Option<char>,
}

/// The reader a request's text goes through.
#[derive(Debug, Clone)]
enum Format {
    Criteo {
        table_rows: Vec<u64>,
    },
    Csv {
        /// The training file's schema (lines).
        file: Box<CsvSchema>,
        /// The same columns without a header, in [`RowEncoder::columns`]' order after a
        /// label column 0 (values by name).
        values: Box<CsvSchema>,
    },
}

/// Encodes rows given in memory as the config's reader encodes its file.
#[derive(Debug, Clone)]
pub struct RowEncoder {
    format: Format,
    /// The vocabulary's encodings; `None`: hashing into the table sizes.
    ids: Option<Vec<FeatureIds>>,
    schema: Schema,
    columns: Vec<Column>,
}

impl RowEncoder {
    /// The encoder of `cfg`'s data (its vocabulary, if any, read from its path relative
    /// to `base_dir`). Reads no data file.
    pub fn new(cfg: &DataConfig, base_dir: &Path) -> Result<Self> {
        let applied = vocab::config::apply(cfg, base_dir)?;
        let (cfg, ids) = match &applied {
            Some((c, a)) => (c, Some(a.vocab.ids())),
            None => (cfg, None),
        };
        let (format, mut schema, columns) =
            match cfg {
                DataConfig::Criteo { table_rows, .. } => {
                    let columns = (1..=NUM_DENSE)
                        .map(|i| (format!("I{i}"), true, None))
                        .chain((1..=NUM_SPARSE).map(|i| (format!("C{i}"), false, None)))
                        .map(|(name, dense, separator)| Column {
                            name,
                            dense,
                            separator,
                        })
                        .collect();
                    let format = Format::Criteo {
                        table_rows: table_rows.clone(),
                    };
                    (format, criteo_schema(table_rows)?, columns)
                }
                DataConfig::Csv { schema, .. } => {
                    let schema_of_file = schema.schema()?;
                    let mut columns: Vec<Column> = schema
                        .dense
                        .iter()
                        .map(|d| Column {
                            name: d.column.clone(),
                            dense: true,
                            separator: None,
                        })
                        .collect();
                    columns.extend(schema.sparse.iter().map(|s| Column {
                        name: s.column.clone(),
                        dense: false,
                        separator: s.separator,
                    }));
                    let mut values = schema.clone();
                    values.header = false;
                    values.label = LabelSpec {
                        column: "0".into(),
                        positive: Vec::new(),
                        threshold: None,
                    };
                    for (i, d) in values.dense.iter_mut().enumerate() {
                        d.column = (1 + i).to_string();
                    }
                    let nd = values.dense.len();
                    for (i, s) in values.sparse.iter_mut().enumerate() {
                        s.column = (1 + nd + i).to_string();
                        // Feature names stay those of the file's schema.
                        s.name = Some(schema.sparse[i].feature_name().to_string());
                    }
                    let format = Format::Csv {
                        file: Box::new(schema.clone()),
                        values: Box::new(values),
                    };
                    (format, schema_of_file, columns)
                }
                DataConfig::Parquet { .. } => return Err(Error::Config(
                    "scoring rows: the model was trained on Parquet data, whose values are typed \
                     columns; rows can be scored only for Criteo or CSV data (docs/SERVING.md)"
                        .into(),
                )),
                DataConfig::Binary { .. } | DataConfig::Synthetic(_) => return Err(Error::Config(
                    "scoring rows: the model was trained on preprocessed or synthetic data, which \
                     hold encoded ids, not raw values; rows can be scored only for models \
                     trained on Criteo or CSV data (docs/SERVING.md)"
                        .into(),
                )),
            };
        if let Some(ids) = &ids {
            for (f, e) in schema.sparse.iter_mut().zip(ids) {
                f.rows = e.rows();
            }
        }
        Ok(Self {
            format,
            ids,
            schema,
            columns,
        })
    }

    /// The features of the batches this encoder makes (the model's schema).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The columns a row given by name has, dense first.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Whether the training file's lines start with a header line.
    pub fn has_header(&self) -> bool {
        matches!(&self.format, Format::Csv { file, .. } if file.header)
    }

    /// The first `limit` rows of `text` (lines of the training file's format, a header
    /// first where it has one) as a batch; a malformed line among them is an error
    /// naming its line number. Labels are read and ignored. A caller that allows `n`
    /// rows asks for `n + 1` to tell a longer text.
    pub fn lines(&self, text: Vec<u8>, limit: usize) -> Result<Batch> {
        let stream = match &self.format {
            Format::Criteo { table_rows } => self.criteo(text, table_rows)?,
            Format::Csv { file, .. } => self.csv(text, file)?,
        };
        self.read(stream, limit)
    }

    /// `rows`, each with one value per column of [`RowEncoder::columns`] in that
    /// order, as a batch; a value the format cannot hold in a field (a tab in a Criteo
    /// value, a line break, a multi-hot value holding its separator) is an error.
    pub fn values(&self, rows: &[Vec<Value>]) -> Result<Batch> {
        let mut text = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            if row.len() != self.columns.len() {
                return Err(row_error(
                    r,
                    "row",
                    &format!("{} values", self.columns.len()),
                    &row.len().to_string(),
                ));
            }
            // The label field, read and ignored.
            text.push(b'0');
            for (c, value) in self.columns.iter().zip(row) {
                text.push(self.delimiter());
                self.write_value(r, c, value, &mut text)?;
            }
            text.push(b'\n');
        }
        let stream = match &self.format {
            Format::Criteo { table_rows } => self.criteo(text, table_rows)?,
            Format::Csv { values, .. } => self.csv(text, values)?,
        };
        self.read(stream, rows.len())
    }

    fn delimiter(&self) -> u8 {
        match &self.format {
            Format::Criteo { .. } => b'\t',
            Format::Csv { file, .. } => file.delimiter as u8,
        }
    }

    /// Appends `value` as column `c`'s field of row `r`.
    fn write_value(&self, r: usize, c: &Column, value: &Value, out: &mut Vec<u8>) -> Result<()> {
        let joined;
        let text: &str = match value {
            Value::Empty => "",
            Value::Text(t) => t,
            Value::List(items) => {
                let Some(sep) = c.separator else {
                    return Err(row_error(r, &c.name, "one value", "a list"));
                };
                if let Some(item) = items.iter().find(|i| i.contains(sep)) {
                    return Err(row_error(
                        r,
                        &c.name,
                        &format!("list items without the separator {sep:?}"),
                        &format!("{item:?}"),
                    ));
                }
                joined = items.join(&sep.to_string());
                &joined
            }
        };
        if text.contains(['\n', '\r']) {
            return Err(row_error(
                r,
                &c.name,
                "a value without line breaks",
                &format!("{text:?}"),
            ));
        }
        match &self.format {
            Format::Criteo { .. } => {
                if text.contains('\t') {
                    return Err(row_error(
                        r,
                        &c.name,
                        "a value without tabs",
                        &format!("{text:?}"),
                    ));
                }
                out.extend_from_slice(text.as_bytes());
            }
            Format::Csv { .. } => {
                // Quoted: taken verbatim, whatever delimiters or spaces it holds.
                out.push(b'"');
                for b in text.bytes() {
                    if b == b'"' {
                        out.push(b'"');
                    }
                    out.push(b);
                }
                out.push(b'"');
            }
        }
        Ok(())
    }

    fn criteo(&self, text: Vec<u8>, table_rows: &[u64]) -> Result<Box<dyn RecordStream>> {
        let reader = CriteoReader::from_reader(
            Cursor::new(text),
            Path::new(REQUEST),
            table_rows,
            BadRows::Fail,
        )?
        .sequential();
        Ok(Box::new(match &self.ids {
            Some(ids) => reader.with_ids(ids.clone())?,
            None => reader,
        }))
    }

    fn csv(&self, text: Vec<u8>, csv: &CsvSchema) -> Result<Box<dyn RecordStream>> {
        let reader =
            CsvReader::from_reader(Cursor::new(text), Path::new(REQUEST), csv, BadRows::Fail)?
                .sequential();
        Ok(Box::new(match &self.ids {
            Some(ids) => reader.with_ids(ids.clone())?,
            None => reader,
        }))
    }

    /// The first `limit` rows of `stream` as one batch with the model's keys.
    fn read(&self, mut stream: Box<dyn RecordStream>, limit: usize) -> Result<Batch> {
        let batch = read_records(&mut *stream, limit)?;
        if stream.schema().sparse_names() != self.schema.sparse_names()
            || stream.schema().num_dense() != self.schema.num_dense()
        {
            // Both come from the same config: a bug, not a request's fault.
            return Err(Error::Config(
                "the request's reader disagrees with the model's schema".into(),
            ));
        }
        Ok(batch)
    }
}

/// The error of row `r` (0-based), field `field`.
fn row_error(r: usize, field: &str, expected: &str, found: &str) -> Error {
    Error::Parse {
        file: REQUEST.into(),
        line: r as u64 + 1,
        field: field.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csv_schema::{DenseColumn, DenseTransform, SparseColumn};
    use crate::data_config::Split;

    fn criteo_cfg() -> DataConfig {
        DataConfig::Criteo {
            path: "unused.tsv".into(),
            eval_path: None,
            table_rows: vec![97],
            vocab: None,
            split: Split::None,
        }
    }

    /// Criteo lines: a label, 13 counts (some empty, one negative), 26 hex ids.
    fn criteo_lines(n: usize) -> String {
        (0..n)
            .map(|r| {
                let dense = (0..NUM_DENSE).map(|i| match (r + i) % 5 {
                    0 => String::new(),
                    1 => "-2".into(),
                    k => (k * 31 + r).to_string(),
                });
                let sparse = (0..NUM_SPARSE).map(|i| match (r * 7 + i) % 6 {
                    0 => String::new(),
                    k => format!("{:08x}", k * 0x9e37 + r * 131 + i),
                });
                std::iter::once((r % 2).to_string())
                    .chain(dense)
                    .chain(sparse)
                    .collect::<Vec<_>>()
                    .join("\t")
                    + "\n"
            })
            .collect()
    }

    /// Splits `lines` into values by column (the label dropped), as a request would.
    fn values_of(lines: &str, delimiter: char) -> Vec<Vec<Value>> {
        lines
            .lines()
            .map(|l| {
                l.split(delimiter)
                    .skip(1)
                    .map(|v| match v {
                        "" => Value::Empty,
                        v => Value::Text(v.to_string()),
                    })
                    .collect()
            })
            .collect()
    }

    fn file_batch(stream: &mut dyn RecordStream, n: usize) -> Batch {
        let mut b = read_records(stream, n).unwrap();
        b.labels.iter_mut().for_each(|l| *l = 0.0);
        b
    }

    fn no_labels(mut b: Batch) -> Batch {
        b.labels.iter_mut().for_each(|l| *l = 0.0);
        b
    }

    #[test]
    fn criteo_lines_and_values_encode_as_the_file_reader() {
        let enc = RowEncoder::new(&criteo_cfg(), Path::new(".")).unwrap();
        assert_eq!(enc.columns().len(), 39);
        assert_eq!(enc.columns()[0].name, "I1");
        assert_eq!(enc.columns()[13].name, "C1");
        let text = criteo_lines(12);
        let mut file = CriteoReader::from_reader(
            Cursor::new(text.clone().into_bytes()),
            Path::new("f"),
            &[97],
            BadRows::Fail,
        )
        .unwrap();
        let expected = file_batch(&mut file, 100);
        assert_eq!(expected.batch_size(), 12);
        let lines = enc.lines(text.clone().into_bytes(), 12).unwrap();
        assert_eq!(no_labels(lines), expected);
        let values = enc.values(&values_of(&text, '\t')).unwrap();
        assert_eq!(values, expected);
    }

    #[test]
    fn criteo_requests_are_refused_with_the_row_and_field() {
        let enc = RowEncoder::new(&criteo_cfg(), Path::new(".")).unwrap();
        assert_eq!(
            enc.lines(criteo_lines(3).into_bytes(), 2)
                .unwrap()
                .batch_size(),
            2
        );
        let mut rows = values_of(&criteo_lines(2), '\t');
        rows[1][14] = Value::Text("a\tb".into());
        let err = enc.values(&rows).unwrap_err().to_string();
        assert!(
            err.contains("request:2: C2: expected a value without tabs"),
            "{err}"
        );
        rows[1][14] = Value::Text("zz".into());
        let err = enc.values(&rows).unwrap_err().to_string();
        assert!(err.contains("request:2") && err.contains("C2"), "{err}");
        rows[1].pop();
        let err = enc.values(&rows).unwrap_err().to_string();
        assert!(err.contains("expected 39 values, found 38"), "{err}");
        rows[0][0] = Value::List(vec!["1".into()]);
        assert!(enc
            .values(&rows[..1])
            .unwrap_err()
            .to_string()
            .contains("a list"));
    }

    fn csv_schema() -> CsvSchema {
        CsvSchema {
            delimiter: ',',
            header: true,
            label: LabelSpec {
                column: "clicked".into(),
                positive: vec!["yes".into()],
                threshold: None,
            },
            dense: vec![
                DenseColumn {
                    column: "price".into(),
                    transform: DenseTransform::Log1p,
                    fill: 3.0,
                },
                DenseColumn {
                    column: "age".into(),
                    transform: DenseTransform::None,
                    fill: 0.0,
                },
            ],
            sparse: vec![
                SparseColumn {
                    column: "city".into(),
                    rows: Some(50),
                    separator: None,
                    name: Some("where".into()),
                },
                SparseColumn {
                    column: "tags".into(),
                    rows: Some(30),
                    separator: Some('|'),
                    name: None,
                },
            ],
        }
    }

    #[test]
    fn csv_values_by_name_encode_as_the_files_lines() {
        let cfg = DataConfig::Csv {
            path: "unused.csv".into(),
            eval_path: None,
            schema: csv_schema(),
            vocab: None,
            split: Split::None,
        };
        let enc = RowEncoder::new(&cfg, Path::new(".")).unwrap();
        let names: Vec<&str> = enc.columns().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["price", "age", "city", "tags"]);
        assert!(enc.has_header());
        // Columns in another order than the schema's, a quoted delimiter and quote, an
        // empty price (its fill), a multi-hot field.
        let text = "tags,city,clicked,age,price\n\
                    a|b,\"Paris, \"\"FR\"\"\",yes,31.5,12\n\
                    ,Oslo,no,-4,\n\
                    c,,yes,0,7\n";
        let expected = no_labels(enc.lines(text.as_bytes().to_vec(), 10).unwrap());
        let t = |s: &str| Value::Text(s.into());
        let rows = vec![
            vec![
                t("12"),
                t("31.5"),
                t("Paris, \"FR\""),
                Value::List(vec!["a".into(), "b".into()]),
            ],
            vec![Value::Empty, t("-4"), t("Oslo"), Value::Empty],
            vec![t("7"), t("0"), Value::Empty, t("c")],
        ];
        let got = enc.values(&rows).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got.sparse.keys(), ["where", "tags"]);
        // The file's own reader agrees.
        let mut file = CsvReader::from_reader(
            Cursor::new(text.as_bytes().to_vec()),
            Path::new("f"),
            &csv_schema(),
            BadRows::Fail,
        )
        .unwrap();
        assert_eq!(file_batch(&mut file, 10), got);
        let mut bad = rows.clone();
        bad[0][3] = Value::List(vec!["a|b".into()]);
        let err = enc.values(&bad).unwrap_err().to_string();
        assert!(err.contains("without the separator '|'"), "{err}");
        bad[0][3] = t("x\ny");
        assert!(enc
            .values(&bad)
            .unwrap_err()
            .to_string()
            .contains("line breaks"));
    }

    #[test]
    fn preprocessed_and_parquet_data_are_refused_by_name() {
        let cfg = DataConfig::Binary {
            path: "x.bin".into(),
            eval_path: None,
            split: Split::None,
        };
        let err = RowEncoder::new(&cfg, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Criteo or CSV"), "{err}");
    }
}
