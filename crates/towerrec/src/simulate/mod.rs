//! `towerrec simulate`: predicts a model's inference or training step on hardware
//! described in TOML (or a preset), at one or many system sizes, with a flat, SPTT or
//! DMT embedding exchange, training steps whole or in the runtime's micro-batches
//! (`--parts`); reproduces the scale-in paper's tables and the DMT paper's speedup
//! curve; writes SVG plots. The model is `towerrec-sim` (docs/SIMULATOR.md).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_sim::scale::{self, Plan, ScalePoint};
use towerrec_sim::{
    simulate, simulate_parts, Exchange, Hardware, Interaction, Mode, RankLoad, Scenario, Sharding,
    Step, TableGroup, Towers, Workload,
};
use towerrec_train::config::{Config, ModelKind};
use towerrec_train::files::Files;

mod figures;
mod model;
mod plans;
use figures::*;
use model::{load_model, SimModel};

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
    /// Tower Modules' compression ratio for `dmt`: the paper's DLRM tower (c = 1, p = 0,
    /// D = N / C; DCN: one cross layer, D = N / C) instead of the config's towers
    /// [default: the config's [model.towers], else 2].
    #[arg(long)]
    compression: Option<f64>,
    /// Towers for `sptt` and `dmt` (table i in tower i mod T) [default: the config's,
    /// else one per host while there are tables, else the most that divide the hosts].
    #[arg(long)]
    towers: Option<usize>,
    /// Hosts per tower, K (§3.1.3) [default: as `towerrec train` places the towers].
    #[arg(long)]
    hosts_per_tower: Option<usize>,
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
    /// Training steps in this many parts (micro-batches) where the exchange splits, as
    /// towerrec's runtime runs them: 2 (halves: one part's dense work beside the other
    /// part's exchange) or 1 (whole steps) [default: a towerrec config's
    /// `cluster.overlap_halves`, on unless set off; whole steps for a preset, as the
    /// papers run].
    #[arg(long, value_name = "P")]
    parts: Option<usize>,
    /// Instead: price these sharding plans (JSON, docs/PLANS.md) of the config's tables,
    /// each on its own topology, rank by rank (needs --profile); the step is the
    /// slowest rank's.
    #[arg(long, value_delimiter = ',', value_name = "PLAN.json,…", conflicts_with_all = ["gpus", "reproduce"])]
    plans: Vec<PathBuf>,
    /// With --plans: the access profile (`towerrec profile`) that says which rows the
    /// ranks read.
    #[arg(long, requires = "plans")]
    profile: Option<PathBuf>,
    /// Instead: reproduce a paper's results (`scale-in`: Tables XVI and XVII with
    /// Figures 8, 11, 12b, 13b; `dmt`: the speedup of Figure 10 from 16 to 512 GPUs).
    /// The papers' models and hardware are fixed: the model, hardware and scenario
    /// options do not apply.
    #[arg(long, value_enum, conflicts_with_all = ["config", "hardware", "gpus", "compare", "mode",
        "sharding", "compression", "towers", "hosts_per_tower", "batch", "per_chip_batch", "json",
        "parts"])]
    reproduce: Option<Reproduce>,
}

