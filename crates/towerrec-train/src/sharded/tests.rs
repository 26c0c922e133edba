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
            precision: Default::default(),
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

/// Quantized communication rounds exactly what crosses a wire: with fp16 forward, a
/// sample's rows of a table held on another rank arrive rounded, those its own rank
/// holds stay exact, and row-wise partial sums are rounded each before they are added
/// (in rank order); the output exchange sends half the bytes of fp32.
#[test]
fn quantized_forward_rounds_what_crosses_a_wire() {
    use crate::config::QComms;
    use towerrec_comm::{Phase, WirePrecision};
    let topology = Topology::new(1, 2).expect("topology");
    let descs: Vec<TableDesc> = ["a", "b"]
        .iter()
        .zip(ROWS)
        .map(|(n, rows)| TableDesc {
            name: n.to_string(),
            rows,
            dim: DIM,
            precision: Default::default(),
        })
        .collect();
    let slots = FeatureSlots::contiguous(2 * DIM, 0, [DIM, DIM]).expect("slots");
    let mut plan = plan_for_group([0, 1]);
    plan.topology = topology;
    let results = run_in_process(topology, |world| {
        let me = world.world_rank();
        let mut sharded =
            ShardedEmbeddings::new(world, &descs, &plan, Pooling::Sum, SparseOptimizer::Sgd, 7)?;
        let batch = batch_of(me);
        let mut bytes = Vec::new();
        let mut outs = Vec::new();
        for forward in [WirePrecision::Fp32, WirePrecision::Fp16] {
            sharded.set_qcomms(QComms {
                forward,
                backward: WirePrecision::Bf16,
                dense: WirePrecision::Fp32,
            });
            let before = sharded.comm().traffic();
            let mut out = vec![0.0; 3 * slots.width()];
            sharded.forward(&batch, &mut out, &slots)?;
            bytes.push(
                sharded
                    .comm()
                    .traffic()
                    .since(&before)
                    .phase(Phase::OutputDist)
                    .total(),
            );
            outs.push(out);
        }
        Ok::<_, Error>((batch, outs, bytes))
    })
    .expect("cluster");
    // Table t's rows `rows` pooled (the others zero), as a shard holding them pools.
    let pooled = |batch: &Batch, t: usize, rows: std::ops::Range<usize>| {
        let init = TableInit::new(7, t, ROWS[t], DIM);
        let bag = EmbeddingBag::try_from_fn(
            "t",
            ROWS[t],
            DIM,
            Pooling::Sum,
            SparseOptimizer::Sgd,
            |r, row| {
                if rows.contains(&r) {
                    init.fill_row(r, 0, row)
                } else {
                    row.fill(0.0)
                }
            },
        )
        .expect("bag");
        let mut out = vec![0.0; 3 * DIM];
        bag.forward(batch.sparse.feature(t), &mut out, DIM, 0)
            .expect("forward");
        out
    };
    let fp16 = |mut v: Vec<f32>| {
        WirePrecision::Fp16.round(&mut v);
        v
    };
    for (me, (batch, outs, bytes)) in results.into_iter().enumerate() {
        assert_eq!(
            bytes[1] * 2,
            bytes[0],
            "rank {me}: fp16 sends half the bytes"
        );
        assert!(bytes[1] > 0);
        // Table a lives on rank 1: rank 0's rows of it cross the wire.
        let a = pooled(&batch, 0, 0..ROWS[0]);
        let want_a = if me == 1 { a.clone() } else { fp16(a.clone()) };
        // Table b: rows 0..6 on rank 0, 6..12 on rank 1; the other rank's partial sum
        // is rounded, then the two are added in rank order.
        let (mut lo, mut hi) = (pooled(&batch, 1, 0..6), pooled(&batch, 1, 6..ROWS[1]));
        if me == 0 {
            hi = fp16(hi);
        } else {
            lo = fp16(lo);
        }
        let want_b: Vec<f32> = lo.iter().zip(&hi).map(|(x, y)| x + y).collect();
        let fp32_b: Vec<f32> = pooled(&batch, 1, 0..6)
            .iter()
            .zip(&pooled(&batch, 1, 6..ROWS[1]))
            .map(|(x, y)| x + y)
            .collect();
        for (k, (out, (want_a, want_b))) in outs
            .iter()
            .zip([(&a, &fp32_b), (&want_a, &want_b)])
            .enumerate()
        {
            for s in 0..3 {
                let row = &out[s * slots.width()..(s + 1) * slots.width()];
                assert_eq!(
                    &row[..DIM],
                    &want_a[s * DIM..(s + 1) * DIM],
                    "rank {me} run {k} sample {s}: a"
                );
                assert_eq!(
                    &row[DIM..],
                    &want_b[s * DIM..(s + 1) * DIM],
                    "rank {me} run {k} sample {s}: b"
                );
            }
        }
        // The setting changed something: rank 0's rows of table a are not all exact
        // in fp16.
        if me == 0 {
            assert_ne!(a, want_a, "the test's values are not all fp16 values");
        }
    }
}
