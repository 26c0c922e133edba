//! The collection on a communicator that is not the world: its plan names world ranks,
//! its exchanges address group ranks.

use super::*;
use crate::init::TableInit;
use towerrec_comm::{run_in_process, Topology};
use towerrec_core::batch::KeyedJagged;
use towerrec_plan::{ShardingType, TablePlan};

const ROWS: [usize; 2] = [10, 12];
const DIM: usize = 4;

/// Table `a` whole on the group's second rank, `b` split by rows over both.
fn plan_for_group(ranks: [usize; 2]) -> Plan {
    let whole = Shard {
        rank: ranks[1],
        rows: (0, ROWS[0]),
        columns: (0, DIM),
    };
    let half = |rank, rows| Shard {
        rank,
        rows,
        columns: (0, DIM),
    };
    Plan {
        topology: Topology::new(1, 4).expect("topology"),
        tables: vec![
            TablePlan {
                hot_rows: Vec::new(),
                partitions: Vec::new(),
                table: "a".into(),
                sharding: ShardingType::TableWise,
                shards: vec![whole],
            },
            TablePlan {
                hot_rows: Vec::new(),
                partitions: Vec::new(),
                table: "b".into(),
                sharding: ShardingType::RowWise,
                shards: vec![half(ranks[0], (0, 6)), half(ranks[1], (6, ROWS[1]))],
            },
        ],
        towers: Vec::new(),
    }
}

/// Three samples whose ids depend on the world rank.
fn batch_of(rank: usize) -> Batch {
    let r = rank as u64;
    let lengths = [1, 2, 1, 2, 0, 3];
    let values = vec![r, (r + 1) % 10, 9, 3, r + 4, 0, 11, 7 - r, 5];
    let sparse = KeyedJagged::from_lengths(vec!["a".into(), "b".into()], 3, &lengths, values)
        .expect("sparse");
    Batch::new(Vec::new(), 0, sparse, vec![0.0; 3]).expect("batch")
}

#[test]
fn a_sub_group_routes_to_its_own_members() {
    let topology = Topology::new(1, 4).expect("topology");
    let descs: Vec<TableDesc> = ["a", "b"]
        .iter()
        .zip(ROWS)
        .map(|(n, rows)| TableDesc {
            name: n.to_string(),
            rows,
            dim: DIM,
        })
        .collect();
    let slots = FeatureSlots::contiguous(2 * DIM, 0, [DIM, DIM]).expect("slots");
    let results = run_in_process(topology, |world| {
        let me = world.world_rank();
        let first = me / 2 * 2;
        let group = world.split(me / 2, me)?;
        let plan = plan_for_group([first, first + 1]);
        let mut sharded =
            ShardedEmbeddings::new(group, &descs, &plan, Pooling::Sum, SparseOptimizer::Sgd, 7)?;
        let batch = batch_of(me);
        let mut out = vec![0.0; 3 * slots.width()];
        sharded.forward(&batch, &mut out, &slots)?;
        Ok::<_, Error>((batch, out))
    })
    .expect("cluster");
    for (rank, (batch, out)) in results.into_iter().enumerate() {
        for (t, &rows) in ROWS.iter().enumerate() {
            let init = TableInit::new(7, t, rows, DIM);
            let bag = EmbeddingBag::try_from_fn(
                "t",
                rows,
                DIM,
                Pooling::Sum,
                SparseOptimizer::Sgd,
                |r, row| init.fill_row(r, 0, row),
            )
            .expect("bag");
            let mut want = vec![0.0; 3 * slots.width()];
            bag.forward(
                batch.sparse.feature(t),
                &mut want,
                slots.width(),
                slots.slot(t).offset,
            )
            .expect("forward");
            for (s, (w, g)) in want
                .chunks(slots.width())
                .zip(out.chunks(slots.width()))
                .enumerate()
            {
                for c in slots.slot(t).range() {
                    assert!(
                        (w[c] - g[c]).abs() < 1e-6,
                        "rank {rank} table {t} sample {s} column {c}: want {}, got {}",
                        w[c],
                        g[c]
                    );
                }
            }
        }
    }
}
