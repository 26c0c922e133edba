//! `towerrec plan` with an access profile (docs/OPER.md): the OPER strategies and
//! their baselines, OPER's cost model (Eq. 1–3) of any plan printed per rank, the
//! rank-to-rank traffic as an SVG heatmap, and the model's rates read from a hardware
//! file (the one `towerrec simulate` and `calibrate` use).

use anyhow::{anyhow, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_data::AccessProfile;
use towerrec_plan::oper::{self, Mode, OperModel, OperParams, Placement};
use towerrec_plan::partition::Matrix;
use towerrec_plan::{CostModel, CostParams, Plan, PlanCost, TableSpec, Topology};
use towerrec_sim::Hardware;
use towerrec_train::files::Files;

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Replicas on every rank, kept in sync by all-reduce (Eq. 4–5).
    Training,
    /// Replicas where ranks fetch over costly links (Algorithm 1).
    Inference,
}

#[derive(Args)]
pub struct OperArgs {
    /// Access profile (`towerrec profile`): needed by the oper, memory-greedy and
    /// access-greedy strategies; with any other, the plan is rated by OPER's model.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// oper: bytes of replicas, as a share of all tables' bytes spread over the ranks
    /// ("1%" or 0.01).
    #[arg(long, value_name = "SHARE", default_value = "5%", value_parser = parse_share)]
    extra_memory: f64,
    /// oper: first partition threshold, a share of all reads and bytes; halved until
    /// --balance-target is met.
    #[arg(long, value_name = "SHARE", default_value = "0.1%", value_parser = parse_share)]
    threshold: f64,
    /// oper: degree of balance (least over most loaded rank) to reach.
    #[arg(long, value_name = "SHARE", default_value = "0.99", value_parser = parse_share)]
    balance_target: f64,
    /// oper: what the replicas are for.
    #[arg(long, value_enum, default_value = "training")]
    mode: ModeArg,
    /// Hardware file or preset whose gather and link rates price the plan (as
    /// `towerrec simulate --hardware`) [default: the cost model's GPU-class rates].
    #[arg(long, value_name = "FILE|PRESET")]
    hardware: Option<String>,
    /// With --profile: the rank-to-rank embedding traffic as SVG [default: the
    /// --output path with .comm.svg].
    #[arg(long)]
    heatmap: Option<PathBuf>,
}

/// "1%" → 0.01; "0.01" → 0.01.
fn parse_share(s: &str) -> std::result::Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a share such as 1% or 0.01"))?;
    let v = v * scale;
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("'{s}' is not a share between 0 and 100%"))
    }
}

impl OperArgs {
    /// Records the files these options read: the profile, a hardware file.
    pub fn inputs(&self, files: &mut Files) -> Result<()> {
        if let Some(p) = &self.profile {
            files.input("the profile", p)?;
        }
        if let Some(h) = self.hardware.as_deref().filter(|h| Path::new(h).is_file()) {
            files.input("the hardware file", Path::new(h))?;
        }
        Ok(())
    }

    /// Whether a profile was given (then the plan is rated and its heatmap drawn).
    pub fn has_profile(&self) -> bool {
        self.profile.is_some()
    }

    pub fn profile(&self) -> Result<Option<AccessProfile>> {
        self.profile
            .as_ref()
            .map(|p| {
                AccessProfile::load(p).with_context(|| format!("reading --profile {}", p.display()))
            })
            .transpose()
    }

    /// The cost model's rates: from --hardware, else `base`'s.
    pub fn cost(&self, base: CostParams, tables: &[TableSpec]) -> Result<CostParams> {
        let Some(name) = &self.hardware else {
            return Ok(base);
        };
        let hw = Hardware::load(name).with_context(|| format!("--hardware {name}"))?;
        Ok(towerrec_sim::cost_params(&hw, base, tables))
    }

    /// The heatmap's path, if one is drawn.
    pub fn heatmap_path(&self, output: Option<&Path>) -> Option<PathBuf> {
        self.heatmap
            .clone()
            .or_else(|| output.map(|o| o.with_extension("comm.svg")))
    }
}

/// Plans by an OPER strategy; prints the back-off's attempts.
pub fn plan(
    placement: Placement,
    a: &OperArgs,
    tables: &[TableSpec],
    profile: &AccessProfile,
    topology: Topology,
    cost: CostParams,
    budget: Option<u64>,
) -> Result<Plan> {
    let p = OperParams {
        cost,
        threshold: a.threshold,
        balance_target: a.balance_target,
        extra_memory: a.extra_memory,
        mode: match a.mode {
            ModeArg::Training => Mode::Training,
            ModeArg::Inference => Mode::Inference,
        },
        memory_budget: budget,
        ..OperParams::default()
    };
    if placement != Placement::Oper {
        return Ok(oper::baseline(tables, profile, topology, &p, placement)?);
    }
    let out = oper::plan(tables, profile, topology, &p)?;
    for t in &out.attempts {
        eprintln!(
            "threshold {:.4}%: {} partitions, degree of balance {:.2}%, {:.2} s",
            100.0 * t.threshold,
            t.partitions,
            100.0 * t.balance,
            t.seconds
        );
    }
    Ok(out.plan)
}

