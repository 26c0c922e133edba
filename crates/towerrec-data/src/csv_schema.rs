//! A CSV/TSV reader driven by a schema from the run config: which column is the label,
//! which are dense (numeric) and which are sparse (categorical, possibly multi-hot).
//!
//! Categorical strings become keys with a stable 64-bit FNV-1a hash, then rows with `%
//! rows` (or another encoding, [`crate::encode`]), so the same string maps to the same
//! row on every run and platform. A single-valued empty field
//! hashes the empty string (it is a category of its own, "missing"); a multi-hot field
//! is split on its separator, empty pieces are dropped, and an empty field has no ids.
//!
//! Fields are trimmed of surrounding ASCII whitespace. Double-quoted fields may contain
//! the delimiter and `""` for a quote; a quoted field cannot span lines (rows are lines).
//! With a header, a column may be named as written or, for typed headers such as
//! RecBole's `user_id:token`, by the part before the `:`; a header that names two
//! columns alike is an error (empty names, which no schema can pick, may repeat).
//! Blank lines, and lines of only whitespace that is not the delimiter, are skipped
//! (see [`crate::lines`]).

use crate::block::RecordBlock;
use crate::chunked::{Line, RowParser, TextRows};
use crate::encode::{hashing, key_of, FeatureIds};
use crate::error::{quote_found, Error, Result};
use crate::lines::{Lines, MAX_LINE_BYTES};
use crate::record::{BadRows, Record, Schema, SparseFeature};
use crate::stream::RecordStream;
use crate::text::RowSelect;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

/// How to read a delimited text file (the `schema` table of a `format = "csv"` config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvSchema {
    /// Field separator, one ASCII character: `","` (default), `"\t"`, `";"`, ...
    #[serde(default = "default_delimiter")]
    pub delimiter: char,
    /// Whether the first line names the columns (default true). Without a header,
    /// columns are named by their 0-based index: `column = "3"`.
    #[serde(default = "default_true")]
    pub header: bool,
    /// The label column and how its values map to 0/1.
    pub label: LabelSpec,
    /// Numeric columns.
    #[serde(default)]
    pub dense: Vec<DenseColumn>,
    /// Categorical columns, each with its own embedding table.
    #[serde(default)]
    pub sparse: Vec<SparseColumn>,
}

fn default_delimiter() -> char {
    ','
}
fn default_true() -> bool {
    true
}

/// The label column. With neither `positive` nor `threshold`, values must be 0 or 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSpec {
    /// Header name, or 0-based index when there is no header.
    pub column: String,
    /// Values meaning 1 (e.g. `[">50K", ">50K."]`); anything else is 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positive: Vec<String>,
    /// Numeric labels at or above this are 1, below it 0 (e.g. `4.0` for ratings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// A numeric column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseColumn {
    /// Header name, or 0-based index when there is no header.
    pub column: String,
    /// Transform applied to the value (default `log1p`).
    #[serde(default)]
    pub transform: DenseTransform,
    /// Raw value used for an empty field, transformed like any other (default 0).
    #[serde(default)]
    pub fill: f32,
}

/// Transform of a dense value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseTransform {
    /// The value as is.
    None,
    /// `sign(x) · ln(1 + |x|)`: compresses heavy-tailed counts, defined for negatives.
    #[default]
    Log1p,
}

impl DenseTransform {
    /// Applies the transform.
    #[inline]
    pub fn apply(self, x: f64) -> f32 {
        match self {
            DenseTransform::None => x as f32,
            // Small whole numbers (most counts) from a table of the same values.
            DenseTransform::Log1p
                if (0.0..4096.0).contains(&x) && x.fract() == 0.0 && x.is_sign_positive() =>
            {
                LOG1P[x as usize]
            }
            DenseTransform::Log1p => (x.signum() * x.abs().ln_1p()) as f32,
        }
    }
}

/// `ln(1 + x)` as f32 for x = 0, 1, ..., 4095.
static LOG1P: std::sync::LazyLock<Vec<f32>> =
    std::sync::LazyLock::new(|| (0..4096u32).map(|x| f64::from(x).ln_1p() as f32).collect());

impl DenseTransform {}

