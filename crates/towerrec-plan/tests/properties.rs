//! Property tests: every planner's plan validates for random models and clusters, plans
//! survive JSON, a plan with any shard removed is rejected, and greedy stays within a
//! memory budget whenever splitting every table row-wise would.

use proptest::prelude::*;
use towerrec_comm::Topology;
use towerrec_plan::{estimate, planners, CostParams, Plan, ShardingType, TableSpec};

fn table_specs() -> impl Strategy<Value = Vec<TableSpec>> {
    prop::collection::vec(
        (1usize..1_000_000, 1usize..=128, 0usize..3, 0.0f64..50.0),
        1..40,
    )
    .prop_map(|ts| {
        ts.into_iter()
            .enumerate()
            .map(|(i, (rows, dim, opt, pooling_factor))| TableSpec {
                name: format!("t{i}"),
                rows,
                dim,
                // SGD, row-wise Adagrad, Adam.
                bytes_per_row: [4 * dim, 4 * dim + 4, 12 * dim][opt],
                pooling_factor,
            })
            .collect()
    })
}

fn topologies() -> impl Strategy<Value = Topology> {
    (1usize..=4, 1usize..=4).prop_map(|(h, l)| Topology::new(h, l).unwrap())
}

/// Every planner's plan, named.
fn all_plans(
    tables: &[TableSpec],
    topo: Topology,
    column_shards: usize,
) -> Vec<(&'static str, Plan)> {
    let cost = CostParams::default();
    vec![
        ("table_wise", planners::table_wise(tables, topo).unwrap()),
        ("row_wise", planners::row_wise(tables, topo).unwrap()),
        (
            "column_wise",
            planners::column_wise(tables, topo, column_shards).unwrap(),
        ),
        (
            "table_row_wise",
            planners::table_row_wise(tables, topo).unwrap(),
        ),
        (
            "data_parallel",
            planners::data_parallel(tables, topo).unwrap(),
        ),
        (
            "greedy",
            planners::greedy(tables, topo, &cost, None).unwrap(),
        ),
    ]
}

proptest! {
    #[test]
    fn every_planner_makes_a_valid_plan(
        tables in table_specs(),
        topo in topologies(),
        column_shards in 1usize..=8,
    ) {
        for (name, plan) in all_plans(&tables, topo, column_shards) {
            prop_assert!(plan.validate(&tables, topo, None).is_ok(), "{name}: {:?}", plan.validate(&tables, topo, None));
            prop_assert_eq!(plan.tables.len(), tables.len());
            let expected = match name {
                "table_wise" => Some(ShardingType::TableWise),
                "row_wise" => Some(ShardingType::RowWise),
                "column_wise" => Some(ShardingType::ColumnWise),
                "table_row_wise" => Some(ShardingType::TableRowWise),
                "data_parallel" => Some(ShardingType::DataParallel),
                _ => None,
            };
            if let Some(kind) = expected {
                prop_assert!(plan.tables.iter().all(|e| e.sharding == kind), "{}", name);
            }
            let secs = estimate(&plan, &tables, &CostParams::default());
            prop_assert_eq!(secs.len(), topo.world_size());
            prop_assert!(secs.iter().all(|s| s.is_finite() && *s >= 0.0));
        }
    }

    #[test]
    fn plans_survive_json(tables in table_specs(), topo in topologies(), column_shards in 1usize..=8) {
        for (name, plan) in all_plans(&tables, topo, column_shards) {
            let back = Plan::from_json(&plan.to_json_pretty());
            prop_assert!(back.is_ok(), "{}: {:?}", name, back);
            prop_assert_eq!(back.unwrap(), plan.clone());
            let compact = serde_json::to_string(&plan).unwrap();
            prop_assert_eq!(Plan::from_json(&compact).unwrap(), plan);
        }
    }

    #[test]
    fn a_plan_missing_any_shard_is_rejected(
        tables in table_specs(),
        topo in topologies(),
        pick in any::<prop::sample::Index>(),
    ) {
        let plan = planners::row_wise(&tables, topo).unwrap();
        let shards: Vec<(usize, usize)> = plan
            .tables
            .iter()
            .enumerate()
            .flat_map(|(e, t)| (0..t.shards.len()).map(move |s| (e, s)))
            .collect();
        let (e, s) = shards[pick.index(shards.len())];
        let mut broken = plan.clone();
        broken.tables[e].shards.remove(s);
        let err = broken.validate(&tables, topo, None);
        prop_assert!(err.is_err());
        let table = format!("'{}'", plan.tables[e].table);
        prop_assert!(err.unwrap_err().to_string().contains(&table));
    }

    #[test]
    fn greedy_stays_within_a_budget_that_row_wise_meets(
        tables in table_specs(),
        topo in topologies(),
        slack in 0.0f64..1.0,
        tiny_kib in 0u64..512,
    ) {
        let even = planners::row_wise(&tables, topo).unwrap();
        let need = even.rank_bytes(&tables).into_iter().max().unwrap();
        let budget = need + (need as f64 * slack) as u64;
        let cost = CostParams { data_parallel_max_bytes: tiny_kib << 10, ..CostParams::default() };
        let plan = planners::greedy(&tables, topo, &cost, Some(budget));
        prop_assert!(plan.is_ok(), "{:?}", plan);
        let plan = plan.unwrap();
        prop_assert!(plan.validate(&tables, topo, Some(budget)).is_ok());
        prop_assert!(plan.rank_bytes(&tables).iter().all(|&b| b <= budget));
    }

    #[test]
    fn greedy_within_any_budget_it_accepts(
        tables in table_specs(),
        topo in topologies(),
        budget_mib in 1u64..2048,
    ) {
        let budget = budget_mib << 20;
        if let Ok(plan) = planners::greedy(&tables, topo, &CostParams::default(), Some(budget)) {
            prop_assert!(plan.validate(&tables, topo, Some(budget)).is_ok());
        }
    }
}
