//! `towerrec simulate`: predicts a model's inference or training step on hardware
//! described in TOML (or a preset), at one or many system sizes, with a flat, SPTT or
//! DMT embedding exchange; reproduces the scale-in paper's tables and the DMT paper's
//! speedup curve; writes SVG plots. The model is `towerrec-sim` (docs/SIMULATOR.md).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_sim::scale::{self, Plan, ScalePoint};
use towerrec_sim::{
    simulate, Exchange, Hardware, Interaction, Mode, Scenario, Sharding, TableGroup, Workload,
};
use towerrec_train::config::{Config, ModelKind};

mod figures;
use figures::*;

#[derive(Args)]
pub struct SimulateArgs {
    /// The model: a preset (rm2-small, rm2-large, dmt-dlrm) or a towerrec config TOML.
    #[arg(long, short, default_value = "rm2-small")]
    config: String,
    /// The hardware: a preset (recspeed, reference, dgx2, dgx-a100, h100-cluster) or a
    /// TOML file (e.g. written by `towerrec calibrate`).
    #[arg(long, default_value = "recspeed")]
    hardware: String,
    /// System sizes to simulate, in chips (whole hosts beyond one host); default: the
    /// hardware as described.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Embedding exchanges to compare: flat, sptt, dmt.
    #[arg(long, value_delimiter = ',', default_value = "flat")]
    compare: Vec<String>,
    #[arg(long, value_enum, default_value_t = ModeArg::Train)]
    mode: ModeArg,
    /// Unsharded (whole tables per chip, pooled exchange) or sharded (every table
    /// row-wise over all chips).
    #[arg(long, value_enum, default_value_t = ShardingArg::Unsharded)]
    sharding: ShardingArg,
    /// Tower Modules' compression ratio for `dmt`.
    #[arg(long, default_value_t = 2.0)]
    compression: f64,
    /// Global batch (or per chip with --per-chip-batch) instead of the model's.
    #[arg(long)]
    batch: Option<usize>,
    #[arg(long)]
    per_chip_batch: bool,
    /// Write SVG plots into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Print one JSON object per size and exchange instead of the tables.
    #[arg(long)]
    json: bool,
    /// Instead: reproduce a paper's results (`scale-in`: Tables XVI and XVII with
    /// Figures 8, 11, 12b, 13b; `dmt`: the speedup of Figure 10 from 16 to 512 GPUs).
    #[arg(long, value_enum)]
    reproduce: Option<Reproduce>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Train,
    Infer,
}

#[derive(Clone, Copy, ValueEnum)]
enum ShardingArg {
    Unsharded,
    Sharded,
}

#[derive(Clone, Copy, ValueEnum)]
enum Reproduce {
    ScaleIn,
    Dmt,
}