/// A categorical column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparseColumn {
    /// Header name, or 0-based index when there is no header.
    pub column: String,
    /// Embedding rows the hashed values are reduced into. Optional with `data.vocab`,
    /// which then gives the table's size (if both are set they must agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Multi-hot: split the field on this character (e.g. `"|"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<char>,
    /// Feature name (default: `column`); names must be unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl SparseColumn {
    /// The feature's name: `name`, else the column.
    pub fn feature_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.column)
    }
}

impl CsvSchema {
    /// The record schema this CSV schema produces (no file needed).
    pub fn schema(&self) -> Result<Schema> {
        self.validate()?;
        columns_schema(&self.dense, &self.sparse)
    }

    /// Checks what needs no file: delimiter, label rule, table sizes, unique names.
    pub fn validate(&self) -> Result<()> {
        let d = self.delimiter;
        if !d.is_ascii() || matches!(d, '"' | '\n' | '\r') {
            return Err(Error::Config(format!(
                "data.schema.delimiter: must be one ASCII character other than a quote or newline, got {d:?}"
            )));
        }
        if let Some(s) = self.sparse.iter().find(|s| s.separator == Some(d)) {
            return Err(Error::Config(format!(
                "data.schema.sparse: column \"{}\": separator equals the delimiter",
                s.column
            )));
        }
        validate_columns(&self.label, &self.dense, &self.sparse)
    }
}

/// The record schema of the columns a schema picks (CSV or Parquet, [`crate::parquet`]).
pub(crate) fn columns_schema(dense: &[DenseColumn], sparse: &[SparseColumn]) -> Result<Schema> {
    Ok(Schema {
        dense: dense.iter().map(|d| d.column.clone()).collect(),
        sparse: sparse
            .iter()
            .map(|s| {
                Ok(SparseFeature {
                    name: s.feature_name().to_string(),
                    rows: s.rows.ok_or_else(|| {
                        Error::Config(format!(
                            "data.schema.sparse: column \"{}\": needs `rows` (or set data.vocab, \
                             which gives the table sizes)",
                            s.column
                        ))
                    })?,
                })
            })
            .collect::<Result<_>>()?,
    })
}

/// Checks the column choices a CSV and a Parquet schema share: the label rule, dense
/// fills, table sizes and unique feature names.
pub(crate) fn validate_columns(
    label: &LabelSpec,
    dense: &[DenseColumn],
    sparse: &[SparseColumn],
) -> Result<()> {
    if !label.positive.is_empty() && label.threshold.is_some() {
        return Err(Error::Config(
            "data.schema.label: set `positive` or `threshold`, not both".into(),
        ));
    }
    if label.threshold.is_some_and(|t| !t.is_finite()) {
        return Err(Error::Config(
            "data.schema.label.threshold: must be a finite number".into(),
        ));
    }
    if let Some(d) = dense.iter().find(|d| !d.fill.is_finite()) {
        return Err(Error::Config(format!(
            "data.schema.dense: column \"{}\": fill must be a finite number, got {}",
            d.column, d.fill
        )));
    }
    let mut names = HashSet::new();
    for s in sparse {
        let name = s.feature_name();
        if s.rows == Some(0) {
            return Err(Error::Config(format!(
                "data.schema.sparse: column \"{}\": rows must be at least 1",
                s.column
            )));
        }
        if !names.insert(name) {
            return Err(Error::Config(format!(
                "data.schema.sparse: feature name \"{name}\" is used twice; set `name` to tell them apart"
            )));
        }
    }
    Ok(())
}

/// How a label field maps to 0/1.
#[derive(Debug, Clone)]
enum LabelRule {
    ZeroOne,
    Positive(HashSet<Vec<u8>>),
    Threshold(f64),
}

/// Everything resolved against the header: column indices and rules.
#[derive(Debug, Clone)]
struct Plan {
    delimiter: u8,
    /// With a header, rows must have exactly this many fields; without, at least.
    fields: usize,
    exact: bool,
    /// Header names for error messages; without a header, columns go by index.
    names: Option<Vec<String>>,
    label: (usize, LabelRule),
    dense: Vec<(usize, DenseTransform, f32)>,
    sparse: Vec<(usize, Option<Vec<u8>>)>,
    /// Per sparse column: its key → its row.
    ids: Vec<FeatureIds>,
}

/// Reads records from a delimited text file described by a [`CsvSchema`], parsed in
/// parallel over blocks of the file and handed out in file order ([`crate::chunked`]).
pub struct CsvReader {
    rows: TextRows<Plan>,
    schema: Schema,
}

