//! `towerrec plan` end to end: every strategy's JSON validates against the quickstart's
//! tables, the memory budget binds, and bad requests fail with a message that says why.

use std::process::Output;
use towerrec_plan::{Plan, ShardingType, TableSpec, Topology};

use crate::common;

use crate::common::towerrec;

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
        // The plan goes to the file only; stdout says what was planned.
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(
            said.starts_with(&format!("planned {strategy}: 26 tables"))
                && !said.contains('{')
                && said.contains(&format!("wrote the plan to {}", out.display())),
            "{strategy}: {said}"
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

    // A topology from the config is checked as the config's.
    let o = towerrec(&["plan", "--set", "cluster.hosts=0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cluster: hosts (0)"), "{}", stderr(&o));

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

/// Without --hosts and --ranks-per-host the topology is the config's `[cluster]`, as
/// `train` reads it (a flag overrides its key only); stdout says what was planned: the
/// topology and where it came from, the towers, every table's sharding, the predicted
/// cost and where the plan went.
#[test]
fn the_topology_comes_from_the_config_and_stdout_says_what_was_planned() {
    let dir = tmp_dir("summary");
    let out = dir.join("p.json");
    let plan = |args: &[&str]| {
        let mut all = vec!["plan", "--output", out.to_str().unwrap()];
        all.extend(args);
        let o = towerrec(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let said = String::from_utf8_lossy(&o.stdout).into_owned();
        (Plan::load(&out).unwrap(), said)
    };
    let one_by_three = [
        "--set",
        "cluster.hosts=1",
        "--set",
        "cluster.ranks_per_host=3",
    ];

    // The quickstart's [cluster] (2 × 2), then as overridden in the config.
    let (p, said) = plan(&["--strategy", "row-wise"]);
    assert_eq!(p.topology, Topology::new(2, 2).unwrap());
    assert!(
        said.contains(
            "2 host(s) × 2 rank(s) per host (from the [cluster] of examples/quickstart.toml"
        ),
        "{said}"
    );
    let mut args = vec!["--strategy", "row-wise"];
    args.extend(one_by_three);
    let (p, said) = plan(&args);
    assert_eq!(p.topology, Topology::new(1, 3).unwrap());
    p.validate(&quickstart_tables(), p.topology, None).unwrap();
    for needle in [
        "planned row-wise: 26 tables on 1 host(s) × 3 rank(s) per host (from the [cluster] of",
        "towers: none",
        "C1   row_wise         3 shard(s) on ranks 0-2",
        "C26  row_wise         3 shard(s) on ranks 0-2",
        "predicted embedding time per step",
        &format!("wrote the plan to {}", out.display()),
    ] {
        assert!(said.contains(needle), "{needle:?} in\n{said}");
    }

    // A flag sets its own key only.
    let mut args = vec!["--hosts", "2", "--strategy", "table-wise"];
    args.extend(one_by_three);
    let (p, said) = plan(&args);
    assert_eq!(p.topology, Topology::new(2, 3).unwrap());
    assert!(
        said.contains(
            "2 host(s) × 3 rank(s) per host (from --hosts and the cluster.ranks_per_host of"
        ),
        "{said}"
    );
    assert!(said.contains("C1   table_wise       rank "), "{said}");

    // Towers, each with its hosts and tables.
    let (p, said) = plan(&["--towers", "2", "--strategy", "table-wise"]);
    assert_eq!(p.towers.len(), 2);
    assert!(said.contains("towers: 2\n"), "{said}");
    assert!(
        said.contains("tower 0: host(s) 0; 13 table(s): C1, C3, C5,")
            && said.contains("tower 1: host(s) 1; 13 table(s): C2, C4, C6,"),
        "{said}"
    );

    // With the plan on stdout, the summary goes to stderr and stdout stays the JSON.
    let o = towerrec(&["plan", "--strategy", "data-parallel"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = Plan::from_json(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert_eq!(p.topology, Topology::new(2, 2).unwrap());
    let err = stderr(&o);
    assert!(
        err.contains("planned data-parallel: 26 tables")
            && err.contains("C7   data_parallel    a copy on every rank")
            && err.contains("wrote the plan to stdout"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}
