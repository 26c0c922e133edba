//! The OPER planner (Wang et al., USENIX ATC 2024, §3.2–§4): row-partitioned plans
//! from an access profile.
//!
//! 1. [`partition`](partition::partition) the tables at a threshold (§4.1);
//! 2. [`place`](place::place) the partitions greedily (§4.2), rate the placement with
//!    the cost model ([`OperModel`], Eq. 1–3, a [`crate::CostModel`]), and halve the
//!    threshold until the degree of balance reaches its target (the paper's back-off);
//! 3. replicate hot partitions under the extra-memory budget, for training (Eq. 4–5)
//!    or inference (Algorithm 1) (§4.3).
//!
//! The baselines of the paper's Figure 10 come from the same partitions placed by one
//! greedy rule each ([`Placement`]), without replicas. [`copy_bound`] says how far
//! any placement's copies could cut the modelled traffic, to rate a plan's against.

mod bound;
mod partition;
mod place;
mod rating;
mod replicate;
#[cfg(test)]
mod tests;

pub use bound::{copy_bound, CopyBound};
pub use place::Placement;
pub use rating::{rate, OperModel, Rating};

use crate::cost::CostParams;
use crate::error::{Error, Result};
use crate::plan::{Partition, Plan, ShardingType, TablePlan, TableSpec};
use crate::rating::CostModel;
use crate::validate::{check_tables, check_topology};
use partition::Partitioned;
use std::time::Instant;
use towerrec_comm::Topology;
use towerrec_data::AccessProfile;

/// What the replicas are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Eq. 4–5: hot partitions on every rank, their gradients all-reduced.
    Training,
    /// Algorithm 1: partitions copied to the ranks that fetch them over costly links.
    Inference,
}

/// The planner's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct OperParams {
    /// Global batch and the gather and link rates (from a hardware file).
    pub cost: CostParams,
    /// First partition threshold, a share of all reads and of all bytes (0.001 = 0.1%).
    pub threshold: f64,
    /// The back-off stops before going below this.
    pub min_threshold: f64,
    /// Degree of balance (least over most loaded rank) the back-off aims for.
    pub balance_target: f64,
    /// Bytes of replicas a rank may hold, as a share of all tables' bytes over the
    /// ranks (0.01 = 1%: the replicas of all ranks add up to at most 1% of the tables).
    pub extra_memory: f64,
    pub mode: Mode,
    /// Bytes a rank may hold in all.
    pub memory_budget: Option<u64>,
}

impl Default for OperParams {
    /// The paper's: thresholds from 0.1%, 5% extra memory; training; balance 99%.
    fn default() -> Self {
        OperParams {
            cost: CostParams::default(),
            threshold: 0.001,
            min_threshold: 1e-6,
            balance_target: 0.99,
            extra_memory: 0.05,
            mode: Mode::Training,
            memory_budget: None,
        }
    }
}

/// One threshold the back-off tried.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub threshold: f64,
    pub partitions: usize,
    /// Degree of balance of the placement before replication.
    pub balance: f64,
    pub seconds: f64,
}

/// An OPER plan and how it was found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub plan: Plan,
    /// Every threshold tried, the last one's plan kept.
    pub attempts: Vec<Attempt>,
}

fn check(
    tables: &[TableSpec],
    topology: Topology,
    p: &OperParams,
    profile: &AccessProfile,
) -> Result<usize> {
    let world = check_topology(topology)?;
    check_tables(tables)?;
    p.cost.check()?;
    let share = |v: f64| v.is_finite() && v > 0.0 && v <= 1.0;
    if !(share(p.threshold) && share(p.min_threshold) && share(p.balance_target)) {
        return Err(Error::Request(
            "OPER: threshold, min_threshold and balance_target must be in (0, 1]".into(),
        ));
    }
    if !(p.extra_memory.is_finite() && p.extra_memory >= 0.0) {
        return Err(Error::Request(
            "OPER: extra memory must be a share ≥ 0".into(),
        ));
    }
    if profile.samples == 0 || profile.tables.iter().all(|t| t.reads == 0) {
        return Err(Error::Request("the access profile counted no reads".into()));
    }
    Ok(world)
}

