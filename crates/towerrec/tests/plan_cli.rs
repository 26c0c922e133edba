//! `towerrec plan` end to end: every strategy's JSON validates against the quickstart's
//! tables, the memory budget binds, and bad requests fail with a message that says why.

use std::process::Output;
use towerrec_plan::{Plan, ShardingType, TableSpec, Topology};

mod common;

use common::towerrec;

/// A fresh scratch directory for this file's tests.
fn tmp_dir(name: &str) -> std::path::PathBuf {
    common::tmp("plan-cli", name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The embedded quickstart's tables: 26 of 20,000 rows, dim 16, row-wise Adagrad
/// (4·16 + 4 bytes per row), one id per sample.
fn quickstart_tables() -> Vec<TableSpec> {
    (1..=26)
        .map(|i| TableSpec {
            name: format!("C{i}"),
            rows: 20_000,
            dim: 16,
            bytes_per_row: 68,
            pooling_factor: 1.0,
        })
        .collect()
}

#[test]
fn every_strategy_writes_a_plan_that_validates() {
    let dir = tmp_dir("strategies");
    let topo = Topology::new(2, 2).unwrap();
    for strategy in [
        "greedy",
        "table-wise",
        "row-wise",
        "column-wise",
        "table-row-wise",
        "data-parallel",
    ] {
        let out = dir.join(format!("{strategy}.json"));
        let o = towerrec(&[
            "plan",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--strategy",
            strategy,
            "--output",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert!(o.status.success(), "{strategy}: {err}");
        assert!(
            o.stdout.is_empty(),
            "{strategy}: the plan goes to the file only"
        );
        assert!(
            err.contains("est. ms/step") && err.contains("26 tables"),
            "{err}"
        );
        let plan = Plan::load(&out).unwrap();
        plan.validate(&quickstart_tables(), topo, None).unwrap();
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_plan_goes_to_stdout_and_follows_the_config() {
    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "3",
        "--set",
        "model.embedding_dim=8",
        "--set",
        "model.bottom_mlp=[64, 8]",
        "--set",
        "optimizer.sparse={kind=\"sgd\"}",
        "--strategy",
        "column-wise",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = Plan::from_json(&String::from_utf8_lossy(&o.stdout)).unwrap();
    let tables: Vec<TableSpec> = quickstart_tables()
        .into_iter()
        .map(|t| TableSpec {
            dim: 8,
            bytes_per_row: 32,
            ..t
        })
        .collect();
    let topo = Topology::new(1, 3).unwrap();
    plan.validate(&tables, topo, None).unwrap();
    assert!(plan
        .tables
        .iter()
        .all(|e| e.sharding == ShardingType::ColumnWise && e.shards.len() == 3));
}

#[test]
fn greedy_keeps_within_the_memory_budget() {
    // 26 tables of 1.3 MiB on 4 ranks: 1 MiB per rank forces row-wise splits, and 9 MiB
    // per rank holds them all.
    let args = |budget: &'static str| {
        [
            "plan",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--memory-budget-mib",
            budget,
        ]
    };
    let o = towerrec(&args("9"));
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = Plan::from_json(&String::from_utf8_lossy(&o.stdout)).unwrap();
    let topo = Topology::new(2, 2).unwrap();
    plan.validate(&quickstart_tables(), topo, Some(9 << 20))
        .unwrap();
    assert!(plan
        .tables
        .iter()
        .any(|e| e.sharding != ShardingType::TableWise));

    let o = towerrec(&args("1"));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("memory budget") && err.contains("1.00 MiB"),
        "{err}"
    );

    // Other strategies are checked against the budget.
    let o = towerrec(&[
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "data-parallel",
        "--memory-budget-mib",
        "9",
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("data-parallel plan does not fit") && err.contains("rank 0"),
        "{err}"
    );
}

#[test]
fn bad_requests_fail_with_a_clear_message() {
    let o = towerrec(&["plan", "--hosts", "0", "--ranks-per-host", "2"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("--hosts 0") && err.contains("at least 1"),
        "{err}"
    );

    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "1",
        "--strategy",
        "diagonal",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("diagonal"), "{}", stderr(&o));

    let o = towerrec(&["plan", "--hosts", "1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--ranks-per-host"), "{}", stderr(&o));

    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "1",
        "--config",
        "/nonexistent/x.toml",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/x.toml"), "{}", stderr(&o));

    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "2",
        "--strategy",
        "column-wise",
        "--column-shards",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("at least 1 shard"), "{}", stderr(&o));

    let o = towerrec(&[
        "plan",
        "--hosts",
        "1",
        "--ranks-per-host",
        "1",
        "--output",
        "/nonexistent/dir/p.json",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent/dir/p.json"),
        "{}",
        stderr(&o)
    );
}