impl CsvReader {
    /// Opens `path`, reads the header if any, and checks that every column exists.
    pub fn open(path: &Path, csv: &CsvSchema, bad_rows: BadRows) -> Result<Self> {
        csv.validate()?;
        Self::with_lines(Lines::open(path, csv.delimiter as u8)?, csv, bad_rows)
    }

    /// Reads from any buffered reader; `name` is the file name shown in errors.
    pub fn from_reader(
        reader: impl BufRead + Send + 'static,
        name: &Path,
        csv: &CsvSchema,
        bad_rows: BadRows,
    ) -> Result<Self> {
        csv.validate()?;
        let lines = Lines::new(Box::new(reader), name, csv.delimiter as u8);
        Self::with_lines(lines, csv, bad_rows)
    }

    /// Yields only the rows `select` picks (a train or eval split).
    pub fn with_rows(mut self, select: RowSelect) -> Self {
        self.rows.set_select(select);
        self
    }

    /// The 0-based index of the data row read last (what a split counts); for a
    /// [`CsvReader::sequential`] reader only.
    pub(crate) fn last_row(&self) -> u64 {
        self.rows.last_row()
    }

    /// Parses one line at a time on the calling thread, as before parallel reading (the
    /// reference the tests compare the parallel path with).
    pub fn sequential(mut self) -> Self {
        self.rows.sequential();
        self
    }

    /// Sets how many bytes of text one parallel block holds (default
    /// [`crate::chunked::BLOCK_BYTES`]).
    pub fn with_block_bytes(mut self, bytes: usize) -> Self {
        self.rows.set_block_bytes(bytes);
        self
    }

    /// Maps each sparse column's keys with `ids` (one per column) instead of hashing
    /// into its `rows`; the schema's table sizes follow.
    pub fn with_ids(mut self, ids: Vec<FeatureIds>) -> Result<Self> {
        let plan = self.rows.parser_mut();
        if ids.len() != plan.sparse.len() {
            return Err(Error::Config(format!(
                "the schema has {} sparse columns, got {} encodings",
                plan.sparse.len(),
                ids.len()
            )));
        }
        plan.ids = ids;
        for (f, e) in self.schema.sparse.iter_mut().zip(&plan.ids) {
            f.rows = e.rows();
        }
        Ok(self)
    }

    fn with_lines(mut lines: Lines, csv: &CsvSchema, bad_rows: BadRows) -> Result<Self> {
        let schema = csv.schema()?;
        let delimiter = csv.delimiter as u8;
        let header = if csv.header {
            if !lines.next_line()? {
                return Err(Error::Format {
                    file: lines.name.clone(),
                    message: "empty file: expected a header line (or set header = false)".into(),
                });
            }
            if lines.too_long {
                return Err(lines.too_long_error("header"));
            }
            let mut spans = Vec::new();
            split_fields(&lines.buf, delimiter, &mut spans)
                .map_err(|(expected, found)| lines.error("header", expected, found))?;
            let mut names: Vec<String> = spans
                .iter()
                .map(|s| {
                    String::from_utf8_lossy(&s.get(&lines.buf))
                        .trim()
                        .to_string()
                })
                .collect();
            if let Some(first) = names.first_mut() {
                // A byte-order mark some spreadsheet exports put before the first name.
                *first = first.trim_start_matches('\u{feff}').to_string();
            }
            check_distinct(&names)
                .map_err(|found| lines.error("header", "distinct column names", found))?;
            Some(names)
        } else {
            None
        };
        let resolve =
            |column: &str, key: &str| resolve_column(column, header.as_deref(), key, &lines.name);
        let label_rule = if let Some(t) = csv.label.threshold {
            LabelRule::Threshold(t)
        } else if !csv.label.positive.is_empty() {
            LabelRule::Positive(
                csv.label
                    .positive
                    .iter()
                    .map(|p| p.trim().as_bytes().to_vec())
                    .collect(),
            )
        } else {
            LabelRule::ZeroOne
        };
        let label = (resolve(&csv.label.column, "label")?, label_rule);
        let dense = csv
            .dense
            .iter()
            .map(|d| Ok((resolve(&d.column, "dense")?, d.transform, d.fill)))
            .collect::<Result<Vec<_>>>()?;
        let sparse = csv
            .sparse
            .iter()
            .map(|s| {
                let sep = s.separator.map(|c| c.to_string().into_bytes());
                Ok((resolve(&s.column, "sparse")?, sep))
            })
            .collect::<Result<Vec<_>>>()?;
        let needed = std::iter::once(label.0)
            .chain(dense.iter().map(|d| d.0))
            .chain(sparse.iter().map(|s| s.0))
            .max()
            .map_or(0, |m| m + 1);
        let (fields, exact, names) = match header {
            Some(h) => (h.len(), true, Some(h)),
            None => (needed, false, None),
        };
        let plan = Plan {
            delimiter,
            fields,
            exact,
            names,
            label,
            dense,
            sparse,
            ids: hashing(&schema),
        };
        let shape = (schema.dense.len(), schema.sparse.len());
        Ok(Self {
            rows: TextRows::new(lines, plan, shape, bad_rows),
            schema,
        })
    }
}

