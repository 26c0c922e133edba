//! `towerrec bench`: speed measurements (whole model steps; kernels against the
//! machine's limits).

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use towerrec_train::bench::{bench_model, load_batches, Mode};
use towerrec_train::Config;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Samples/s of whole training or inference steps on batches held in memory.
    Model(ModelArgs),
    /// Kernel speeds (lookup, fused update, MLP) beside the machine's measured limits.
    Kernels(crate::bench_kernels::KernelsArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Train,
    Infer,
}

#[derive(Args)]
struct ModelArgs {
    /// Run config (its model, optimizer, batch size and data) [default: the quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// What to time.
    #[arg(long, value_enum, default_value = "train")]
    mode: ModeArg,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Steps per timed repetition.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Distinct batches held in memory and cycled over.
    #[arg(long, default_value_t = 8)]
    batches: usize,
    /// Worker threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.what {
        BenchWhat::Model(m) => model(m),
        BenchWhat::Kernels(k) => crate::bench_kernels::run(k),
    }
}

fn model(a: ModelArgs) -> Result<()> {
    crate::commands::set_threads(a.threads.unwrap_or(0))?;
    let cfg = match &a.config {
        Some(p) => Config::load(p, &a.set)?,
        None => Config::quickstart(&a.set)?,
    };
    let mode = match a.mode {
        ModeArg::Train => Mode::Train,
        ModeArg::Infer => Mode::Infer,
    };
    let batches = load_batches(&cfg, a.batches.max(1))?;
    let r = bench_model(
        &cfg,
        &batches,
        mode,
        a.warmup,
        a.steps.max(1),
        a.reps.max(1),
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let reps: Vec<String> = r
            .samples_per_sec
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        println!(
            "{:?} batch {}: median {:.0} samples/s (repetitions: {})",
            r.mode,
            r.batch_size,
            r.median_samples_per_sec,
            reps.join(", ")
        );
        let total: f64 = r.phase_ms_per_step.iter().map(|(_, ms)| ms).sum();
        for (name, ms) in &r.phase_ms_per_step {
            println!(
                "  {name:<26} {ms:8.3} ms/step {:5.1}%",
                100.0 * ms / total.max(1e-12)
            );
        }
    }
    Ok(())
}
