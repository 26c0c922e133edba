//! `towerrec simulate`: predicts a model's inference or training step on hardware
//! described in TOML (or a preset), at one or many system sizes, with a flat, SPTT or
//! DMT embedding exchange; reproduces the scale-in paper's tables and the DMT paper's
//! speedup curve; writes SVG plots. The model is `towerrec-sim` (docs/SIMULATOR.md).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_sim::paper::{self, BREAKDOWN};
use towerrec_sim::plot::{self, Bar, LineChart, Series};
use towerrec_sim::scale::{self, Plan, ScalePoint};
use towerrec_sim::{
    simulate, Exchange, Hardware, Interaction, Mode, Scenario, Sharding, TableGroup, Workload,
};
use towerrec_train::config::{Config, ModelKind};

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
    print_header(&workload, &hw, mode, sharding);
    print_points(&points);
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
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
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

fn duration(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}

const LATENCIES_US: [f64; 11] = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
const BANDWIDTHS_GBS: [f64; 5] = [100.0, 250.0, 500.0, 750.0, 1000.0];

fn qps_chart(title: String, w: &Workload, hw: &Hardware, scenario: Scenario) -> Result<LineChart> {
    let sweep = paper::qps_sweep(w, hw, scenario, &LATENCIES_US, &BANDWIDTHS_GBS)?;
    Ok(LineChart {
        title,
        x_label: "collective latency (µs)".into(),
        y_label: "QPS".into(),
        series: sweep
            .into_iter()
            .map(|(bw, points)| Series {
                label: format!("{bw:.0} GB/s"),
                points,
            })
            .collect(),
        log_x: false,
    })
}

fn breakdown_bars(
    w: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    latency: f64,
) -> Result<Vec<Bar>> {
    BANDWIDTHS_GBS
        .iter()
        .map(|&bw| {
            let step = simulate(w, &paper::with_collectives(hw, latency, bw), scenario)?;
            Ok(Bar {
                label: format!("{bw:.0} GB/s"),
                parts: paper::breakdown(&step).to_vec(),
            })
        })
        .collect()
}

