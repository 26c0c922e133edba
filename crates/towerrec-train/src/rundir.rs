//! The run directory, guarded: one run at a time (a lock), never over another run by
//! accident, untouched by a run that fails at start-up, an overwritten run kept until
//! its replacement has finished, and after a resume holding exactly the history up to
//! the checkpoint.
//!
//! - [`RunDir::claim`] takes the directory's lock (an advisory `flock` on
//!   [`LOCK_FILE`], released by the kernel when the process ends, however it ends) and,
//!   for a new run, refuses a directory that holds another run unless asked to
//!   overwrite it. It first finishes what a stopped `--overwrite` left ([`recover`]).
//! - [`begin`] is called once start-up has succeeded (model built, checkpoint applied,
//!   data opened): only then does a new run move what an overwritten run left into
//!   [`REPLACED_DIR`] and write its `config.toml`, and a resumed run cut
//!   `metrics.jsonl` back to the checkpoint's step.
//! - [`end`]: a new run that finished removes the replaced run's files; one that failed
//!   removes its own and puts them back. A run killed in between leaves
//!   [`REPLACED_DIR`], and the next command in the directory restores the replaced run.
//!
//! [`owner`] says which files of a run directory each command writes there
//! (docs/RELIABILITY.md, "Inputs and outputs").

use crate::checkpoint::CHECKPOINT_FILE;
use crate::config::Config;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file inside a run directory.
pub const LOCK_FILE: &str = ".towerrec.lock";
/// The metrics log inside a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The summary a finished run writes.
pub const SUMMARY_FILE: &str = "summary.json";
/// The resolved config a run writes.
pub const CONFIG_FILE: &str = "config.toml";
/// The run's report (`towerrec report`, which `train` also runs at its end).
pub const REPORT_FILE: &str = "report.html";
/// Where a run started with `--overwrite` keeps the files of the run it replaces until
/// it has finished.
pub const REPLACED_DIR: &str = ".towerrec-replaced";
/// The list, inside [`REPLACED_DIR`], of the files being moved there (written first).
const MANIFEST: &str = "MOVED";

/// `partition`'s default outputs beside a run's checkpoint.
const PARTITION_FILES: [&str; 3] = [
    "partition.json",
    "partition.interaction.svg",
    "partition.embedding.svg",
];

/// The command that writes the file `name` of a run directory (`"train"`,
/// `"partition"`), or None for a name that is not one of a run's files. Only that
/// command may write it there.
pub fn owner(name: &str) -> Option<&'static str> {
    let replan = name
        .strip_prefix("replan-step-")
        .and_then(|r| r.strip_suffix(".json"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if RUN_FILES.contains(&name) || name == LOCK_FILE || name == REPLACED_DIR || replan {
        Some("train")
    } else if PARTITION_FILES.contains(&name) {
        Some("partition")
    } else if name == REPORT_FILE {
        Some("report")
    } else {
        None
    }
}

/// Whether `dir` holds a run (any of its files, or its lock).
pub fn is_run_dir(dir: &Path) -> bool {
    !run_files(dir).is_empty() || dir.join(LOCK_FILE).exists() || dir.join(REPLACED_DIR).exists()
}

/// Whether a new run (which moves an overwritten run's files aside) replaces the file
/// `name` of its directory: every file of a run.
pub fn new_run_replaces(name: &str) -> bool {
    owner(name).is_some()
}

/// Whether a resumed run rewrites the file `name` of its directory: its checkpoint,
/// metrics, summary, report and lock (its plans and config stay).
pub fn resume_rewrites(name: &str) -> bool {
    [
        CHECKPOINT_FILE,
        METRICS_FILE,
        SUMMARY_FILE,
        REPORT_FILE,
        LOCK_FILE,
    ]
    .contains(&name)
}

/// The files that make a directory a run's.
const RUN_FILES: [&str; 4] = [CHECKPOINT_FILE, METRICS_FILE, SUMMARY_FILE, CONFIG_FILE];

/// How a run uses its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A new run; `overwrite` allows replacing another run's files.
    New { overwrite: bool },
    /// Continuing the run whose checkpoint is there.
    Resume,
}

