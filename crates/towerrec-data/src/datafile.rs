//! Opening a data file: what can be read as one is a regular file, `/dev/null` (empty
//! data) and `/dev/zero` (one endless line, a bad row at line 1); anything else a path
//! can name — a named pipe (FIFO), a socket, a directory, another device — is refused
//! at once, by its type, before it is opened (opening a FIFO with no writer would block
//! forever). A reader opens its file once per pass and does all its reading (the
//! binary magic, a split's row count, the rows) through that one handle
//! (docs/RELIABILITY.md, "No data").

use crate::error::{Error, Result};
use std::fs::{File, Metadata};
use std::path::Path;

/// Why the file at `path` cannot be a data file, if it cannot.
fn refusal(path: &Path, meta: &Metadata) -> Option<String> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("is a directory, not a data file".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if kind.is_fifo() {
            return Some(
                "is a named pipe (FIFO): towerrec reads a data file more than once (its \
                 schema, a split's row count, every pass) and has no streaming mode; write \
                 the data to a regular file first"
                    .into(),
            );
        }
        if kind.is_socket() {
            return Some("is a socket, not a data file".into());
        }
        if kind.is_char_device() {
            let same_device = |p: &str| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == meta.rdev())
            };
            if same_device("/dev/null") || same_device("/dev/zero") {
                return None;
            }
            return Some(
                "is a character device; of the devices only /dev/null (empty data) and \
                 /dev/zero are read as data files"
                    .into(),
            );
        }
        if kind.is_block_device() {
            return Some("is a block device, not a data file".into());
        }
    }
    let _ = path;
    Some("is not a regular file".into())
}

/// Checks that `path` names something readable as a data file (see the module doc),
/// without opening it.
pub fn check(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    match refusal(path, &meta) {
        None => Ok(()),
        Some(why) => Err(Error::format(path, why)),
    }
}

/// Opens `path` for reading, once it has passed [`check`].
pub fn open(path: &Path) -> Result<File> {
    check(path)?;
    File::open(path).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_two_devices_are_data_files_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.txt");
        std::fs::write(&file, "1\n").unwrap();
        assert!(open(&file).is_ok());
        let e = check(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        #[cfg(target_os = "linux")]
        {
            assert!(check(Path::new("/dev/null")).is_ok());
            assert!(check(Path::new("/dev/zero")).is_ok());
            let e = check(Path::new("/dev/urandom")).unwrap_err().to_string();
            assert!(e.contains("character device"), "{e}");
            let fifo = dir.path().join("pipe");
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            // Refused by its type: opening it here would block with no writer.
            let e = open(&fifo).unwrap_err().to_string();
            assert!(e.contains("named pipe (FIFO)"), "{e}");
        }
    }
}
