//! One test per rejection: each asserts the message names the entry and the reason.

use crate::{Error, Plan, Shard, ShardingType, TablePlan, TableSpec};
use towerrec_comm::Topology;

fn spec(name: &str, rows: usize, dim: usize) -> TableSpec {
    TableSpec {
        name: name.into(),
        rows,
        dim,
        bytes_per_row: 4 * dim,
        pooling_factor: 1.0,
    }
}

fn tables() -> Vec<TableSpec> {
    vec![
        spec("tw", 10, 4),
        spec("rw", 10, 4),
        spec("cw", 10, 8),
        spec("trw", 9, 4),
        spec("dp", 3, 4),
    ]
}

fn topo() -> Topology {
    Topology::new(2, 2).unwrap()
}

fn sh(rank: usize, rows: (usize, usize), columns: (usize, usize)) -> Shard {
    Shard {
        rank,
        rows,
        columns,
    }
}

fn entry(table: &str, sharding: ShardingType, shards: Vec<Shard>) -> TablePlan {
    TablePlan {
        hot_rows: Vec::new(),
        partitions: Vec::new(),
        table: table.into(),
        sharding,
        shards,
    }
}

fn good() -> Plan {
    use ShardingType::*;
    Plan {
        topology: topo(),
        towers: Vec::new(),
        tables: vec![
            entry("tw", TableWise, vec![sh(3, (0, 10), (0, 4))]),
            entry(
                "rw",
                RowWise,
                vec![sh(0, (0, 4), (0, 4)), sh(3, (4, 10), (0, 4))],
            ),
            entry(
                "cw",
                ColumnWise,
                vec![sh(1, (0, 10), (0, 3)), sh(2, (0, 10), (3, 8))],
            ),
            entry(
                "trw",
                TableRowWise,
                vec![sh(2, (0, 5), (0, 4)), sh(3, (5, 9), (0, 4))],
            ),
            entry("dp", DataParallel, vec![]),
        ],
    }
}

/// Validates `plan` (no budget), expects an error, returns its message.
fn rejects(plan: &Plan) -> String {
    let e = plan.validate(&tables(), topo(), None).unwrap_err();
    e.to_string()
}

fn set_shards(plan: &mut Plan, table: &str, shards: Vec<Shard>) {
    let e = plan.tables.iter_mut().find(|t| t.table == table).unwrap();
    e.shards = shards;
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "message {msg:?} lacks {p:?}");
    }
}

#[test]
fn a_good_plan_validates() {
    good().validate(&tables(), topo(), None).unwrap();
    // rank bytes: tw 160 on 3; rw 64 on 0, 96 on 3; cw 10·32·3/8 = 120 on 1, 200 on 2;
    // trw 80 on 2, 64 on 3; dp 48 everywhere.
    assert_eq!(good().rank_bytes(&tables()), vec![112, 168, 328, 368]);
    good().validate(&tables(), topo(), Some(368)).unwrap();
}

#[test]
fn rejects_unknown_missing_and_repeated_tables() {
    let mut p = good();
    p.tables
        .push(entry("ghost", ShardingType::DataParallel, vec![]));
    assert_has(&rejects(&p), &["'ghost'", "model has no table"]);

    let mut p = good();
    p.tables.retain(|t| t.table != "cw");
    assert_has(&rejects(&p), &["'cw'", "no entry"]);

    let mut p = good();
    p.tables.push(p.tables[1].clone());
    assert_has(&rejects(&p), &["'rw'", "listed twice"]);
}

#[test]
fn rejects_another_topology_and_bad_topologies() {
    let mut p = good();
    p.topology = Topology::new(1, 4).unwrap();
    assert_has(&rejects(&p), &["1 hosts × 4", "cluster is 2 × 2"]);
    let zero = Topology {
        hosts: 0,
        ranks_per_host: 2,
    };
    let e = good().validate(&tables(), zero, None).unwrap_err();
    assert_has(&e.to_string(), &["0 hosts", "at least 1"]);
    let huge = Topology {
        hosts: usize::MAX,
        ranks_per_host: 2,
    };
    assert!(good().validate(&tables(), huge, None).is_err());
}

