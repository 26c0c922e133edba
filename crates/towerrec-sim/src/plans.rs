//! A particular sharding plan's step, rank by rank (docs/SIMULATOR.md, "Pricing
//! plans"). [`crate::simulate`] assumes every chip does the same embedding work; a plan
//! gives each rank its own. A `towerrec_plan::CostModel` (the table-level model, or
//! OPER's under an access profile, §3.2 Eq. 1–3) says what each rank of the plan looks
//! up and sends per step ([`PlanCost`]); over an even spread's, those are the rank's
//! [`RankLoad`] ([`rank_loads`]), [`simulate_parts`] prices its step, and the plan's
//! step is its slowest rank's.

use crate::collective::{Group, LevelShares};
use crate::error::{Error, Result};
use crate::hardware::Hardware;
use crate::step::{simulate_parts, Mode, Phase, RankLoad, Resource, Scenario, Step};
use crate::workload::Workload;
use towerrec_plan::{CostModel, CostParams, Plan, PlanCost, TableSpec};

/// A plan's simulated step: the cost model's figures, each rank's load and its step.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanStep {
    pub model: PlanCost,
    pub loads: Vec<RankLoad>,
    pub steps: Vec<Step>,
}

impl PlanStep {
    /// The slowest rank (the first of equals), whose step is the plan's.
    pub fn slowest(&self) -> usize {
        (0..self.steps.len())
            .max_by(|&a, &b| self.steps[a].seconds.total_cmp(&self.steps[b].seconds))
            .unwrap_or(0)
    }

    /// The fastest rank's seconds per step.
    pub fn fastest_seconds(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| s.seconds)
            .fold(f64::INFINITY, f64::min)
    }
}

/// A plan cost model's rates from a hardware file (`base` gives the batch and the
/// data-parallel threshold): gathers at the memory's random-read rate for the tables'
/// mean row, links at the all-to-all bandwidths within and between hosts.
pub fn cost_params(hw: &Hardware, base: CostParams, tables: &[TableSpec]) -> CostParams {
    let row = tables.iter().map(|t| 4.0 * t.dim as f64).sum::<f64>() / tables.len().max(1) as f64;
    let intra = hw.network.intra_host.all_to_all.bandwidth_gbs * 1e9;
    let cross = hw
        .network
        .cross_host
        .as_ref()
        .map_or(intra, |c| c.level.all_to_all.bandwidth_gbs * 1e9);
    CostParams {
        gather_bytes_per_s: hw.memory.random_read(row),
        intra_host_bytes_per_s: intra,
        cross_host_bytes_per_s: cross,
        ..base
    }
}

/// Each rank's lookups and exchanged bytes over an even spread's: every rank serving
/// `1 / W` of the lookups, and receiving [`PlanCost::even_rank_bytes`], of which a
/// share `(L − 1) / (W − 1)` from within its host. A rank's bytes within its host and
/// across hosts are each the larger of what it sends and receives there.
pub fn rank_loads(cost: &PlanCost) -> Vec<RankLoad> {
    let w = cost.lookup_seconds.len();
    let even_lookup = cost.lookup_seconds.iter().sum::<f64>() / w as f64;
    let even_exchange = cost.even_rank_bytes;
    let intra_share = Group {
        hosts: cost.topology.hosts,
        per_host: cost.topology.ranks_per_host,
    }
    .intra_share();
    let share = |x: f64, even: f64| if even > 0.0 { x / even } else { 0.0 };
    (0..w)
        .map(|rank| {
            let (within, across) = cost.level_bytes(rank);
            RankLoad {
                lookups: share(cost.lookup_seconds[rank], even_lookup),
                exchange: LevelShares {
                    intra: share(within, even_exchange * intra_share),
                    cross: share(across, even_exchange * (1.0 - intra_share)),
                },
            }
        })
        .collect()
}