/// Checks that no column name is used twice, so a name picks one column; unnamed
/// (empty) columns, such as those of a trailing delimiter, cannot be picked and may
/// repeat. On error returns what was found, for the message.
fn check_distinct(names: &[String]) -> std::result::Result<(), String> {
    let mut first = HashMap::with_capacity(names.len());
    for (i, name) in names.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        if let Some(j) = first.insert(name.as_str(), i) {
            return Err(format!(
                "column {} twice (columns {j} and {i})",
                quote_found(name.as_bytes())
            ));
        }
    }
    Ok(())
}

/// Finds a column's index: by header name (exact, else the part before a `:` type
/// suffix), or by 0-based index without a header.
fn resolve_column(column: &str, header: Option<&[String]>, key: &str, file: &str) -> Result<usize> {
    let Some(header) = header else {
        let i = column.trim().parse::<usize>().map_err(|_| {
            Error::Config(format!(
                "data.schema.{key}: column \"{column}\" must be a 0-based index because header = false"
            ))
        })?;
        // A line of at most MAX_LINE_BYTES bytes has at most one more field than that.
        if i > MAX_LINE_BYTES {
            return Err(Error::Config(format!(
                "data.schema.{key}: column {i} is beyond any row (a line holds at most {MAX_LINE_BYTES} bytes)"
            )));
        }
        return Ok(i);
    };
    if let Some(i) = header.iter().position(|h| h == column) {
        return Ok(i);
    }
    let typed: Vec<usize> = (0..header.len())
        .filter(|&i| header[i].split(':').next() == Some(column))
        .collect();
    match typed[..] {
        [i] => Ok(i),
        [] => Err(Error::Config(format!(
            "data.schema.{key}: column \"{column}\" is not in the header of {file} (columns: {})",
            header.join(", ")
        ))),
        _ => Err(Error::Config(format!(
            "data.schema.{key}: column \"{column}\" matches several header columns of {file}"
        ))),
    }
}

/// A field of the current line: a byte range, and whether it was quoted and holds
/// `""` escapes to undo.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    start: usize,
    end: usize,
    escaped: bool,
}

impl Span {
    /// The field's text, quotes unescaped; trimmed unless it was quoted.
    #[inline]
    fn get<'a>(&self, line: &'a [u8]) -> Cow<'a, [u8]> {
        let raw = &line[self.start..self.end];
        if self.escaped {
            let mut out = Vec::with_capacity(raw.len());
            let mut i = 0;
            while i < raw.len() {
                out.push(raw[i]);
                // `""` inside a quoted field stands for one quote.
                i += if raw[i] == b'"' { 2 } else { 1 };
            }
            Cow::Owned(out)
        } else {
            Cow::Borrowed(raw.trim_ascii())
        }
    }
}

/// Splits a line into fields; on error returns (expected, found) for the message.
fn split_fields(
    line: &[u8],
    delim: u8,
    out: &mut Vec<Span>,
) -> std::result::Result<(), (String, String)> {
    out.clear();
    if split_unquoted(line, delim, out) {
        return Ok(());
    }
    out.clear();
    split_quoted(line, delim, out)
}