#[test]
fn rejects_bad_model_tables() {
    for (t, why) in [
        (spec("z", 0, 4), "0 rows"),
        (spec("z", 4, 0), "dim 0"),
        (
            TableSpec {
                pooling_factor: f64::NAN,
                ..spec("z", 4, 4)
            },
            "pooling",
        ),
        (spec("tw", 4, 4), "twice"),
    ] {
        let mut ts = tables();
        ts.push(t);
        let e = good().validate(&ts, topo(), None).unwrap_err();
        assert!(matches!(e, Error::Table { .. }), "{e}");
        assert_has(&e.to_string(), &[why]);
    }
}

#[test]
fn rejects_ranks_outside_the_world() {
    let mut p = good();
    set_shards(&mut p, "tw", vec![sh(4, (0, 10), (0, 4))]);
    assert_has(
        &rejects(&p),
        &["'tw'", "shard 0", "rank 4 does not exist", "0..4"],
    );
}

#[test]
fn rejects_empty_shards_and_shards_outside_the_table() {
    let cases = [
        (
            vec![sh(0, (0, 0), (0, 4)), sh(3, (0, 10), (0, 4))],
            "rows [0, 0) are empty",
        ),
        (
            vec![sh(0, (5, 2), (0, 4)), sh(3, (5, 10), (0, 4))],
            "rows [5, 2) are empty",
        ),
        (
            vec![sh(0, (0, 4), (0, 4)), sh(3, (4, 11), (0, 4))],
            "rows [4, 11) go past the table's 10 rows",
        ),
        (
            vec![sh(0, (0, 4), (0, 5)), sh(3, (4, 10), (0, 4))],
            "columns [0, 5) go past the table's 4 columns",
        ),
        (
            vec![sh(0, (0, 4), (2, 2)), sh(3, (4, 10), (0, 4))],
            "columns [2, 2) are empty",
        ),
        (vec![], "needs at least one shard"),
    ];
    for (shards, why) in cases {
        let mut p = good();
        set_shards(&mut p, "rw", shards);
        assert_has(&rejects(&p), &["'rw'", why]);
    }
}

#[test]
fn table_wise_needs_one_whole_shard() {
    let mut p = good();
    set_shards(
        &mut p,
        "tw",
        vec![sh(0, (0, 5), (0, 4)), sh(1, (5, 10), (0, 4))],
    );
    assert_has(&rejects(&p), &["'tw'", "exactly one shard, found 2"]);
    let mut p = good();
    set_shards(&mut p, "tw", vec![sh(0, (0, 9), (0, 4))]);
    assert_has(&rejects(&p), &["'tw'", "not the whole table"]);
    let mut p = good();
    set_shards(&mut p, "tw", vec![sh(0, (0, 10), (1, 4))]);
    assert_has(&rejects(&p), &["'tw'", "not the whole table"]);
}

#[test]
fn row_wise_needs_full_columns_and_rows_that_tile() {
    let cases = [
        (
            vec![sh(0, (0, 4), (0, 2)), sh(3, (4, 10), (0, 4))],
            "shard 0: columns [0, 2); row_wise shards hold all 4 columns",
        ),
        (
            vec![sh(0, (1, 4), (0, 4)), sh(3, (4, 10), (0, 4))],
            "row splits do not add up: shard 0 starts at row 1",
        ),
        (
            vec![sh(0, (0, 4), (0, 4)), sh(3, (5, 10), (0, 4))],
            "rows [4, 5) are in no shard",
        ),
        (
            vec![sh(0, (0, 5), (0, 4)), sh(3, (4, 10), (0, 4))],
            "shard 1 starts at row 4, inside",
        ),
        (
            vec![sh(3, (4, 10), (0, 4)), sh(0, (0, 4), (0, 4))],
            "out of order",
        ),
        (
            vec![sh(0, (0, 4), (0, 4)), sh(3, (4, 9), (0, 4))],
            "end at row 9 but the table has 10 rows",
        ),
        (
            vec![sh(1, (0, 4), (0, 4)), sh(1, (4, 10), (0, 4))],
            "shards 0 and 1 are both on rank 1",
        ),
    ];
    for (shards, why) in cases {
        let mut p = good();
        set_shards(&mut p, "rw", shards);
        assert_has(&rejects(&p), &["'rw'", why]);
    }
}

