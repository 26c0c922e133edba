//! The hierarchical AllReduce on the in-process backend: results bitwise equal to a
//! sequential sum in the documented order (each host in local-rank order, then the
//! hosts in host order) on many shapes and lengths, property-tested; the same bits and
//! bytes as the flat AllReduce on one host or one rank per host; the cross-host bytes
//! `L` times fewer than the flat AllReduce's; groups of whole hosts served, other
//! groups refused on every rank; ranks that disagree on the length fail, not hang.

use proptest::prelude::*;
use towerrec_comm::{
    even_split, run_in_process, Bytes, Comm, Error, HierarchicalAllReduce, Phase, Topology,
};

/// Values of magnitudes 1e-3 to 1e8, so that a float sum depends on its order.
fn value(rank: usize, i: usize, salt: u64) -> f32 {
    let mut x = (rank as u64) << 32 ^ i as u64 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let unit = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
    unit * [1e-3, 1.0, 1e4, 1e8][(x & 3) as usize]
}

fn inputs(t: Topology, n: usize, salt: u64) -> Vec<Vec<f32>> {
    (0..t.world_size())
        .map(|r| (0..n).map(|i| value(r, i, salt)).collect())
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn add(sum: &mut [f32], v: &[f32]) {
    for (s, x) in sum.iter_mut().zip(v) {
        *s += x;
    }
}

/// The documented order: on each host the sum of its ranks in local-rank order, then
/// the sum of the host sums in host order (`vs` by world rank).
fn host_then_peer_sum(t: Topology, vs: &[Vec<f32>]) -> Vec<f32> {
    let host_sum = |h: usize| {
        let mut ranks = t.host_ranks(h);
        let mut s = vs[ranks.next().unwrap()].clone();
        for r in ranks {
            add(&mut s, &vs[r]);
        }
        s
    };
    let mut total = host_sum(0);
    for h in 1..t.hosts {
        add(&mut total, &host_sum(h));
    }
    total
}

/// The flat AllReduce's order: every rank in world-rank order.
fn rank_order_sum(vs: &[Vec<f32>]) -> Vec<f32> {
    let mut s = vs[0].clone();
    for v in &vs[1..] {
        add(&mut s, v);
    }
    s
}

/// Every rank's results of the hierarchical AllReduce of `vs[rank]` for each of
/// `rounds` (one reducer, reused), and the bytes sent.
fn run_hierarchical(t: Topology, rounds: &[Vec<Vec<f32>>]) -> Vec<(Vec<Vec<f32>>, Bytes)> {
    run_in_process(t, |comm: Comm| {
        let mut reducer = HierarchicalAllReduce::new(&comm)?;
        let before = comm.traffic();
        let mut out = Vec::new();
        for vs in rounds {
            let mut buf = vs[comm.rank()].clone();
            reducer.all_reduce(&mut buf, Phase::DenseGradSync)?;
            out.push(buf);
        }
        let bytes = comm.traffic().since(&before).phase(Phase::DenseGradSync);
        Ok::<_, Error>((out, bytes))
    })
    .unwrap_or_else(|e| panic!("hierarchical all_reduce on {t}: {e}"))
}

/// Every rank's bytes sent by one flat and then by one hierarchical AllReduce of `n`
/// f32 (in separate phases).
fn bytes_flat_and_hierarchical(t: Topology, n: usize) -> Vec<(Bytes, Bytes)> {
    run_in_process(t, |comm: Comm| {
        let mut reducer = HierarchicalAllReduce::new(&comm)?;
        let mut buf = vec![1.0f32; n];
        comm.all_reduce(&mut buf, Phase::DenseGradSync)?;
        reducer.all_reduce(&mut buf, Phase::SparseGradSync)?;
        let t = comm.traffic();
        Ok::<_, Error>((
            t.phase(Phase::DenseGradSync),
            t.phase(Phase::SparseGradSync),
        ))
    })
    .unwrap_or_else(|e| panic!("{t}: {e}"))
}

const SHAPES: [(usize, usize); 10] = [
    (1, 1),
    (1, 3),
    (3, 1),
    (2, 2),
    (2, 3),
    (3, 2),
    (2, 4),
    (4, 2),
    (3, 3),
    (4, 4),
];

#[test]
fn equals_the_host_then_peer_sum_bitwise_on_many_shapes() {
    for (h, l) in SHAPES {
        let t = Topology::new(h, l).unwrap();
        let p = t.world_size();
        // Empty, shorter than the ranks, one per rank, uneven chunks, and longer; one
        // reducer for all of them, lengths going up and down.
        let lengths = [
            0,
            1,
            p.saturating_sub(1),
            p,
            p + 1,
            37,
            1000,
            2,
            0,
            7 * p + 3,
        ];
        let rounds: Vec<Vec<Vec<f32>>> = lengths
            .iter()
            .enumerate()
            .map(|(k, &n)| inputs(t, n, k as u64))
            .collect();
        let out = run_hierarchical(t, &rounds);
        for (k, vs) in rounds.iter().enumerate() {
            let want = bits(&host_then_peer_sum(t, vs));
            for (rank, (got, _)) in out.iter().enumerate() {
                assert_eq!(
                    bits(&got[k]),
                    want,
                    "{t}, length {}, rank {rank}",
                    vs[0].len()
                );
            }
        }
        // The same bits on another run.
        let again = run_hierarchical(t, &rounds);
        assert_eq!(
            out.iter().map(|o| &o.0).collect::<Vec<_>>(),
            again.iter().map(|o| &o.0).collect::<Vec<_>>(),
            "{t}"
        );
    }
}

#[test]
fn one_host_or_one_rank_per_host_is_the_flat_all_reduce() {
    for (h, l) in [(1, 1), (1, 2), (1, 4), (2, 1), (4, 1)] {
        let t = Topology::new(h, l).unwrap();
        for n in [0, 1, 3, 37] {
            let vs = inputs(t, n, 9);
            let out = run_in_process(t, |comm: Comm| {
                let mut reducer = HierarchicalAllReduce::new(&comm)?;
                assert_eq!((reducer.hosts(), reducer.ranks_per_host()), (h, l));
                let mut flat = vs[comm.rank()].clone();
                comm.all_reduce(&mut flat, Phase::DenseGradSync)?;
                let mut hier = vs[comm.rank()].clone();
                reducer.all_reduce(&mut hier, Phase::SparseGradSync)?;
                let t = comm.traffic();
                Ok::<_, Error>((
                    flat,
                    hier,
                    t.phase(Phase::DenseGradSync),
                    t.phase(Phase::SparseGradSync),
                ))
            })
            .unwrap();
            let want = bits(&rank_order_sum(&vs));
            for (rank, (flat, hier, flat_bytes, hier_bytes)) in out.iter().enumerate() {
                let case = format!("{t}, length {n}, rank {rank}");
                assert_eq!(bits(flat), want, "{case}");
                assert_eq!(bits(hier), want, "{case}");
                assert_eq!(flat_bytes, hier_bytes, "{case}");
            }
        }
    }
}

#[test]
fn differs_from_the_flat_order_on_several_hosts_of_several_ranks() {
    // Not a property of the algorithm but of float sums: with both levels present the
    // association differs, and values of mixed magnitudes show it.
    let t = Topology::new(2, 2).unwrap();
    let vs = vec![vec![1e8f32], vec![1.0], vec![-1e8], vec![1.0]];
    let out = run_hierarchical(t, std::slice::from_ref(&vs));
    // Flat: ((1e8 + 1) + -1e8) + 1 = 1; hierarchical: (1e8 + 1) + (-1e8 + 1) = 0.
    assert_eq!(rank_order_sum(&vs), [1.0]);
    assert_eq!(host_then_peer_sum(t, &vs), [0.0]);
    for (got, _) in &out {
        assert_eq!(got[0], [0.0]);
    }
}

/// Cross-host bytes of the flat AllReduce and `L` × those of the hierarchical one, per
/// rank, may differ by the rounding of the chunks, at most `2·(P−L)` elements; over the
/// cluster they are equal: `2·(P−L)·n` elements either way.
#[test]
fn cross_host_bytes_fall_by_the_ranks_per_host() {
    for (h, l) in [(2, 2), (2, 4), (4, 2)] {
        let t = Topology::new(h, l).unwrap();
        let p = t.world_size();
        let s = 4u64;
        for n in [0, 1, 5, p - 1, p, 8 * p, 8 * p + 3, 1001, 4096] {
            let out = bytes_flat_and_hierarchical(t, n);
            let (mut flat_cross, mut hier_cross) = (0, 0);
            for (rank, (flat, hier)) in out.iter().enumerate() {
                let case = format!("{t}, {n} elements, rank {rank}: flat {flat:?}, hier {hier:?}");
                let (me_host, me_local) = (t.host_of(rank), t.local_rank(rank));
                // Flat: chunk d to every other rank d, its own chunk to every other rank.
                let c = even_split(n, p);
                let (mut intra, mut cross) = (0, 0);
                for d in (0..p).filter(|&d| d != rank) {
                    let b = s * (c[d] + c[rank]) as u64;
                    if t.host_of(d) == me_host {
                        intra += b
                    } else {
                        cross += b
                    }
                }
                assert_eq!((flat.intra_host, flat.cross_host), (intra, cross), "{case}");
                // Hierarchical: the host's chunks (all but its own) to the host's other
                // ranks, its own chunk back to each of them; its chunk's flat AllReduce
                // among the peers.
                let chunks = even_split(n, l);
                let mine = chunks[me_local];
                let intra = if l == 1 {
                    0
                } else {
                    s * ((n - mine) + (l - 1) * mine) as u64
                };
                let e = even_split(mine, h);
                let cross: u64 = (0..h)
                    .filter(|&o| o != me_host)
                    .map(|o| s * (e[o] + e[me_host]) as u64)
                    .sum();
                assert_eq!((hier.intra_host, hier.cross_host), (intra, cross), "{case}");
                // L times fewer cross-host bytes: exactly when the buffer splits evenly.
                let diff = flat.cross_host.abs_diff(l as u64 * hier.cross_host);
                if n % p == 0 {
                    assert_eq!(diff, 0, "{case}");
                } else {
                    assert!(diff <= 2 * (p - l) as u64 * s, "{case}");
                }
                flat_cross += flat.cross_host;
                hier_cross += hier.cross_host;
            }
            assert_eq!(flat_cross, l as u64 * hier_cross, "{t}, {n} elements");
            assert_eq!(flat_cross, 2 * (p - l) as u64 * n as u64 * s, "{t}, {n}");
        }
    }
}

#[test]
fn serves_groups_of_whole_hosts_and_refuses_others() {
    // 4 hosts × 2: the world split into hosts {0, 1} and {2, 3}, each group in reverse
    // rank order; and into the ranks of local rank 0 on hosts {0, 1} and on {2, 3}.
    let t = Topology::new(4, 2).unwrap();
    let vs = inputs(t, 23, 5);
    let out = run_in_process(t, |comm: Comm| {
        let me = comm.rank();
        let pair = comm.split(t.host_of(me) / 2, t.world_size() - me)?;
        let mut r = HierarchicalAllReduce::new(&pair)?;
        let mut a = vs[me].clone();
        r.all_reduce(&mut a, Phase::DenseGradSync)?;
        let shape_a = (r.hosts(), r.ranks_per_host(), r.intra_host().size());
        let col = comm.split(t.local_rank(me) * 2 + t.host_of(me) / 2, me)?;
        let mut r = HierarchicalAllReduce::new(&col)?;
        let mut b = vs[me].clone();
        r.all_reduce(&mut b, Phase::DenseGradSync)?;
        let shape_b = (r.hosts(), r.ranks_per_host(), r.peers().size());
        Ok::<_, Error>((a, shape_a, b, shape_b))
    })
    .unwrap();
    for (me, (a, shape_a, b, shape_b)) in out.iter().enumerate() {
        let first = t.host_of(me) / 2 * 2;
        let group: Vec<Vec<f32>> = t
            .host_ranks(first)
            .chain(t.host_ranks(first + 1))
            .map(|r| vs[r].clone())
            .collect();
        let want = host_then_peer_sum(Topology::new(2, 2).unwrap(), &group);
        assert_eq!(bits(a), bits(&want), "rank {me}");
        assert_eq!(*shape_a, (2, 2, 2));
        let mut want = vs[t.rank(first, t.local_rank(me))].clone();
        add(&mut want, &vs[t.rank(first + 1, t.local_rank(me))]);
        assert_eq!(bits(b), bits(&want), "rank {me}");
        assert_eq!(*shape_b, (2, 1, 2));
    }

    // 2 × 3 split by parity: {0, 2, 4} is two ranks on host 0 and one on host 1.
    let t = Topology::new(2, 3).unwrap();
    let out = run_in_process(t, |comm: Comm| {
        let parity = comm.split(comm.rank() % 2, comm.rank())?;
        Ok::<_, Error>(match HierarchicalAllReduce::<f32>::new(&parity) {
            Ok(_) => String::from("accepted"),
            Err(e) => e.to_string(),
        })
    })
    .unwrap();
    for (rank, msg) in out.iter().enumerate() {
        let want = if rank % 2 == 0 {
            "host 0: 2, host 1: 1"
        } else {
            "host 0: 1, host 1: 2"
        };
        assert!(
            msg.starts_with("hierarchical_all_reduce: ") && msg.contains(want),
            "rank {rank}: {msg}"
        );
    }
}

#[test]
fn ranks_that_disagree_on_the_length_fail_instead_of_hanging() {
    for (h, l) in [(2, 2), (2, 3)] {
        let t = Topology::new(h, l).unwrap();
        for odd in 0..t.world_size() {
            let out = run_in_process(t, |comm: Comm| {
                let mut r = HierarchicalAllReduce::new(&comm)?;
                let mut buf = vec![1.0f32; if comm.rank() == odd { 7 } else { 9 }];
                r.all_reduce(&mut buf, Phase::DenseGradSync)
            });
            assert!(out.is_err(), "{t}, rank {odd} with another length");
        }
    }
}

/// A topology of up to 4 × 4 and one f32 vector of `len` (0 to 199) elements per rank.
fn topology_and_vectors() -> impl Strategy<Value = (Topology, Vec<Vec<f32>>)> {
    (1usize..=4, 1usize..=4, 0usize..200).prop_flat_map(|(h, l, len)| {
        (
            Just(Topology::new(h, l).unwrap()),
            prop::collection::vec(
                prop::collection::vec(prop_oneof![-1e3f32..1e3, -1e8f32..1e8, -1e-3f32..1e-3], len),
                h * l,
            ),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn is_the_host_then_peer_sum((t, vs) in topology_and_vectors()) {
        let out = run_hierarchical(t, std::slice::from_ref(&vs));
        let want = bits(&host_then_peer_sum(t, &vs));
        let (h, l, n) = (t.hosts as u64, t.ranks_per_host as u64, vs[0].len() as u64);
        let (mut cross, mut intra) = (0, 0);
        for (rank, (got, bytes)) in out.iter().enumerate() {
            prop_assert_eq!(bits(&got[0]), want.clone(), "rank {}", rank);
            cross += bytes.cross_host;
            intra += bytes.intra_host;
        }
        // Over the cluster: 2·(H−1)·n elements cross hosts, 2·(L−1)·n stay on each host.
        prop_assert_eq!(cross, 4 * 2 * (h - 1) * n);
        prop_assert_eq!(intra, 4 * 2 * (l - 1) * n * h);
    }
}
