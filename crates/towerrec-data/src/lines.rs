//! Lines of a text data file, read as bytes with their 1-based line numbers, with a
//! bound on how much of one line is ever held in memory.
//!
//! - **Over-long lines.** A line longer than [`MAX_LINE_BYTES`] is a malformed row
//!   (an [`Error::Parse`] at its line): at most that many bytes of it are buffered, so a
//!   file with no line breaks (`/dev/zero`, a binary blob) cannot exhaust memory. Under
//!   `bad_rows = "fail"` the error comes as soon as the bound is passed. Under `"skip"`
//!   the rest of the line is read and discarded without buffering, up to
//!   [`MAX_SKIP_BYTES`]; a line that has not ended by then is not a row of a text file
//!   at all, and reading stops with an [`Error::Format`] that skipping does not pass
//!   (an endless stream such as `/dev/zero` would otherwise be read forever).
//! - **Blank lines** are skipped and are not rows: lines that are empty or hold only
//!   spaces, tabs and carriage returns, unless one of those is the file's field
//!   delimiter. A line of tabs in a tab-separated file (Criteo) is a row of empty
//!   fields, which the parser reports as malformed (Criteo's label cannot be empty);
//!   a line of spaces there carries nothing and is blank. The delimiter decides because
//!   only it makes fields: trimmed whitespace is no value in any reader.
//!
//! Lines are bytes, not `String`s, so that invalid UTF-8 becomes a parse error at the
//! field it occurs in rather than an I/O error for the whole file.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind};
use std::path::{Path, PathBuf};

/// The longest line (without its `\n`) a text reader accepts: 1 MiB, thousands of
/// times a real row (a Criteo row is about 200 bytes).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How much of an over-long line `bad_rows = "skip"` reads past [`MAX_LINE_BYTES`] in
/// search of its end before giving up on the file: 1 GiB.
pub const MAX_SKIP_BYTES: u64 = 1 << 30;

/// Buffered lines of a text file, with 1-based line numbers.
pub(crate) struct Lines {
    reader: Box<dyn BufRead + Send>,
    /// The file name as shown in errors.
    pub name: String,
    path: PathBuf,
    /// The field delimiter, which a blank line must not contain.
    delimiter: u8,
    /// The current line, without its line terminator; only its first
    /// `MAX_LINE_BYTES + 1` bytes when `too_long`.
    pub buf: Vec<u8>,
    /// 1-based number of the current line.
    pub line_no: u64,
    /// The current line is longer than [`MAX_LINE_BYTES`]; its rest is still unread.
    pub too_long: bool,
}

impl Lines {
    /// Opens `path` for reading (refusing what is no data file: [`crate::datafile`]);
    /// `delimiter` separates fields.
    pub fn open(path: &Path, delimiter: u8) -> Result<Self> {
        Ok(Self::from_file(
            crate::datafile::open(path)?,
            path,
            delimiter,
        ))
    }

    /// Reads the open `file` from where it stands, naming `path` in errors.
    pub fn from_file(file: File, path: &Path, delimiter: u8) -> Self {
        Self::new(
            Box::new(BufReader::with_capacity(1 << 16, file)),
            path,
            delimiter,
        )
    }

    /// Reads from `reader`, naming `path` in errors.
    pub fn new(reader: Box<dyn BufRead + Send>, path: &Path, delimiter: u8) -> Self {
        Self {
            reader,
            name: path.display().to_string(),
            path: path.to_path_buf(),
            delimiter,
            buf: Vec::new(),
            line_no: 0,
            too_long: false,
        }
    }

    /// Advances to the next non-blank line (in `self.buf`); false at the end of the file.
    /// An over-long line is returned with `too_long` set (see the module doc).
    pub fn next_line(&mut self) -> Result<bool> {
        loop {
            if self.too_long {
                self.discard_rest()?;
            }
            self.buf.clear();
            let (n, newline) = read_bounded(&mut *self.reader, &mut self.buf, MAX_LINE_BYTES + 1)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                return Ok(false);
            }
            self.line_no += 1;
            if !newline && self.buf.len() > MAX_LINE_BYTES {
                self.too_long = true;
                return Ok(true);
            }
            // Windows line endings.
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            if !is_blank(&self.buf, self.delimiter) {
                return Ok(true);
            }
        }
    }

    /// Reads past the rest of the over-long current line.
    fn discard_rest(&mut self) -> Result<()> {
        let mut skipped = 0u64;
        loop {
            let avail = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(&self.path, e)),
            };
            if avail.is_empty() {
                break;
            }
            let (n, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            self.reader.consume(n);
            if done {
                break;
            }
            skipped += n as u64;
            if skipped > MAX_SKIP_BYTES {
                return Err(Error::Format {
                    file: self.name.clone(),
                    message: format!(
                        "line {} runs on for more than {} bytes without a line break; \
                         this is not a line-oriented text file",
                        self.line_no,
                        MAX_SKIP_BYTES + MAX_LINE_BYTES as u64
                    ),
                });
            }
        }
        self.too_long = false;
        Ok(())
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

    /// The error for an over-long current line, as its `field` ("row" or "header").
    pub fn too_long_error(&self, field: &str) -> Error {
        self.error(
            field,
            format!("a line of at most {MAX_LINE_BYTES} bytes"),
            format!("a line of more than {MAX_LINE_BYTES} bytes"),
        )
    }
}