/// OPER's model of `plan`, per rank and in all, on stderr; the heatmap to `heatmap`.
pub fn report(
    plan: &Plan,
    tables: &[TableSpec],
    profile: &AccessProfile,
    cost: &CostParams,
    heatmap: Option<&Path>,
) -> Result<PlanCost> {
    let model = OperModel {
        profile,
        cost: *cost,
    };
    let r = model.price(plan, tables)?;
    let extra = plan.replica_bytes(tables);
    let topo = plan.topology;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    eprintln!(
        "OPER cost model, per iteration of {} samples:",
        cost.batch_size
    );
    eprintln!(
        "{:>6} {:>5} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10}",
        "rank", "host", "MiB", "extra MiB", "lookup ms", "sent MB", "recv MB", "model ms"
    );
    for (rank, extra) in extra.iter().enumerate().take(r.memory.len()) {
        let (sent, recv) = (r.sent(rank), r.received(rank));
        eprintln!(
            "{rank:>6} {:>5} {:>10.2} {:>10.2} {:>11.4} {:>10.3} {:>10.3} {:>10.4}",
            topo.host_of(rank),
            mib(r.memory[rank]),
            mib(*extra),
            1e3 * r.lookup_seconds[rank],
            sent / 1e6,
            recv / 1e6,
            1e3 * r.seconds[rank]
        );
    }
    let (mean, var) = r.link_mean_variance();
    eprintln!(
        "embedding traffic {:.3} MB per iteration ({:.3} MB across hosts; per link mean {:.4} MB, \
         variance {:.3e} MB²); slowest rank {:.4} ms; degree of balance {:.2}%; extra memory {:.2}% of the tables",
        r.total_bytes() / 1e6,
        r.cross_host_bytes() / 1e6,
        mean / 1e6,
        var / 1e12,
        1e3 * r.max_seconds(),
        100.0 * r.balance(),
        100.0 * extra_share(&r, tables)
    );
    eprintln!(
        "gradients of rows with copies, read in an iteration: {:.3} MB per iteration (summed over the copies by a sparse AllReduce in training)",
        r.copy_sync_bytes / 1e6
    );
    if !plan.tables.iter().any(|t| t.sharding.sends_every_sample()) {
        copies_line(&r, tables, profile, topo, cost)?;
    }
    if !plan.towers.is_empty() {
        eprintln!("{}", flat_rating_note(plan.towers.len()));
    }
    if let Some(path) = heatmap {
        draw(&r, topo, path)?;
        eprintln!("drew {}", path.display());
    }
    Ok(r)
}

/// How far the plan's copies cut the modelled traffic, and the most any placement with
/// as much extra memory could (a row-wise shard's traffic is priced per sample, so
/// plans with one are left out).
fn copies_line(
    r: &PlanCost,
    tables: &[TableSpec],
    profile: &AccessProfile,
    topo: Topology,
    cost: &CostParams,
) -> Result<()> {
    let used = extra_share(r, tables);
    let bound = oper::copy_bound(tables, profile, topo.world_size(), used, cost.batch_size)?;
    let plan_cut = match bound.without_copies / r.total_bytes() {
        x if x.is_finite() => format!("by {x:.2}x"),
        _ => "to nothing".to_string(),
    };
    let best = if bound.best_cut.is_finite() {
        format!("no placement cuts it by more than {:.2}x", bound.best_cut)
    } else {
        "a placement can leave none".to_string()
    };
    eprintln!(
        "copies cut the traffic without copies ({:.3} MB) {plan_cut}; with {:.2}% extra memory {best} (reads spread evenly over the ranks)",
        bound.without_copies / 1e6,
        100.0 * used,
    );
    Ok(())
}

/// Bytes held beyond one copy of every row (replicas of partitions and data-parallel
/// tables alike), as a share of all tables' bytes.
fn extra_share(r: &PlanCost, tables: &[TableSpec]) -> f64 {
    let held: u64 = r.memory.iter().sum();
    let once: u64 = tables.iter().map(TableSpec::bytes).sum();
    held.saturating_sub(once) as f64 / once.max(1) as f64
}

fn draw(r: &PlanCost, topo: Topology, path: &Path) -> Result<()> {
    let w = r.traffic.len();
    let values: Vec<f64> = r.traffic.iter().flatten().map(|b| b / 1e6).collect();
    let matrix = Matrix::new(w, values).map_err(|e| anyhow!("{e}"))?;
    let hosts: Vec<Vec<usize>> = (0..topo.hosts)
        .map(|h| topo.host_ranks(h).collect())
        .collect();
    let names: Vec<String> = (0..w).map(|r| format!("rank {r}")).collect();
    let title = "MB per iteration from rank (column) to rank (row), hosts outlined";
    crate::partition_plot::heatmap(path, &matrix, &hosts, &names, title)
}

/// What the OPER rating of a plan with DMT towers does not see: it prices the tables'
/// exchange as the flat path runs it.
pub fn flat_rating_note(towers: usize) -> String {
    format!(
        "note: this plan has {towers} DMT tower(s); these figures price its exchange as the flat path runs it \
         (each read's pooled row sent straight to its sample's owner). SPTT runs it within each tower's \
         hosts first, then across hosts once per peer (docs/DMT.md); `towerrec simulate --compare dmt` prices that"
    )
}
