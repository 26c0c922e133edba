//! `towerrec datagen` and `towerrec preprocess`: data into the binary format. An output
//! never replaces an input, is checked against the free disk space where its size is
//! known, and is removed, with its temporary files, when the conversion fails or is
//! interrupted (SIGINT, SIGTERM; a second signal ends the process at once).

use crate::commands::{absolute, clean, load_config, BadRowsArg, PartArg};
use anyhow::{bail, Result};
use clap::Args;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use towerrec_data::{BadRows, DataConfig, Part, PoolingFactor, SyntheticConfig};
use towerrec_train::config::DEFAULT_MAX_BAD_FRACTION;
use towerrec_train::files::Files;
use towerrec_train::{Config, ReadCounts};

#[derive(Args)]
pub struct DatagenArgs {
    /// Config whose [data] section is synthetic [default: the embedded quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output file (preprocessed binary format).
    #[arg(long)]
    out: PathBuf,
    /// Which part to generate.
    #[arg(long, value_enum, default_value = "train")]
    part: PartArg,
}

#[derive(Args)]
pub struct PreprocessArgs {
    /// Config whose [data] section describes the text data.
    #[arg(long)]
    config: PathBuf,
    /// Input data file, overriding the config's.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output file (preprocessed binary format).
    #[arg(long)]
    out: PathBuf,
    /// Which part of the config's split to convert.
    #[arg(long, value_enum, default_value = "train")]
    part: PartArg,
    /// Whether malformed rows stop the conversion or are skipped and counted.
    #[arg(long, value_enum, default_value = "fail")]
    bad_rows: BadRowsArg,
    /// With --bad-rows skip: the largest share of malformed rows before the conversion
    /// fails (and its output is removed).
    #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_BAD_FRACTION,
          value_parser = crate::commands::parse_fraction)]
    max_bad_fraction: f64,
}

/// A flag raised by SIGINT or SIGTERM; a second signal, once it is up, ends the
/// process with the shell's status for the signal.
fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    #[cfg(unix)]
    for (signal, code) in [
        (signal_hook::consts::SIGINT, 130),
        (signal_hook::consts::SIGTERM, 143),
    ] {
        signal_hook::flag::register_conditional_shutdown(signal, code, Arc::clone(&flag))?;
        signal_hook::flag::register(signal, Arc::clone(&flag))?;
    }
    Ok(flag)
}

/// Writes `part` of `cfg`'s data to `out`; returns what was read.
fn write_part(cfg: &Config, part: Part, bad_rows: BadRows, out: &Path) -> Result<ReadCounts> {
    let mut stream = towerrec_data::open(&cfg.data, part, bad_rows, &cfg.base_dir)?;
    let interrupted = interrupt_flag()?;
    let started = Instant::now();
    let vocab = towerrec_data::source::vocab_checksum(&cfg.data, &cfg.base_dir)?;
    let mut reported = 0u64;
    let rows = towerrec_data::write_binary_with(stream.as_mut(), out, vocab, |n| {
        // Text readers hand over blocks of rows: report each million passed.
        if n / 1_000_000 > reported {
            reported = n / 1_000_000;
            eprintln!("{} rows", reported * 1_000_000);
        }
        if interrupted.load(Ordering::Relaxed) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    let secs = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {rows} rows to {} in {secs:.1}s ({:.0} rows/s, {:.1} bytes/row){}",
        out.display(),
        rows as f64 / secs.max(1e-9),
        bytes as f64 / rows.max(1) as f64,
        match stream.skipped() {
            0 => String::new(),
            n => format!(" (skipped {n} malformed rows)"),
        }
    );
    Ok(ReadCounts {
        rows,
        skipped: stream.skipped(),
    })
}

/// Refuses to generate `part` of `s` into `out` where it would not fit on the disk:
/// the spooled sections and the assembled file are on disk together at the end.
fn check_disk(s: &SyntheticConfig, part: Part, out: &Path) -> Result<()> {
    let rows = match part {
        Part::Train => s.train_range(),
        Part::Eval => s.eval_range(),
    };
    let ids: Vec<f64> = s
        .tables
        .iter()
        .flat_map(|t| {
            let mean = match t.pooling {
                PoolingFactor::Fixed(n) => f64::from(n),
                PoolingFactor::Mean { mean } => mean,
            };
            std::iter::repeat_n(mean, t.count)
        })
        .collect();
    let size = towerrec_data::estimated_size(rows.end - rows.start, s.num_dense, &ids);
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let need = size.saturating_mul(2);
    if let Some(free) = towerrec_core::fsio::free_disk_bytes(dir) {
        if need > u128::from(free) {
            bail!(
                "--out {}: the {} rows need about {:.2} GiB on disk while writing ({:.2} GiB of \
                 file, spooled once), more than the {:.2} GiB free in {}",
                out.display(),
                rows.end - rows.start,
                need as f64 / GIB,
                size as f64 / GIB,
                free as f64 / GIB,
                dir.display()
            );
        }
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

pub fn datagen(a: DatagenArgs) -> Result<()> {
    let cfg = load_config(a.config.as_deref(), &a.set)?;
    let DataConfig::Synthetic(s) = &cfg.data else {
        bail!("datagen needs a config whose [data] format is \"synthetic\"; use `towerrec preprocess` for files");
    };
    let mut files = Files::new("datagen");
    files.config(a.config.as_deref(), &cfg)?;
    files.output("--out", &a.out)?;
    check_disk(s, a.part.into(), &a.out)?;
    clean(&files);
    write_part(&cfg, a.part.into(), BadRows::Fail, &a.out).map(drop)
}

pub fn preprocess(a: PreprocessArgs) -> Result<()> {
    let mut cfg = Config::load(&a.config, &a.set)?;
    cfg.override_data(absolute(a.data)?, None);
    let mut files = Files::new("preprocess");
    files.config(Some(&a.config), &cfg)?;
    files.output("--out", &a.out)?;
    clean(&files);
    let part: Part = a.part.into();
    let read = write_part(&cfg, part, a.bad_rows.into(), &a.out)?;
    let source = cfg.data.describe(part, &cfg.base_dir);
    let name = match part {
        Part::Train => "training",
        Part::Eval => "evaluation",
    };
    if let Err(e) =
        towerrec_train::trainer::check_read(name, read, true, a.max_bad_fraction, &source)
    {
        // Best effort: the error that matters is the data's.
        let _ = std::fs::remove_file(&a.out);
        bail!("{e}; {} was removed", a.out.display());
    }
    Ok(())
}
