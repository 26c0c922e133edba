//! Writing output files without ever leaving a half-written file or destroying an input:
//! every output is written under a temporary name beside it and renamed into place, and
//! an output that is one of the command's inputs (the same file, also through a link)
//! is refused before anything is written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `<path><suffix>` beside `path` (`out.bin` and `.tmp` give `out.bin.tmp`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// Writes `bytes` to `path` atomically: into a temporary file beside it, flushed to
/// disk, then renamed over `path`. On failure the temporary file is removed and `path`
/// is as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // With this process's id, so that two processes writing one output do not share it.
    let tmp = sibling(path, &format!(".tmp.{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        // Best effort: the error that matters is the write's.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether `a` and `b` name the same existing file (through links, `..` or a
/// different spelling). False when either does not exist.
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
    }
}

/// The first of `inputs` that `output` would overwrite, if any.
pub fn clobbered_input<'a>(output: &Path, inputs: &[&'a Path]) -> Option<&'a Path> {
    inputs.iter().copied().find(|i| same_file(output, i))
}

/// Bytes free to an unprivileged writer on the file system holding `dir`, where the
/// system says.
pub fn free_disk_bytes(dir: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs fills the zeroed struct from a NUL-terminated path it only reads.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        (st.f_bavail as u64).checked_mul(st.f_frsize as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("towerrec-fsio-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temporaries() {
        let d = scratch("atomic");
        let p = d.join("out.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // A directory in the way: the write fails and nothing is left behind.
        let blocked = d.join("dir");
        std::fs::create_dir(&blocked).unwrap();
        assert!(write_atomic(&blocked, b"x").is_err());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn same_file_sees_through_links_and_spellings() {
        let d = scratch("same");
        let a = d.join("a.txt");
        std::fs::write(&a, "x").unwrap();
        let b = d.join("b.txt");
        std::fs::write(&b, "x").unwrap();
        assert!(same_file(&a, &d.join(".").join("a.txt")));
        assert!(!same_file(&a, &b));
        assert!(!same_file(&a, &d.join("missing")));
        #[cfg(unix)]
        {
            let sym = d.join("sym");
            std::os::unix::fs::symlink(&a, &sym).unwrap();
            let hard = d.join("hard");
            std::fs::hard_link(&a, &hard).unwrap();
            assert!(same_file(&sym, &a));
            assert!(same_file(&hard, &a));
            assert_eq!(clobbered_input(&hard, &[&b, &a]), Some(a.as_path()));
        }
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn free_disk_space_is_read() {
        let free = free_disk_bytes(&std::env::temp_dir()).unwrap();
        assert!(free > 0);
        assert_eq!(free_disk_bytes(Path::new("/no/such/dir")), None);
    }
}
