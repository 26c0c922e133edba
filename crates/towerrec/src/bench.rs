//! `towerrec bench`: speed measurements (whole model steps; kernels against the
//! machine's limits).

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use towerrec_train::bench::{bench_cluster, bench_model, load_batches, Mode, Timing};
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
    /// Forward, loss, backward and the updates.
    Train,
    /// Forward only, over a stream: each batch's lookups beside the previous batch's
    /// dense layers (as `evaluate` scores).
    Infer,
    /// Forward only, one batch finished before the next starts.
    InferSerial,
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
    /// Batches per group with --mode infer: a group's lookups go table by table over
    /// all its batches (cache reuse), beside the previous group's dense layers
    /// [default: 8192 samples' worth, as `evaluate` scores].
    #[arg(long)]
    group: Option<usize>,
    /// Distinct batches held in memory and cycled over.
    #[arg(long, default_value_t = 8)]
    batches: usize,
    /// Worker threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Hosts of an in-process cluster to run the model on [default: 1].
    #[arg(long)]
    hosts: Option<usize>,
    /// Ranks per host of the in-process cluster [default: 1].
    #[arg(long)]
    ranks_per_host: Option<usize>,
    /// Sharding plan for the cluster (JSON from `towerrec plan`) [default: greedy].
    #[arg(long)]
    plan: Option<PathBuf>,
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
    crate::commands::set_threads(crate::commands::check_threads(
        a.threads.unwrap_or(0),
        "--threads",
    )?)?;
    let cfg = match &a.config {
        Some(p) => Config::load(p, &a.set)?,
        None => Config::quickstart(&a.set)?,
    };
    let mode = match a.mode {
        ModeArg::Train => Mode::Train,
        ModeArg::Infer => Mode::Infer,
        ModeArg::InferSerial => Mode::InferSerial,
    };
    let batches = load_batches(&cfg, a.batches.max(1))?;
    let timing = Timing {
        warmup: a.warmup,
        steps: a.steps.max(1),
        reps: a.reps.max(1),
        group: a
            .group
            .unwrap_or_else(|| towerrec_train::forward::default_group(cfg.train.batch_size))
            .max(1),
    };
    let (hosts, ranks) = (a.hosts.unwrap_or(1), a.ranks_per_host.unwrap_or(1));
    let max = towerrec_train::cluster::MAX_IN_PROCESS_RANKS;
    if hosts.checked_mul(ranks).is_none_or(|w| w > max || w == 0) {
        anyhow::bail!(
            "--hosts × --ranks-per-host must be between 1 and {max} (the ranks are threads of this process)"
        );
    }
    let r = if hosts * ranks == 1 && a.plan.is_none() {
        bench_model(&cfg, &batches, mode, timing)?
    } else {
        let topology = towerrec_comm::Topology::new(hosts, ranks)?;
        let plan = a.plan.as_ref().map(towerrec_plan::Plan::load).transpose()?;
        let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
        let per_rank = (threads / topology.world_size()).max(1);
        bench_cluster(&cfg, &batches, mode, timing, topology, plan, per_rank)?
    };
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let reps: Vec<String> = r
            .samples_per_sec
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        let group = r
            .group
            .map(|g| format!(" (groups of {g})"))
            .unwrap_or_default();
        println!(
            "{:?} batch {}{group}: median {:.0} samples/s (repetitions: {})",
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
