//! `towerrec plan`: a sharding plan for a run config's embedding tables on a cluster of
//! `--hosts` × `--ranks-per-host` workers (by default the config's `[cluster]`), written
//! as JSON (see docs/PLANS.md), with a short summary of what was planned on stdout (on
//! stderr when the plan itself goes to stdout) and per-rank bytes and estimated cost on
//! stderr.

use crate::plan_oper::{self, OperArgs};
use crate::plan_summary;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use towerrec_data::Schema;
use towerrec_plan::oper::Placement;
use towerrec_plan::{planners, CostModel, CostParams, Plan, ShardingType, TableSpec, Topology};
use towerrec_train::files::Files;
use towerrec_train::Config;

/// The towers to plan (table indices), from `--towers`, `--towers-file` or, for a DMT
/// model, the model's (its default planner's: docs/DMT.md, "Where the towers come
/// from"); `None` for a plan without towers.
fn plan_towers(
    a: &PlanArgs,
    cfg: &Config,
    tables: &[TableSpec],
) -> Result<Option<Vec<Vec<usize>>>> {
    let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
    if a.flat {
        return Ok(None);
    }
    if let Some(path) = &a.towers_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--towers-file {}", path.display()))?;
        let partition = towerrec_plan::partition::TowerPartition::from_json(&text)
            .with_context(|| format!("--towers-file {}", path.display()))?;
        let towers = towerrec_train::config::towers_by_name(&partition.towers, &names)
            .map_err(|e| anyhow!("--towers-file {}: {e}", path.display()))?;
        return Ok(Some(towers));
    }
    match a.towers {
        Some(0) => bail!("--towers 0: a tower plan needs at least one tower"),
        Some(t) if t > tables.len() => {
            bail!(
                "--towers {t}: there are only {} tables to group",
                tables.len()
            )
        }
        Some(t) => Ok(Some(planners::strided_towers(tables.len(), t))),
        None => Ok(towerrec_train::run_towers::run_towers(
            &cfg.model, &names, None, None,
        )?),
    }
}

/// How to spread the tables.
#[derive(Clone, Copy, ValueEnum)]
pub enum Strategy {
    /// Every table whole on one rank, biggest first to the emptiest rank.
    TableWise,
    /// Every table's rows split evenly over all ranks.
    RowWise,
    /// Every table's columns split into near-equal blocks on distinct ranks.
    ColumnWise,
    /// Every table row-wise over the ranks of one host.
    TableRowWise,
    /// A copy of every table on every rank.
    DataParallel,
    /// Cost-balanced table-wise placement within the memory budget; row-wise splits for
    /// tables too big for one rank; tiny tables data-parallel.
    Greedy,
    /// OPER: rows partitioned by access (--profile), balanced, hot rows replicated.
    Oper,
    /// OPER's partitions, each to the rank holding the fewest bytes.
    MemoryGreedy,
    /// OPER's partitions, each to the rank serving the fewest lookups.
    AccessGreedy,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::TableWise => "table-wise",
            Strategy::RowWise => "row-wise",
            Strategy::ColumnWise => "column-wise",
            Strategy::TableRowWise => "table-row-wise",
            Strategy::DataParallel => "data-parallel",
            Strategy::Greedy => "greedy",
            Strategy::Oper => "oper",
            Strategy::MemoryGreedy => "memory-greedy",
            Strategy::AccessGreedy => "access-greedy",
        }
    }

    /// The OPER placement rule of a strategy that needs an access profile.
    fn placement(self) -> Option<Placement> {
        match self {
            Strategy::Oper => Some(Placement::Oper),
            Strategy::MemoryGreedy => Some(Placement::MemoryGreedy),
            Strategy::AccessGreedy => Some(Placement::AccessGreedy),
            _ => None,
        }
    }
}

