//! `towerrec quantize`: makes an inference checkpoint whose embedding tables are 8-bit
//! row-wise quantized (docs/CONFIG.md, `model.table_precision = "int8"`), from a
//! trained one. `towerrec eval` scores it as any checkpoint; it cannot be trained on.

use crate::commands::{clean, recover_run_dir};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use towerrec_core::embedding::TablePrecision;
use towerrec_train::checkpoint::{self, Checkpoint};
use towerrec_train::files::Files;

#[derive(Args)]
pub struct QuantizeArgs {
    /// The trained checkpoint: a file, or a run directory holding checkpoint.safetensors.
    #[arg(long)]
    checkpoint: PathBuf,
    /// The quantized checkpoint to write (a file; not the input).
    #[arg(long)]
    out: PathBuf,
    /// Quantize only these tables (comma-separated feature names) [default: all].
    #[arg(long, value_delimiter = ',')]
    tables: Option<Vec<String>>,
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    recover_run_dir(&a.checkpoint)?;
    let input = checkpoint::resolve(&a.checkpoint);
    let ckpt = Checkpoint::read(&input)?;
    let mut cfg = ckpt.config()?;
    let mut files = Files::new("quantize");
    files.input("the checkpoint", &input)?;
    files.output("--out", &a.out)?;
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)
        .context("the data the checkpoint was trained on (its schema sizes the tables)")?;
    let mut model = ckpt.restore(&cfg, &schema)?;
    let done = model.quantize_tables(a.tables.as_deref())?;
    if done.is_empty() {
        bail!("every table chosen is int8 already: nothing to quantize");
    }
    match &a.tables {
        None => {
            cfg.model.table_precision = TablePrecision::Int8;
            cfg.model.table_precisions.clear();
        }
        Some(_) => {
            for q in &done {
                (cfg.model.table_precisions).insert(q.name.clone(), TablePrecision::Int8);
            }
        }
    }
    clean(&files);
    let progress = ckpt.progress()?;
    checkpoint::save(&a.out, &mut model, &cfg, progress, &ckpt.data_files()?)?;
    let (before, after) = done.iter().fold((0u64, 0u64), |(b, f), q| {
        (b + q.bytes_before, f + q.bytes_after)
    });
    let worst = done
        .iter()
        .max_by(|x, y| x.max_error.total_cmp(&y.max_error))
        .expect("at least one table");
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    eprintln!(
        "quantized {} tables to int8 row-wise: {:.1} MiB of rows -> {:.1} MiB ({:.2}x smaller); \
         largest error of a value {:.3e} (table '{}', from {}); wrote {}",
        done.len(),
        mib(before),
        mib(after),
        before as f64 / after.max(1) as f64,
        worst.max_error,
        worst.name,
        worst.from,
        a.out.display()
    );
    println!("{}", serde_json::to_string(&done)?);
    Ok(())
}
