use super::*;
use crate::plan::{Partition, Plan, Shard, ShardingType, TableSpec};
use proptest::prelude::*;

fn spec(rows: usize) -> TableSpec {
    TableSpec {
        name: "T".into(),
        rows,
        dim: 4,
        bytes_per_row: 16,
        pooling_factor: 1.0,
    }
}

fn entry(hot: Vec<usize>, partitions: Vec<Partition>) -> TablePlan {
    TablePlan {
        table: "T".into(),
        sharding: ShardingType::RowPartitioned,
        shards: Vec::new(),
        hot_rows: hot,
        partitions,
    }
}

fn part(order: (usize, usize), rank: usize, replicas: &[usize]) -> Partition {
    Partition {
        order,
        rank,
        replicas: replicas.to_vec(),
    }
}

fn plan(topology: Topology, e: TablePlan) -> Plan {
    Plan {
        topology,
        tables: vec![e],
        towers: Vec::new(),
    }
}

fn validate(p: &Plan, rows: usize) -> std::result::Result<(), String> {
    p.validate(&[spec(rows)], p.topology, None)
        .map_err(|e| e.to_string())
}

/// The order spelled out: hot rows, then the rest by id.
fn naive_order(rows: usize, hot: &[usize]) -> Vec<usize> {
    let mut order = hot.to_vec();
    order.extend((0..rows).filter(|r| !hot.contains(r)));
    order
}

/// Distinct rows of a table of `rows`, in a shuffled order.
fn hot_rows(rows: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..rows, 0..=rows.min(40))
        .prop_shuffle()
        .prop_map(|v| {
            let mut seen = std::collections::HashSet::new();
            v.into_iter().filter(|r| seen.insert(*r)).collect()
        })
}

/// A valid row-partitioned entry on `world` ranks: random cuts, owners and replicas.
fn valid_entry(world: usize) -> impl Strategy<Value = (usize, TablePlan)> {
    (1usize..200).prop_flat_map(move |rows| {
        let cuts = prop::collection::btree_set(1..rows.max(2), 0..6);
        let owners =
            prop::collection::vec((0..world, prop::collection::btree_set(0..world, 0..3)), 7);
        (hot_rows(rows), cuts, owners).prop_map(move |(hot, cuts, owners)| {
            let mut bounds: Vec<usize> = std::iter::once(0)
                .chain(cuts.into_iter().filter(|&c| c < rows))
                .chain(std::iter::once(rows))
                .collect();
            bounds.dedup();
            let partitions = bounds
                .windows(2)
                .zip(&owners)
                .map(|(w, (owner, reps))| {
                    let reps: Vec<usize> = reps.iter().copied().filter(|r| r != owner).collect();
                    part((w[0], w[1]), *owner, &reps)
                })
                .collect();
            (rows, entry(hot, partitions))
        })
    })
}

/// Every row's position and every position's row, against the order built naively.
fn order_matches_naive(rows: usize, hot: &[usize]) -> Result<(), TestCaseError> {
    let order = RowOrder::new(rows, hot);
    for (pos, &row) in naive_order(rows, hot).iter().enumerate() {
        prop_assert_eq!(order.position(row), pos);
        prop_assert_eq!(order.row_at(pos), row);
    }
    Ok(())
}

proptest! {
    #[test]
    fn the_order_is_the_hot_rows_then_the_rest_by_id(
        (rows, hot) in (1usize..1500).prop_flat_map(|rows| (Just(rows), hot_rows(rows)))
    ) {
        order_matches_naive(rows, &hot)?;
    }

    /// Any share of the rows hot, whole words and blocks of them included.
    #[test]
    fn the_order_holds_with_many_hot_rows(
        (rows, hot) in (1usize..1500).prop_flat_map(|rows| {
            let all: Vec<usize> = (0..rows).collect();
            (Just(rows), prop::sample::subsequence(all, 0..=rows).prop_shuffle())
        })
    ) {
        order_matches_naive(rows, &hot)?;
    }

    #[test]
    fn valid_entries_validate_and_every_row_has_one_home(
        (rows, e) in valid_entry(8)
    ) {
        let topo = Topology::new(2, 4).unwrap();
        let p = plan(topo, e.clone());
        prop_assert_eq!(validate(&p, rows), Ok(()));
        let map = TableAddresses::new(&e, rows, 8);
        // Every rank's copies fill its storage exactly: offsets 0..owned+replicas, once.
        for rank in 0..8 {
            let (owned, replica) = map.stored(rank);
            let mut offsets: Vec<usize> = (0..rows)
                .map(|r| map.locate(r, rank, topo))
                .filter(|l| l.rank == rank)
                .map(|l| l.offset)
                .collect();
            offsets.sort_unstable();
            prop_assert_eq!(offsets, (0..owned + replica).collect::<Vec<_>>());
        }
        // Each row: read locally if held, else from the same host if a replica is there.
        for row in 0..rows {
            let pos = naive_order(rows, &e.hot_rows).iter().position(|&r| r == row).unwrap();
            let p = e.partitions.iter().find(|p| p.order.0 <= pos && pos < p.order.1).unwrap();
            for from in 0..8 {
                let l = map.locate(row, from, topo);
                let holders: Vec<usize> = std::iter::once(p.rank).chain(p.replicas.iter().copied()).collect();
                prop_assert!(holders.contains(&l.rank));
                prop_assert_eq!(l.replica, l.rank != p.rank);
                if holders.contains(&from) {
                    prop_assert_eq!(l.rank, from);
                } else if holders.iter().any(|&h| topo.host_of(h) == topo.host_of(from)) {
                    prop_assert_eq!(topo.host_of(l.rank), topo.host_of(from));
                }
            }
        }
        // Bytes: owners and replicas hold their partitions.
        let total: u64 = p.rank_bytes(&[spec(rows)]).iter().sum();
        let copies: usize = e.partitions.iter().map(|p| p.num_rows() * (1 + p.replicas.len())).sum();
        prop_assert_eq!(total, copies as u64 * 16);
        let extra: u64 = p.replica_bytes(&[spec(rows)]).iter().sum();
        let replicated: usize = e.partitions.iter().map(|p| p.num_rows() * p.replicas.len()).sum();
        prop_assert_eq!(extra, replicated as u64 * 16);
        // And the plan file reads back the same.
        prop_assert_eq!(Plan::from_json(&p.to_json_pretty()).unwrap(), p);
    }

    #[test]
    fn broken_entries_are_refused((rows, e) in valid_entry(4), which in 0usize..7) {
        let topo = Topology::new(2, 2).unwrap();
        let mut e = e;
        let expect = match which {
            0 => { e.partitions[0].order.1 += 1; "do not add up" }
            1 => { e.partitions.last_mut().unwrap().rank = 4; "does not exist" }
            2 => { let o = e.partitions[0].rank; e.partitions[0].replicas.push(o); "holds it twice" }
            3 => { e.partitions[0].replicas.push(9); "does not exist" }
            4 => { e.hot_rows.push(rows); "outside the table" }
            5 => {
                if e.hot_rows.is_empty() { e.hot_rows = vec![0, 0]; } else { e.hot_rows.push(e.hot_rows[0]); }
                "listed twice"
            }
            _ => {
                e.shards.push(Shard { rank: 0, rows: (0, rows), columns: (0, 4) });
                "not shards"
            }
        };
        let err = validate(&plan(topo, e), rows).unwrap_err();
        prop_assert!(err.contains(expect), "{} (expected '{}')", err, expect);
    }
}