#[test]
fn table_row_wise_stays_on_one_host() {
    let mut p = good();
    set_shards(
        &mut p,
        "trw",
        vec![sh(1, (0, 5), (0, 4)), sh(2, (5, 9), (0, 4))],
    );
    assert_has(
        &rejects(&p),
        &["'trw'", "shard 1 is on rank 2 (host 1)", "one host"],
    );
    let mut p = good();
    set_shards(
        &mut p,
        "trw",
        vec![sh(2, (0, 5), (0, 4)), sh(3, (6, 9), (0, 4))],
    );
    assert_has(&rejects(&p), &["'trw'", "row splits do not add up"]);
}

#[test]
fn column_wise_needs_full_rows_and_columns_that_add_up() {
    let cases = [
        (
            vec![sh(1, (0, 10), (0, 3)), sh(2, (0, 10), (3, 6))],
            "column splits do not add up: the shards end at column 6 but the table has 8 columns",
        ),
        (
            vec![sh(1, (0, 10), (0, 3)), sh(2, (0, 10), (4, 8))],
            "column splits do not add up: shard 1 starts at column 4",
        ),
        (
            vec![sh(1, (0, 10), (0, 4)), sh(2, (0, 10), (3, 8))],
            "column splits do not add up: shard 1 starts at column 3, inside",
        ),
        (
            vec![sh(1, (0, 9), (0, 3)), sh(2, (0, 10), (3, 8))],
            "shard 0: rows [0, 9); column_wise shards hold all 10 rows",
        ),
        (
            vec![sh(2, (0, 10), (0, 3)), sh(2, (0, 10), (3, 8))],
            "both on rank 2",
        ),
    ];
    for (shards, why) in cases {
        let mut p = good();
        set_shards(&mut p, "cw", shards);
        assert_has(&rejects(&p), &["'cw'", why]);
    }
}

#[test]
fn data_parallel_has_no_shards() {
    let mut p = good();
    set_shards(&mut p, "dp", vec![sh(0, (0, 3), (0, 4))]);
    assert_has(
        &rejects(&p),
        &["'dp'", "data_parallel tables have no shards", "found 1"],
    );
}

#[test]
fn rejects_a_rank_over_the_memory_budget() {
    let e = good()
        .validate(&tables(), topo(), Some(367))
        .unwrap_err()
        .to_string();
    assert_has(&e, &["rank 3 (host 1)", "368 bytes", "budget of 367 bytes"]);
}

#[test]
fn shard_bytes_are_exact_and_never_overflow() {
    let t = TableSpec {
        bytes_per_row: 36,
        ..spec("x", 10, 8)
    };
    // 3 rows × 36 bytes × 5/8 columns = 67.5 → 67.
    assert_eq!(t.shard_bytes(&sh(0, (0, 3), (0, 5))), 67);
    assert_eq!(t.shard_bytes(&sh(0, (0, 10), (0, 8))), t.bytes());
    let big = TableSpec {
        name: "big".into(),
        rows: usize::MAX,
        dim: usize::MAX,
        bytes_per_row: usize::MAX,
        pooling_factor: 1.0,
    };
    assert_eq!(
        big.shard_bytes(&sh(0, (0, usize::MAX), (0, usize::MAX))),
        u64::MAX
    );
    assert_eq!(big.bytes(), u64::MAX);
    assert_eq!(t.shard_bytes(&sh(0, (5, 2), (0, 8))), 0);
}
