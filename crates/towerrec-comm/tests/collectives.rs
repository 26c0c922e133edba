//! The collectives on the in-process backend: the self-test on several topologies,
//! property tests against plain sequential definitions (data delivered, rank-order
//! sums, byte counts and their intra/cross-host split), and worker failures.

use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use towerrec_comm::{
    even_split, run_in_process, selftest, Comm, Error, HierarchicalAllReduce, Phase,
    SelfTestReport, Topology, WirePrecision, WorkerFailure,
};

fn selftest_reports(t: Topology) -> Vec<SelfTestReport> {
    run_in_process(t, |comm| selftest(&comm)).unwrap_or_else(|e| panic!("selftest on {t}: {e}"))
}

#[test]
fn selftest_passes_on_every_topology() {
    for (hosts, l) in [(1, 1), (1, 4), (2, 2), (4, 1), (2, 3)] {
        let t = Topology::new(hosts, l).unwrap();
        let a = selftest_reports(t);
        assert_eq!(a.len(), t.world_size());
        for (r, rep) in a.iter().enumerate() {
            assert_eq!(rep.rank, r);
            let line = rep.to_string();
            assert!(line.starts_with(&format!("rank {r} hash ")), "{line}");
            if hosts == 1 {
                assert_eq!(rep.bytes.cross_host, 0, "{t}: {line}");
            }
            if l == 1 {
                assert_eq!(rep.bytes.intra_host, 0, "{t}: {line}");
            }
            if t.world_size() > 1 {
                assert!(rep.bytes.total() > 0, "{t}: {line}");
            }
        }
        // Deterministic: the same bits and bytes every run.
        assert_eq!(a, selftest_reports(t), "{t}");
    }
}

/// The value rank `src` sends to rank `dst` as its `i`-th element.
fn tag(src: usize, dst: usize, i: usize) -> u64 {
    ((src as u64) << 40) | ((dst as u64) << 20) | i as u64
}

/// A topology and a `world × world` matrix of element counts.
fn topology_and_counts() -> impl Strategy<Value = (Topology, Vec<Vec<usize>>)> {
    (1usize..=3, 1usize..=3).prop_flat_map(|(h, l)| {
        let n = h * l;
        (
            Just(Topology::new(h, l).unwrap()),
            prop::collection::vec(prop::collection::vec(0usize..6, n), n),
        )
    })
}

/// A topology and one f32 vector of `len` elements per rank.
fn topology_and_vectors() -> impl Strategy<Value = (Topology, Vec<Vec<f32>>)> {
    (1usize..=3, 1usize..=3, 0usize..40).prop_flat_map(|(h, l, len)| {
        (
            Just(Topology::new(h, l).unwrap()),
            prop::collection::vec(
                prop::collection::vec(prop_oneof![-1e3f32..1e3, -1e8f32..1e8, -1e-3f32..1e-3], len),
                h * l,
            ),
        )
    })
}