pub fn run(a: SimulateArgs) -> Result<()> {
    if !(a.compression.is_finite() && a.compression >= 1.0) {
        bail!(
            "--compression: must be a finite number ≥ 1 (how many times smaller the towers' output is), got {}",
            a.compression
        );
    }
    if let Some(dir) = &a.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match a.reproduce {
        Some(Reproduce::ScaleIn) => return reproduce_scale_in(a.plots.as_deref()),
        Some(Reproduce::Dmt) => return reproduce_dmt(a.plots.as_deref()),
        None => {}
    }
    let mut workload = load_workload(&a.config)?;
    if let Some(b) = a.batch {
        workload.batch = b;
        workload.batch_per_chip = a.per_chip_batch;
    }
    workload.validate()?;
    let hw = Hardware::load(&a.hardware)?;
    let mode = match a.mode {
        ModeArg::Train => Mode::Training,
        ModeArg::Infer => Mode::Inference,
    };
    let sharding = match a.sharding {
        ShardingArg::Unsharded => Sharding::Unsharded,
        ShardingArg::Sharded => Sharding::Sharded,
    };
    let plans = a
        .compare
        .iter()
        .map(|p| Plan::parse(p))
        .collect::<towerrec_sim::Result<Vec<_>>>()?;
    if plans.is_empty() {
        bail!("--compare needs at least one of flat, sptt, dmt");
    }
    if sharding == Sharding::Sharded && plans.iter().any(|p| *p != Plan::Flat) {
        bail!("SPTT and DMT are modelled for unsharded tables only: use --sharding unsharded");
    }
    let gpus = if a.gpus.is_empty() {
        vec![hw.chips()]
    } else {
        a.gpus.clone()
    };
    let points = if sharding == Sharding::Unsharded {
        scale::compare(&workload, &hw, &gpus, &plans, mode, a.compression)?
    } else {
        sharded_points(&workload, &hw, &gpus, mode)?
    };
    if a.json {
        print_json(&points)?;
    } else {
        print_header(&workload, &hw, mode, sharding);
        print_points(&points);
    }
    if let Some(dir) = &a.plots {
        let scenario = Scenario {
            mode,
            sharding,
            exchange: Exchange::Flat,
        };
        write_run_plots(dir, &workload, &hw, scenario, &points)?;
    }
    Ok(())
}

fn sharded_points(
    workload: &Workload,
    hw: &Hardware,
    gpus: &[usize],
    mode: Mode,
) -> Result<Vec<ScalePoint>> {
    gpus.iter()
        .map(|&n| {
            let sized = hw.with_chips(n)?;
            let scenario = Scenario {
                mode,
                sharding: Sharding::Sharded,
                exchange: Exchange::Flat,
            };
            Ok(ScalePoint {
                chips: n,
                steps: vec![(Plan::Flat, simulate(workload, &sized, scenario)?)],
            })
        })
        .collect()
}

/// A model preset, or the model of a towerrec config file.
fn load_workload(name: &str) -> Result<Workload> {
    if Workload::PRESETS.contains(&name) {
        return Ok(Workload::preset(name)?);
    }
    let path = Path::new(name);
    if !path.exists() {
        bail!(
            "--config {name}: neither a model preset ({}) nor a file",
            Workload::PRESETS.join(", ")
        );
    }
    let cfg = Config::load(path, &[])?;
    workload_of(&cfg, name)
}

/// The simulator's view of a towerrec run: its tables and lookups per sample, its
/// layers, its batch; f32 everywhere, 32-bit ids.
pub fn workload_of(cfg: &Config, name: &str) -> Result<Workload> {
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).with_context(|| {
        format!("{name}: the table sizes come from the config's data, which could not be read")
    })?;
    let lookups: Vec<f64> = match &cfg.data {
        towerrec_data::DataConfig::Synthetic(s) => s
            .tables
            .iter()
            .flat_map(|t| {
                let ids = match t.pooling {
                    towerrec_data::PoolingFactor::Fixed(n) => n as f64,
                    towerrec_data::PoolingFactor::Mean { mean } => mean,
                };
                std::iter::repeat_n(ids, t.count)
            })
            .collect(),
        _ => vec![1.0; schema.num_sparse()],
    };
    let tables = schema
        .sparse
        .iter()
        .zip(lookups.iter().chain(std::iter::repeat(&1.0)))
        .map(|(f, &l)| TableGroup {
            count: 1,
            lookups: l,
            rows: f.rows,
        })
        .collect();
    let m = &cfg.model;
    let interaction = match m.kind {
        ModelKind::Dlrm => Interaction::Dot {
            self_interaction: m.self_interaction,
        },
        ModelKind::Dcn => Interaction::Cross {
            layers: m.cross_layers,
            rank: m.cross_rank,
        },
    };
    Ok(Workload {
        name: name.to_string(),
        dense_features: schema.num_dense(),
        embedding_dim: m.embedding_dim,
        tables,
        bottom_mlp: m.bottom_mlp.clone(),
        top_mlp: m.top_mlp.clone(),
        interaction,
        batch: cfg.train.batch_size,
        batch_per_chip: false,
        param_bytes: 4,
        grad_bytes: 4,
        index_bytes: 4,
        wire_bytes: None,
    })
}