/// The plan of partitions `parts` with owners `owner` and `replicas`.
fn to_plan(
    tables: &[TableSpec],
    topology: Topology,
    cut: &Partitioned,
    owner: &[usize],
    replicas: &[Vec<usize>],
) -> Plan {
    let mut entries: Vec<TablePlan> = tables
        .iter()
        .zip(&cut.hot)
        .map(|(t, hot)| {
            let mut e = TablePlan::new(t.name.clone(), ShardingType::RowPartitioned, Vec::new());
            e.hot_rows = hot.clone();
            e
        })
        .collect();
    for (i, part) in cut.parts.iter().enumerate() {
        entries[part.table].partitions.push(Partition {
            order: part.order,
            rank: owner[i],
            replicas: replicas[i].clone(),
        });
    }
    Plan {
        topology,
        tables: entries,
        towers: Vec::new(),
    }
}

/// Plans `tables` on `topology` from `profile` (exact counts; see
/// [`towerrec_data::ProfileOptions`]).
pub fn plan(
    tables: &[TableSpec],
    profile: &AccessProfile,
    topology: Topology,
    p: &OperParams,
) -> Result<Outcome> {
    let world = check(tables, topology, p, profile)?;
    let counts = rating::exact_counts(tables, profile)?;
    let mut attempts = Vec::new();
    let mut threshold = p.threshold;
    let (cut, owner) = loop {
        let started = Instant::now();
        let cut = partition::partition(tables, &counts, threshold);
        let owner = place::place(&cut.parts, world, Placement::Oper, p.memory_budget)?;
        let placed = to_plan(
            tables,
            topology,
            &cut,
            &owner,
            &vec![Vec::new(); cut.parts.len()],
        );
        let model = rating::CountsModel {
            counts: &counts,
            samples: profile.samples,
            cost: &p.cost,
        };
        let balance = model.price(&placed, tables)?.balance();
        attempts.push(Attempt {
            threshold,
            partitions: cut.parts.len(),
            balance,
            seconds: started.elapsed().as_secs_f64(),
        });
        if balance >= p.balance_target || threshold / 2.0 < p.min_threshold {
            break (cut, owner);
        }
        threshold /= 2.0;
    };
    let total: u64 = tables.iter().map(TableSpec::bytes).sum();
    let mut budget = (p.extra_memory * total as f64 / world as f64) as u64;
    if let Some(limit) = p.memory_budget {
        let held = place::held_bytes(&cut.parts, &owner, world);
        budget = budget.min(limit.saturating_sub(held.into_iter().max().unwrap_or(0)));
    }
    let per_read = p.cost.batch_size as f64 / profile.samples as f64;
    let replicas = match p.mode {
        Mode::Training => {
            // BW_P2P / BW_AR: the all-to-all's mean rate over the batch's senders
            // against the ring all-reduce's slowest link.
            let p2p = p.cost.seconds_per_exchanged_byte(topology).recip();
            let ratio = p2p / p.cost.allreduce_bytes_per_s(topology);
            replicate::for_training(&cut.parts, &owner, world, budget, per_read, ratio)
        }
        Mode::Inference => {
            let link = |i: usize, j: usize| p.cost.seconds_per_byte(topology, i, j);
            replicate::for_inference(&cut.parts, &owner, topology, budget, per_read, link)
        }
    };
    let plan = to_plan(tables, topology, &cut, &owner, &replicas);
    plan.validate(tables, topology, p.memory_budget)?;
    Ok(Outcome { plan, attempts })
}

/// A baseline of the paper's Figure 10: the partitions at `p.threshold`, every one
/// placed by `rule`, no replicas.
pub fn baseline(
    tables: &[TableSpec],
    profile: &AccessProfile,
    topology: Topology,
    p: &OperParams,
    rule: Placement,
) -> Result<Plan> {
    let world = check(tables, topology, p, profile)?;
    let counts = rating::exact_counts(tables, profile)?;
    let cut = partition::partition(tables, &counts, p.threshold);
    let owner = place::place(&cut.parts, world, rule, p.memory_budget)?;
    let plan = to_plan(
        tables,
        topology,
        &cut,
        &owner,
        &vec![Vec::new(); cut.parts.len()],
    );
    plan.validate(tables, topology, p.memory_budget)?;
    Ok(plan)
}
