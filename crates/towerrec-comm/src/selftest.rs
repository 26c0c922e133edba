//! A fixed, deterministic run of every collective, to check a backend or a cluster.
//!
//! [`selftest`] runs AlltoAllv (varied counts, zeros included), AllReduce (values whose
//! float sum depends on the order), ReduceScatter (uneven chunks), AllGather (a
//! different size on every rank), Broadcast, Barrier, splits into intra-host, peer and
//! custom groups with collectives on each, the [`HierarchicalAllReduce`] on the world,
//! a host, the peers and the custom groups (or its refusal of a group that is not the
//! same number of ranks on every host), a peer AlltoAllv run during a host's AllReduce
//! ([`Comm::all_to_all_v_during`]), AlltoAllv and AllGather in rounds, and
//! `check_same`, on f32, u64 and i64 payloads. Every rank recomputes what it must
//! receive and fails with [`Error::Mismatch`] on any difference; it also hashes every
//! result's bits, so two backends (in-process threads and MPI, say) that agree give
//! the same [`SelfTestReport`] line on every rank, byte counts included.

use crate::comm::{Comm, Element};
use crate::error::{Error, Result};
use crate::hierarchical::HierarchicalAllReduce;
use crate::traffic::{Bytes, Phase};
use std::collections::BTreeMap;

/// What one rank's self-test produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfTestReport {
    /// World rank.
    pub rank: usize,
    /// Hash of every result's bits, group membership and error outcome.
    pub hash: u64,
    /// Payload bytes this rank sent, intra-host and cross-host.
    pub bytes: Bytes,
}

impl std::fmt::Display for SelfTestReport {
    /// `rank R hash H bytes_intra X bytes_cross Y`, H in 16 hex digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} hash {:016x} bytes_intra {} bytes_cross {}",
            self.rank, self.hash, self.bytes.intra_host, self.bytes.cross_host
        )
    }
}

/// Runs the self-test on the world communicator `world` (collective: every rank calls
/// it). Only the traffic of the test itself is reported, so `world` may have been used
/// before.
pub fn selftest(world: &Comm) -> Result<SelfTestReport> {
    let before = world.traffic();
    let mut h = Fnv::new();
    h.word(world.size() as u64);
    h.word(world.rank() as u64);
    exercise_all(world, 100, &mut h)?;

    let host = world.intra_host()?;
    h.members(&host);
    exercise_all(&host, 200, &mut h)?;
    let peers = world.peers()?;
    h.members(&peers);
    exercise_all(&peers, 300, &mut h)?;

    // A custom split: even and odd world ranks, each group in reverse rank order.
    let me = world.rank();
    let parity = world.split(me % 2, world.size() - me)?;
    h.members(&parity);
    let order: Vec<usize> = (0..parity.size())
        .map(|r| parity.world_rank_of(r))
        .collect();
    if order.windows(2).any(|w| w[0] <= w[1]) || order.iter().any(|&w| w % 2 != me % 2) {
        return Err(Error::Mismatch(format!(
            "selftest: split by parity in reverse order gave world ranks {order:?}"
        )));
    }
    exercise::<f32>(&parity, 401, &mut h)?;
    // A split of a split.
    let half = host.split(host.rank() % 2, host.rank())?;
    h.members(&half);
    exercise::<i64>(&half, 501, &mut h)?;

    // The hierarchical AllReduce on groups of every shape: the world, one host, one
    // rank per host, and the parity groups (whose rank order is not the host order;
    // on some topologies they are not the same number of ranks on every host).
    for (g, salt) in [(world, 601), (&host, 611), (&peers, 621), (&parity, 631)] {
        hierarchical::<f32>(g, salt, &mut h)?;
        hierarchical::<u64>(g, salt + 1, &mut h)?;
    }

    overlapped(&peers, &host, 701, &mut h)?;

    world.check_same("selftest version", 0x5e1f_7e57)?;
    let differ = world.check_same("world rank", world.rank() as u64);
    match (&differ, world.size()) {
        (Ok(()), 1) | (Err(Error::Mismatch(_)), 2..) => h.word(differ.is_ok() as u64),
        _ => {
            return Err(Error::Mismatch(format!(
                "selftest: check_same of distinct values on {} ranks returned {differ:?}",
                world.size()
            )))
        }
    }
    world.barrier()?;
    Ok(SelfTestReport {
        rank: world.world_rank(),
        hash: h.0,
        bytes: world.traffic().since(&before).total(),
    })
}

