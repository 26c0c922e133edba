//! What the text readers share: reading lines as bytes with their line numbers, and
//! [`RowSelect`], the rule that picks which data rows a stream yields (train/eval splits).
//!
//! Lines are read as bytes, not `String`s, so that invalid UTF-8 becomes a parse error
//! at the field it occurs in rather than an I/O error for the whole file.

use crate::error::{Error, Result};
use crate::hash::{mix2, unit_f64};
use crate::record::BadRows;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::path::Path;

/// Which data rows (0-based, counting every non-blank line after any header, malformed
/// or not) a stream yields. Counting malformed rows keeps a split the same whether bad
/// rows are skipped or not.
#[derive(Debug, Clone, PartialEq)]
pub enum RowSelect {
    /// Every row.
    All,
    /// Rows `start..end`.
    Range(Range<u64>),
    /// Row `i` is in the "inside" part iff `hash(seed, i) < fraction`; `inside` says
    /// which part this stream yields. Streaming and reproducible.
    Hashed {
        seed: u64,
        fraction: f64,
        inside: bool,
    },
}

impl RowSelect {
    /// Whether row `i` is selected.
    pub fn contains(&self, i: u64) -> bool {
        match self {
            RowSelect::All => true,
            RowSelect::Range(r) => r.contains(&i),
            RowSelect::Hashed {
                seed,
                fraction,
                inside,
            } => (unit_f64(mix2(*seed, i)) < *fraction) == *inside,
        }
    }

    /// A row index at and past which nothing is selected, so readers can stop early.
    pub fn end(&self) -> u64 {
        match self {
            RowSelect::Range(r) => r.end,
            RowSelect::All | RowSelect::Hashed { .. } => u64::MAX,
        }
    }
}

/// Buffered lines of a text file, with 1-based line numbers.
pub(crate) struct Lines {
    reader: Box<dyn BufRead + Send>,
    /// The file name as shown in errors.
    pub name: String,
    path: std::path::PathBuf,
    /// The current line, without its line terminator.
    pub buf: Vec<u8>,
    /// 1-based number of the current line.
    pub line_no: u64,
}

impl Lines {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(Self::new(
            Box::new(BufReader::with_capacity(1 << 16, file)),
            path,
        ))
    }

    /// Reads from `reader`, naming `path` in errors.
    pub fn new(reader: Box<dyn BufRead + Send>, path: &Path) -> Self {
        Self {
            reader,
            name: path.display().to_string(),
            path: path.to_path_buf(),
            buf: Vec::new(),
            line_no: 0,
        }
    }

    /// Advances to the next non-blank line (in `self.buf`); false at the end of the file.
    pub fn next_line(&mut self) -> Result<bool> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                return Ok(false);
            }
            self.line_no += 1;
            if self.buf.last() == Some(&b'\n') {
                self.buf.pop();
            }
            // Windows line endings.
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            if !self.buf.is_empty() {
                return Ok(true);
            }
        }
    }

    /// A parse error at the current line.
    pub fn error(
        &self,
        field: impl Into<String>,
        expected: impl Into<String>,
        found: String,
    ) -> Error {
        Error::Parse {
            file: self.name.clone(),
            line: self.line_no,
            field: field.into(),
            expected: expected.into(),
            found,
        }
    }
}

/// A [`Lines`] reader that counts data rows, applies a [`RowSelect`] and the
/// [`BadRows`] policy; the format readers only parse one line at a time.
pub(crate) struct RowCursor {
    pub lines: Lines,
    select: RowSelect,
    bad_rows: BadRows,
    next_row: u64,
    skipped: u64,
}

impl RowCursor {
    pub fn new(lines: Lines, bad_rows: BadRows) -> Self {
        Self {
            lines,
            select: RowSelect::All,
            bad_rows,
            next_row: 0,
            skipped: 0,
        }
    }

    pub fn set_select(&mut self, select: RowSelect) {
        self.select = select;
    }

    /// Rows skipped as malformed so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Parses the next selected row with `parse`; malformed rows are skipped and counted
    /// under [`BadRows::Skip`]. Only [`Error::Parse`] counts as malformed: an I/O error
    /// means the file itself is unreadable, and skipping would silently drop data.
    pub fn next<T>(&mut self, mut parse: impl FnMut(&Lines) -> Result<T>) -> Result<Option<T>> {
        loop {
            if self.next_row >= self.select.end() || !self.lines.next_line()? {
                return Ok(None);
            }
            let row = self.next_row;
            self.next_row += 1;
            if !self.select.contains(row) {
                continue;
            }
            match parse(&self.lines) {
                Ok(t) => return Ok(Some(t)),
                Err(e) if self.bad_rows == BadRows::Skip && e.is_bad_row() => self.skipped += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Number of data rows in a text file: non-blank lines, less one header line if `header`.
pub fn count_rows(path: &Path, header: bool) -> Result<u64> {
    let mut lines = Lines::open(path)?;
    let mut n = 0u64;
    while lines.next_line()? {
        n += 1;
    }
    Ok(if header { n.saturating_sub(1) } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_skip_blank_and_strip_crlf() {
        let data = b"a\r\n\nb\n\r\nc".to_vec();
        let mut l = Lines::new(Box::new(std::io::Cursor::new(data)), Path::new("x"));
        let mut got = Vec::new();
        while l.next_line().unwrap() {
            got.push((l.line_no, l.buf.clone()));
        }
        assert_eq!(
            got,
            vec![(1, b"a".to_vec()), (3, b"b".to_vec()), (5, b"c".to_vec())]
        );
    }

    #[test]
    fn hashed_selection_partitions_rows_by_fraction() {
        let eval = RowSelect::Hashed {
            seed: 3,
            fraction: 0.2,
            inside: true,
        };
        let train = RowSelect::Hashed {
            seed: 3,
            fraction: 0.2,
            inside: false,
        };
        let n = 20_000;
        let e = (0..n).filter(|&i| eval.contains(i)).count();
        assert!((0..n).all(|i| eval.contains(i) != train.contains(i)));
        assert!((3_600..4_400).contains(&e), "{e}");
        assert_eq!(RowSelect::Range(2..5).end(), 5);
        assert!(!RowSelect::Range(2..5).contains(5));
    }
}
