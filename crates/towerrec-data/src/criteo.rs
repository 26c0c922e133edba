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
//! The reader holds a few blocks of lines at a time, so memory stays bounded on the 1 TB
//! data set.
//! A line of only spaces is blank and skipped; a line with tabs is a row (of empty
//! fields, which is malformed: the label cannot be empty). See [`crate::lines`] for
//! blank and over-long lines.

use crate::block::RecordBlock;
use crate::chunked::{Line, RowParser, TextRows};
use crate::encode::{hashing, FeatureIds};
use crate::error::{quote_found, Error, Result};
use crate::lines::Lines;
use crate::record::{BadRows, Record, Schema, SparseFeature};
use crate::stream::RecordStream;
use crate::text::RowSelect;
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

/// Reads Criteo TSV records, parsed in parallel over blocks of the file and handed out
/// in file order ([`crate::chunked`]).
pub struct CriteoReader {
    rows: TextRows<CriteoParser>,
    schema: Schema,
}

/// Per categorical: its key (the hex id) → its row.
#[derive(Clone)]
struct CriteoParser {
    ids: Vec<FeatureIds>,
}

impl CriteoReader {
    /// Opens a Criteo TSV file. `table_rows`: 26 entries, or 1 shared by all tables.
    pub fn open(path: &Path, table_rows: &[u64], bad_rows: BadRows) -> Result<Self> {
        Self::with_lines(Lines::open(path, b'\t')?, table_rows, bad_rows)
    }

    /// Reads from any buffered reader; `name` is the file name shown in errors.
    pub fn from_reader(
        reader: impl BufRead + Send + 'static,
        name: &Path,
        table_rows: &[u64],
        bad_rows: BadRows,
    ) -> Result<Self> {
        Self::with_lines(
            Lines::new(Box::new(reader), name, b'\t'),
            table_rows,
            bad_rows,
        )
    }

    fn with_lines(lines: Lines, table_rows: &[u64], bad_rows: BadRows) -> Result<Self> {
        let schema = criteo_schema(table_rows)?;
        let parser = CriteoParser {
            ids: hashing(&schema),
        };
        Ok(Self {
            rows: TextRows::new(lines, parser, (NUM_DENSE, NUM_SPARSE), bad_rows),
            schema,
        })
    }

    /// Yields only the rows `select` picks (a train or eval split).
    pub fn with_rows(mut self, select: RowSelect) -> Self {
        self.rows.set_select(select);
        self
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
        self.rows.parser_mut().ids = ids;
        Ok(self)
    }
}

/// `ln(1 + x)` as f32 for the small counts that make up most dense values.
fn ln_1p_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..4096u32).map(|x| f64::from(x).ln_1p() as f32).collect())
}

/// The transformed dense value: `ln(1 + max(x, 0))`.
#[inline]
fn dense_value(x: i64) -> f32 {
    let table = ln_1p_table();
    match usize::try_from(x) {
        Ok(i) if i < table.len() => table[i],
        Ok(_) => (x as f64).ln_1p() as f32,
        Err(_) => 0.0,
    }
}

/// Parses a decimal integer as `str::parse::<i64>` does (an optional sign, then
/// digits); None where that fails. Empty fields are handled by the caller.
#[inline]
fn parse_i64(field: &[u8]) -> Option<i64> {
    let (neg, digits) = match field.first()? {
        b'-' => (true, &field[1..]),
        b'+' => (false, &field[1..]),
        _ => (false, field),
    };
    if digits.is_empty() {
        return None;
    }
    let mut m: u64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        m = m.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    if neg {
        // -(2^63) is the smallest i64.
        (m <= 1 << 63).then(|| (m as i64).wrapping_neg())
    } else {
        i64::try_from(m).ok()
    }
}

impl RowParser for CriteoParser {
    type Scratch = ();

    fn parse(&self, line: &Line<'_>, _: &mut (), out: &mut RecordBlock) -> Result<()> {
        let buf = line.buf;
        // The field ends: each tab, then the line's end.
        let mut ends = [0usize; NUM_FIELDS];
        let mut n = 0;
        for tab in memchr::memchr_iter(b'\t', buf) {
            if n < NUM_FIELDS {
                ends[n] = tab;
            }
            n += 1;
        }
        if n < NUM_FIELDS {
            ends[n] = buf.len();
        }
        n += 1;
        if n != NUM_FIELDS {
            return Err(line.error(
                "row",
                format!("{NUM_FIELDS} tab-separated fields"),
                format!("{n} fields"),
            ));
        }
        let mut next = 0;
        let mut start = 0;
        let mut field = || {
            let f = &buf[start..ends[next]];
            start = ends[next] + 1;
            next += 1;
            f
        };
        let label = field();
        out.labels.push(match label {
            b"0" => 0.0,
            b"1" => 1.0,
            _ => return Err(line.error(field_label(0), "0 or 1", quote_found(label))),
        });
        for i in 1..=NUM_DENSE {
            let f = field();
            let x = if f.is_empty() {
                0
            } else {
                parse_i64(f)
                    .ok_or_else(|| line.error(field_label(i), "an integer", quote_found(f)))?
            };
            out.dense.push(dense_value(x));
        }
        for (k, ids) in self.ids.iter().enumerate() {
            let f = field();
            let key = parse_hex(f).ok_or_else(|| {
                line.error(field_label(1 + NUM_DENSE + k), "a hex id", quote_found(f))
            })?;
            // Bounds: `criteo_schema` checked that every table has at least one row.
            out.ids.push(ids.id(key));
            out.end_feature();
        }
        Ok(())
    }
}

/// Each byte's value as a hex digit, or 0xFF for a byte that is none.
const HEX: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Parses a hex id of at most 16 digits; empty → 0. (A leading `+`, which
/// `from_str_radix` would accept, is not an id.) Branch-free over the digits: a byte
/// that is no digit sets the high bit of `bad`.
#[inline]
fn parse_hex(field: &[u8]) -> Option<u64> {
    if field.len() > 16 {
        return None;
    }
    let mut key = 0u64;
    let mut bad = 0u8;
    for &b in field {
        let d = HEX[usize::from(b)];
        bad |= d;
        key = key << 4 | u64::from(d & 0xF);
    }
    (bad & 0x80 == 0).then_some(key)
}

impl RecordStream for CriteoReader {
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
        assert_eq!(parse_hex(b""), Some(0));
        assert_eq!(parse_hex(b"g"), None);
        for b in 0..=255u8 {
            let s = [b'1', b];
            let want = std::str::from_utf8(&s)
                .ok()
                .filter(|t| t.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|t| u64::from_str_radix(t, 16).ok());
            assert_eq!(parse_hex(&s), want, "{b}");
        }
    }

    #[test]
    fn integers_parse_as_str_parse_does() {
        for s in [
            "0",
            "7",
            "-3",
            "+12",
            "-",
            "+",
            "1a",
            " 1",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999999",
            "--1",
            "0x1",
        ] {
            assert_eq!(parse_i64(s.as_bytes()), s.parse::<i64>().ok(), "{s}");
        }
        for x in [0i64, 1, 4095, 4096, 1 << 40, -5] {
            assert_eq!(dense_value(x), (x.max(0) as f64).ln_1p() as f32);
        }
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
