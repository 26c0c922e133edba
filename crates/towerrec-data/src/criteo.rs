//! Streaming reader of the Criteo Kaggle / Terabyte click logs.
//!
//! Each line has 40 tab-separated fields: a 0/1 label, 13 integer counts (I1..I13) and
//! 26 categorical ids written as hex strings (C1..C26). Any field may be empty.
//!
//! - Dense: empty → 0; then `ln(1 + max(x, 0))`, the transform of the DLRM reference,
//!   which tames the heavy-tailed counts (a few fields hold small negatives, clamped).
//! - Sparse: the hex string parsed as a u64 (empty → 0), its key, then `% rows` of its
//!   table, or another encoding ([`crate::encode`]).
//!
//! The reader holds one line at a time, so memory stays constant on the 1 TB data set.
//! A line of only spaces is blank and skipped; a line with tabs is a row (of empty
//! fields, which is malformed: the label cannot be empty). See [`crate::lines`] for
//! blank and over-long lines.

use crate::encode::{hashing, FeatureIds};
use crate::error::{quote_found, Error, Result};
use crate::lines::Lines;
use crate::record::{BadRows, Record, RecordStream, Schema, SparseFeature};
use crate::text::{RowCursor, RowSelect};
use std::io::BufRead;
use std::path::Path;

/// Number of dense (integer) fields.
pub const NUM_DENSE: usize = 13;
/// Number of categorical fields.
pub const NUM_SPARSE: usize = 26;
/// Fields per line: label, dense, categorical.
pub const NUM_FIELDS: usize = 1 + NUM_DENSE + NUM_SPARSE;

/// The Criteo schema: `I1..I13`, `C1..C26` with `table_rows` rows each (26 entries, or
/// one entry shared by every table).
pub fn criteo_schema(table_rows: &[u64]) -> Result<Schema> {
    let rows: Vec<u64> = match table_rows.len() {
        1 => vec![table_rows[0]; NUM_SPARSE],
        NUM_SPARSE => table_rows.to_vec(),
        n => {
            return Err(Error::Config(format!(
                "data.table_rows: needs 1 entry (shared by all tables) or {NUM_SPARSE}, got {n}"
            )))
        }
    };
    if let Some(i) = rows.iter().position(|&r| r == 0) {
        return Err(Error::Config(format!(
            "data.table_rows: table C{} has 0 rows; every table needs at least 1",
            i + 1
        )));
    }
    Ok(Schema {
        dense: (1..=NUM_DENSE).map(|i| format!("I{i}")).collect(),
        sparse: rows
            .into_iter()
            .enumerate()
            .map(|(i, rows)| SparseFeature {
                name: format!("C{}", i + 1),
                rows,
            })
            .collect(),
    })
}

/// Name of field `i` (0-based) in error messages: `label`, `I1`.., `C1`...
fn field_name(i: usize) -> String {
    match i {
        0 => "label".into(),
        i if i <= NUM_DENSE => format!("I{i}"),
        i => format!("C{}", i - NUM_DENSE),
    }
}

fn field_label(i: usize) -> String {
    format!("field {i} ({})", field_name(i))
}

/// Reads Criteo TSV records one line at a time.
pub struct CriteoReader {
    rows: RowCursor,
    schema: Schema,
    /// Per categorical: its key (the hex id) → its row.
    ids: Vec<FeatureIds>,
}

impl CriteoReader {
    /// Opens a Criteo TSV file. `table_rows`: 26 entries, or 1 shared by all tables.
    pub fn open(path: &Path, table_rows: &[u64], bad_rows: BadRows) -> Result<Self> {
        let schema = criteo_schema(table_rows)?;
        Ok(Self {
            rows: RowCursor::new(Lines::open(path, b'\t')?, bad_rows),
            ids: hashing(&schema),
            schema,
        })
    }

    /// Reads from any buffered reader; `name` is the file name shown in errors.
    pub fn from_reader(
        reader: impl BufRead + Send + 'static,
        name: &Path,
        table_rows: &[u64],
        bad_rows: BadRows,
    ) -> Result<Self> {
        let schema = criteo_schema(table_rows)?;
        Ok(Self {
            rows: RowCursor::new(Lines::new(Box::new(reader), name, b'\t'), bad_rows),
            ids: hashing(&schema),
            schema,
        })
    }

    /// Yields only the rows `select` picks (a train or eval split).
    pub fn with_rows(mut self, select: RowSelect) -> Self {
        self.rows.set_select(select);
        self
    }

    /// Maps each categorical's keys with `ids` (26 entries) instead of hashing into
    /// `table_rows`; the schema's table sizes follow.
    pub fn with_ids(mut self, ids: Vec<FeatureIds>) -> Result<Self> {
        if ids.len() != NUM_SPARSE {
            return Err(Error::Config(format!(
                "the Criteo format has {NUM_SPARSE} categoricals, got {} encodings",
                ids.len()
            )));
        }
        for (f, e) in self.schema.sparse.iter_mut().zip(&ids) {
            f.rows = e.rows();
        }
        self.ids = ids;
        Ok(self)
    }
}