/// Checks the plots `simulate` may write into `dir` against the files it reads (the
/// rule of `towerrec_train::files`), before anything is written.
fn check_plots(a: &SimulateArgs, dir: &Path) -> Result<()> {
    let mut files = Files::new("simulate");
    let config = Path::new(&a.config);
    if a.reproduce.is_none() && !Workload::PRESETS.contains(&a.config.as_str()) && config.is_file()
    {
        files.config(Some(config), &Config::load(config, &[])?)?;
    }
    let hardware = Path::new(&a.hardware);
    if a.reproduce.is_none() && hardware.is_file() {
        files.input("the hardware file", hardware)?;
    }
    for p in &a.plans {
        files.input("the plan", p)?;
    }
    if let Some(p) = &a.profile {
        files.input("the profile", p)?;
    }
    let names: &[&str] = match a.reproduce {
        Some(Reproduce::ScaleIn) => &figures::SCALE_IN_PLOTS,
        Some(Reproduce::Dmt) => &figures::DMT_PLOTS,
        None => &figures::RUN_PLOTS,
    };
    for name in names {
        files.output("--plots", &dir.join(name))?;
    }
    crate::commands::clean(&files);
    Ok(())
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
    if let Some(c) = a.compression {
        if !(c.is_finite() && c >= 1.0) {
            bail!(
                "--compression: must be a finite number ≥ 1 (how many times smaller the towers' output is), got {c}"
            );
        }
    }
    if a.towers == Some(0) || a.hosts_per_tower == Some(0) {
        bail!("--towers and --hosts-per-tower must be at least 1");
    }
    if let Some(p) = a.parts {
        if !(1..=towerrec_sim::MAX_PARTS).contains(&p) {
            bail!("--parts {p}: towerrec runs a training step whole (1) or in halves (2)");
        }
        if matches!(a.mode, ModeArg::Infer) {
            bail!(
                "--parts applies to training steps (--mode train): an inference query runs whole"
            );
        }
    }
    if let Some(dir) = &a.plots {
        check_plots(&a, dir)?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match a.reproduce {
        Some(Reproduce::ScaleIn) => return reproduce_scale_in(a.plots.as_deref()),
        Some(Reproduce::Dmt) => return reproduce_dmt(a.plots.as_deref()),
        None => {}
    }
    let towerrec_run = !Workload::PRESETS.contains(&a.config.as_str());
    let SimModel {
        mut workload,
        towers: config_towers,
        cluster,
        tower_chunks,
        overlap_halves,
        not_trainable,
    } = load_model(&a.config)?;
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
    if let (Mode::Training, Some(why)) = (mode, not_trainable) {
        bail!("--mode train: {why}");
    }
    // As towerrec trains the config; the papers' models as the papers do.
    let parts = match (mode, a.parts) {
        (Mode::Inference, _) => 1,
        (Mode::Training, Some(p)) => p,
        (Mode::Training, None) => 1 + usize::from(overlap_halves),
    };
    if !a.plans.is_empty() {
        let req = plans::PlanRequest {
            config: &a.config,
            plans: &a.plans,
            profile: a.profile.as_deref(),
            mode,
            json: a.json,
            parts,
            early_maps: config_towers
                .as_ref()
                .is_some_and(|t| t.kind.per_feature_width().is_some()),
        };
        return plans::run(req, workload, &hw);
    }
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
    if plans.iter().all(|p| *p == Plan::Flat) {
        for (flag, given) in [
            ("--towers", a.towers.is_some()),
            ("--hosts-per-tower", a.hosts_per_tower.is_some()),
            ("--compression", a.compression.is_some()),
        ] {
            if given {
                bail!("{flag} applies to the sptt and dmt exchanges; add one to --compare (e.g. --compare flat,dmt)");
            }
        }
    }
    if sharding == Sharding::Sharded && plans.iter().any(|p| *p != Plan::Flat) {
        bail!("SPTT and DMT are modelled for unsharded tables only: use --sharding unsharded");
    }
    let gpus = if a.gpus.is_empty() {
        vec![hw.chips()]
    } else {
        a.gpus.clone()
    };
    let kind = match (a.compression, &config_towers) {
        (Some(c), _) => Towers::module_for(&workload, c)?,
        (None, Some(t)) => t.kind,
        (None, None) => Towers::module_for(&workload, 2.0)?,
    };
    let towers = |hosts: usize| -> towerrec_sim::Result<Towers> {
        let mut t = match (a.towers, &config_towers) {
            (Some(n), _) => Towers::strided(kind, workload.num_tables(), n)?,
            (None, Some(t)) => Towers { kind, ..t.clone() },
            (None, None) => Towers::per_host(&workload, kind, hosts)?,
        };
        if a.hosts_per_tower.is_some() {
            t.hosts_per_tower = a.hosts_per_tower;
        }
        // A towerrec config is priced as towerrec runs it; the paper's models as the
        // paper does.
        t.maps_at_lookup = towerrec_run;
        t.chunks = tower_chunks;
        Ok(t)
    };
    let points = if sharding == Sharding::Unsharded {
        scale::compare_parts(&workload, &hw, &gpus, &plans, mode, &towers, parts)?
    } else {
        sharded_points(&workload, &hw, &gpus, mode, parts)?
    };
    if a.json {
        print_json(&points)?;
    } else {
        print_header(&workload, &hw, mode, sharding);
        if mode == Mode::Training && parts > 1 {
            println!("{}", schedule_line(parts));
        }
        if let Some((h, r)) = cluster.filter(|&c| c != (hw.hosts, hw.chips_per_host)) {
            if a.gpus.is_empty() {
                println!(
                    "note: the config's [cluster] is {h} × {r}; simulating the hardware's {} × {}",
                    hw.hosts, hw.chips_per_host
                );
            }
        }
        print_points(&workload, &points, parts);
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
    parts: usize,
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
                steps: vec![(
                    Plan::Flat,
                    simulate_parts(workload, &sized, scenario, RankLoad::EVEN, parts)?,
                )],
                towers: None,
            })
        })
        .collect()
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

