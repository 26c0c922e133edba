//! Fuzzing plan JSON: `Plan::from_json` on arbitrary text and on planners' plans
//! mutated, then `Plan::validate` against the model and cluster the plans were made
//! for (and against the plan's own topology), as `towerrec train` does with a plan file.
//! Whatever the input, parsing and validation return a plan or an error; they never
//! panic, hang or allocate beyond the guard's limits. A plan that parses writes back
//! (`to_json_pretty`) to the same plan, and one that validates has a cost estimate and
//! per-rank bytes for every rank. Run long with
//! `PROPTEST_CASES=1000000 cargo test --release -p towerrec-plan --test fuzz`.

use proptest::prelude::*;
use towerrec_comm::Topology;
use towerrec_fuzz::{arbitrary, config, mutated, AllocGuard};
use towerrec_plan::{estimate, planners, CostParams, Plan, TableSpec};

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"0",
    b"1",
    b"-1",
    b"1.5",
    b"1e400",
    b"null",
    b"true",
    b"\\u0000",
    b"\\ud800",
    b"\"\\\"\"",
    b"18446744073709551615",
    b"18446744073709551616",
    b"4294967296",
    b"1048576",
    b"1048577",
    b"\"rank\": 3",
    b"\"rows\": [5, 2]",
    b"\"rows\": [0, 18446744073709551615]",
    b"\"columns\": [0, 0]",
    b"\"shards\": []",
    b"\"sharding\": \"data_parallel\"",
    b"\"sharding\": \"table_row_wise\"",
    b"\"sharding\": \"column_wise\"",
    b"\"table\": \"t0\"",
    b"\"table\": \"\"",
    b"\"topology\": { \"hosts\": 0, \"ranks_per_host\": 1 }",
    b"\"topology\": { \"hosts\": 4294967296, \"ranks_per_host\": 4294967296 }",
    b"{ \"rank\": 1, \"rows\": [0, 10], \"columns\": [0, 8] }",
];

const ALPHABET: &[u8] = b"{}[],:\" 0123456789tablerowsshardinghostsrank_wise";

/// The model the plans are for: small, mid and big tables.
fn tables() -> Vec<TableSpec> {
    [(10usize, 8usize), (1000, 16), (1 << 30, 64), (7, 3)]
        .iter()
        .enumerate()
        .map(|(i, &(rows, dim))| TableSpec {
            name: format!("t{i}"),
            rows,
            dim,
            bytes_per_row: 4 * dim + 4,
            pooling_factor: 2.0,
        })
        .collect()
}

fn topology() -> Topology {
    Topology::new(2, 2).unwrap()
}

/// Every planner's plan, pretty and compact.
fn seeds() -> Vec<Vec<u8>> {
    let (t, topo) = (tables(), topology());
    let plans = [
        planners::table_wise(&t, topo),
        planners::row_wise(&t, topo),
        planners::column_wise(&t, topo, 2),
        planners::table_row_wise(&t, topo),
        planners::data_parallel(&t, topo),
        planners::greedy(&t, topo, &CostParams::default(), None),
    ];
    plans
        .into_iter()
        .map(|p| p.unwrap())
        .flat_map(|p| {
            [
                p.to_json_pretty().into_bytes(),
                serde_json::to_vec(&p).unwrap(),
            ]
        })
        .collect()
}

fn check(text: &str) {
    let Ok(plan) = Plan::from_json(text) else {
        return;
    };
    let back = Plan::from_json(&plan.to_json_pretty())
        .unwrap_or_else(|e| panic!("a plan that parses does not parse again: {e}"));
    assert_eq!(back, plan);
    let t = tables();
    let _ = plan.validate(&t, plan.topology, Some(1 << 30));
    if plan.validate(&t, topology(), Some(u64::MAX)).is_ok() {
        let world = topology().world_size();
        assert_eq!(plan.rank_bytes(&t).len(), world);
        let secs = estimate(&plan, &t, &CostParams::default());
        assert_eq!(secs.len(), world);
        assert!(secs.iter().all(|s| s.is_finite() && *s >= 0.0), "{secs:?}");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plan_from_json_and_validate(
        bytes in prop_oneof![
            4 => mutated(seeds(), TOKENS, 256),
            1 => arbitrary(ALPHABET, 600),
        ],
    ) {
        check(&String::from_utf8_lossy(&bytes));
    }
}

// Tower partition JSON (`towerrec partition`'s output): `TowerPartition::from_json` on
// mutated partitions and arbitrary text, then `indices` against a model's features.
// A partition that parses writes back to one that parses with the same towers; one
// whose indices are accepted holds every feature exactly once.

mod partition {
    use super::*;
    use towerrec_plan::partition::{naive, Method, TowerPartition};

    const TOKENS: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b"\"",
        b"null",
        b"1e400",
        b"-0",
        b"\"C1\"",
        b"\"C9\"",
        b"\"\"",
        b"[]",
        b"\"mode\": \"naive\"",
        b"\"mode\": \"diverse\"",
        b"\"max_ratio\": 1.5",
        b"\"affinity\": { \"within\": null, \"between\": 0.5 }",
        b"\"samples\": 18446744073709551616",
    ];

    const ALPHABET: &[u8] = b"{}[],:\" 0123456789.Cmodetowersnaivecoherentdiverse";

    fn names() -> Vec<String> {
        (1..=7).map(|i| format!("C{i}")).collect()
    }

    fn seeds() -> Vec<Vec<u8>> {
        let n = names();
        let mut p = TowerPartition::new(Method::Naive, &naive(7, 3).unwrap(), &n).unwrap();
        let bare = p.to_json_pretty().into_bytes();
        p.mode = Method::Coherent;
        (p.max_ratio, p.seed, p.dims, p.samples, p.stress) =
            (Some(1.0), Some(4), Some(2), Some(2048), Some(0.35));
        vec![
            bare,
            p.to_json_pretty().into_bytes(),
            serde_json::to_vec(&p).unwrap(),
        ]
    }

    fn check(text: &str) {
        let Ok(p) = TowerPartition::from_json(text) else {
            return;
        };
        let back = TowerPartition::from_json(&p.to_json_pretty())
            .unwrap_or_else(|e| panic!("a partition that parses does not parse again: {e}"));
        assert_eq!((back.mode, &back.towers), (p.mode, &p.towers));
        let n = names();
        if let Ok(towers) = p.indices(&n) {
            let mut all: Vec<usize> = towers.concat();
            all.sort_unstable();
            assert_eq!(all, (0..n.len()).collect::<Vec<_>>());
            assert!(towers.iter().all(|t| !t.is_empty()));
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn partition_from_json_and_indices(
            bytes in prop_oneof![
                4 => mutated(seeds(), TOKENS, 256),
                1 => arbitrary(ALPHABET, 400),
            ],
        ) {
            check(&String::from_utf8_lossy(&bytes));
        }
    }
}