fn write_run_plots(
    dir: &Path,
    w: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    points: &[ScalePoint],
) -> Result<()> {
    let sized = hw.with_chips(points[0].chips)?;
    let chart = qps_chart(format!("{} on {}", w.name, hw.name), w, &sized, scenario)?;
    let path = dir.join("qps_vs_collectives.svg");
    plot::line_charts(&path, &[chart], 1)?;
    println!("\nwrote {}", path.display());
    let bars: Vec<Bar> = points
        .iter()
        .flat_map(|p| {
            p.steps.iter().map(move |(plan, step)| Bar {
                label: format!("{} {}", p.chips, plan.name()),
                parts: paper::breakdown(step).to_vec(),
            })
        })
        .collect();
    let path = dir.join("breakdown.svg");
    plot::stacked_shares(
        &path,
        &format!("{}: time per step", w.name),
        &BREAKDOWN,
        &bars,
    )?;
    println!("wrote {}", path.display());
    if points.len() > 1 && points[0].steps.len() > 1 {
        let path = dir.join("speedup.svg");
        plot::line_charts(&path, &[speedup_chart(points, &w.name)], 1)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn speedup_chart(points: &[ScalePoint], name: &str) -> LineChart {
    let plans: Vec<Plan> = points[0].steps.iter().map(|(p, _)| *p).collect();
    LineChart {
        title: format!("{name}: speedup over the flat exchange"),
        x_label: "GPUs".into(),
        y_label: "speedup".into(),
        series: plans
            .into_iter()
            .map(|plan| Series {
                label: plan.name().into(),
                points: points
                    .iter()
                    .filter_map(|p| Some((p.chips as f64, p.speedup(plan)?)))
                    .collect(),
            })
            .collect(),
        log_x: true,
    }
}

fn reproduce_scale_in(plots: Option<&Path>) -> Result<()> {
    let rows = paper::reproduce()?;
    println!("The scale-in paper's Tables XVI (inference) and XVII (training), simulated:\n");
    print!("{}", paper::markdown(&rows));
    println!("\nRandom row reads (Figure 6), GB/s and share of the peak:\n");
    println!("| memory | peak GB/s | 64 B | 128 B | 256 B |\n|---|---:|---:|---:|---:|");
    for s in memory_chart()?.series {
        let peak = memory_systems()
            .into_iter()
            .find(|(l, _)| *l == s.label)
            .map_or(0.0, |(_, m)| m.peak() / 1e9);
        let cell = |row: f64| {
            let gbs = s.points.iter().find(|p| p.0 == row).map_or(0.0, |p| p.1);
            format!("{gbs:.0} ({:.0}%)", gbs / peak * 100.0)
        };
        println!(
            "| {} | {peak:.0} | {} | {} | {} |",
            s.label,
            cell(64.0),
            cell(128.0),
            cell(256.0)
        );
    }
    let Some(dir) = plots else {
        return Ok(());
    };
    let path = dir.join("fig6_memory_random_access.svg");
    plot::line_charts(&path, &[memory_chart()?], 1)?;
    println!("wrote {}", path.display());
    let reference = Hardware::preset("reference")?;
    for (mode, file, fig) in [
        (Mode::Inference, "fig8_inference_qps.svg", "Fig. 8"),
        (Mode::Training, "fig11_training_qps.svg", "Fig. 11"),
    ] {
        let charts = paper::CONFIGS
            .iter()
            .map(|&(label, large, sharding)| {
                let scenario = Scenario {
                    mode,
                    sharding,
                    exchange: Exchange::Flat,
                };
                qps_chart(
                    format!("{fig}: {label}"),
                    &Workload::rm2(large),
                    &reference,
                    scenario,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let path = dir.join(file);
        plot::line_charts(&path, &charts, 2)?;
        println!("wrote {}", path.display());
    }
    for (large, sharding, file, title) in [
        (
            false,
            Sharding::Unsharded,
            "fig12b_training_breakdown.svg",
            "Fig. 12b: small, unsharded, 1 µs",
        ),
        (
            true,
            Sharding::Sharded,
            "fig13b_training_breakdown.svg",
            "Fig. 13b: large, sharded, 1 µs",
        ),
    ] {
        let scenario = Scenario {
            mode: Mode::Training,
            sharding,
            exchange: Exchange::Flat,
        };
        let bars = breakdown_bars(&Workload::rm2(large), &reference, scenario, 1.0)?;
        let path = dir.join(file);
        plot::stacked_shares(&path, title, &BREAKDOWN, &bars)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Random-access bandwidth by row size of common memory systems (the paper's Figure 6,
/// Table VIII's parts).
fn memory_systems() -> Vec<(&'static str, towerrec_sim::MemorySystem)> {
    [
        ("DDR4-3200, 6 channels", "ddr4", 3200.0, 6),
        ("GDDR6 14 Gbps, 11 chips", "gddr6", 14000.0, 11),
        ("HBM2 2300 MT/s, 4 stacks (DGX-2)", "hbm2", 2300.0, 4),
        ("HBM2 2430 MT/s, 5 stacks (A100)", "hbm2", 2430.0, 5),
        ("HBM2E 3000 MT/s, 6 stacks (RecSpeed)", "hbm2e", 3000.0, 6),
        ("HBM3 5200 MT/s, 5 stacks (H100)", "hbm3", 5200.0, 5),
    ]
    .into_iter()
    .map(|(label, timing, rate, units)| {
        let m = towerrec_sim::MemorySystem::Dram {
            timing: towerrec_sim::TimingRef::Preset(timing.into()),
            units,
            data_rate_mts: Some(rate),
        };
        (label, m)
    })
    .collect()
}

fn memory_chart() -> Result<LineChart> {
    let series = memory_systems()
        .into_iter()
        .map(|(label, m)| {
            let points = [32.0, 64.0, 128.0, 256.0, 512.0]
                .iter()
                .map(|&row| (row, m.random_read(row) / 1e9))
                .collect();
            Series {
                label: label.into(),
                points,
            }
        })
        .collect();
    Ok(LineChart {
        title: "Fig. 6: random row reads, one activation per row".into(),
        x_label: "row bytes".into(),
        y_label: "GB/s".into(),
        series,
        log_x: true,
    })
}

/// The GPU counts of the DMT paper's Figure 10.
pub const DMT_GPUS: [usize; 6] = [16, 32, 64, 128, 256, 512];

fn reproduce_dmt(plots: Option<&Path>) -> Result<()> {
    let hw = Hardware::preset("h100-cluster")?;
    let w = Workload::dmt_dlrm();
    let points = scale::compare(
        &w,
        &hw,
        &DMT_GPUS,
        &[Plan::Flat, Plan::Sptt, Plan::Dmt],
        Mode::Training,
        2.0,
    )?;
    println!(
        "The DMT paper's Figure 10 (DLRM on H100, local batch 16K, towers with CR 2), simulated:\n"
    );
    print_header(&w, &hw, Mode::Training, Sharding::Unsharded);
    print_points(&points);
    if let Some(dir) = plots {
        let path = dir.join("fig10_dmt_speedup.svg");
        plot::line_charts(&path, &[speedup_chart(&points, &w.name)], 1)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