/// A run directory with its lock held; dropping it releases the lock, and removes the
/// directory again if the claim created it and nothing but the lock was written.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    lock: Option<File>,
    created: bool,
    /// What [`recover`] restored when the directory was claimed, to say.
    recovered: Option<String>,
}

impl Drop for RunDir {
    fn drop(&mut self) {
        drop(self.lock.take());
        if !self.created {
            return;
        }
        let only_lock = std::fs::read_dir(&self.path).is_ok_and(|entries| {
            entries
                .filter_map(|e| e.ok())
                .all(|e| e.file_name() == LOCK_FILE)
        });
        if only_lock {
            // Best effort: a leftover empty directory is harmless.
            let _ = std::fs::remove_file(self.path.join(LOCK_FILE));
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// The run files `dir` holds.
pub fn run_files(dir: &Path) -> Vec<&'static str> {
    RUN_FILES
        .into_iter()
        .filter(|f| dir.join(f).exists())
        .collect()
}

/// Refuses a new run in `dir` where it holds another run and `overwrite` is off.
pub fn check_new_run(dir: &Path, overwrite: bool) -> Result<()> {
    let found = run_files(dir);
    if found.is_empty() || overwrite {
        return Ok(());
    }
    Err(Error::RunDir {
        path: dir.to_path_buf(),
        message: format!(
            "holds another run ({}); continue it with --resume {}, replace it with \
             --overwrite, or choose another --out",
            found.join(", "),
            dir.display()
        ),
    })
}

impl RunDir {
    /// Claims `path` for a run: creates it if needed, takes its lock (refused while
    /// another process holds it) and checks it against `claim`.
    pub fn claim(path: &Path, claim: Claim) -> Result<Self> {
        let dir_error = |message: String| Error::RunDir {
            path: path.to_path_buf(),
            message,
        };
        if path.exists() && !path.is_dir() {
            return Err(dir_error("is not a directory".into()));
        }
        if claim == Claim::Resume && !path.is_dir() {
            return Err(dir_error("no such run directory".into()));
        }
        let created = !path.exists();
        std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
        let lock_path = path.join(LOCK_FILE);
        let mut lock = open_lock(path)?;
        let mut dir = Self {
            path: path.to_path_buf(),
            lock: None,
            created,
            recovered: None,
        };
        if !try_lock(&lock) {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            return Err(dir_error(format!(
                "another towerrec run is using it ({}); wait for it to end or choose another --out",
                match holder.trim() {
                    "" => "process unknown".to_string(),
                    pid => format!("process {pid}"),
                }
            )));
        }
        // Who holds it, for the message above; the lock is the flock, not this text.
        let _ = lock.set_len(0);
        let _ = writeln!(lock, "{}", std::process::id());
        dir.lock = Some(lock);
        dir.recovered = restore_replaced(path)?;
        if claim == Claim::Resume && !path.join(CHECKPOINT_FILE).exists() {
            return Err(dir_error(format!(
                "holds no {CHECKPOINT_FILE} to resume from"
            )));
        }
        if let Claim::New { overwrite } = claim {
            check_new_run(path, overwrite)?;
        }
        Ok(dir)
    }

    /// What the claim restored of a run that a stopped `--overwrite` was replacing, in
    /// words, if it restored anything.
    pub fn recovered(&self) -> Option<&str> {
        self.recovered.as_deref()
    }
}

/// Finishes, in a directory no run holds, what a run started with `--overwrite` and
/// stopped before its end left there: restores the run it was replacing. Returns what
/// was done, in words. Does nothing while a run holds the directory's lock, or where
/// the directory does not exist.
pub fn recover(dir: &Path) -> Result<Option<String>> {
    if !dir.join(REPLACED_DIR).is_dir() {
        return Ok(None);
    }
    let lock = open_lock(dir)?;
    if !try_lock(&lock) {
        return Ok(None);
    }
    restore_replaced(dir)
}

/// The lock file of the run directory `dir`, opened (made if absent), not yet locked.
fn open_lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))
}

