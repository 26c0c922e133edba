//! What the subcommands share (bad-row and part arguments, threads, config loading) and
//! `towerrec eval`.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_data::{BadRows, Part};
use towerrec_train::checkpoint::Checkpoint;
use towerrec_train::config::DEFAULT_MAX_BAD_FRACTION;
use towerrec_train::evaluate::score;
use towerrec_train::files::Files;
use towerrec_train::Config;

/// What to do with a malformed data row.
#[derive(Clone, Copy, ValueEnum)]
pub enum BadRowsArg {
    /// Stop with an error naming the file, line and field.
    Fail,
    /// Skip the row, count it and report the count at the end.
    Skip,
}

impl From<BadRowsArg> for BadRows {
    fn from(b: BadRowsArg) -> Self {
        match b {
            BadRowsArg::Fail => BadRows::Fail,
            BadRowsArg::Skip => BadRows::Skip,
        }
    }
}

/// Which part of a data set.
#[derive(Clone, Copy, ValueEnum)]
pub enum PartArg {
    Train,
    Eval,
}

impl From<PartArg> for Part {
    fn from(p: PartArg) -> Self {
        match p {
            PartArg::Train => Part::Train,
            PartArg::Eval => Part::Eval,
        }
    }
}

#[derive(Args)]
pub struct EvalArgs {
    /// A checkpoint file, or a run directory holding checkpoint.safetensors.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Data file to score (same format as the run's data) [default: the run's eval split].
    #[arg(long)]
    data: Option<PathBuf>,
    /// Write one predicted probability per line here.
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Whether malformed rows stop the run or are skipped and counted.
    #[arg(long, value_enum, default_value = "fail")]
    bad_rows: BadRowsArg,
    /// With --bad-rows skip: the largest share of malformed rows before eval fails.
    #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_BAD_FRACTION,
          value_parser = parse_fraction)]
    max_bad_fraction: f64,
    /// Worker threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
}

/// Where a cluster's ranks run.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    InProcess,
    Mpi,
}

/// A share from 0 to 1 (`--max-bad-fraction`).
pub fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("must be a number between 0 and 1, got {s:?}")),
    }
}

/// Most worker threads per core that `--threads` or `train.threads` may ask for: more
/// only adds switching, and a typo (`--threads 10000`) would start thousands of threads.
pub const MAX_THREADS_PER_CORE: usize = 8;

/// The machine's cores.
pub fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `threads` (0: one per core) where it is at most [`MAX_THREADS_PER_CORE`] per core;
/// `what` names the option in the error.
pub fn check_threads(threads: usize, what: &str) -> Result<usize> {
    let max = MAX_THREADS_PER_CORE * num_cores();
    if threads > max {
        bail!(
            "{what}: {threads} threads is more than {MAX_THREADS_PER_CORE} per core of this \
             machine's {} (at most {max}); 0 means one per core",
            num_cores()
        );
    }
    Ok(threads)
}

pub fn set_threads(threads: usize) -> Result<()> {
    if threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .context("setting up the thread pool")?;
    }
    Ok(())
}

/// Paths given on the command line are relative to the working directory, while paths
/// in a config are relative to the config file: make the former absolute.
pub fn absolute(p: Option<PathBuf>) -> Result<Option<PathBuf>> {
    p.map(|p| std::path::absolute(&p).with_context(|| format!("resolving {}", p.display())))
        .transpose()
}

pub fn load_config(path: Option<&Path>, overrides: &[String]) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p, overrides)?,
        None => Config::quickstart(overrides)?,
    })
}

/// Says what [`Files::clean`] removed: the temporaries of interrupted writes in the
/// directories the command writes into (docs/RELIABILITY.md, "Inputs and outputs").
pub fn clean(files: &Files) {
    for line in files.clean() {
        eprintln!("{line}");
    }
}

/// Where `checkpoint` (a run directory or a checkpoint file) is in a run directory that
/// a stopped `--overwrite` left, restores the run it was replacing first, and says so.
pub fn recover_run_dir(checkpoint: &Path) -> Result<()> {
    let dir = if checkpoint.is_dir() {
        checkpoint
    } else {
        match checkpoint.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        }
    };
    if let Some(note) = towerrec_train::rundir::recover(dir)? {
        eprintln!("{note}");
    }
    Ok(())
}

pub fn eval(a: EvalArgs) -> Result<()> {
    set_threads(check_threads(a.threads.unwrap_or(0), "--threads")?)?;
    recover_run_dir(&a.checkpoint)?;
    let ckpt_path = towerrec_train::checkpoint::resolve(&a.checkpoint);
    let ckpt = Checkpoint::read(&ckpt_path)?;
    let mut cfg = ckpt.config()?;
    cfg.override_data(None, absolute(a.data)?);
    let mut files = Files::new("eval");
    files.input("the checkpoint", &ckpt_path)?;
    files.config(None, &cfg)?;
    if let Some(path) = &a.predictions {
        files.output("--predictions", path)?;
    }
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
    let mut model = ckpt.restore(&cfg, &schema)?;
    let stream = towerrec_data::open(&cfg.data, Part::Eval, a.bad_rows.into(), &cfg.base_dir)?;
    let scored = score(&mut model, stream, cfg.eval_batch_size())?;
    let source = cfg.data.describe(Part::Eval, &cfg.base_dir);
    let m = scored.checked_metrics(a.max_bad_fraction, &source)?;
    if let Some(path) = &a.predictions {
        clean(&files);
        let text: String = scored.probs.iter().map(|p| format!("{p}\n")).collect();
        towerrec_core::fsio::write_atomic(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", serde_json::to_string(&m)?);
    if scored.skipped > 0 {
        eprintln!("skipped {} malformed rows", scored.skipped);
    }
    Ok(())
}