#[test]
fn other_shardings_refuse_partitions() {
    let topo = Topology::new(1, 2).unwrap();
    let mut e = TablePlan::new(
        "T",
        ShardingType::TableWise,
        vec![Shard {
            rank: 0,
            rows: (0, 10),
            columns: (0, 4),
        }],
    );
    e.hot_rows = vec![3];
    let err = validate(&plan(topo, e), 10).unwrap_err();
    assert!(err.contains("belong to row_partitioned"), "{err}");
}

#[test]
fn a_replica_on_the_host_beats_the_owner_across_hosts() {
    let topo = Topology::new(2, 2).unwrap();
    // Ranks 0, 1 on host 0; 2, 3 on host 1. Rows 0..4 on rank 0, replicated on 3.
    let e = entry(vec![], vec![part((0, 4), 0, &[3]), part((4, 10), 2, &[])]);
    let map = TableAddresses::new(&e, 10, 4);
    let at = |row, from| map.locate(row, from, topo);
    assert_eq!(
        at(1, 0),
        Location {
            rank: 0,
            offset: 1,
            replica: false
        }
    );
    assert_eq!(
        at(1, 1),
        Location {
            rank: 0,
            offset: 1,
            replica: false
        }
    );
    assert_eq!(
        at(1, 2),
        Location {
            rank: 3,
            offset: 1,
            replica: true
        }
    );
    assert_eq!(
        at(1, 3),
        Location {
            rank: 3,
            offset: 1,
            replica: true
        }
    );
    assert_eq!(
        at(5, 3),
        Location {
            rank: 2,
            offset: 1,
            replica: false
        }
    );
    // Rank 3 owns nothing: its replica region starts at 0.
    assert_eq!(map.stored(3), (0, 4));
}

#[test]
fn the_map_of_a_hundred_million_rows_is_small() {
    let rows = 100_000_000usize;
    // 1% hot rows, scattered over the table by an affine map.
    let hot: Vec<usize> = (0..rows / 100).map(|i| (i * 7_919 + 13) % rows).collect();
    let step = rows / 64;
    let partitions = (0..64)
        .map(|i| {
            part(
                (i * step, if i == 63 { rows } else { (i + 1) * step }),
                i,
                &[],
            )
        })
        .collect();
    let e = entry(hot.clone(), partitions);
    let map = TableAddresses::new(&e, rows, 64);
    let mb = map.heap_bytes() as f64 / 1e6;
    assert!(mb < 30.0, "{mb} MB");
    let topo = Topology::new(8, 8).unwrap();
    // The hottest row is position 0 (rank 0); the first cold row by id follows the hot ones.
    assert_eq!(map.locate(hot[0], 5, topo).rank, 0);
    assert_eq!(map.order().position(hot[0]), 0);
    let cold = (0..rows).find(|r| !hot.contains(r)).unwrap();
    assert_eq!(map.order().position(cold), hot.len());
    assert_eq!(map.order().row_at(rows - 1), rows - 1);
}

proptest! {
    #[test]
    fn stored_rows_and_shared_offsets_agree_with_locate((rows, e) in valid_entry(4)) {
        let topo = Topology::new(2, 2).unwrap();
        let map = TableAddresses::new(&e, rows, 4);
        for rank in 0..4 {
            let stored = map.stored_rows(rank);
            let (owned, replica) = map.stored(rank);
            prop_assert_eq!(stored.len(), owned + replica);
            let shared = map.shared_offsets(rank);
            for (offset, &row) in stored.iter().enumerate() {
                let l = map.locate(row, rank, topo);
                prop_assert_eq!((l.rank, l.offset), (rank, offset));
                let pos = map.order().position(row);
                let p = e.partitions.iter().find(|p| p.order.0 <= pos && pos < p.order.1).unwrap();
                prop_assert_eq!(shared.iter().any(|r| r.contains(&offset)), !p.replicas.is_empty());
            }
        }
    }
}
