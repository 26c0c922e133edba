//! Training on a cluster: every rank builds its part of the model from the plan and runs
//! the training loop on its slice of each global batch.
//!
//! Rank `r` of `W` takes the `r`-th of `W` near-equal contiguous slices of every global
//! batch ([`rank_slice`]), so the cluster sees exactly the batches one process would,
//! and the loss and every gradient are those of the global batch: each rank scales its
//! loss gradient by `1 / global batch`, dense gradients are summed over the ranks, and
//! every embedding row receives the gradients of all samples that looked it up.
//!
//! [`train_in_process`] runs the ranks as threads of this process (the default backend);
//! an MPI launcher calls [`train_rank`] in every process with the MPI world.

pub use crate::ranks::{global_sum, rank_slice};
pub use crate::report::{ClusterReport, PhaseBytes};
pub use crate::specs::table_specs;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::memory::{MemoryNeed, Placement};
use crate::model::Model;
use crate::run_towers::run_towers;
use crate::trainer::{resumed_towers, train_model, Observer, Summary, TrainOptions};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use towerrec_comm::{run_in_process_with, Comm, Topology, Watchdog};
use towerrec_data::{schema, Schema};
use towerrec_plan::planners::{default_hosts_per_tower, greedy, table_wise, with_towers};
use towerrec_plan::{CostParams, Plan};

/// What the ranks `ranks` (those this process runs, of a world of `world`) of a run of
/// `cfg` need ([`MemoryNeed`]: their tables under `plan`, with row-partitioned tables'
/// route caches and stores' bookkeeping, and each one's dense layers, activations,
/// buffers, evaluations and checkpoints), refused where that is more memory than the
/// machine has available now. Runs before anything is allocated.
pub fn check_run_fits(
    cfg: &Config,
    schema: &Schema,
    plan: &Plan,
    world: usize,
    ranks: impl IntoIterator<Item = usize>,
) -> Result<(MemoryNeed, String)> {
    let specs = table_specs(cfg, schema);
    let mut addressing = vec![0u64; plan.topology.world_size()];
    crate::sharded::add_addressing_bytes(plan, &specs, &mut addressing);
    let ranks: Vec<usize> = ranks.into_iter().collect();
    let extra = ranks
        .iter()
        .filter_map(|&r| addressing.get(r))
        .fold(0u128, |a, &b| a.saturating_add(b.into()));
    let whose = match ranks.as_slice() {
        [r] => format!("rank {r} of {world}"),
        _ => format!("the {} ranks of this process", ranks.len()),
    };
    let placement = Placement::Cluster {
        plan,
        ranks: &ranks,
    };
    let need = MemoryNeed::of_run(cfg, schema, placement, extra);
    need.check(&whose)?;
    Ok((need, whose))
}

/// The plan to run: `plan` checked against the model and topology; else, for a DMT
/// model, the default planner's plan of the run's towers ([`run_towers`]: those of the
/// checkpoint a resumed run trained with, `recorded`, else the model's); else the
/// greedy planner's for this batch size.
pub fn resolve_plan(
    cfg: &Config,
    schema: &Schema,
    topology: Topology,
    plan: Option<Plan>,
    recorded: Option<&[Vec<String>]>,
) -> Result<Plan> {
    if schema.sparse.is_empty() {
        return Err(Error::Config {
            file: cfg.origin.clone(),
            message: format!("cluster: {}", crate::config::nothing_to_shard()),
        });
    }
    let specs = table_specs(cfg, schema);
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let towers = run_towers(&cfg.model, &names, plan.as_ref(), recorded)?;
    let plan = match (plan, &towers) {
        (Some(p), _) => p,
        (None, Some(towers)) => {
            // The default planner's: towers over host groups, tables whole on the ranks.
            let k = default_hosts_per_tower(topology.hosts, towers.len());
            with_towers(&specs, topology, towers, k, table_wise)?
        }
        (None, None) => {
            let cost = CostParams {
                batch_size: cfg.train.batch_size,
                ..CostParams::default()
            };
            greedy(&specs, topology, &cost, None)?
        }
    };
    plan.validate(&specs, topology, None)?;
    Ok(plan)
}

/// One rank's whole run: builds its part of the model and trains. Every rank of `comm`
/// calls it with the same config and plan (checked); rank 0 writes the run directory
/// and reports to `observer`.
pub fn train_rank(
    cfg: &Config,
    opts: &TrainOptions,
    comm: Comm,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    // Named first: "auto" resolves on each rank's own build and CPU.
    comm.check_same(
        "model.dense_precision (\"auto\" resolves by each rank's build and CPU: set \
         \"fp32\" or \"bf16\" for hosts that differ)",
        cfg.model.dense_precision as u64,
    )?;
    comm.check_same("the config", fingerprint(&cfg.to_toml()))?;
    comm.check_same("the plan", fingerprint(&plan.to_json_pretty()))?;
    cfg.refuse_int8("training")?;
    let data_schema = schema(&cfg.data, &cfg.base_dir)?;
    cfg.validate_against(&data_schema)?;
    let recorded = resumed_towers(opts)?;
    let model = build_rank_model(cfg, &data_schema, comm, plan, recorded.as_deref())?;
    train_model(cfg, opts, model, observer)
}

/// Builds this rank's part of the model of `cfg` over `plan`, with the cluster's
/// settings: its towers are the ones a checkpoint `recorded` (by table name) where
/// given, else the config's (`train`, `serve` and `bench` build their ranks alike).
pub fn build_rank_model(
    cfg: &Config,
    data_schema: &Schema,
    comm: Comm,
    plan: &Plan,
    recorded: Option<&[Vec<String>]>,
) -> Result<Model> {
    let names: Vec<String> = data_schema.sparse.iter().map(|f| f.name.clone()).collect();
    let towers = run_towers(&cfg.model, &names, Some(plan), recorded)?;
    let mut model = Model::build_sharded(
        &cfg.model,
        &cfg.optimizer,
        data_schema,
        cfg.train.seed,
        comm,
        plan,
        towers.as_deref(),
    )?;
    model.apply_cluster_config(&cfg.cluster);
    Ok(model)
}

