//! `towerrec simulate --plans P,… --profile PROF`: particular sharding plans priced by
//! the simulator. OPER's cost model (§3.2 Eq. 1–3, the `towerrec plan --profile`
//! rating, a `towerrec_plan::CostModel`) says what each rank looks up and sends under
//! the access profile; `towerrec_sim::simulate_plan` prices each rank's step from that,
//! and the plan's step is the slowest rank's. This is how plans from other planners
//! (TorchRec's, bench/torchrec) are set beside towerrec's.

use super::*;
use towerrec_data::AccessProfile;
use towerrec_plan::oper::OperModel;
use towerrec_plan::{CostParams, Plan, ShardingType, TableSpec};
use towerrec_sim::{cost_params, simulate_plan, PlanStep};

/// What `--plans` needs besides the model and hardware.
pub(super) struct PlanRequest<'a> {
    pub config: &'a str,
    pub plans: &'a [PathBuf],
    pub profile: Option<&'a Path>,
    pub mode: Mode,
    pub json: bool,
    /// Parts of a training step where a plan splits ([`plan_parts`]).
    pub parts: usize,
    /// Whether the config's Tower Modules are per-feature maps (run before step d when
    /// a tower plan's tables are whole).
    pub early_maps: bool,
}

/// A plan's simulated step.
struct Priced {
    label: String,
    step: PlanStep,
    /// DMT towers in the plan: priced as the flat exchange all the same.
    towers: usize,
}

/// The parts towerrec's runtime can run `plan`'s steps in (`towerrec-train`'s
/// `ShardedEmbeddings::max_parts`): one with table-row-wise tables across several hosts
/// (their two-step exchange runs whole) or with towers whose modules do not run before
/// step d (`early_maps`, every table whole on one rank), else two.
fn plan_parts(plan: &Plan, early_maps: bool) -> usize {
    let whole = |sharding| sharding == ShardingType::TableWise;
    let splits = if plan.towers.is_empty() {
        plan.topology.hosts < 2
            || plan
                .tables
                .iter()
                .all(|t| t.sharding != ShardingType::TableRowWise)
    } else {
        early_maps && plan.tables.iter().all(|t| whole(t.sharding))
    };
    if splits {
        towerrec_sim::MAX_PARTS
    } else {
        1
    }
}

pub(super) fn run(req: PlanRequest, workload: Workload, hw: &Hardware) -> Result<()> {
    let Some(profile_path) = req.profile else {
        bail!(
            "--plans needs --profile (written by `towerrec profile`): a plan's ranks are priced by the rows they serve"
        );
    };
    let path = Path::new(req.config);
    if !path.exists() {
        bail!(
            "--plans needs --config to be a towerrec config file (its tables are the plans'), not '{}'",
            req.config
        );
    }
    let cfg = Config::load(path, &[])?;
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
    let tables = towerrec_train::cluster::table_specs(&cfg, &schema);
    let profile = AccessProfile::load(profile_path)
        .with_context(|| format!("reading --profile {}", profile_path.display()))?;
    let mut priced = Vec::new();
    for p in req.plans {
        let label = p.display().to_string();
        let plan = Plan::load(p).with_context(|| format!("reading plan {label}"))?;
        let topo = plan.topology;
        plan.validate(&tables, topo, None)
            .with_context(|| format!("plan {label} does not fit the config's tables"))?;
        // One host may use fewer chips than the hardware's host has; several hosts
        // must be whole hardware hosts.
        let fits = if topo.hosts == 1 {
            topo.ranks_per_host <= hw.chips_per_host
        } else {
            topo.ranks_per_host == hw.chips_per_host
        };
        if !fits {
            bail!(
                "plan {label} is {} host(s) × {} ranks, but the hardware '{}' has {} chips per host",
                topo.hosts,
                topo.ranks_per_host,
                hw.name,
                hw.chips_per_host
            );
        }
        let sized = hw.with_chips(topo.world_size())?;
        let base = CostParams {
            batch_size: workload.global_batch(topo.world_size()) as usize,
            ..CostParams::default()
        };
        let model = OperModel {
            profile: &profile,
            cost: cost_params(&sized, base, &tables),
        };
        let scenario = Scenario {
            mode: req.mode,
            sharding: Sharding::Unsharded,
            exchange: Exchange::Flat,
        };
        let parts = req.parts.min(plan_parts(&plan, req.early_maps));
        let step = simulate_plan(&model, &plan, &tables, &workload, &sized, scenario, parts)
            .with_context(|| format!("rating plan {label}"))?;
        priced.push(Priced {
            label,
            step,
            towers: plan.towers.len(),
        });
    }
    if req.json {
        print_json_plans(&priced)
    } else {
        print_plans(&workload, hw, &tables, &priced, req.parts);
        Ok(())
    }
}

