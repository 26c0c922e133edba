//! `towerrec simulate --plans P,… --profile PROF`: particular sharding plans priced by
//! the simulator. The simulator's flat step assumes every chip does the same embedding
//! work; a plan gives each rank its own share. OPER's cost model (§3.2 Eq. 1–3, the
//! `towerrec plan --profile` rating) says how many rows each rank looks up and how many
//! bytes it sends and receives under the access profile; those, over an even spread's,
//! are the rank's [`RankLoad`], and the step is the slowest rank's. This is how plans
//! from other planners (TorchRec's, bench/torchrec) are set beside towerrec's.

use super::*;
use crate::plan_oper;
use towerrec_data::AccessProfile;
use towerrec_plan::oper::{self, Rating};
use towerrec_plan::{CostParams, Plan, TableSpec, Topology};
use towerrec_sim::{simulate_rank, Group, LevelShares, Phase, RankLoad, Resource, Step};

/// What `--plans` needs besides the model and hardware.
pub(super) struct PlanRequest<'a> {
    pub config: &'a str,
    pub plans: &'a [PathBuf],
    pub profile: Option<&'a Path>,
    pub mode: Mode,
    pub json: bool,
}

/// A plan's simulated step: every rank's, and the model's rating beside it.
struct Priced {
    label: String,
    steps: Vec<Step>,
    loads: Vec<RankLoad>,
    rating: Rating,
    topology: towerrec_plan::Topology,
    /// DMT towers in the plan: priced as the flat exchange all the same.
    towers: usize,
}

impl Priced {
    fn slowest(&self) -> usize {
        (0..self.steps.len())
            .max_by(|&a, &b| self.steps[a].seconds.total_cmp(&self.steps[b].seconds))
            .unwrap_or(0)
    }

    fn fastest_seconds(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| s.seconds)
            .fold(f64::INFINITY, f64::min)
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
        let cost = plan_oper::from_hardware(
            &sized,
            CostParams {
                batch_size: workload.global_batch(topo.world_size()) as usize,
                ..CostParams::default()
            },
            &tables,
        );
        let rating = oper::rate(&plan, &tables, &profile, &cost)
            .with_context(|| format!("rating plan {label}"))?;
        let loads = rank_loads(&rating, topo, cost.gather_bytes_per_s);
        let scenario = Scenario {
            mode: req.mode,
            sharding: Sharding::Unsharded,
            exchange: Exchange::Flat,
        };
        // Training: rows held on several ranks sum their gradients every step, the
        // same all-reduce on every rank (Eq. 1–3 leave it out; OPER's Eq. 4–5 weigh it).
        let copy_sync = match req.mode {
            Mode::Training if rating.copy_sync_bytes > 0.0 => {
                let world = Group {
                    hosts: topo.hosts,
                    per_host: topo.ranks_per_host,
                };
                sized
                    .network
                    .hierarchical_all_reduce(rating.copy_sync_bytes, world)
            }
            _ => 0.0,
        };
        let steps = loads
            .iter()
            .map(|&l| {
                let mut step = simulate_rank(&workload, &sized, scenario, l)?;
                if copy_sync > 0.0 {
                    step.phases.push(Phase {
                        name: "copy_sync",
                        resource: Resource::Network,
                        seconds: copy_sync,
                        exposed: copy_sync,
                    });
                    step.seconds += copy_sync;
                }
                Ok(step)
            })
            .collect::<towerrec_sim::Result<Vec<_>>>()?;
        priced.push(Priced {
            label,
            steps,
            loads,
            rating,
            topology: topo,
            towers: plan.towers.len(),
        });
    }
    if req.json {
        print_json_plans(&priced)
    } else {
        print_plans(&workload, hw, &tables, &priced);
        Ok(())
    }
}