/// Runs `rank` once per rank of an in-process cluster of `topology`, each on its own
/// thread inside its own pool of `threads_per_rank` compute threads, and returns the
/// results in rank order; a failing rank stops all, and its error names it.
///
/// Ranks must not share a rayon pool: a rank blocked in a collective inside a pool task
/// would hold a thread that another rank's task needs to reach the same collective.
pub fn run_ranks<R: Send>(
    topology: Topology,
    threads_per_rank: usize,
    rank: impl Fn(Comm) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    run_ranks_with(topology, threads_per_rank, Watchdog::default(), rank)
}

/// [`run_ranks`] with `watchdog` watching the collectives.
pub fn run_ranks_with<R: Send>(
    topology: Topology,
    threads_per_rank: usize,
    watchdog: Watchdog,
    rank: impl Fn(Comm) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    run_in_process_with(topology, watchdog, |comm: Comm| -> Result<R> {
        let r = comm.rank();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads_per_rank.max(1))
            .thread_name(move |i| format!("rank-{r}-worker-{i}"))
            .build()
            .map_err(|e| Error::Cluster(format!("cannot start rank {r}'s threads: {e}")))?;
        pool.install(|| rank(comm))
    })
    .map_err(|failure| Error::Cluster(failure.to_string()))
}

/// What an in-process cluster run needs before its ranks start: the data's schema
/// (checked against the config) and the plan (checked, or the greedy planner's), with
/// the memory of all its ranks checked against the machine's (and said to `observer`).
pub(crate) fn prepare_in_process(
    cfg: &Config,
    topology: Topology,
    plan: Option<Plan>,
    recorded: Option<&[Vec<String>]>,
    observer: &mut dyn Observer,
) -> Result<(Schema, Plan)> {
    cfg.refuse_int8("a cluster")?;
    let data_schema = schema(&cfg.data, &cfg.base_dir)?;
    cfg.validate_against(&data_schema)?;
    let plan = resolve_plan(cfg, &data_schema, topology, plan, recorded)?;
    let world = topology.world_size();
    let (need, whose) = check_run_fits(cfg, &data_schema, &plan, world, 0..world)?;
    observer.on_memory(&whose, &need);
    Ok((data_schema, plan))
}

/// Trains on an in-process cluster of `topology` (threads of this process), each rank
/// with its own pool of `threads_per_rank` compute threads. Returns rank 0's summary;
/// a failing rank stops all and its error is returned, naming it.
pub fn train_in_process(
    cfg: &Config,
    opts: &TrainOptions,
    topology: Topology,
    plan: Option<Plan>,
    threads_per_rank: usize,
    observer: &mut (dyn Observer + Send),
) -> Result<Summary> {
    let recorded = resumed_towers(opts)?;
    let (_, plan) = prepare_in_process(cfg, topology, plan, recorded.as_deref(), &mut *observer)?;
    let observer = Mutex::new(Some(observer));
    let results = run_ranks_with(topology, threads_per_rank, opts.watchdog, |comm: Comm| {
        if comm.rank() == 0 {
            let mut guard = observer.lock().unwrap_or_else(|e| e.into_inner());
            let obs = guard.take().expect("rank 0 takes the observer once");
            train_rank(cfg, opts, comm, &plan, obs)
        } else {
            train_rank(cfg, opts, comm, &plan, &mut crate::trainer::Silent)
        }
    })?;
    Ok(results.into_iter().next().expect("rank 0's summary"))
}

/// A stable 64-bit fingerprint of some text (to compare configs across ranks).
fn fingerprint(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Most ranks of an in-process cluster: each is a thread with its own compute pool and
/// copy of the dense model; past this, use MPI.
pub const MAX_IN_PROCESS_RANKS: usize = 256;

/// Refuses an in-process cluster of more than [`MAX_IN_PROCESS_RANKS`] ranks.
pub fn check_in_process_ranks(cfg: &Config) -> Result<()> {
    let c = &cfg.cluster;
    if c.world_size() > MAX_IN_PROCESS_RANKS {
        return Err(Error::Config {
            file: cfg.origin.clone(),
            message: format!(
                "cluster: {} hosts × {} ranks = {} ranks, more than the {MAX_IN_PROCESS_RANKS} \
                 an in-process cluster runs (each rank is threads of this process); use \
                 --backend mpi to run more",
                c.hosts,
                c.ranks_per_host,
                c.world_size()
            ),
        });
    }
    Ok(())
}

/// Trains where `cfg.cluster` says: in this process for one rank without a plan, else
/// on an in-process cluster (`threads` compute threads shared among its ranks).
pub fn train_configured(
    cfg: &Config,
    opts: &TrainOptions,
    threads: usize,
    observer: &mut (dyn Observer + Send),
) -> Result<Summary> {
    let c = &cfg.cluster;
    let plan = cfg.plan_path().map(Plan::load).transpose()?;
    if c.world_size() == 1 && plan.is_none() {
        return crate::trainer::train(cfg, opts, observer);
    }
    let topology = Topology::new(c.hosts, c.ranks_per_host)?;
    check_in_process_ranks(cfg)?;
    let per_rank = (threads / c.world_size()).max(1);
    train_in_process(cfg, opts, topology, plan, per_rank, observer)
}