/// The bytes of `word` equal to `b`, as their high bits (exact: no false matches).
#[inline]
fn bytes_equal(word: u64, b: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (0x0101_0101_0101_0101 * u64::from(b));
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Splits a line without quotes in one pass, eight bytes at a time (most lines of
/// most files: no field of theirs is quoted); false, with `out` partly filled, at the
/// first quote.
fn split_unquoted(line: &[u8], delim: u8, out: &mut Vec<Span>) -> bool {
    let mut start = 0;
    let mut push = |end: usize, out: &mut Vec<Span>| {
        out.push(Span {
            start,
            end,
            escaped: false,
        });
        start = end + 1;
    };
    let words = line.chunks_exact(8);
    let tail = words.remainder();
    for (k, word) in words.enumerate() {
        let word = u64::from_le_bytes(word.try_into().expect("chunks of 8 bytes"));
        if bytes_equal(word, b'"') != 0 {
            return false;
        }
        let mut hits = bytes_equal(word, delim);
        while hits != 0 {
            push(k * 8 + hits.trailing_zeros() as usize / 8, out);
            hits &= hits - 1;
        }
    }
    let base = line.len() - tail.len();
    for (i, &b) in tail.iter().enumerate() {
        if b == b'"' {
            return false;
        } else if b == delim {
            push(base + i, out);
        }
    }
    push(line.len(), out);
    true
}

/// Splits a line that may hold quoted fields.
fn split_quoted(
    line: &[u8],
    delim: u8,
    out: &mut Vec<Span>,
) -> std::result::Result<(), (String, String)> {
    let mut pos = 0;
    loop {
        if line.get(pos) == Some(&b'"') {
            let start = pos + 1;
            let mut i = start;
            let mut escaped = false;
            let end = loop {
                let Some(q) = memchr::memchr(b'"', &line[i..]).map(|q| q + i) else {
                    return Err((
                        format!("a closing quote for the field opened at byte {pos}"),
                        "end of line".into(),
                    ));
                };
                if line.get(q + 1) == Some(&b'"') {
                    escaped = true;
                    i = q + 2;
                } else {
                    break q;
                }
            };
            out.push(Span {
                start,
                end,
                escaped,
            });
            pos = end + 1;
            match line.get(pos) {
                None => return Ok(()),
                Some(&b) if b == delim => pos += 1,
                Some(_) => {
                    return Err((
                        "a delimiter after a closing quote".into(),
                        quote_found(&line[pos..]),
                    ))
                }
            }
        } else {
            let end = memchr::memchr(delim, &line[pos..]).map_or(line.len(), |e| e + pos);
            out.push(Span {
                start: pos,
                end,
                escaped: false,
            });
            if end == line.len() {
                return Ok(());
            }
            pos = end + 1;
        }
    }
}

/// Exact powers of ten in f64 (10^22 is the largest).
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Parses a finite number.
#[inline]
pub(crate) fn parse_number(field: &[u8]) -> Option<f64> {
    // Plain decimals of up to 15 digits (most numeric log fields: `42`, `29.286`) take
    // Clinger's fast path: the digits as an integer below 2^53 and the power of ten are
    // both exact in f64, so one correctly rounded division gives the correctly rounded
    // value, the standard parser's bits (proptest below).
    let (negative, digits) = match field {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, field),
    };
    if !digits.is_empty() && digits.len() <= 16 {
        let (mut n, mut frac, mut point, mut ok) = (0u64, 0usize, false, true);
        for &d in digits {
            if d.is_ascii_digit() {
                n = n * 10 + u64::from(d - b'0');
                frac += usize::from(point);
            } else if d == b'.' && !point {
                point = true;
            } else {
                ok = false;
                break;
            }
        }
        let count = digits.len() - usize::from(point);
        if ok && count > 0 && count <= 15 {
            let x = n as f64 / POW10[frac];
            return Some(if negative { -x } else { x });
        }
    }
    std::str::from_utf8(field)
        .ok()?
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
}

#[cfg(test)]
mod number_tests {
    use super::parse_number;

    proptest::proptest! {
        /// The integer fast path gives the standard parser's value, sign of zero
        /// included, for any short digit string.
        #[test]
        fn integers_parse_as_the_standard_parser_does(text in "[-+]?[0-9]{0,17}") {
            let std = text.parse::<f64>().ok().filter(|x| x.is_finite());
            let got = parse_number(text.as_bytes());
            proptest::prop_assert_eq!(got.map(f64::to_bits), std.map(f64::to_bits), "{}", text);
        }

        /// So do decimals, short and long, with a point anywhere or twice.
        #[test]
        fn decimals_parse_as_the_standard_parser_does(
            text in "[-+]?[0-9]{0,10}\\.?[0-9]{0,10}\\.?[0-9]{0,2}",
        ) {
            let std = text.parse::<f64>().ok().filter(|x| x.is_finite());
            let got = parse_number(text.as_bytes());
            proptest::prop_assert_eq!(got.map(f64::to_bits), std.map(f64::to_bits), "{}", text);
        }
    }
}

/// Splits `field` on the byte sequence `sep` (a UTF-8 encoded char).
pub(crate) fn split_on<'a>(field: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(field);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(sep.len()).position(|w| w == sep) {
            Some(i) => {
                rest = Some(&r[i + sep.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

impl RowParser for Plan {
    type Scratch = Vec<Span>;

    fn parse(&self, line: &Line<'_>, spans: &mut Vec<Span>, out: &mut RecordBlock) -> Result<()> {
        parse_line(line, self, spans, out)
    }
}

fn parse_line(
    lines: &Line<'_>,
    plan: &Plan,
    spans: &mut Vec<Span>,
    out: &mut RecordBlock,
) -> Result<()> {
    let line = lines.buf;
    split_fields(line, plan.delimiter, spans).map_err(|(e, f)| lines.error("row", e, f))?;
    let n = spans.len();
    if (plan.exact && n != plan.fields) || n < plan.fields {
        let expected = if plan.exact {
            format!("{} fields (as in the header)", plan.fields)
        } else {
            format!("at least {} fields", plan.fields)
        };
        return Err(lines.error("row", expected, format!("{n} fields")));
    }
    let field = |i: usize| spans[i].get(line);
    let label_of = |i: usize| match &plan.names {
        Some(names) => format!("field {i} ({})", names[i]),
        None => format!("field {i}"),
    };
    let (li, rule) = &plan.label;
    let raw = field(*li);
    let label = match rule {
        LabelRule::Positive(set) => set.contains(raw.as_ref()),
        LabelRule::Threshold(t) => {
            parse_number(&raw)
                .ok_or_else(|| lines.error(label_of(*li), "a number", quote_found(&raw)))?
                >= *t
        }
        LabelRule::ZeroOne => match parse_number(&raw) {
            Some(0.0) => false,
            Some(1.0) => true,
            _ => return Err(lines.error(label_of(*li), "0 or 1", quote_found(&raw))),
        },
    };
    out.labels.push(if label { 1.0 } else { 0.0 });
    for &(i, transform, fill) in &plan.dense {
        let raw = field(i);
        let x = if raw.is_empty() {
            f64::from(fill)
        } else {
            parse_number(&raw)
                .ok_or_else(|| lines.error(label_of(i), "a number", quote_found(&raw)))?
        };
        // Finite as an f64 is not enough: the model reads f32.
        let value = transform.apply(x);
        if !value.is_finite() {
            return Err(lines.error(
                label_of(i),
                "a number within the range of f32 (about ±3.4e38)",
                quote_found(&raw),
            ));
        }
        out.dense.push(value);
    }
    for ((i, sep), enc) in plan.sparse.iter().zip(&plan.ids) {
        let raw = field(*i);
        match sep {
            None => out.ids.push(enc.id(key_of(&raw))),
            Some(sep) => out.ids.extend(
                split_on(&raw, sep)
                    .map(<[u8]>::trim_ascii)
                    .filter(|p| !p.is_empty())
                    .map(|p| enc.id(key_of(p))),
            ),
        }
        out.end_feature();
    }
    Ok(())
}

impl RecordStream for CsvReader {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        self.rows.next_record()
    }

    fn skipped(&self) -> u64 {
        self.rows.skipped()
    }

    fn read_block(&mut self, max: usize, out: &mut RecordBlock) -> Result<Option<usize>> {
        self.rows.read_into(max, out).map(Some)
    }

    fn read_batch(&mut self, n: usize) -> Result<Option<towerrec_core::Batch>> {
        self.rows.read_batch(n, &self.schema).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Vec<String> {
        let mut spans = Vec::new();
        split_fields(line.as_bytes(), b',', &mut spans).unwrap();
        spans
            .iter()
            .map(|s| String::from_utf8(s.get(line.as_bytes()).into_owned()).unwrap())
            .collect()
    }

    #[test]
    fn splits_quoted_fields_with_delimiters_and_escapes() {
        assert_eq!(fields("a, b ,c"), vec!["a", "b", "c"]);
        assert_eq!(fields(r#""x,y",2"#), vec!["x,y", "2"]);
        assert_eq!(fields(r#"1,"say ""hi""",3"#), vec!["1", r#"say "hi""#, "3"]);
        assert_eq!(fields("a,,"), vec!["a", "", ""]);
        assert_eq!(fields(r#""""#), vec![""]);
        let mut spans = Vec::new();
        assert!(split_fields(br#""open,1"#, b',', &mut spans).is_err());
        assert!(split_fields(br#""a"b,1"#, b',', &mut spans).is_err());
    }

    proptest::proptest! {
        /// The one-pass split of unquoted lines gives the general splitter's fields,
        /// and hands a line with a quote anywhere to it.
        #[test]
        fn the_fast_split_agrees_with_the_general_one(
            line in "[a,\t \"é|0-9]{0,40}",
            delim in proptest::sample::select(vec![b',', b'\t', b'|']),
        ) {
            let (mut fast, mut general) = (Vec::new(), Vec::new());
            let got = split_fields(line.as_bytes(), delim, &mut fast);
            let want = split_quoted(line.as_bytes(), delim, &mut general);
            proptest::prop_assert_eq!(got.is_ok(), want.is_ok());
            let spans = |v: &[Span]| v.iter().map(|s| (s.start, s.end, s.escaped)).collect::<Vec<_>>();
            if want.is_ok() {
                proptest::prop_assert_eq!(spans(&fast), spans(&general));
            }
            let mut unquoted = Vec::new();
            proptest::prop_assert_eq!(
                split_unquoted(line.as_bytes(), delim, &mut unquoted),
                !line.contains('"')
            );
        }
    }

    #[test]
    fn multi_hot_split_handles_multibyte_separators() {
        let got: Vec<&[u8]> = split_on("a→b→→c".as_bytes(), "→".as_bytes()).collect();
        assert_eq!(got, vec![&b"a"[..], b"b", b"", b"c"]);
    }

    #[test]
    fn log1p_is_sign_symmetric() {
        let t = DenseTransform::Log1p;
        for x in [0.0f64, 1.0, 4095.0, 4096.0, 3.5, -0.0, -3.0, 1e30] {
            let want = (x.signum() * x.abs().ln_1p()) as f32;
            assert_eq!(t.apply(x).to_bits(), want.to_bits(), "{x}");
        }
        assert_eq!(t.apply(0.0), 0.0);
        assert!((t.apply(-9.0) + 10f32.ln()).abs() < 1e-6);
        assert_eq!(DenseTransform::None.apply(-2.5), -2.5);
    }

    #[test]
    fn typed_headers_resolve_by_base_name() {
        let h = vec!["user_id:token".to_string(), "rating:float".to_string()];
        assert_eq!(resolve_column("rating", Some(&h), "label", "f").unwrap(), 1);
        assert_eq!(
            resolve_column("user_id:token", Some(&h), "label", "f").unwrap(),
            0
        );
        let e = resolve_column("item", Some(&h), "sparse", "f").unwrap_err();
        assert!(
            e.to_string()
                .contains("data.schema.sparse: column \"item\""),
            "{e}"
        );
        assert_eq!(resolve_column("2", None, "dense", "f").unwrap(), 2);
        assert!(resolve_column("x", None, "dense", "f").is_err());
    }

    #[test]
    fn validate_rejects_bad_configs() {
        let mut s = CsvSchema {
            delimiter: ',',
            header: true,
            label: LabelSpec {
                column: "y".into(),
                positive: vec!["1".into()],
                threshold: Some(1.0),
            },
            dense: vec![],
            sparse: vec![],
        };
        assert!(s.validate().is_err());
        s.label.threshold = None;
        s.validate().unwrap();
        s.delimiter = 'é';
        assert!(s.validate().is_err());
        s.delimiter = ',';
        s.sparse = vec![SparseColumn {
            column: "a".into(),
            rows: Some(0),
            separator: None,
            name: None,
        }];
        assert!(s.validate().is_err());
    }
}