/// An AlltoAllv among `peers` run during an AllReduce of `host` (two groups at once),
/// both checked.
fn overlapped(peers: &Comm, host: &Comm, salt: u64, h: &mut Fnv) -> Result<()> {
    let (p, me) = (peers.size(), peers.rank());
    let count = |s: usize, d: usize| (s * 5 + d + salt as usize) % 4 * 3;
    let counts: Vec<usize> = (0..p).map(|d| count(me, d)).collect();
    let send: Vec<f32> = (0..p)
        .flat_map(|d| values::<f32>(seed(salt, 1, me, d), count(me, d)))
        .collect();
    let n = 29;
    let mut sum = values::<f32>(seed(salt, 2, host.rank(), 0), n);
    let mut recv = Vec::new();
    let (from, reduced) =
        peers.all_to_all_v_during(&send, &counts, &mut recv, Phase::TowerPeer, |progress| {
            progress();
            let reduced = host.all_reduce(&mut sum, Phase::TowerIntra);
            progress();
            reduced
        })?;
    reduced?;
    let want: Vec<f32> = (0..p)
        .flat_map(|s| values::<f32>(seed(salt, 1, s, me), count(s, me)))
        .collect();
    expect_eq("all_to_all_v_during", &recv, &want)?;
    expect_eq(
        "all_reduce during",
        &sum,
        &rank_sum::<f32>(salt, 2, host.size(), n),
    )?;
    h.values(&recv);
    h.usizes(&from);
    h.values(&sum);
    Ok(())
}

fn exercise_all(g: &Comm, salt: u64, h: &mut Fnv) -> Result<()> {
    exercise::<f32>(g, salt + 1, h)?;
    exercise::<u64>(g, salt + 2, h)?;
    exercise::<i64>(g, salt + 3, h)?;
    g.barrier()
}

/// A payload type with deterministic test values.
trait Value: Element + std::fmt::Debug {
    const NAME: &'static str;
    fn make(seed: u64, i: usize) -> Self;
}

