//! `towerrec profile`: how often every embedding row is read (OPER's access counts),
//! written as a profile file for `towerrec plan --strategy oper`, with a summary on
//! stdout and the access CDF of every table as SVG.

use crate::commands::{absolute, clean, load_config, PartArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;
use towerrec_data::{AccessProfile, Part, ProfileOptions};
use towerrec_sim::plot::{line_charts, LineChart, Series};
use towerrec_train::files::Files;

#[derive(Args)]
pub struct ProfileArgs {
    /// Run config whose [data] is profiled [default: the embedded quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Data file to profile, overriding the config's training data.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Which part of the config's data.
    #[arg(long, value_enum, default_value = "train")]
    part: PartArg,
    /// Count only the first N samples (HugeCTR counts the first 20 batches) [default: all].
    #[arg(long, value_name = "N")]
    max_samples: Option<u64>,
    /// Pass over the first N samples first (with --max-samples: profile a window).
    #[arg(long, value_name = "N", default_value_t = 0)]
    skip_samples: u64,
    /// Tables with more rows than this keep only their hot rows, from a count-min
    /// sketch, instead of an exact count per row (4 bytes per row).
    #[arg(long, value_name = "ROWS", default_value_t = ProfileOptions::default().exact_max_rows)]
    exact_max_rows: u64,
    /// Hot rows a sketched table keeps.
    #[arg(long, value_name = "K", default_value_t = ProfileOptions::default().sketch_top)]
    sketch_top: usize,
    /// The profile file to write (safetensors).
    #[arg(long)]
    out: PathBuf,
    /// The access CDF of every table, as SVG [default: the --out path with .cdf.svg].
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: ProfileArgs) -> Result<()> {
    let config = absolute(a.config)?;
    let mut cfg = load_config(config.as_deref(), &a.set)?;
    let part: Part = a.part.into();
    match part {
        Part::Train => cfg.override_data(absolute(a.data)?, None),
        Part::Eval => cfg.override_data(None, absolute(a.data)?),
    }
    let mut files = Files::new("profile");
    files.config(config.as_deref(), &cfg)?;
    files.output("--out", &a.out)?;
    let plot = a.plot.unwrap_or_else(|| a.out.with_extension("cdf.svg"));
    files.output("--plot", &plot)?;
    for file in [&a.out, &plot] {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    clean(&files);
    let opts = ProfileOptions {
        exact_max_rows: a.exact_max_rows,
        sketch_top: a.sketch_top,
        ..ProfileOptions::default()
    };
    let source = cfg.data.describe(part, &cfg.base_dir);
    // Malformed rows as the run would meet them (train.bad_rows, max_bad_fraction).
    let mut stream = towerrec_data::open(&cfg.data, part, cfg.train.bad_rows, &cfg.base_dir)?;
    let skipped = stream.skip_records(a.skip_samples)?;
    if skipped < a.skip_samples {
        bail!(
            "{source}: --skip-samples {} passes the end ({skipped} samples)",
            a.skip_samples
        );
    }
    let started = Instant::now();
    let quiet = a.quiet;
    let profile = towerrec_data::profile::profile_stream(
        stream.as_mut(),
        opts,
        a.max_samples,
        source.clone(),
        |n| {
            if !quiet && n % 1_000_000 == 0 {
                eprintln!("{n} samples");
            }
            ControlFlow::Continue(())
        },
    )?;
    if profile.samples == 0 {
        bail!("{source}: no samples to profile");
    }
    let read = towerrec_train::ReadCounts {
        rows: profile.samples,
        skipped: stream.skipped(),
    };
    towerrec_train::trainer::check_read(
        "profiled",
        read,
        a.skip_samples == 0,
        cfg.train.max_bad_fraction,
        &source,
    )?;
    if read.skipped > 0 {
        eprintln!(
            "skipped {} malformed rows (train.bad_rows = \"skip\")",
            read.skipped
        );
    }
    profile.save(&a.out)?;
    cdf_plot(&profile, &plot)?;
    print!("{}", summary(&profile));
    println!(
        "profiled {} samples in {:.1}s; wrote {} and {}",
        profile.samples,
        started.elapsed().as_secs_f64(),
        a.out.display(),
        plot.display()
    );
    Ok(())
}

fn share(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.1}%", 100.0 * s))
}

/// A Markdown table: per table its rows, reads, rows read, fitted Zipf exponent and
/// the share of reads to the hottest 0.1, 1 and 10% of its rows.
pub fn summary(p: &AccessProfile) -> String {
    let mut out = format!(
        "{}: {} samples\n\n| table | rows | reads | rows read | Zipf s | top 0.1% | top 1% | top 10% |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
        p.source, p.samples
    );
    for t in &p.tables {
        let r = t.ranking();
        let distinct = t
            .distinct()
            .map_or_else(|| "(sketch)".into(), |d| d.to_string());
        let zipf = r
            .zipf_exponent()
            .map_or_else(|| "-".into(), |s| format!("{s:.2}"));
        out += &format!(
            "| {} | {} | {} | {distinct} | {zipf} | {} | {} | {} |\n",
            t.name,
            t.rows,
            t.reads,
            share(r.top_share(0.001)),
            share(r.top_share(0.01)),
            share(r.top_share(0.1)),
        );
    }
    out
}

fn cdf_plot(p: &AccessProfile, path: &Path) -> Result<()> {
    let series = p
        .tables
        .iter()
        .map(|t| Series {
            label: t.name.clone(),
            points: t.ranking().cdf(200),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let chart = LineChart {
        title: format!("access CDF, {} samples", p.samples),
        x_label: "share of rows, hottest first (log)".into(),
        y_label: "share of reads".into(),
        series,
        log_x: true,
        y_from_zero: true,
    };
    line_charts(path, &[chart], 1).with_context(|| format!("drawing {}", path.display()))
}