/// Parses one line into a record.
fn parse_line(lines: &Lines, ids: &[FeatureIds]) -> Result<Record> {
    let line = &lines.buf[..];
    let n = line.split(|&b| b == b'\t').count();
    if n != NUM_FIELDS {
        return Err(lines.error(
            "row",
            format!("{NUM_FIELDS} tab-separated fields"),
            format!("{n} fields"),
        ));
    }
    let mut record = Record {
        label: 0.0,
        dense: Vec::with_capacity(NUM_DENSE),
        sparse: Vec::with_capacity(NUM_SPARSE),
    };
    for (i, field) in line.split(|&b| b == b'\t').enumerate() {
        match i {
            0 => {
                record.label = match field {
                    b"0" => 0.0,
                    b"1" => 1.0,
                    _ => return Err(lines.error(field_label(i), "0 or 1", quote_found(field))),
                }
            }
            i if i <= NUM_DENSE => {
                let x = if field.is_empty() {
                    0
                } else {
                    std::str::from_utf8(field)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .ok_or_else(|| {
                            lines.error(field_label(i), "an integer", quote_found(field))
                        })?
                };
                record.dense.push((x.max(0) as f64).ln_1p() as f32);
            }
            i => {
                let key = parse_hex(field)
                    .ok_or_else(|| lines.error(field_label(i), "a hex id", quote_found(field)))?;
                // Bounds: `criteo_schema` checked that every table has at least one row.
                record.sparse.push(vec![ids[i - NUM_DENSE - 1].id(key)]);
            }
        }
    }
    Ok(record)
}

/// Parses a hex id of at most 16 digits; empty → 0. `from_str_radix` alone would also
/// accept a leading `+`, which is not an id.
fn parse_hex(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return Some(0);
    }
    if field.len() > 16 || !field.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let s = std::str::from_utf8(field).ok()?;
    u64::from_str_radix(s, 16).ok()
}

impl RecordStream for CriteoReader {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        let ids = &self.ids;
        self.rows.next(|lines| parse_line(lines, ids))
    }

    fn skipped(&self) -> u64 {
        self.rows.skipped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn line(label: &str, dense: &[&str], sparse: &[&str]) -> String {
        let mut f = vec![label.to_string()];
        f.extend(dense.iter().map(|s| s.to_string()));
        f.extend(sparse.iter().map(|s| s.to_string()));
        f.join("\t")
    }

    fn reader(text: &str, bad: BadRows) -> CriteoReader {
        CriteoReader::from_reader(
            Cursor::new(text.as_bytes().to_vec()),
            Path::new("criteo.txt"),
            &[1000],
            bad,
        )
        .unwrap()
    }

    #[test]
    fn parses_values_with_transform_and_modulo() {
        let mut dense = vec![""; 13];
        dense[0] = "0";
        dense[1] = "-3";
        dense[2] = "9";
        let mut sparse = vec![""; 26];
        sparse[0] = "ff";
        sparse[1] = "68fd1e64";
        let mut r = reader(&line("1", &dense, &sparse), BadRows::Fail);
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.label, 1.0);
        assert_eq!(rec.dense[0], 0.0);
        assert_eq!(rec.dense[1], 0.0);
        assert!((rec.dense[2] - 10f32.ln()).abs() < 1e-6);
        assert_eq!(rec.sparse[0], vec![255]);
        assert_eq!(rec.sparse[1], vec![0x68fd_1e64 % 1000]);
        assert_eq!(rec.sparse[25], vec![0]);
        assert!(r.next_record().unwrap().is_none());
    }

    #[test]
    fn field_names_follow_criteo_convention() {
        assert_eq!(field_label(0), "field 0 (label)");
        assert_eq!(field_label(13), "field 13 (I13)");
        assert_eq!(field_label(15), "field 15 (C2)");
        assert_eq!(field_label(39), "field 39 (C26)");
    }

    #[test]
    fn hex_parsing_rejects_signs_and_overlong() {
        assert_eq!(parse_hex(b"0aF"), Some(0xaf));
        assert_eq!(parse_hex(b"+1"), None);
        assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_hex(b"1ffffffffffffffff"), None);
    }

    #[test]
    fn table_rows_must_be_1_or_26_nonzero() {
        assert!(criteo_schema(&[10, 20]).is_err());
        assert!(criteo_schema(&[0]).is_err());
        let s = criteo_schema(&(1..=26).collect::<Vec<_>>()).unwrap();
        assert_eq!(s.sparse[25].rows, 26);
        assert_eq!(s.dense[12], "I13");
    }
}