#[derive(Args)]
pub struct PlanArgs {
    /// Run config (TOML) whose model and data give the tables [default: the embedded quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Hosts in the cluster [default: the config's cluster.hosts].
    #[arg(long)]
    hosts: Option<usize>,
    /// Ranks (workers) per host [default: the config's cluster.ranks_per_host].
    #[arg(long)]
    ranks_per_host: Option<usize>,
    /// How to spread the tables.
    #[arg(long, value_enum, default_value = "greedy")]
    strategy: Strategy,
    /// column-wise: blocks per table, at most the table's dim and the number of ranks [default: all ranks].
    #[arg(long, value_name = "N")]
    column_shards: Option<usize>,
    /// Bytes of weights and optimizer state a rank may hold, in MiB: greedy plans within
    /// it; the other strategies' plans are checked against it.
    #[arg(long, value_name = "N")]
    memory_budget_mib: Option<u64>,
    /// DMT towers: group the tables into T towers (feature i in tower i mod T, the DMT
    /// paper's naive assignment), each placed by --strategy on the ranks of its hosts
    /// [default: a DMT model's towers, `[model.towers] count` of them].
    #[arg(long, value_name = "T", group = "tower_source")]
    towers: Option<usize>,
    /// DMT towers as `towerrec partition` grouped them (its JSON), each placed by
    /// --strategy on the ranks of its hosts.
    #[arg(long, value_name = "FILE", group = "tower_source")]
    towers_file: Option<PathBuf>,
    /// A plan without towers, also for a DMT model (its Tower Modules then run after a
    /// flat output exchange, without SPTT).
    #[arg(long, group = "tower_source")]
    flat: bool,
    /// Hosts each tower spans (K dividing the hosts) [default: the hosts over the
    /// towers, as the runtime's default plan].
    #[arg(long, value_name = "K")]
    hosts_per_tower: Option<usize>,
    /// Write the plan to this file [default: stdout].
    #[arg(long)]
    output: Option<PathBuf>,
    /// Rate this plan instead of making one: validate it and print the per-rank
    /// figures (with --profile, OPER's model too).
    #[arg(long, value_name = "PLAN", conflicts_with_all = ["tower_source", "output"])]
    rate: Option<PathBuf>,
    /// Also write the tables as JSON (name, rows, dim, bytes per row, pooling factor),
    /// with the topology and global batch, for other planners (bench/torchrec).
    #[arg(long, value_name = "FILE")]
    tables_out: Option<PathBuf>,
    #[command(flatten)]
    oper: OperArgs,
}