fn print_header(w: &Workload, hw: &Hardware, mode: Mode, sharding: Sharding) {
    let batch = if w.batch_per_chip {
        format!("{} per chip", w.batch)
    } else {
        format!("{} per step", w.batch)
    };
    println!(
        "model {}: {} tables, {:.1} lookups per sample, dim {}, {:.2} MFLOPs forward per sample, batch {batch}",
        w.name,
        w.num_tables(),
        w.lookups_per_sample(),
        w.embedding_dim,
        w.forward_flops() / 1e6,
    );
    println!(
        "hardware {}: {} host(s) × {} chips, {} TFLOPS × {}, memory {:.0} GB/s peak, {:.0} GB/s for random {}-byte rows",
        hw.name,
        hw.hosts,
        hw.chips_per_host,
        hw.compute.peak_tflops,
        hw.compute.efficiency,
        hw.memory.peak() / 1e9,
        hw.memory.random_read(w.row_bytes() as f64) / 1e9,
        w.row_bytes(),
    );
    println!(
        "{}, {} tables",
        match mode {
            Mode::Training => "training",
            Mode::Inference => "inference",
        },
        match sharding {
            Sharding::Unsharded => "unsharded",
            Sharding::Sharded => "fully sharded",
        }
    );
}

fn print_points(points: &[ScalePoint]) {
    println!(
        "\n{:>6}  {:<5} {:>11} {:>12} {:>13} {:>8} {:>10} {:>8}",
        "chips", "plan", "step", "QPS", "samples/s", "mem", "all-reduce", "speedup"
    );
    for p in points {
        for (plan, step) in &p.steps {
            let speedup = p
                .speedup(*plan)
                .map_or_else(|| "-".into(), |s| format!("{s:.2}×"));
            println!(
                "{:>6}  {:<5} {:>11} {:>12.1} {:>13.0} {:>7.1}% {:>9.1}% {:>8}",
                p.chips,
                plan.name(),
                duration(step.seconds),
                step.qps(),
                step.samples_per_s(),
                step.memory_utilization() * 100.0,
                step.allreduce_share() * 100.0,
                speedup,
            );
        }
    }
    let last = points.last().expect("at least one size");
    for (plan, step) in &last.steps {
        println!("\nphases at {} chips, {}:", last.chips, plan.name());
        for ph in &step.phases {
            if ph.seconds > 0.0 {
                let hidden = if ph.exposed < ph.seconds * 0.999 {
                    format!(
                        "  ({} under another phase)",
                        duration(ph.seconds - ph.exposed)
                    )
                } else {
                    String::new()
                };
                println!(
                    "  {:<24} {:>11} {:>6.1}%{hidden}",
                    ph.name,
                    duration(ph.exposed),
                    ph.exposed / step.seconds * 100.0
                );
            }
        }
    }
}

fn print_json(points: &[ScalePoint]) -> Result<()> {
    for p in points {
        for (plan, step) in &p.steps {
            let phases: serde_json::Map<String, serde_json::Value> = step
                .phases
                .iter()
                .map(|ph| (ph.name.to_string(), serde_json::json!(ph.exposed)))
                .collect();
            let line = serde_json::json!({
                "chips": p.chips,
                "plan": plan.name(),
                "step_seconds": step.seconds,
                "qps": step.qps(),
                "samples_per_sec": step.samples_per_s(),
                "memory_utilization": step.memory_utilization(),
                "allreduce_share": step.allreduce_share(),
                "speedup_over_flat": p.speedup(*plan),
                "exposed_seconds": phases,
            });
            println!("{}", serde_json::to_string(&line)?);
        }
    }
    Ok(())
}

fn duration(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}