/// Each rank's lookups and exchanged bytes over an even spread's: every read served by
/// some rank, a share `(W − 1) / W` of each rank's reads fetched from the others, of
/// which `(L − 1) / (W − 1)` within its host. A rank's bytes within its host and across
/// hosts are each the larger of what it sends and receives there.
fn rank_loads(r: &Rating, topology: Topology, gather_bytes_per_s: f64) -> Vec<RankLoad> {
    let w = r.lookup_seconds.len();
    let total_reads_bytes: f64 = r.lookup_seconds.iter().sum::<f64>() * gather_bytes_per_s;
    let even_lookup = r.lookup_seconds.iter().sum::<f64>() / w as f64;
    let even_exchange = total_reads_bytes / w as f64 * (w as f64 - 1.0) / w as f64;
    let intra_share = Group {
        hosts: topology.hosts,
        per_host: topology.ranks_per_host,
    }
    .intra_share();
    let share = |x: f64, even: f64| if even > 0.0 { x / even } else { 0.0 };
    (0..w)
        .map(|rank| {
            let (mut within, mut across) = ([0.0; 2], [0.0; 2]);
            for other in (0..w).filter(|&o| o != rank) {
                let level = if topology.is_cross_host(rank, other) {
                    &mut across
                } else {
                    &mut within
                };
                level[0] += r.comm[other][rank];
                level[1] += r.comm[rank][other];
            }
            let larger = |[sent, received]: [f64; 2]| sent.max(received);
            RankLoad {
                lookups: share(r.lookup_seconds[rank], even_lookup),
                exchange: LevelShares {
                    intra: share(larger(within), even_exchange * intra_share),
                    cross: share(larger(across), even_exchange * (1.0 - intra_share)),
                },
            }
        })
        .collect()
}

fn print_plans(w: &Workload, hw: &Hardware, tables: &[TableSpec], priced: &[Priced]) {
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
        let s = p.slowest();
        let max = p.steps[s].seconds;
        let load = p.loads[s];
        println!(
            "{:<40} {:>6} {:>12} {:>12} {:>7.1}% {:>12.0} {:>19} {:>12.4} {:>7.1}% {:>10.3} {:>10.3} {:>10.3}",
            p.label,
            p.steps.len(),
            duration(max),
            duration(p.fastest_seconds()),
            100.0 * p.fastest_seconds() / max,
            p.steps[s].samples_per_s(),
            format!(
                "{s} ({:.2}, {:.2}, {:.2})",
                load.lookups, load.exchange.intra, load.exchange.cross
            ),
            1e3 * p.rating.max_seconds(),
            100.0 * p.rating.balance(),
            p.rating.total_bytes() / 1e6,
            p.rating.cross_host_bytes(p.topology) / 1e6,
            p.rating.copy_sync_bytes / 1e6,
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
}

fn print_json_plans(priced: &[Priced]) -> Result<()> {
    for p in priced {
        let s = p.slowest();
        let line = serde_json::json!({
            "plan": p.label,
            "ranks": p.steps.len(),
            "step_seconds": p.steps[s].seconds,
            "fastest_rank_seconds": p.fastest_seconds(),
            "balance": p.fastest_seconds() / p.steps[s].seconds,
            "samples_per_sec": p.steps[s].samples_per_s(),
            "slowest_rank": s,
            "rank_step_seconds": p.steps.iter().map(|x| x.seconds).collect::<Vec<_>>(),
            "rank_lookup_share": p.loads.iter().map(|l| l.lookups).collect::<Vec<_>>(),
            "rank_intra_exchange_share": p.loads.iter().map(|l| l.exchange.intra).collect::<Vec<_>>(),
            "rank_cross_exchange_share": p.loads.iter().map(|l| l.exchange.cross).collect::<Vec<_>>(),
            "model_max_rank_seconds": p.rating.max_seconds(),
            "model_balance": p.rating.balance(),
            "model_bytes_per_iteration": p.rating.total_bytes(),
            "model_cross_host_bytes_per_iteration": p.rating.cross_host_bytes(p.topology),
            "copy_sync_bytes_per_iteration": p.rating.copy_sync_bytes,
            "copy_sync_seconds": p.steps[s].phase("copy_sync").map_or(0.0, |ph| ph.seconds),
            "towers_priced_as_flat": p.towers,
        });
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}