/// The names listed in a manifest.
fn manifest_names(replaced: &Path) -> Result<Vec<String>> {
    let path = replaced.join(MANIFEST);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.lines().map(str::to_string).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Removes a file or a directory tree; absent is fine.
fn remove_any(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.map_err(|e| Error::io(path, e))
}

/// With the lock held: where [`REPLACED_DIR`] exists, a run that was replacing the
/// directory's run failed or was stopped. Its files go (every run file of the
/// directory that is not the replaced run's and not yet moved), the replaced run's
/// files come back, and [`REPLACED_DIR`] goes. Each step can be repeated, so a restore
/// that is itself stopped is finished by the next one.
fn restore_replaced(dir: &Path) -> Result<Option<String>> {
    let replaced = dir.join(REPLACED_DIR);
    if !replaced.is_dir() {
        return Ok(None);
    }
    let listed = manifest_names(&replaced)?;
    // A listed name not yet moved is the replaced run's own file: it stays.
    let kept = |name: &str| listed.iter().any(|l| l == name) && !replaced.join(name).exists();
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
    {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // The failed run's files, and the temporaries of its writes cut short.
        let cut_short = towerrec_core::fsio::temporary_of(name)
            .is_some_and(|(of, pid)| moves_aside(of) && !towerrec_core::fsio::process_running(pid));
        if !(moves_aside(name) || cut_short) || kept(name) {
            continue;
        }
        remove_any(&entry.path())?;
        removed.push(name.to_string());
    }
    let mut restored = Vec::new();
    for name in &listed {
        let from = replaced.join(name);
        if from.exists() {
            let to = dir.join(name);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
            restored.push(name.clone());
        }
    }
    remove_any(&replaced)?;
    removed.sort();
    Ok(Some(format!(
        "run directory {}: a run started there with --overwrite did not finish; its files \
         were removed ({}) and the run it was replacing is restored ({})",
        dir.display(),
        if removed.is_empty() {
            "none".into()
        } else {
            removed.join(", ")
        },
        if restored.is_empty() {
            "none".into()
        } else {
            restored.join(", ")
        }
    )))
}

/// Whether `--overwrite` moves the file `name` of a run directory aside: every file of
/// a run but its lock and the place it moves them to.
fn moves_aside(name: &str) -> bool {
    owner(name).is_some() && ![LOCK_FILE, REPLACED_DIR].contains(&name)
}

/// Moves every file of an overwritten run in `dir` (all that [`owner`] knows but the
/// lock) into [`REPLACED_DIR`], listing them there first.
fn move_replaced_aside(dir: &Path) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| moves_aside(n))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let replaced = dir.join(REPLACED_DIR);
    std::fs::create_dir(&replaced).map_err(|e| Error::io(&replaced, e))?;
    let manifest = replaced.join(MANIFEST);
    towerrec_core::fsio::write_atomic(&manifest, (names.join("\n") + "\n").as_bytes())
        .map_err(|e| Error::io(&manifest, e))?;
    for name in &names {
        let to = replaced.join(name);
        std::fs::rename(dir.join(name), &to).map_err(|e| Error::io(&to, e))?;
    }
    Ok(())
}

/// Ends a run in `dir`: where it replaced another run (`--overwrite`), a finished run
/// (`ok`) removes the replaced run's files; a failed one removes its own files and
/// restores them. Returns what a restore did, in words.
pub fn end(dir: &Path, ok: bool) -> Result<Option<String>> {
    if ok {
        remove_any(&dir.join(REPLACED_DIR))?;
        Ok(None)
    } else {
        restore_replaced(dir)
    }
}

