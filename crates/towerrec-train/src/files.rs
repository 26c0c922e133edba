//! The one rule on a command's files (docs/RELIABILITY.md, "Inputs and outputs"): every
//! command collects the files it reads (configs, plans, profiles, checkpoints, data,
//! hardware files) into [`Files`] and, before it writes anything, refuses
//!
//! - an output that is one of them: the same device and inode, so links and other
//!   spellings of the path are caught;
//! - an output named twice (`--out X --plot X`);
//! - in a run directory, a file of the run that the command does not own
//!   ([`crate::rundir::owner`]); and for `train`, an input that is one of the files its
//!   run directory's run would replace ([`Files::run_dir`]);
//! - a path that is not UTF-8 (configs and checkpoints record paths as text).
//!
//! [`Files::clean`] then removes what interrupted writes left in the directories the
//! command writes into (`*.tmp.<pid>` of processes that are gone).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::rundir;
use std::path::{Path, PathBuf};
use towerrec_core::fsio::{remove_stale_temporaries, same_file};

/// A file the command reads, and what it is, for messages ("the config").
#[derive(Debug, Clone)]
struct Input {
    what: String,
    path: PathBuf,
}

/// The files of one command: what it reads, and what it has been allowed to write.
#[derive(Debug, Clone)]
pub struct Files {
    /// The command, as `towerrec` names it (`"eval"`), for the run directory's rule.
    command: &'static str,
    inputs: Vec<Input>,
    /// Each output with the flag that named it.
    outputs: Vec<(String, PathBuf)>,
    /// Directories written into, whose interrupted writes [`Files::clean`] removes.
    dirs: Vec<PathBuf>,
}

/// The directory a file path is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn not_utf8(what: &str, path: &Path) -> Error {
    Error::Files(format!(
        "{what} {}: the path is not valid UTF-8; towerrec records paths as text in its \
         configs and checkpoints, so rename it (or link to it under a UTF-8 name)",
        path.display()
    ))
}

impl Files {
    /// The files of `command` (as `towerrec` names it: `"train"`, `"eval"`, …).
    pub fn new(command: &'static str) -> Self {
        Self {
            command,
            inputs: Vec::new(),
            outputs: Vec::new(),
            dirs: Vec::new(),
        }
    }

    /// Records a file the command reads; `what` names it in messages ("the plan").
    pub fn input(&mut self, what: impl Into<String>, path: &Path) -> Result<()> {
        let what = what.into();
        if path.to_str().is_none() {
            return Err(not_utf8(&what, path));
        }
        self.inputs.push(Input {
            what,
            path: path.to_path_buf(),
        });
        Ok(())
    }

    /// Records the config file (None: the embedded quickstart), the config's data
    /// files and its vocabulary (its plan is an input only of the commands that read it: `train`).
    pub fn config(&mut self, path: Option<&Path>, cfg: &Config) -> Result<()> {
        if let Some(p) = path {
            self.input("the config", p)?;
        }
        for (role, p) in cfg.data.input_files(&cfg.base_dir) {
            let what = match role {
                "eval" => "the input evaluation data file",
                _ => "the input data file",
            };
            self.input(what, &p)?;
        }
        if let Some(p) = towerrec_data::vocab::config::vocab_path(&cfg.data, &cfg.base_dir) {
            self.input("the vocabulary (data.vocab)", &p)?;
        }
        Ok(())
    }