fn rank_order_sum(vs: &[Vec<f32>]) -> Vec<f32> {
    let mut sum = vs[0].clone();
    for v in &vs[1..] {
        for (s, x) in sum.iter_mut().zip(v) {
            *s += x;
        }
    }
    sum
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn all_to_all_v_delivers_what_was_sent_and_counts_it((t, counts) in topology_and_counts()) {
        let n = t.world_size();
        let out = run_in_process(t, |comm: Comm| {
            let me = comm.rank();
            let send: Vec<u64> = (0..n)
                .flat_map(|d| (0..counts[me][d]).map(move |i| tag(me, d, i)))
                .collect();
            let got = comm.all_to_all_v(&send, &counts[me], Phase::InputDist)?;
            Ok::<_, Error>((got, comm.traffic()))
        })
        .unwrap();
        for (me, ((recv, from), traffic)) in out.iter().enumerate() {
            let want: Vec<u64> = (0..n)
                .flat_map(|s| (0..counts[s][me]).map(move |i| tag(s, me, i)))
                .collect();
            prop_assert_eq!(recv, &want);
            let want_from: Vec<usize> = (0..n).map(|s| counts[s][me]).collect();
            prop_assert_eq!(from, &want_from);
            let (mut intra, mut cross) = (0u64, 0u64);
            for (d, &c) in counts[me].iter().enumerate() {
                let bytes = if d == me { 0 } else { c as u64 * 8 };
                prop_assert_eq!(traffic.to(Phase::InputDist, d), bytes);
                if t.host_of(d) == t.host_of(me) { intra += bytes } else { cross += bytes }
            }
            let phase = traffic.phase(Phase::InputDist);
            prop_assert_eq!((phase.intra_host, phase.cross_host), (intra, cross));
            prop_assert_eq!(traffic.total(), phase);
        }
    }

    /// A reduced-precision AlltoAllv delivers each value rounded to the wire's
    /// precision, counts 2 bytes a value, and gives the same bits in its overlapping
    /// form; fp32 delivers the values as sent.
    #[test]
    fn wire_all_to_all_v_delivers_rounded_values_and_counts_sent_bytes(
        (t, counts) in topology_and_counts(),
        wire in prop_oneof![Just(WirePrecision::Fp32), Just(WirePrecision::Fp16), Just(WirePrecision::Bf16)],
    ) {
        let n = t.world_size();
        let value = |s: usize, d: usize, i: usize| (tag(s, d, i) % 1_000_003) as f32 / 977.0 - 300.0;
        let out = run_in_process(t, |comm: Comm| {
            let me = comm.rank();
            let send: Vec<f32> = (0..n)
                .flat_map(|d| (0..counts[me][d]).map(move |i| value(me, d, i)))
                .collect();
            let mut got = Vec::new();
            let from = comm.all_to_all_v_wire_into(&send, &counts[me], &mut got, Phase::OutputDist, wire)?;
            let mut again = Vec::new();
            let (from_again, ran) = comm.all_to_all_v_wire_during(
                &send, &counts[me], &mut again, (Phase::OutputDist, wire), |_| 7)?;
            Ok::<_, Error>((got, from, again, from_again, ran, comm.traffic()))
        })
        .unwrap();
        for (me, (recv, from, again, from_again, ran, traffic)) in out.iter().enumerate() {
            let mut want: Vec<f32> = (0..n)
                .flat_map(|s| (0..counts[s][me]).map(move |i| value(s, me, i)))
                .collect();
            wire.round(&mut want);
            prop_assert_eq!(bits(recv), bits(&want));
            prop_assert_eq!(bits(again), bits(&want));
            let want_from: Vec<usize> = (0..n).map(|s| counts[s][me]).collect();
            prop_assert_eq!(from, &want_from);
            prop_assert_eq!(from_again, &want_from);
            prop_assert_eq!(*ran, 7);
            for (d, &c) in counts[me].iter().enumerate() {
                let bytes = if d == me { 0 } else { 2 * (c * wire.bytes()) as u64 };
                prop_assert_eq!(traffic.to(Phase::OutputDist, d), bytes);
            }
        }
    }

    /// A bf16 AllReduce: each chunk is the rank-order sum of the ranks' values, rounded
    /// on the wire except the chunk owner's own, then rounded once; every rank gets the
    /// same bits, and the bytes are half of the fp32 AllReduce's. The hierarchical one
    /// gives every rank the same bf16 values too, close to the exact sum, for half the
    /// bytes of its fp32 form.
    #[test]
    fn bf16_all_reduce_sums_rounded_values_for_half_the_bytes((t, vs) in topology_and_vectors()) {
        let n = t.world_size();
        let bf16 = WirePrecision::Bf16;
        let out = run_in_process(t, |comm: Comm| {
            let me = comm.rank();
            let mut scratch = (Vec::new(), Vec::new());
            let mut flat32 = vs[me].clone();
            let before = comm.traffic();
            comm.all_reduce_wire(&mut flat32, &mut scratch, Phase::DenseGradSync, WirePrecision::Fp32)?;
            let mid = comm.traffic();
            let mut flat = vs[me].clone();
            comm.all_reduce_wire(&mut flat, &mut scratch, Phase::DenseGradSync, bf16)?;
            let after = comm.traffic();
            let mut hier = HierarchicalAllReduce::new(&comm)?;
            let mut h32 = vs[me].clone();
            hier.all_reduce_wire(&mut h32, Phase::TowerGradSync, WirePrecision::Fp32)?;
            let mid2 = comm.traffic();
            let mut h = vs[me].clone();
            hier.all_reduce_wire(&mut h, Phase::TowerGradSync, bf16)?;
            let end = comm.traffic();
            let bytes = |a: &towerrec_comm::RankTraffic, b: &towerrec_comm::RankTraffic, p| b.since(a).phase(p).total();
            Ok::<_, Error>((flat32, flat, h, [
                bytes(&before, &mid, Phase::DenseGradSync),
                bytes(&mid, &after, Phase::DenseGradSync),
                bytes(&mid2, &end, Phase::TowerGradSync) * 2,
                bytes(&mid, &mid2, Phase::TowerGradSync),
            ]))
        })
        .unwrap();
        let len = vs[0].len();
        let counts = even_split(len, n);
        let round = |x: f32| { let mut v = [x]; bf16.round(&mut v); v[0] };
        let mut want = vec![0.0f32; len];
        let mut start = 0;
        for (owner, &c) in counts.iter().enumerate() {
            for i in start..start + c {
                let mut sum = 0.0f32;
                for (src, v) in vs.iter().enumerate() {
                    let x = if src == owner { v[i] } else { round(v[i]) };
                    sum = if src == 0 { x } else { sum + x };
                }
                want[i] = round(sum);
            }
            start += c;
        }
        let exact = rank_order_sum(&vs);
        // One rank sends nothing: its values stay exact.
        if n == 1 {
            want = exact.clone();
        }
        let scale: f32 = vs.iter().map(|v| v.iter().map(|x| x.abs()).fold(0.0, f32::max)).sum::<f32>();
        for (me, (flat32, flat, h, b)) in out.iter().enumerate() {
            prop_assert_eq!(bits(flat32), bits(&exact), "rank {}: fp32 is the plain all-reduce", me);
            prop_assert_eq!(bits(flat), bits(&want), "rank {}", me);
            prop_assert_eq!(bits(h), bits(&out[0].2), "rank {}: the same bits everywhere", me);
            for (&x, &e) in h.iter().zip(&exact) {
                if n > 1 {
                    prop_assert_eq!(round(x).to_bits(), x.to_bits(), "a bf16 value");
                }
                prop_assert!((x - e).abs() <= 0.02 * scale, "rank {}: {} vs exact {}", me, x, e);
            }
            prop_assert_eq!(2 * b[1], b[0], "rank {}: flat bytes halve", me);
            prop_assert_eq!(b[2], b[3], "rank {}: hierarchical bytes halve", me);
        }
    }

    #[test]
    fn all_reduce_is_the_rank_order_sum((t, vs) in topology_and_vectors()) {
        let out = run_in_process(t, |comm: Comm| {
            let mut buf = vs[comm.rank()].clone();
            comm.all_reduce(&mut buf, Phase::DenseGradSync)?;
            Ok::<_, Error>((buf, comm.traffic()))
        })
        .unwrap();
        let want = bits(&rank_order_sum(&vs));
        let (p, len) = (t.world_size(), vs[0].len());
        let chunks = even_split(len, p);
        for (me, (buf, traffic)) in out.iter().enumerate() {
            prop_assert_eq!(bits(buf), want.clone());
            // ReduceScatter sends chunk d to rank d, AllGather sends this rank's chunk to
            // every other rank: 2·(p−1)/p of the buffer when it splits evenly.
            for d in 0..p {
                let want_bytes = if d == me || p == 1 {
                    0
                } else {
                    4 * (chunks[d] + chunks[me]) as u64
                };
                prop_assert_eq!(traffic.to(Phase::DenseGradSync, d), want_bytes);
            }
        }
    }

    #[test]
    fn reduce_scatter_then_all_gather_is_all_reduce(
        (t, vs) in topology_and_vectors(),
        seed in any::<u64>(),
    ) {
        let p = t.world_size();
        let len = vs[0].len();
        // Random chunk sizes that tile the buffer (some empty).
        let mut cuts: Vec<usize> = (0..p.saturating_sub(1))
            .map(|i| (seed.rotate_left(i as u32 * 7) as usize) % (len + 1))
            .collect();
        cuts.sort_unstable();
        let mut counts = Vec::with_capacity(p);
        let mut prev = 0;
        for &c in cuts.iter().chain(std::iter::once(&len)) {
            counts.push(c - prev);
            prev = c;
        }
        let out = run_in_process(t, |comm: Comm| {
            let mine = comm.reduce_scatter(&vs[comm.rank()], &counts, Phase::SparseGradSync)?;
            let (all, from) = comm.all_gather(&mine, Phase::SparseGradSync)?;
            let mut reduced = vs[comm.rank()].clone();
            comm.all_reduce(&mut reduced, Phase::DenseGradSync)?;
            Ok::<_, Error>((mine, all, from, reduced))
        })
        .unwrap();
        let want = rank_order_sum(&vs);
        let mut start = 0;
        for (r, (mine, all, from, reduced)) in out.iter().enumerate() {
            prop_assert_eq!(bits(mine), bits(&want[start..start + counts[r]]));
            start += counts[r];
            prop_assert_eq!(bits(all), bits(&want));
            prop_assert_eq!(from, &counts);
            prop_assert_eq!(bits(reduced), bits(&want));
        }
    }

    #[test]
    fn splits_count_intra_and_cross_host_bytes((t, counts) in topology_and_counts()) {
        // An AlltoAllv inside the peer group: only cross-host bytes (a peer group has one
        // rank per host); inside the host group: only intra-host bytes.
        let out = run_in_process(t, |comm: Comm| {
            let peers = comm.peers()?;
            let host = comm.intra_host()?;
            let me = comm.rank();
            let pc: Vec<usize> = (0..peers.size()).map(|d| counts[me][d]).collect();
            peers.all_to_all_v(&vec![1u32; pc.iter().sum()], &pc, Phase::OutputDist)?;
            let hc: Vec<usize> = (0..host.size()).map(|d| counts[d][me]).collect();
            host.all_to_all_v(&vec![2u32; hc.iter().sum()], &hc, Phase::SparseGradSync)?;
            Ok::<_, Error>((pc, hc, comm.traffic()))
        })
        .unwrap();
        for (me, (pc, hc, traffic)) in out.iter().enumerate() {
            let peer_self = t.host_of(me);
            let host_self = t.local_rank(me);
            let sent = |c: &[usize], skip: usize| -> u64 {
                c.iter().enumerate().filter(|&(d, _)| d != skip).map(|(_, &x)| 4 * x as u64).sum()
            };
            let o = traffic.phase(Phase::OutputDist);
            prop_assert_eq!((o.intra_host, o.cross_host), (0, sent(pc, peer_self)));
            let s = traffic.phase(Phase::SparseGradSync);
            prop_assert_eq!((s.intra_host, s.cross_host), (sent(hc, host_self), 0));
        }
    }
}