/// Prices `plan` of `tables` rank by rank on `hw` (of the plan's shape: hosts and ranks
/// per host), each rank's load from `model`'s figures, its step in `parts`
/// ([`simulate_parts`]). In training, rows held on several ranks (data-parallel
/// tables, replicated partitions) sum their gradients every step, a hierarchical
/// all-reduce of [`PlanCost::copy_sync_bytes`]: a `copy_sync` phase, the same on every
/// rank.
pub fn simulate_plan(
    model: &dyn CostModel,
    plan: &Plan,
    tables: &[TableSpec],
    workload: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    parts: usize,
) -> Result<PlanStep> {
    let topo = plan.topology;
    if (hw.hosts, hw.chips_per_host) != (topo.hosts, topo.ranks_per_host) {
        return Err(Error::invalid(
            format!("hardware '{}'", hw.name),
            format!(
                "{} host(s) × {} chips, but the plan is for {} host(s) × {} ranks",
                hw.hosts, hw.chips_per_host, topo.hosts, topo.ranks_per_host
            ),
        ));
    }
    let cost = model.price(plan, tables)?;
    let loads = rank_loads(&cost);
    let copy_sync = match scenario.mode {
        Mode::Training if cost.copy_sync_bytes > 0.0 => {
            let world = Group {
                hosts: topo.hosts,
                per_host: topo.ranks_per_host,
            };
            hw.network
                .hierarchical_all_reduce(cost.copy_sync_bytes, world)
        }
        _ => 0.0,
    };
    let steps = loads
        .iter()
        .map(|&l| {
            let mut step = simulate_parts(workload, hw, scenario, l, parts)?;
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
        .collect::<Result<Vec<_>>>()?;
    Ok(PlanStep {
        model: cost,
        loads,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::{simulate, Exchange, Sharding};
    use towerrec_plan::{planners, Topology};

    #[test]
    fn an_even_plan_of_the_table_level_model_is_the_flat_step() {
        // Eight equal one-id tables, one per chip of 2 hosts × 4: every rank looks up
        // and sends an even spread's, so the plan's every rank is the flat step, whole
        // and in halves; each rank moves 7 of 8 of its samples' rows, 3 of them within
        // its host.
        let mut hw = Hardware::preset("dgx-a100").unwrap().with_chips(4).unwrap();
        hw.hosts = 2;
        let mut w = Workload::rm2(false);
        w.tables = vec![crate::TableGroup {
            count: 8,
            lookups: 1.0,
            rows: 1000,
        }];
        w.batch = 8192;
        let tables: Vec<TableSpec> = (0..8)
            .map(|i| TableSpec {
                name: format!("t{i}"),
                rows: 1000,
                dim: w.embedding_dim,
                bytes_per_row: 4 * w.embedding_dim,
                pooling_factor: 1.0,
            })
            .collect();
        let topo = Topology::new(2, 4).unwrap();
        let plan = planners::table_wise(&tables, topo).unwrap();
        let base = CostParams {
            batch_size: 8192,
            ..CostParams::default()
        };
        let model = cost_params(&hw, base, &tables);
        let scenario = Scenario {
            mode: Mode::Training,
            sharding: Sharding::Unsharded,
            exchange: Exchange::Flat,
        };
        for parts in [1, 2] {
            let priced = simulate_plan(&model, &plan, &tables, &w, &hw, scenario, parts).unwrap();
            let flat = simulate_parts(&w, &hw, scenario, RankLoad::EVEN, parts).unwrap();
            for (load, step) in priced.loads.iter().zip(&priced.steps) {
                for x in [load.lookups, load.exchange.intra, load.exchange.cross] {
                    assert!((x - 1.0).abs() < 1e-9, "{load:?}");
                }
                assert!((step.seconds - flat.seconds).abs() <= 1e-9 * flat.seconds);
                assert_eq!(step.parts, parts);
            }
        }
        assert_eq!(
            simulate(&w, &hw, scenario).unwrap().seconds,
            simulate_parts(&w, &hw, scenario, RankLoad::EVEN, 1)
                .unwrap()
                .seconds
        );
        // A hardware of another shape is refused.
        let other = hw.with_chips(2).unwrap();
        let e = simulate_plan(&model, &plan, &tables, &w, &other, scenario, 1).unwrap_err();
        assert!(
            e.to_string()
                .contains("the plan is for 2 host(s) × 4 ranks"),
            "{e}"
        );
    }
}