impl Value for f32 {
    const NAME: &'static str = "f32";
    /// Magnitudes from 1e-3 to 1e8, so sums depend on their order.
    fn make(seed: u64, i: usize) -> Self {
        let x = splitmix(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let unit = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        unit * [1e-3, 1.0, 1e4, 1e8][(x & 3) as usize]
    }
}

impl Value for u64 {
    const NAME: &'static str = "u64";
    fn make(seed: u64, i: usize) -> Self {
        splitmix(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 24
    }
}

impl Value for i64 {
    const NAME: &'static str = "i64";
    fn make(seed: u64, i: usize) -> Self {
        (u64::make(seed, i) as i64) - (1 << 39)
    }
}

/// Seed of the values group rank `src` makes for `dst` in test `what`.
fn seed(salt: u64, what: u64, src: usize, dst: usize) -> u64 {
    splitmix(salt ^ splitmix(what ^ splitmix(((src as u64) << 32) | dst as u64)))
}

fn values<T: Value>(seed: u64, n: usize) -> Vec<T> {
    (0..n).map(|i| T::make(seed, i)).collect()
}

/// The rank-order sum of `p` ranks' `values(seed(salt, what, src, 0), n)`.
fn rank_sum<T: Value>(salt: u64, what: u64, p: usize, n: usize) -> Vec<T> {
    let mut sum = values::<T>(seed(salt, what, 0, 0), n);
    for src in 1..p {
        for (s, v) in sum.iter_mut().zip(values::<T>(seed(salt, what, src, 0), n)) {
            *s = *s + v;
        }
    }
    sum
}

/// Group `g`'s `values(seed(salt, what, r, 0), n)` of every group rank `r`, summed
/// as [`HierarchicalAllReduce`] documents: on each host in local-rank order, then over
/// the hosts in host order. `None` if `g` is not the same number of ranks on every host.
fn host_then_peer_sum<T: Value>(g: &Comm, salt: u64, what: u64, n: usize) -> Option<Vec<T>> {
    let t = g.topology();
    let mut by_host: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for r in 0..g.size() {
        let w = g.world_rank_of(r);
        by_host
            .entry(t.host_of(w))
            .or_default()
            .push((t.local_rank(w), r));
    }
    let per_host = by_host.values().next().map_or(0, Vec::len);
    if by_host.values().any(|m| m.len() != per_host) {
        return None;
    }
    let add = |sum: &mut Vec<T>, v: Vec<T>| {
        for (s, x) in sum.iter_mut().zip(v) {
            *s = *s + x;
        }
    };
    let mut total: Option<Vec<T>> = None;
    for mut members in by_host.into_values() {
        members.sort_unstable();
        let mut host_sum: Option<Vec<T>> = None;
        for (_, r) in members {
            let v = values::<T>(seed(salt, what, r, 0), n);
            match &mut host_sum {
                None => host_sum = Some(v),
                Some(s) => add(s, v),
            }
        }
        let host_sum = host_sum.unwrap_or_default();
        match &mut total {
            None => total = Some(host_sum),
            Some(s) => add(s, host_sum),
        }
    }
    total
}

/// The hierarchical AllReduce of group `g` on payload `T`, checked against its
/// documented order and hashed, for several lengths (empty, shorter than the group,
/// uneven chunks) with one reducer; or its refusal of a group it cannot serve.
fn hierarchical<T: Value>(g: &Comm, salt: u64, h: &mut Fnv) -> Result<()> {
    let me = g.rank();
    let lengths = [(70, 0), (71, 1), (72, g.size().saturating_sub(1)), (73, 37)];
    // Whether the group is the same number of ranks on every host (the sum exists).
    let regular = host_then_peer_sum::<T>(g, salt, 0, 0).is_some();
    match HierarchicalAllReduce::<T>::new(g) {
        Ok(mut reducer) if regular => {
            h.word(1);
            h.word(reducer.hosts() as u64);
            h.word(reducer.ranks_per_host() as u64);
            for (what, n) in lengths {
                let mut buf = values::<T>(seed(salt, what, me, 0), n);
                reducer.all_reduce(&mut buf, Phase::DenseGradSync)?;
                let want = host_then_peer_sum::<T>(g, salt, what, n).unwrap_or_default();
                expect_eq("hierarchical all_reduce", &buf, &want)?;
                h.values(&buf);
            }
        }
        Err(Error::Usage { .. }) if !regular => h.word(0),
        other => {
            return Err(Error::Mismatch(format!(
                "selftest: hierarchical all_reduce on a group of world ranks {:?}: {}",
                (0..g.size())
                    .map(|r| g.world_rank_of(r))
                    .collect::<Vec<_>>(),
                match other {
                    Ok(_) => "accepted a group of uneven hosts".to_string(),
                    Err(e) => format!("refused with {e}"),
                }
            )))
        }
    }
    g.barrier()
}

fn expect_eq<T: Value>(what: &str, got: &[T], want: &[T]) -> Result<()> {
    let (g, w): (&[u8], &[u8]) = (bytemuck::cast_slice(got), bytemuck::cast_slice(want));
    if g == w {
        Ok(())
    } else {
        Err(Error::Mismatch(format!(
            "selftest {what} ({}): got {got:?}, want {want:?}",
            T::NAME
        )))
    }
}

/// Every collective of `g` on payload `T`, checked and hashed.
fn exercise<T: Value>(g: &Comm, salt: u64, h: &mut Fnv) -> Result<()> {
    let (p, me) = (g.size(), g.rank());

    // AlltoAllv: 0 to 4 elements between every pair, zeros included.
    let count = |s: usize, d: usize| (s * 7 + d * 3 + salt as usize) % 5;
    let counts: Vec<usize> = (0..p).map(|d| count(me, d)).collect();
    let send: Vec<T> = (0..p)
        .flat_map(|d| values::<T>(seed(salt, 1, me, d), count(me, d)))
        .collect();
    let (recv, from) = g.all_to_all_v(&send, &counts, Phase::InputDist)?;
    let want: Vec<T> = (0..p)
        .flat_map(|s| values::<T>(seed(salt, 1, s, me), count(s, me)))
        .collect();
    expect_eq("all_to_all_v", &recv, &want)?;
    let want_from: Vec<usize> = (0..p).map(|s| count(s, me)).collect();
    if from != want_from {
        return Err(Error::Mismatch(format!(
            "selftest all_to_all_v counts: got {from:?}, want {want_from:?}"
        )));
    }
    h.values(&recv);
    h.usizes(&from);

    // Nothing at all.
    let (none, zeros) = g.all_to_all_v::<T>(&[], &vec![0; p], Phase::Control)?;
    if !none.is_empty() || zeros.iter().any(|&c| c != 0) {
        return Err(Error::Mismatch("selftest empty all_to_all_v".into()));
    }

    // AllReduce: empty, shorter than the group, uneven chunks.
    for (what, n) in [(10, 0), (11, 1), (12, 37)] {
        let mut buf = values::<T>(seed(salt, what, me, 0), n);
        g.all_reduce(&mut buf, Phase::DenseGradSync)?;
        expect_eq("all_reduce", &buf, &rank_sum::<T>(salt, what, p, n))?;
        h.values(&buf);
    }

    // ReduceScatter: uneven chunks, some empty.
    let chunks: Vec<usize> = (0..p).map(|r| (r + salt as usize) % 3 * 2).collect();
    let n: usize = chunks.iter().sum();
    let mine = g.reduce_scatter(
        &values::<T>(seed(salt, 20, me, 0), n),
        &chunks,
        Phase::SparseGradSync,
    )?;
    let start: usize = chunks[..me].iter().sum();
    let full = rank_sum::<T>(salt, 20, p, n);
    expect_eq("reduce_scatter", &mine, &full[start..start + chunks[me]])?;
    h.values(&mine);

    // AllGather: a different size on every rank.
    let len = |r: usize| (r * 2 + salt as usize) % 4;
    let (all, sizes) = g.all_gather(
        &values::<T>(seed(salt, 30, me, 0), len(me)),
        Phase::OutputDist,
    )?;
    let want: Vec<T> = (0..p)
        .flat_map(|r| values::<T>(seed(salt, 30, r, 0), len(r)))
        .collect();
    expect_eq("all_gather", &all, &want)?;
    h.values(&all);
    h.usizes(&sizes);

    // Both again in rounds: 2 elements a rank pair (AlltoAllv), 1 a rank (AllGather).
    let size = std::mem::size_of::<T>();
    let (split, split_from) =
        g.all_to_all_v_in_rounds(&send, &counts, 2 * p * size, Phase::InputDist)?;
    expect_eq("all_to_all_v_in_rounds", &split, &recv)?;
    let (split_all, split_sizes) = g.all_gather_in_rounds(
        &values::<T>(seed(salt, 30, me, 0), len(me)),
        p * size,
        Phase::OutputDist,
    )?;
    expect_eq("all_gather_in_rounds", &split_all, &all)?;
    if split_from != from || split_sizes != sizes {
        return Err(Error::Mismatch(format!(
            "selftest counts in rounds: got {split_from:?} and {split_sizes:?}, want {from:?} and {sizes:?}"
        )));
    }

    // Broadcast from two roots; the others start with something else.
    for root in [salt as usize % p, p - 1] {
        let mut buf = if me == root {
            values::<T>(seed(salt, 40, root, 0), 5 + root)
        } else {
            vec![T::default(); 3]
        };
        g.broadcast(&mut buf, root, Phase::Control)?;
        expect_eq(
            "broadcast",
            &buf,
            &values::<T>(seed(salt, 40, root, 0), 5 + root),
        )?;
        h.values(&buf);
    }
    g.barrier()
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a over the bits of everything hashed.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn word(&mut self, w: u64) {
        self.bytes(&w.to_le_bytes());
    }

    fn values<T: Element>(&mut self, v: &[T]) {
        self.word(v.len() as u64);
        self.bytes(bytemuck::cast_slice(v));
    }

    fn usizes(&mut self, v: &[usize]) {
        self.word(v.len() as u64);
        for &x in v {
            self.word(x as u64);
        }
    }

    fn members(&mut self, g: &Comm) {
        let m: Vec<usize> = (0..g.size()).map(|r| g.world_rank_of(r)).collect();
        self.usizes(&m);
        self.word(g.rank() as u64);
    }
}