fn print_plans(w: &Workload, hw: &Hardware, tables: &[TableSpec], priced: &[Priced], parts: usize) {
    println!(
        "model {}: {} tables, global batch {}; hardware {} ({} chips per host); each plan's ranks priced by their lookups and exchanged bytes under the profile",
        w.name,
        tables.len(),
        w.batch,
        hw.name,
        hw.chips_per_host
    );
    println!(
        "\n{:<40} {:>6} {:>12} {:>12} {:>8} {:>12} {:>19} {:>12} {:>8} {:>10} {:>10} {:>10}",
        "plan",
        "ranks",
        "step",
        "fastest",
        "balance",
        "samples/s",
        "slowest rank",
        "model ms",
        "model bal",
        "MB/iter",
        "cross MB",
        "copies MB"
    );
    for p in priced {
        let (m, ps) = (&p.step.model, &p.step);
        let s = ps.slowest();
        let max = ps.steps[s].seconds;
        let load = ps.loads[s];
        println!(
            "{:<40} {:>6} {:>12} {:>12} {:>7.1}% {:>12.0} {:>19} {:>12.4} {:>7.1}% {:>10.3} {:>10.3} {:>10.3}",
            p.label,
            ps.steps.len(),
            duration(max),
            duration(ps.fastest_seconds()),
            100.0 * ps.fastest_seconds() / max,
            ps.steps[s].samples_per_s(),
            format!(
                "{s} ({:.2}, {:.2}, {:.2})",
                load.lookups, load.exchange.intra, load.exchange.cross
            ),
            1e3 * m.max_seconds(),
            100.0 * m.balance(),
            m.total_bytes() / 1e6,
            m.cross_host_bytes() / 1e6,
            m.copy_sync_bytes / 1e6,
        );
    }
    println!(
        "\nslowest rank (lookups, exchange within its host, across hosts): its shares of an even spread's; model: OPER's cost model at the hardware's rates; \
         copies MB: gradients of rows held on several ranks and read in an iteration, all-reduced each training step (in the step)"
    );
    for p in priced.iter().filter(|p| p.towers > 0) {
        println!(
            "{}: {}",
            p.label,
            crate::plan_oper::flat_rating_note(p.towers)
        );
    }
    if parts > 1 {
        println!("\n{}", super::schedule_line(parts));
        for p in priced {
            let step = &p.step.steps[p.step.slowest()];
            if step.parts > 1 {
                println!("{}, slowest rank:", p.label);
                super::print_overlaps(step);
            } else {
                println!(
                    "{}: whole steps (table-row-wise tables across hosts, or towers whose modules do not run before step d)",
                    p.label
                );
            }
        }
    }
}

fn print_json_plans(priced: &[Priced]) -> Result<()> {
    for p in priced {
        let (m, ps) = (&p.step.model, &p.step);
        let s = ps.slowest();
        let line = serde_json::json!({
            "plan": p.label,
            "ranks": ps.steps.len(),
            "step_seconds": ps.steps[s].seconds,
            "fastest_rank_seconds": ps.fastest_seconds(),
            "balance": ps.fastest_seconds() / ps.steps[s].seconds,
            "samples_per_sec": ps.steps[s].samples_per_s(),
            "slowest_rank": s,
            "rank_step_seconds": ps.steps.iter().map(|x| x.seconds).collect::<Vec<_>>(),
            "rank_lookup_share": ps.loads.iter().map(|l| l.lookups).collect::<Vec<_>>(),
            "rank_intra_exchange_share": ps.loads.iter().map(|l| l.exchange.intra).collect::<Vec<_>>(),
            "rank_cross_exchange_share": ps.loads.iter().map(|l| l.exchange.cross).collect::<Vec<_>>(),
            "model_max_rank_seconds": m.max_seconds(),
            "model_balance": m.balance(),
            "model_bytes_per_iteration": m.total_bytes(),
            "model_cross_host_bytes_per_iteration": m.cross_host_bytes(),
            "copy_sync_bytes_per_iteration": m.copy_sync_bytes,
            "copy_sync_seconds": ps.steps[s].phase("copy_sync").map_or(0.0, |ph| ph.seconds),
            "towers_priced_as_flat": p.towers,
            "parts": ps.steps[s].parts,
            "overlaps": overlaps_json(&ps.steps[s]),
        });
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}