/// What a step in `parts` parts runs side by side (docs/SIMULATOR.md, "Steps in parts").
fn schedule_line(parts: usize) -> String {
    format!(
        "steps in {parts} parts where the exchange splits, as towerrec runs them: each part's \
         dense work beside the other part's embedding exchange (--parts 1: whole steps)"
    )
}

/// The phases heading's note on the schedule of `step` when `asked` parts.
fn schedule_note(step: &Step, asked: usize) -> String {
    if step.parts > 1 {
        format!(", in {} parts", step.parts)
    } else if asked > 1 {
        ", whole steps (towerrec splits only the flat exchange and towers whose maps run before step d)"
            .into()
    } else {
        String::new()
    }
}

fn print_points(w: &Workload, points: &[ScalePoint], parts: usize) {
    if let Some(t) = points.iter().find_map(|p| p.towers) {
        let flat = w.dense_counts().forward_flops();
        let dmt = t.dense.forward_flops() + t.module_flops;
        println!(
            "DMT model: dense forward {:.3} MFLOPs per sample against {:.3} flat (ratio {:.3}; \
             Tower Modules {:.3} MFLOPs, {} parameters)",
            dmt / 1e6,
            flat / 1e6,
            dmt / flat,
            t.module_flops / 1e6,
            t.module_params,
        );
    }
    println!(
        "\n{:>6}  {:<5} {:>11} {:>12} {:>13} {:>8} {:>10} {:>8}",
        "chips", "plan", "step", "QPS", "samples/s", "mem", "all-reduce", "speedup"
    );
    for p in points {
        if let Some(t) = &p.towers {
            println!(
                "{:>6}  towers: {} in {} group(s) of {} host(s), compression {:.2}",
                p.chips, t.towers, t.groups, t.hosts_per_group, t.compression
            );
        }
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
        println!(
            "\nphases at {} chips, {}{}:",
            last.chips,
            plan.name(),
            schedule_note(step, parts)
        );
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
        print_overlaps(step);
    }
}

/// The parts a step in parts ran side by side, one line each.
fn print_overlaps(step: &Step) {
    for o in &step.overlaps {
        println!(
            "  overlapped: {} of {} ({}) beside part {}'s interaction, top_mlp and top_mlp_backward ({}): {} hidden",
            o.exchange_part,
            o.exchange,
            duration(o.exchange_seconds),
            o.dense_part,
            duration(o.dense_seconds),
            duration(o.hidden)
        );
    }
}

/// `step`'s overlaps as JSON.
fn overlaps_json(step: &Step) -> serde_json::Value {
    step.overlaps
        .iter()
        .map(|o| {
            serde_json::json!({
                "exchange": o.exchange,
                "exchange_part": o.exchange_part,
                "exchange_seconds": o.exchange_seconds,
                "dense_part": o.dense_part,
                "dense_seconds": o.dense_seconds,
                "hidden_seconds": o.hidden,
            })
        })
        .collect()
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
                "parts": step.parts,
                "overlaps": overlaps_json(step),
                "towers": p.towers.map(|t| serde_json::json!({
                    "towers": t.towers,
                    "groups": t.groups,
                    "hosts_per_group": t.hosts_per_group,
                    "compression": t.compression,
                })),
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