/// Takes an exclusive advisory lock on `file` without waiting; false if another open
/// file description holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> bool {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor this File owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(not(unix))]
fn try_lock(_: &File) -> bool {
    true
}

/// Makes `dir` this run's once start-up has succeeded. A new run (`resumed_at` None)
/// moves an overwritten run's files into [`REPLACED_DIR`] (see [`end`]) and writes its
/// config; a resumed one keeps the metrics lines up to its checkpoint's step and drops
/// a summary that no longer describes the run.
pub fn begin(dir: &Path, cfg: &Config, resumed_at: Option<u64>) -> Result<()> {
    let remove = |name: &str| -> Result<()> {
        let p = dir.join(name);
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&p, e)),
            _ => Ok(()),
        }
    };
    match resumed_at {
        None => {
            move_replaced_aside(dir)?;
            let p = dir.join(CONFIG_FILE);
            towerrec_core::fsio::write_atomic(&p, cfg.to_toml().as_bytes())
                .map_err(|e| Error::io(&p, e))
        }
        Some(step) => {
            remove(SUMMARY_FILE)?;
            cut_metrics(&dir.join(METRICS_FILE), step)
        }
    }
}

/// Appends a failure record, `{"failed": why}`, to the metrics log in `dir`, so that the
/// run's files say why it stopped (`towerrec report` shows it; docs/REPORT.md). It has
/// no `step`, so a resumed run's [`cut_metrics`] drops it.
pub fn log_failure(dir: &Path, why: &str) -> Result<()> {
    let path = dir.join(METRICS_FILE);
    let line = serde_json::json!({ "failed": why }).to_string();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    // A torn last line (a killed writer) must not swallow the record.
    let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
    let mut sep = "";
    if len > 0 {
        use std::io::{Read, Seek, SeekFrom};
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))
            .and_then(|_| file.read_exact(&mut last))
            .map_err(|e| Error::io(&path, e))?;
        if last[0] != b'\n' {
            sep = "\n";
        }
    }
    writeln!(file, "{sep}{line}")
        .and_then(|_| file.sync_data())
        .map_err(|e| Error::io(&path, e))
}