pub fn run(a: PlanArgs) -> Result<()> {
    let cfg = match &a.config {
        Some(p) => Config::load(p, &a.set)?,
        None => Config::quickstart(&a.set)?,
    };
    let (topology, topology_from) = topology(&a, &cfg)?;
    let budget = a
        .memory_budget_mib
        .map(|m| {
            m.checked_mul(1 << 20).filter(|&b| b > 0).ok_or_else(|| {
                anyhow!("--memory-budget-mib {m}: must be at least 1 and below 2^44")
            })
        })
        .transpose()?;
    let mut files = Files::new("plan");
    files.config(a.config.as_deref(), &cfg)?;
    a.oper.inputs(&mut files)?;
    if let Some(p) = &a.rate {
        files.input("the plan to rate (--rate)", p)?;
    }
    if let Some(p) = &a.towers_file {
        files.input("the towers (--towers-file)", p)?;
    }
    if let Some(p) = &a.output {
        files.output("--output", p)?;
    }
    if let Some(p) = &a.tables_out {
        files.output("--tables-out", p)?;
    }
    if a.oper.has_profile() {
        if let Some(p) = a.oper.heatmap_path(a.output.as_deref()) {
            files.output("--heatmap", &p)?;
        }
    }
    crate::commands::clean(&files);
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
    let tables = table_specs(&cfg, &schema)?;
    if let Some(path) = &a.tables_out {
        write_tables(path, &tables, topology, cfg.train.batch_size)?;
    }
    let base = CostParams {
        batch_size: cfg.train.batch_size,
        ..CostParams::default()
    };
    let cost = a.oper.cost(base, &tables)?;
    let profile = a.oper.profile()?;
    let flat = |tables: &[TableSpec], topology: Topology| match a.strategy {
        Strategy::TableWise => planners::table_wise(tables, topology),
        Strategy::RowWise => planners::row_wise(tables, topology),
        Strategy::ColumnWise => {
            let k = a.column_shards.unwrap_or(topology.world_size());
            planners::column_wise(tables, topology, k)
        }
        Strategy::TableRowWise => planners::table_row_wise(tables, topology),
        Strategy::DataParallel => planners::data_parallel(tables, topology),
        Strategy::Greedy => planners::greedy(tables, topology, &cost, budget),
        Strategy::Oper | Strategy::MemoryGreedy | Strategy::AccessGreedy => {
            unreachable!("planned from the profile below")
        }
    };
    let label = match &a.rate {
        Some(path) => path.display().to_string(),
        None => a.strategy.name().to_string(),
    };
    // One strategy on any (sub-)cluster: the profile ones plan from --profile.
    let any = |tables: &[TableSpec], topology: Topology| -> Result<Plan> {
        let Some(placement) = a.strategy.placement() else {
            return Ok(flat(tables, topology)?);
        };
        let Some(profile) = &profile else {
            bail!(
                "--strategy {} needs --profile (written by `towerrec profile`)",
                a.strategy.name()
            );
        };
        plan_oper::plan(placement, &a.oper, tables, profile, topology, cost, budget)
    };
    let towers = match &a.rate {
        Some(_) => None,
        None => plan_towers(&a, &cfg, &tables)?,
    };
    if towers.is_none() && a.hosts_per_tower.is_some() {
        bail!("--hosts-per-tower: the plan has no towers (give --towers, --towers-file or a DMT model)");
    }
    let plan = match (&a.rate, &towers) {
        (Some(path), _) => Ok(Plan::load(path)?),
        (None, None) => any(&tables, topology),
        (None, Some(towers)) => {
            // OPER inside towers: each host group's tables planned on its hosts, so
            // replicas stay there (docs/OPER.md, "Replicas under DMT towers").
            let k = a
                .hosts_per_tower
                .unwrap_or_else(|| planners::default_hosts_per_tower(topology.hosts, towers.len()));
            planners::with_towers(&tables, topology, towers, k, any)
        }
    }
    .with_context(|| format!("planning {label}"))?;
    plan.validate(&tables, topology, budget)
        .with_context(|| format!("the {label} plan does not fit"))?;
    let written = match (&a.output, &a.rate) {
        (Some(path), _) => {
            plan.save(path)?;
            format!("wrote the plan to {}", path.display())
        }
        (None, None) => {
            print!("{}", plan.to_json_pretty());
            "wrote the plan to stdout (--output FILE writes it to a file)".to_string()
        }
        (None, Some(_)) => "rated only: no plan written".to_string(),
    };
    report(&plan, &tables, &cost, &label, budget)?;
    let oper = match &profile {
        Some(profile) => {
            let heatmap = a.oper.heatmap_path(a.output.as_deref());
            let r = plan_oper::report(&plan, &tables, profile, &cost, heatmap.as_deref())?;
            Some((r.max_seconds(), r.total_bytes()))
        }
        None => None,
    };
    let summary = plan_summary::text(
        &plan,
        &tables,
        &cost,
        &plan_summary::Summary {
            label: &label,
            rated: a.rate.is_some(),
            topology_from: &topology_from,
            oper,
            written: &written,
        },
    );
    if a.output.is_none() && a.rate.is_none() {
        // The plan's JSON is on stdout: keep it parseable.
        eprint!("{summary}");
    } else {
        print!("{summary}");
    }
    Ok(())
}

/// The cluster to plan for: `--hosts` and `--ranks-per-host` where given, else the
/// config's `[cluster]` (as `train` reads it); and where it came from, in words.
fn topology(a: &PlanArgs, cfg: &Config) -> Result<(Topology, String)> {
    let hosts = a.hosts.unwrap_or(cfg.cluster.hosts);
    let ranks_per_host = a.ranks_per_host.unwrap_or(cfg.cluster.ranks_per_host);
    let named = |flag: Option<usize>, name: &str, key: &str, value: usize| match flag {
        Some(_) => format!("--{name} {value}"),
        None => format!("cluster.{key} = {value}"),
    };
    let given = format!(
        "{} {}",
        named(a.hosts, "hosts", "hosts", hosts),
        named(
            a.ranks_per_host,
            "ranks-per-host",
            "ranks_per_host",
            ranks_per_host
        )
    );
    let topology = Topology::new(hosts, ranks_per_host).map_err(|e| anyhow!("{given}: {e}"))?;
    let from = match (a.hosts, a.ranks_per_host) {
        (Some(_), Some(_)) => "from --hosts and --ranks-per-host".to_string(),
        (None, None) => format!("from the [cluster] of {}", cfg.origin),
        (Some(_), None) => format!(
            "from --hosts and the cluster.ranks_per_host of {}",
            cfg.origin
        ),
        (None, Some(_)) => format!(
            "from --ranks-per-host and the cluster.hosts of {}",
            cfg.origin
        ),
    };
    Ok((topology, from))
}