#[test]
fn a_panicking_worker_fails_the_run_promptly() {
    let t = Topology::new(2, 2).unwrap();
    let released = AtomicUsize::new(0);
    let start = Instant::now();
    let out = run_in_process(t, |comm: Comm| {
        if comm.rank() == 2 {
            std::thread::sleep(Duration::from_millis(100));
            panic!("deliberate failure of rank 2");
        }
        // The others block in a collective rank 2 never joins.
        let r = comm.all_to_all_v(&[1.0f32; 4], &[1; 4], Phase::InputDist);
        if matches!(r, Err(Error::PeerFailed { rank: 2, .. })) {
            released.fetch_add(1, Ordering::SeqCst);
        }
        comm.barrier()
    });
    let elapsed = start.elapsed();
    match out {
        Err(WorkerFailure::Panic { rank, message }) => {
            assert_eq!(rank, 2);
            assert!(
                message.contains("deliberate failure of rank 2"),
                "{message}"
            );
        }
        other => panic!("expected rank 2's panic, got {other:?}"),
    }
    assert_eq!(
        released.load(Ordering::SeqCst),
        3,
        "the other ranks saw PeerFailed"
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn a_worker_error_fails_the_run_naming_the_rank() {
    let t = Topology::new(1, 3).unwrap();
    let out = run_in_process(t, |comm: Comm| {
        if comm.rank() == 1 {
            return Err("bad input on rank 1".to_string());
        }
        comm.barrier().map_err(|e| e.to_string())
    });
    match out {
        Err(WorkerFailure::Error { rank: 1, error }) => assert_eq!(error, "bad input on rank 1"),
        other => panic!("expected rank 1's error, got {other:?}"),
    }
}
