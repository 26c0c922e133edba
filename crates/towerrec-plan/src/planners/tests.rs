//! Each planner on small, hand-checked inputs.

use super::*;
use crate::CostParams;

fn spec(name: &str, rows: usize, dim: usize) -> TableSpec {
    TableSpec {
        name: name.into(),
        rows,
        dim,
        bytes_per_row: 4 * dim,
        pooling_factor: 1.0,
    }
}

fn topo(h: usize, l: usize) -> Topology {
    Topology::new(h, l).unwrap()
}

fn ranks_of(plan: &Plan, table: &str) -> Vec<usize> {
    plan.table(table)
        .unwrap()
        .shards
        .iter()
        .map(|s| s.rank)
        .collect()
}

#[test]
fn table_wise_puts_the_biggest_first_on_the_emptiest_rank() {
    let t = vec![
        spec("s", 10, 4),
        spec("b", 100, 4),
        spec("m", 50, 4),
        spec("m2", 50, 4),
    ];
    let p = table_wise(&t, topo(1, 2)).unwrap();
    // b → 0; m → 1; m2 → 1 (50 < 100); s → 0 (100 = 100, lowest rank).
    assert_eq!(ranks_of(&p, "b"), vec![0]);
    assert_eq!(ranks_of(&p, "m"), vec![1]);
    assert_eq!(ranks_of(&p, "m2"), vec![1]);
    assert_eq!(ranks_of(&p, "s"), vec![0]);
    // Entries keep the model's order.
    let names: Vec<&str> = p.tables.iter().map(|e| e.table.as_str()).collect();
    assert_eq!(names, vec!["s", "b", "m", "m2"]);
}

#[test]
fn row_wise_gives_the_remainder_to_the_first_ranks() {
    let t = vec![spec("a", 10, 4), spec("tiny", 2, 4)];
    let p = row_wise(&t, topo(2, 2)).unwrap();
    let rows: Vec<_> = p
        .table("a")
        .unwrap()
        .shards
        .iter()
        .map(|s| (s.rank, s.rows))
        .collect();
    assert_eq!(
        rows,
        vec![(0, (0, 3)), (1, (3, 6)), (2, (6, 8)), (3, (8, 10))]
    );
    // Fewer rows than ranks: only the first ranks get a shard.
    assert_eq!(ranks_of(&p, "tiny"), vec![0, 1]);
}

#[test]
fn column_wise_splits_dims_into_near_equal_blocks() {
    let t = vec![spec("a", 10, 10), spec("narrow", 10, 2)];
    let p = column_wise(&t, topo(2, 2), 3).unwrap();
    let cols: Vec<_> = p
        .table("a")
        .unwrap()
        .shards
        .iter()
        .map(|s| s.columns)
        .collect();
    assert_eq!(cols, vec![(0, 4), (4, 7), (7, 10)]);
    assert_eq!(ranks_of(&p, "a"), vec![0, 1, 2]);
    // At most dim blocks; the narrow table lands on the emptiest ranks: 3 (empty), then
    // 1 (120 bytes, as 2 holds, but lower).
    assert_eq!(ranks_of(&p, "narrow"), vec![3, 1]);
    // At most world-size blocks.
    let p = column_wise(&t, topo(1, 2), 8).unwrap();
    assert_eq!(p.table("a").unwrap().shards.len(), 2);
    let e = column_wise(&t, topo(1, 2), 0).unwrap_err().to_string();
    assert!(e.contains("at least 1 shard"), "{e}");
}

#[test]
fn table_row_wise_balances_hosts() {
    let t = vec![spec("a", 100, 4), spec("b", 60, 4), spec("c", 50, 4)];
    let p = table_row_wise(&t, topo(2, 3)).unwrap();
    let host = |name: &str| topo(2, 3).host_of(ranks_of(&p, name)[0]);
    assert_eq!((host("a"), host("b"), host("c")), (0, 1, 1));
    assert_eq!(ranks_of(&p, "a"), vec![0, 1, 2]);
}

#[test]
fn data_parallel_has_an_entry_per_table_and_no_shards() {
    let t = vec![spec("a", 100, 4), spec("b", 6, 4)];
    let p = data_parallel(&t, topo(2, 1)).unwrap();
    assert!(p
        .tables
        .iter()
        .all(|e| e.sharding == ShardingType::DataParallel && e.shards.is_empty()));
    assert_eq!(p.rank_bytes(&t), vec![1696, 1696]);
}

#[test]
fn greedy_replicates_tiny_tables_and_balances_the_rest() {
    let mut t: Vec<TableSpec> = (0..8)
        .map(|i| spec(&format!("big{i}"), 100_000, 16))
        .collect();
    t.push(spec("tiny", 10, 16));
    let p = greedy(&t, topo(2, 2), &CostParams::default(), None).unwrap();
    assert_eq!(
        p.table("tiny").unwrap().sharding,
        ShardingType::DataParallel
    );
    let mut per_rank = [0; 4];
    for e in p
        .tables
        .iter()
        .filter(|e| e.sharding == ShardingType::TableWise)
    {
        per_rank[e.shards[0].rank] += 1;
    }
    assert_eq!(per_rank, [2, 2, 2, 2]);
}

#[test]
fn greedy_splits_a_table_too_big_for_one_rank_over_one_host() {
    let t = vec![spec("huge", 1000, 4), spec("small", 100, 4)];
    let cost = CostParams {
        data_parallel_max_bytes: 0,
        ..CostParams::default()
    };
    // 16,000 bytes of "huge" on ranks of at most 7,000 bytes: one host of 3 ranks holds it.
    let p = greedy(&t, topo(2, 3), &cost, Some(7000)).unwrap();
    let e = p.table("huge").unwrap();
    assert_eq!(e.sharding, ShardingType::TableRowWise);
    assert!(p.rank_bytes(&t).iter().all(|&b| b <= 7000));
    // At most 3,000 bytes per rank: only all six ranks together hold it.
    let p = greedy(&t, topo(2, 3), &cost, Some(3000)).unwrap();
    assert_eq!(p.table("huge").unwrap().sharding, ShardingType::RowWise);
    assert!(p.rank_bytes(&t).iter().all(|&b| b <= 3000));
}

#[test]
fn greedy_says_when_nothing_fits() {
    let t = vec![spec("huge", 1000, 4)];
    let e = greedy(&t, topo(1, 2), &CostParams::default(), Some(7000))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("budget of 7000 bytes") && e.contains("16000 bytes"),
        "{e}"
    );
}

#[test]
fn planners_refuse_bad_requests() {
    let t = vec![spec("a", 10, 4)];
    let no_hosts = Topology {
        hosts: 0,
        ranks_per_host: 1,
    };
    assert!(table_wise(&t, no_hosts)
        .unwrap_err()
        .to_string()
        .contains("0 hosts"));
    let bad = vec![spec("a", 0, 4)];
    assert!(row_wise(&bad, topo(1, 1))
        .unwrap_err()
        .to_string()
        .contains("'a': has 0 rows"));
    let cost = CostParams {
        gather_bytes_per_s: -1.0,
        ..CostParams::default()
    };
    assert!(greedy(&t, topo(1, 1), &cost, None).is_err());
    // No tables at all is an empty plan.
    assert!(greedy(&[], topo(1, 1), &CostParams::default(), None)
        .unwrap()
        .tables
        .is_empty());
}
