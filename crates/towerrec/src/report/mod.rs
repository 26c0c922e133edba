//! `towerrec report`: one self-contained HTML page of one or several training runs
//! (loss and AUC over steps, samples/s, time per phase, bytes per phase intra- and
//! cross-host, per-rank times), and the report `train` writes into its run directory
//! at its end, a failed run's included (docs/REPORT.md).

mod page;
mod run;

use anyhow::{bail, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use towerrec_train::files::Files;
use towerrec_train::rundir::REPORT_FILE;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run directories of `towerrec train` (each with its metrics.jsonl).
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// The page to write. Default with one run: RUN_DIR/report.html; several runs
    /// need it.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// `towerrec report`.
pub fn run(a: ReportArgs) -> Result<()> {
    let out = match (&a.out, a.runs.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [one]) => one.join(REPORT_FILE),
        (None, _) => bail!(
            "{} runs: give --out FILE for the page that compares them (the report of one \
             run goes into its directory)",
            a.runs.len()
        ),
    };
    let mut files = Files::new("report");
    for dir in &a.runs {
        for (what, path) in ["metrics log", "summary", "config"]
            .iter()
            .zip(run::inputs(dir))
        {
            files.input(format!("the run's {what}"), &path)?;
        }
    }
    files.output("--out", &out)?;
    crate::commands::clean(&files);
    let mut runs = a
        .runs
        .iter()
        .map(|d| run::read(d))
        .collect::<Result<Vec<_>>>()?;
    run::unique_labels(&mut runs);
    write(&out, &runs)?;
    println!("report: {}", out.display());
    Ok(())
}

/// Writes the report of the run in `dir` into `dir/report.html` (`train` at its end;
/// `failure`: why the run failed, shown at the top, where the log could not say it).
pub fn write_for_run(dir: &Path, failure: Option<String>) -> Result<PathBuf> {
    let mut run = run::read(dir)?;
    if failure.is_some() {
        run.failure = failure;
    }
    let out = dir.join(REPORT_FILE);
    write(&out, &[run])?;
    Ok(out)
}

fn write(out: &Path, runs: &[run::Run]) -> Result<()> {
    let html = page::page(runs)?;
    towerrec_core::fsio::write_atomic(out, html.as_bytes())
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))
}
