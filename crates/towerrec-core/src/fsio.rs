//! Writing output files without ever leaving a half-written file or destroying an input:
//! every output is written under a temporary name beside it (`<name>.tmp.<pid>`) and
//! renamed into place; the temporaries of a process that was killed mid-write are found
//! by [`remove_stale_temporaries`]; [`same_file`] is the identity (device and inode)
//! by which an output is compared with a command's inputs (the rule itself is
//! `towerrec_train::files`; docs/RELIABILITY.md, "Inputs and outputs").

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

/// The temporary name of an output of this process: `<path>.tmp.<pid>`, beside it.
/// [`remove_stale_temporaries`] recognizes it once the process is gone.
pub fn temporary(path: &Path) -> PathBuf {
    sibling(path, &format!("{TEMP_MARK}{}", std::process::id()))
}

/// What every temporary file's name carries before the writer's process id.
const TEMP_MARK: &str = ".tmp.";

/// Writes `bytes` to `path` atomically: into a temporary file beside it, flushed to
/// disk, then renamed over `path`. On failure the temporary file is removed and `path`
/// is as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // With this process's id, so that two processes writing one output do not share it.
    let tmp = temporary(path);
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

/// The file a temporary is of and the process id its name ends with
/// (`out.json.tmp.1234` → `("out.json", 1234)`).
pub fn temporary_of(name: &str) -> Option<(&str, u32)> {
    let at = name.rfind(TEMP_MARK)?;
    let digits = &name[at + TEMP_MARK.len()..];
    if at == 0 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((&name[..at], digits.parse().ok()?))
}

fn temporary_owner(name: &std::ffi::OsStr) -> Option<u32> {
    temporary_of(name.to_str()?).map(|(_, pid)| pid)
}

/// Whether the process `pid` is running on this machine (a process of another user
/// counts; without a way to ask, every process is taken to be running).
pub fn process_running(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            return false;
        }
        // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        alive || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// A temporary file removed by [`remove_stale_temporaries`], and the process that left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleTemporary {
    pub path: PathBuf,
    pub pid: u32,
    pub bytes: u64,
}

/// Removes from `dir` the temporary files of interrupted writes: regular files named
/// `<name>.tmp.<pid>` whose process is no longer running on this machine (a write
/// killed before its rename). Returns what was removed; a file that cannot be removed
/// is left and skipped. A process on another machine sharing the directory is not
/// seen: its temporaries look stale.
pub fn remove_stale_temporaries(dir: &Path) -> Vec<StaleTemporary> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = temporary_owner(&entry.file_name()) else {
            continue;
        };
        // Not through links: only a plain file this naming scheme made.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if pid == me || !meta.is_file() || process_running(pid) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            removed.push(StaleTemporary {
                path: entry.path(),
                pid,
                bytes: meta.len(),
            });
        }
    }
    removed.sort_by(|a, b| a.path.cmp(&b.path));
    removed
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
        }
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn only_the_temporaries_of_ended_processes_are_removed() {
        let d = scratch("stale");
        // A process id that is not running: the largest a pid_t can be is never handed out
        // on Linux (pid_max is at most 2^22).
        let gone = 2_000_000_000u32;
        assert!(!process_running(gone));
        assert!(process_running(std::process::id()));
        let stale = d.join(format!("checkpoint.safetensors.tmp.{gone}"));
        std::fs::write(&stale, b"half a checkpoint").unwrap();
        let mine = temporary(&d.join("plan.json"));
        std::fs::write(&mine, b"in progress").unwrap();
        for keep in ["data.tmp.", "data.tmp.12x", ".tmp.5", "notes.tmp"] {
            std::fs::write(d.join(keep), b"x").unwrap();
        }
        std::fs::create_dir(d.join(format!("dir.tmp.{gone}"))).unwrap();
        let removed = remove_stale_temporaries(&d);
        assert_eq!(
            removed,
            vec![StaleTemporary {
                path: stale.clone(),
                pid: gone,
                bytes: 17
            }]
        );
        assert!(!stale.exists());
        assert!(mine.exists());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 6);
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn free_disk_space_is_read() {
        let free = free_disk_bytes(&std::env::temp_dir()).unwrap();
        assert!(free > 0);
        assert_eq!(free_disk_bytes(Path::new("/no/such/dir")), None);
    }
}