/// Keeps the lines of a metrics log whose `step` is at most `step` (what the checkpoint
/// of that step had seen); drops the rest, and a torn last line, atomically.
pub fn cut_metrics(path: &Path, step: u64) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let kept: String = text
        .lines()
        .filter(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("step").and_then(|s| s.as_u64()))
                .is_some_and(|s| s <= step)
        })
        .map(|line| format!("{line}\n"))
        .collect();
    if kept.len() == text.len() {
        return Ok(());
    }
    towerrec_core::fsio::write_atomic(path, kept.as_bytes()).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("towerrec-rundir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_directory_is_claimed_once_and_another_run_is_refused() {
        let d = scratch("claim");
        std::fs::create_dir_all(&d).unwrap();
        let first = RunDir::claim(&d, Claim::New { overwrite: false }).unwrap();
        let e = RunDir::claim(&d, Claim::New { overwrite: true }).unwrap_err();
        assert!(
            e.to_string().contains("another towerrec run is using it"),
            "{e}"
        );
        drop(first);
        std::fs::write(d.join(METRICS_FILE), "{\"step\":1}\n").unwrap();
        let e = RunDir::claim(&d, Claim::New { overwrite: false }).unwrap_err();
        assert!(
            e.to_string().contains("holds another run (metrics.jsonl)"),
            "{e}"
        );
        assert!(RunDir::claim(&d, Claim::New { overwrite: true }).is_ok());
        let e = RunDir::claim(&d, Claim::Resume).unwrap_err();
        assert!(e.to_string().contains("no checkpoint.safetensors"), "{e}");
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_directory_the_claim_created_goes_when_nothing_was_written() {
        let d = scratch("created");
        drop(RunDir::claim(&d, Claim::New { overwrite: false }).unwrap());
        assert!(!d.exists());
        let kept = RunDir::claim(&d, Claim::New { overwrite: false }).unwrap();
        std::fs::write(d.join(METRICS_FILE), "").unwrap();
        drop(kept);
        assert!(d.join(METRICS_FILE).exists());
        std::fs::remove_dir_all(d).ok();
    }

    /// The files of `d`, by name, with their text (the lock aside).
    fn files(d: &Path) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name() != LOCK_FILE)
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap_or_else(|_| "<dir>".into());
                (e.file_name().to_string_lossy().into_owned(), text)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn an_overwritten_run_comes_back_however_far_its_replacement_got() {
        let d = scratch("restore");
        std::fs::create_dir_all(&d).unwrap();
        let old = [
            (CHECKPOINT_FILE, "old checkpoint"),
            (METRICS_FILE, "old metrics"),
            (SUMMARY_FILE, "old summary"),
        ];
        let put = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();
        for (n, t) in old {
            put(n, t);
        }
        let before = files(&d);
        // Stopped while moving aside: two of three moved, nothing new written yet.
        move_replaced_aside(&d).unwrap();
        std::fs::rename(
            d.join(REPLACED_DIR).join(METRICS_FILE),
            d.join(METRICS_FILE),
        )
        .unwrap();
        let note = recover(&d).unwrap().unwrap();
        assert!(note.contains("is restored"), "{note}");
        assert_eq!(files(&d), before);
        // Stopped mid-run: a new checkpoint, config and a cut-short write.
        move_replaced_aside(&d).unwrap();
        put(CHECKPOINT_FILE, "new checkpoint");
        put(CONFIG_FILE, "new config");
        put("checkpoint.safetensors.tmp.2000000000", "half");
        put("notes.txt", "the user's");
        let note = recover(&d).unwrap().unwrap();
        assert!(
            note.contains("checkpoint.safetensors.tmp.2000000000"),
            "{note}"
        );
        let mut expected = before.clone();
        expected.push(("notes.txt".into(), "the user's".into()));
        expected.sort();
        assert_eq!(files(&d), expected);
        assert_eq!(recover(&d).unwrap(), None);
        // A replacement that finished: the old files go.
        move_replaced_aside(&d).unwrap();
        put(CHECKPOINT_FILE, "new checkpoint");
        end(&d, true).unwrap();
        assert_eq!(
            files(&d),
            vec![
                (CHECKPOINT_FILE.to_string(), "new checkpoint".to_string()),
                ("notes.txt".into(), "the user's".into())
            ]
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn metrics_are_cut_back_to_the_checkpoint_step() {
        let d = scratch("cut");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(METRICS_FILE);
        std::fs::write(
            &p,
            "{\"step\":10,\"loss\":1}\n{\"step\":20,\"loss\":1}\n{\"step\":20,\"split\":\"eval\"}\n{\"step\":30,\"loss\":1}\n{\"step\":4",
        )
        .unwrap();
        cut_metrics(&p, 20).unwrap();
        let kept = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            kept,
            "{\"step\":10,\"loss\":1}\n{\"step\":20,\"loss\":1}\n{\"step\":20,\"split\":\"eval\"}\n"
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_failure_is_logged_after_a_torn_line_and_a_resume_drops_it() {
        let d = scratch("failure");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(METRICS_FILE);
        std::fs::write(&p, "{\"step\":10,\"loss\":1}\n{\"step\":2").unwrap();
        log_failure(&d, "step 12: \"loss\" is NaN").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["failed"], "step 12: \"loss\" is NaN");
        assert_eq!(text.lines().count(), 3, "{text}");
        cut_metrics(&p, 10).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"step\":10,\"loss\":1}\n"
        );
        std::fs::remove_dir_all(d).ok();
    }
}
