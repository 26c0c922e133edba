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
    /// Rows/s of reading a data part into batches, no model: the input pipeline alone.
    Data(DataArgs),
}

#[derive(Args)]
struct DataArgs {
    /// Run config whose [data] is read [default: the quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Input data file, overriding the config's (any format; a binary file by its magic).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Which part to read.
    #[arg(long, value_enum, default_value = "train")]
    part: crate::commands::PartArg,
    /// Timed passes over the part (the median is reported); the first pass is timed
    /// too, so run once untimed with --reps 1 beforehand for a page-cache figure.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Print one JSON object instead of lines of text.
    #[arg(long)]
    json: bool,
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
        BenchWhat::Data(d) => data(d),
    }
}

/// Reads `part` of the data into batches of `train.batch_size` `reps` times.
fn data(a: DataArgs) -> Result<()> {
    let mut cfg = match &a.config {
        Some(p) => Config::load(p, &a.set)?,
        None => Config::quickstart(&a.set)?,
    };
    cfg.override_data(crate::commands::absolute(a.data)?, None);
    let part: towerrec_data::Part = a.part.into();
    // The file the part reads whole, if it does (no split), for MB/s.
    let whole = match (part, cfg.data.split()) {
        (towerrec_data::Part::Train, towerrec_data::Split::None) => Some("train"),
        (towerrec_data::Part::Eval, towerrec_data::Split::None) => Some("eval"),
        _ => None,
    };
    let bytes = cfg
        .data
        .input_files(&cfg.base_dir)
        .into_iter()
        .find(|(role, _)| Some(*role) == whole)
        .and_then(|(_, p)| std::fs::metadata(p).ok())
        .map(|m| m.len());
    let mut passes = Vec::new();
    for _ in 0..a.reps.max(1) {
        let start = std::time::Instant::now();
        let mut stream = towerrec_data::open(&cfg.data, part, cfg.train.bad_rows, &cfg.base_dir)?;
        let mut rows = 0u64;
        while let Some(b) = towerrec_data::next_batch(stream.as_mut(), cfg.train.batch_size)? {
            rows += b.batch_size() as u64;
        }
        passes.push((rows, start.elapsed().as_secs_f64()));
    }
    let rates: Vec<f64> = passes
        .iter()
        .map(|(r, s)| *r as f64 / s.max(1e-9))
        .collect();
    let median = towerrec_train::bench::median(&rates);
    let rows = passes[0].0;
    if a.json {
        let j = serde_json::json!({
            "source": cfg.data.describe(part, &cfg.base_dir),
            "rows": rows,
            "file_bytes": bytes,
            "batch_size": cfg.train.batch_size,
            "seconds": passes.iter().map(|p| p.1).collect::<Vec<_>>(),
            "rows_per_sec": rates,
            "median_rows_per_sec": median,
        });
        println!("{j}");
    } else {
        let reps: Vec<String> = rates.iter().map(|v| format!("{v:.0}")).collect();
        let mb = bytes
            .map(|b| {
                format!(
                    ", {:.1} MB/s of file",
                    median * b as f64 / rows.max(1) as f64 / 1e6
                )
            })
            .unwrap_or_default();
        println!(
            "{}: {rows} rows in batches of {}: median {median:.0} rows/s{mb} (passes: {})",
            cfg.data.describe(part, &cfg.base_dir),
            cfg.train.batch_size,
            reps.join(", ")
        );
    }
    Ok(())
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