/// One [`TableSpec`] per sparse feature, derived as `train` derives them.
fn table_specs(cfg: &Config, schema: &Schema) -> Result<Vec<TableSpec>> {
    if schema.sparse.is_empty() {
        bail!("the data has no sparse (categorical) features: there are no tables to plan");
    }
    Ok(towerrec_train::cluster::table_specs(cfg, schema))
}

/// The `towerrec-tables-v1` file: what another planner needs to plan the same tables.
fn write_tables(
    path: &std::path::Path,
    tables: &[TableSpec],
    topology: Topology,
    batch_size: usize,
) -> Result<()> {
    let doc = serde_json::json!({
        "format": "towerrec-tables-v1",
        "topology": { "hosts": topology.hosts, "ranks_per_host": topology.ranks_per_host },
        "batch_size": batch_size,
        "tables": tables,
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    towerrec_core::fsio::write_atomic(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote the tables to {}", path.display());
    Ok(())
}

/// The per-rank table on stderr: tables held, bytes, estimated embedding time per step
/// (the greedy planner's cost model, through [`CostModel::price`]).
fn report(
    plan: &Plan,
    tables: &[TableSpec],
    cost: &CostParams,
    label: &str,
    budget: Option<u64>,
) -> Result<()> {
    let topo = plan.topology;
    let mut kinds: Vec<(ShardingType, usize)> = Vec::new();
    for e in &plan.tables {
        match kinds.iter_mut().find(|(k, _)| *k == e.sharding) {
            Some((_, n)) => *n += 1,
            None => kinds.push((e.sharding, 1)),
        }
    }
    let kinds: Vec<String> = kinds
        .iter()
        .map(|(k, n)| format!("{n} {}", k.name()))
        .collect();
    eprintln!(
        "{} plan for {} hosts × {} ranks per host: {} tables ({}); global batch {}",
        label,
        topo.hosts,
        topo.ranks_per_host,
        plan.tables.len(),
        kinds.join(", "),
        cost.batch_size
    );
    let priced = cost.price(plan, tables)?;
    let (bytes, secs) = (&priced.memory, &priced.seconds);
    let replicas = plan
        .tables
        .iter()
        .filter(|e| e.sharding == ShardingType::DataParallel)
        .count();
    let mut held = vec![replicas; bytes.len()];
    for e in &plan.tables {
        let mut on: Vec<usize> = e.shards.iter().map(|s| s.rank).collect();
        for p in &e.partitions {
            on.push(p.rank);
            on.extend(&p.replicas);
        }
        on.sort_unstable();
        on.dedup();
        for r in on {
            if let Some(n) = held.get_mut(r) {
                *n += 1;
            }
        }
    }
    eprintln!(
        "{:>6} {:>5} {:>7} {:>14} {:>10} {:>14}",
        "rank", "host", "tables", "bytes", "MiB", "est. ms/step"
    );
    for (r, (b, s)) in bytes.iter().zip(secs).enumerate() {
        eprintln!(
            "{r:>6} {:>5} {:>7} {b:>14} {:>10.2} {:>14.4}",
            topo.host_of(r),
            held[r],
            *b as f64 / (1u64 << 20) as f64,
            s * 1e3
        );
    }
    if let Some(b) = budget {
        eprintln!(
            "memory budget: {:.2} MiB per rank",
            b as f64 / (1u64 << 20) as f64
        );
    }
    eprintln!(
        "cost model: {:.0} GB/s gathers, {:.1} GB/s within a host, {:.1} GB/s between hosts (docs/PLANS.md)",
        cost.gather_bytes_per_s / 1e9,
        cost.intra_host_bytes_per_s / 1e9,
        cost.cross_host_bytes_per_s / 1e9
    );
    Ok(())
}