    /// Checks `path`, named by `flag`, as an output of the command, and records it: not
    /// an input, not another output, not a run's file the command does not own, UTF-8.
    pub fn output(&mut self, flag: &str, path: &Path) -> Result<()> {
        if path.to_str().is_none() {
            return Err(not_utf8(flag, path));
        }
        if let Some(input) = self.inputs.iter().find(|i| same_file(path, &i.path)) {
            return Err(Error::Files(format!(
                "{flag} {} is {} {}: writing it would destroy the input; choose another output",
                path.display(),
                input.what,
                input.path.display()
            )));
        }
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some((other, _)) = self.outputs.iter().find(|(_, o)| {
            same_file(o, path) || std::path::absolute(o).is_ok_and(|o| o == absolute)
        }) {
            return Err(Error::Files(format!(
                "{flag} {} is also the command's {other}: give each output its own path",
                path.display()
            )));
        }
        let dir = parent(path);
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            if let Some(owner) = rundir::owner(name).filter(|o| *o != self.command) {
                if rundir::is_run_dir(dir) {
                    return Err(Error::Files(format!(
                        "{flag} {} is a file of the run in {}, which only `towerrec {owner}` \
                         writes; choose another output",
                        path.display(),
                        dir.display()
                    )));
                }
            }
        }
        self.outputs.push((flag.to_string(), path.to_path_buf()));
        self.dirs.push(dir.to_path_buf());
        Ok(())
    }

    /// Checks the run directory `dir` of `train` (named by `flag`): no input may be a
    /// file there that the run replaces (`replaces` says which names it does: all of a
    /// run's files for a new run, which moves an overwritten run's files aside; the
    /// metrics and summary for a resumed one).
    pub fn run_dir(
        &mut self,
        flag: &str,
        dir: &Path,
        replaces: impl Fn(&str) -> bool,
    ) -> Result<()> {
        if dir.to_str().is_none() {
            return Err(not_utf8(flag, dir));
        }
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str().filter(|n| replaces(n)) else {
                    continue;
                };
                let file = entry.path();
                if let Some(input) = self.inputs.iter().find(|i| same_file(&file, &i.path)) {
                    return Err(Error::Files(format!(
                        "{flag} {}: {} {} is the run's {name} there, which this run would \
                         replace; copy it out of the run directory first, or choose another {flag}",
                        dir.display(),
                        input.what,
                        input.path.display()
                    )));
                }
            }
        }
        self.outputs.push((flag.to_string(), dir.to_path_buf()));
        self.dirs.push(dir.to_path_buf());
        Ok(())
    }

    /// Removes the temporaries that interrupted writes left in the directories the
    /// command writes into; one line for each, to print.
    pub fn clean(&self) -> Vec<String> {
        let mut dirs: Vec<&PathBuf> = self.dirs.iter().collect();
        dirs.sort();
        dirs.dedup();
        dirs.into_iter()
            .flat_map(|d| remove_stale_temporaries(d))
            .map(|t| {
                format!(
                    "removed {} ({} bytes): a temporary file that process {} left when it \
                     was stopped mid-write",
                    t.path.display(),
                    t.bytes,
                    t.pid
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("towerrec-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_through_links() {
        let d = scratch("inputs");
        let cfg = d.join("c.toml");
        std::fs::write(&cfg, "x").unwrap();
        let mut f = Files::new("plan");
        f.input("the config", &cfg).unwrap();
        let e = f.output("--output", &cfg).unwrap_err().to_string();
        assert!(e.contains("--output") && e.contains("is the config"), "{e}");
        #[cfg(unix)]
        {
            let sym = d.join("sym.toml");
            std::os::unix::fs::symlink(&cfg, &sym).unwrap();
            let hard = d.join("hard.toml");
            std::fs::hard_link(&cfg, &hard).unwrap();
            for out in [&sym, &hard] {
                let e = f.output("--output", out).unwrap_err().to_string();
                assert!(e.contains(&out.display().to_string()), "{e}");
                assert!(e.contains(&cfg.display().to_string()), "{e}");
            }
        }
        f.output("--output", &d.join("plan.json")).unwrap();
        let e = f
            .output("--tables-out", &d.join(".").join("plan.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is also the command's --output"), "{e}");
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_run_s_files_are_written_only_by_their_owner() {
        let d = scratch("owner");
        std::fs::write(d.join(crate::checkpoint::CHECKPOINT_FILE), "x").unwrap();
        let mut eval = Files::new("eval");
        let e = eval
            .output("--predictions", &d.join(rundir::SUMMARY_FILE))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only `towerrec train` writes"), "{e}");
        let e = eval
            .output("--predictions", &d.join("partition.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only `towerrec partition` writes"), "{e}");
        eval.output("--predictions", &d.join("predictions.txt"))
            .unwrap();
        Files::new("partition")
            .output("--out", &d.join("partition.json"))
            .unwrap();
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn an_input_the_run_would_replace_is_refused() {
        let d = scratch("rundir");
        let plan = d.join("replan-step-4.json");
        std::fs::write(&plan, "{}").unwrap();
        let mut f = Files::new("train");
        f.input("the plan", &plan).unwrap();
        let e = f
            .run_dir("--out", &d, |n| rundir::owner(n) == Some("train"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is the run's replan-step-4.json"), "{e}");
        // A resumed run keeps its plans.
        f.run_dir("--resume", &d, |n| n == rundir::METRICS_FILE)
            .unwrap();
        std::fs::remove_dir_all(d).ok();
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/data-\xff.csv"));
        let e = Files::new("train")
            .input("the input data file", bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid UTF-8"), "{e}");
        assert!(Files::new("eval").output("--predictions", bad).is_err());
    }
}