/// Whether a line holds nothing but spaces, tabs and carriage returns, none of them the
/// delimiter.
fn is_blank(line: &[u8], delimiter: u8) -> bool {
    line.iter()
        .all(|&b| matches!(b, b' ' | b'\t' | b'\r') && b != delimiter)
}

/// Appends the next line (without its `\n`) to `buf`, stopping once `buf` holds `limit`
/// bytes. Returns the bytes consumed (0 at the end of input) and whether the line's `\n`
/// was reached.
fn read_bounded(
    reader: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<(usize, bool)> {
    let mut consumed = 0;
    loop {
        // Checked before reading more, so that a cut line never waits on a pipe.
        if buf.len() >= limit {
            return Ok((consumed, false));
        }
        let avail = match reader.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok((consumed, false));
        }
        let window = &avail[..avail.len().min(limit - buf.len())];
        if let Some(i) = memchr::memchr(b'\n', window) {
            buf.extend_from_slice(&window[..i]);
            reader.consume(i + 1);
            return Ok((consumed + i + 1, true));
        }
        let n = window.len();
        buf.extend_from_slice(window);
        reader.consume(n);
        consumed += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Read};

    fn all_lines(data: &[u8], delimiter: u8) -> Vec<(u64, Vec<u8>)> {
        let mut l = Lines::new(
            Box::new(Cursor::new(data.to_vec())),
            Path::new("x"),
            delimiter,
        );
        let mut got = Vec::new();
        while l.next_line().unwrap() {
            got.push((l.line_no, l.buf.clone()));
        }
        got
    }

    #[test]
    fn lines_skip_blank_and_strip_crlf() {
        assert_eq!(
            all_lines(b"a\r\n\nb\n\r\nc", b','),
            vec![(1, b"a".to_vec()), (3, b"b".to_vec()), (5, b"c".to_vec())]
        );
    }

    #[test]
    fn whitespace_lines_are_blank_unless_they_hold_the_delimiter() {
        let text = b"a\n  \t \r\n \t\n\t\t\nb\n";
        assert_eq!(
            all_lines(text, b','),
            vec![(1, b"a".to_vec()), (5, b"b".to_vec())]
        );
        // Tab-separated: a line with a tab is a row of empty fields, spaces are blank.
        assert_eq!(
            all_lines(text, b'\t'),
            vec![
                (1, b"a".to_vec()),
                (2, b"  \t ".to_vec()),
                (3, b" \t".to_vec()),
                (4, b"\t\t".to_vec()),
                (5, b"b".to_vec())
            ]
        );
        assert_eq!(all_lines(b"   \r\n", b'\t'), vec![]);
    }

    #[test]
    fn a_line_at_the_bound_is_read_and_one_past_it_is_cut() {
        let mut text = vec![b'x'; MAX_LINE_BYTES];
        text.extend_from_slice(b"\nshort\n");
        text.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES + 1));
        text.extend_from_slice(b"\nlast");
        let mut l = Lines::new(Box::new(Cursor::new(text)), Path::new("x"), b',');
        assert!(l.next_line().unwrap());
        assert_eq!((l.buf.len(), l.too_long), (MAX_LINE_BYTES, false));
        assert!(l.next_line().unwrap());
        assert_eq!(l.buf, b"short");
        assert!(l.next_line().unwrap());
        assert!(l.too_long);
        assert_eq!((l.line_no, l.buf.len()), (3, MAX_LINE_BYTES + 1));
        assert!(l.too_long_error("row").to_string().starts_with("x:3: row:"));
        assert!(l.next_line().unwrap());
        assert_eq!(
            (l.line_no, &l.buf[..], l.too_long),
            (4, &b"last"[..], false)
        );
        assert!(!l.next_line().unwrap());
    }

    #[test]
    fn an_endless_line_is_cut_at_the_bound_and_given_up_on_after_the_skip_limit() {
        let endless = std::io::repeat(0).take(u64::MAX);
        let mut l = Lines::new(
            Box::new(BufReader::with_capacity(1 << 16, endless)),
            Path::new("/dev/zero"),
            b'\t',
        );
        assert!(l.next_line().unwrap());
        assert!(l.too_long);
        assert_eq!(l.buf.len(), MAX_LINE_BYTES + 1);
        let e = l.next_line().unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e}");
        assert!(e.to_string().contains("line 1 runs on"), "{e}");
    }
}
