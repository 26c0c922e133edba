//! The error type of towerrec-data.
//!
//! Data files are user input, so every way a file can be wrong maps to a variant that
//! says where (file, line, field) and what was expected, instead of a panic.

use std::path::{Path, PathBuf};

/// Errors raised while reading, converting or generating data.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused a file operation.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        // Not named `source`: the message already includes it, and a chain printer
        // (anyhow's `{:#}`) would print it twice.
        error: std::io::Error,
    },
    /// A text row is malformed. `field` is e.g. `field 15 (C2)` or `row`; `found` is
    /// already quoted where it is a value (`"zz1"`) and plain where it is a count.
    #[error("{file}:{line}: {field}: expected {expected}, found {found}")]
    Parse {
        file: String,
        line: u64,
        field: String,
        expected: String,
        found: String,
    },
    /// A binary file is not in the expected format (bad magic, header, sizes).
    #[error("{file}: {message}")]
    Format { file: String, message: String },
    /// A configuration value is invalid; the message names the key.
    #[error("invalid data configuration: {0}")]
    Config(String),
    /// A conversion was interrupted (SIGINT, SIGTERM); its partial output was removed.
    #[error("{}: interrupted; the partial output was removed", path.display())]
    Interrupted { path: PathBuf },
    /// A core operation (assembling a batch) failed.
    #[error(transparent)]
    Core(#[from] towerrec_core::Error),
}

/// Result alias for towerrec-data.
pub type Result<T> = std::result::Result<T, Error>;

/// Longest excerpt of a bad value quoted in a [`Error::Parse`] message; whole lines of
/// garbage would drown the location.
const MAX_FOUND_CHARS: usize = 40;

impl Error {
    /// Shorthand for an [`Error::Io`] error.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            error: source,
        }
    }

    /// Shorthand for an [`Error::Format`] error about `path`.
    pub fn format(path: &Path, message: impl Into<String>) -> Self {
        Error::Format {
            file: path.display().to_string(),
            message: message.into(),
        }
    }

    /// True for errors that describe one malformed row, which `BadRows::Skip` may skip.
    pub fn is_bad_row(&self) -> bool {
        matches!(self, Error::Parse { .. })
    }
}

/// Quotes a bad value for an error message: lossy UTF-8, at most [`MAX_FOUND_CHARS`]
/// characters, with an ellipsis when cut.
pub(crate) fn quote_found(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(MAX_FOUND_CHARS).collect();
    if chars.next().is_some() {
        format!("{:?}", format!("{head}..."))
    } else {
        format!("{head:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_display_names_file_line_field() {
        let e = Error::Parse {
            file: "criteo.txt".into(),
            line: 17,
            field: "field 15 (C2)".into(),
            expected: "a hex id".into(),
            found: quote_found(b"zz1"),
        };
        assert_eq!(
            e.to_string(),
            r#"criteo.txt:17: field 15 (C2): expected a hex id, found "zz1""#
        );
        assert!(e.is_bad_row());
    }

    #[test]
    fn long_found_values_are_truncated() {
        let long = vec![b'x'; 500];
        let q = quote_found(&long);
        assert!(q.len() < 50, "{q}");
        assert!(q.ends_with("...\""));
        assert_eq!(quote_found(&[0xff, b'a']), "\"\u{fffd}a\"");
    }
}
