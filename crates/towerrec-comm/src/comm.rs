//! [`Comm`]: typed collectives over a [`Backend`], with traffic accounting.
//!
//! Reductions are done here, on the receiving rank, summing contributions in rank order;
//! AllReduce is a ReduceScatter followed by an AllGather, each one direct exchange. So
//! every backend gives the same bits, and the bytes counted are exactly the bytes sent:
//! AllReduce of `n` elements on `p` ranks sends `2·(p−1)/p·n` elements per rank, the
//! bandwidth-optimal volume (scale-in paper §IV-D). On several hosts of several ranks,
//! [`crate::HierarchicalAllReduce`] sends `L` (ranks per host) times fewer of those bytes
//! across hosts, at the price of a different summation order.

use crate::backend::{Backend, RecvBuf};
use crate::error::{Error, Result};
use crate::precision::WirePrecision;
use crate::topology::Topology;
use crate::traffic::{Phase, RankTraffic};
use crate::watchdog::{Activity, Entered, Op};
use std::mem::size_of;
use std::sync::{Arc, Mutex};

/// A value collectives can move and sum: plain numbers.
pub trait Element:
    bytemuck::Pod + Default + Send + Sync + std::ops::Add<Output = Self> + 'static
{
}
impl Element for f32 {}
impl Element for f64 {}
impl Element for u16 {}
impl Element for u32 {}
impl Element for u64 {}
impl Element for i32 {}
impl Element for i64 {}

/// A group of ranks (the world, a host, a peer group) that this rank belongs to.
///
/// Every method is collective: all ranks of the group call it, in the same order,
/// with arguments that agree (counts, roots), and a rank runs one collective at a time.
/// Sub-groups made by [`Comm::split`] share their parent's traffic counters and the
/// rank's watchdog activity (see [`crate::Watchdog`]).
pub struct Comm {
    backend: Box<dyn Backend>,
    topology: Topology,
    traffic: Arc<Mutex<RankTraffic>>,
    activity: Arc<Activity>,
    /// The 16-bit buffers of reduced-precision exchanges (send, receive), kept across
    /// calls; taken out for an exchange, so never locked during one.
    wire: Mutex<(Vec<u16>, Vec<u16>)>,
}

impl Comm {
    /// The world communicator of a backend whose ranks are laid out as `topology`.
    pub fn new(backend: Box<dyn Backend>, topology: Topology) -> Result<Self> {
        Self::watched(backend, topology, Arc::default())
    }

    /// [`Comm::new`] reporting its collectives to `activity`, which a watchdog reads.
    pub(crate) fn watched(
        backend: Box<dyn Backend>,
        topology: Topology,
        activity: Arc<Activity>,
    ) -> Result<Self> {
        if backend.size() != topology.world_size() {
            return Err(Error::Topology(format!(
                "topology {topology} has {} ranks but the backend has {}",
                topology.world_size(),
                backend.size()
            )));
        }
        let me = backend.world_rank(backend.rank());
        Ok(Self {
            backend,
            topology,
            traffic: Arc::new(Mutex::new(RankTraffic::new(topology, me))),
            activity,
            wire: Mutex::default(),
        })
    }

    /// Tells the watchdog which training step this rank is in, for its report (one
    /// relaxed store: call it every step).
    pub fn set_step(&self, step: u64) {
        self.activity.set_step(step);
    }

    /// Failure injection (`TOWERREC_STALL_RANK`): makes this rank hang as a stuck one
    /// would, outside any collective. An MPI process stops itself with `SIGSTOP`; an
    /// in-process rank blocks its thread for an hour. Returns if it is ever resumed.
    pub fn hang(&self) {
        self.backend.hang();
    }

    /// This rank's index in the group.
    pub fn rank(&self) -> usize {
        self.backend.rank()
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> usize {
        self.backend.size()
    }

    /// This rank's world rank.
    pub fn world_rank(&self) -> usize {
        self.backend.world_rank(self.backend.rank())
    }

    /// World rank of group rank `r`.
    pub fn world_rank_of(&self, r: usize) -> usize {
        self.backend.world_rank(r)
    }

    /// The cluster layout.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// A snapshot of the bytes this rank has sent so far and its time inside
    /// collectives (all its groups together).
    pub fn traffic(&self) -> RankTraffic {
        let mut t = self.traffic.lock().expect("traffic lock").clone();
        t.set_collective_nanos(self.activity.collective_nanos());
        t
    }

    /// Variable-size AlltoAll: `send` holds `counts[r]` elements for group rank `r`,
    /// in rank order. Returns the elements received, in source-rank order, and how many
    /// came from each rank.
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        phase: Phase,
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let mut recv = Vec::new();
        let from = self.all_to_all_v_into(send, counts, &mut recv, phase)?;
        Ok((recv, from))
    }

    /// [`Comm::all_to_all_v`] into `recv` (resized; its allocation is reused).
    pub fn all_to_all_v_into<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        recv: &mut Vec<T>,
        phase: Phase,
    ) -> Result<Vec<usize>> {
        let _watch = self.activity.enter(Op::AllToAllV, Some(phase));
        let byte_counts = self.record_all_to_all::<T>(send.len(), counts, phase)?;
        let from = self.backend.all_to_all_v(
            bytemuck::cast_slice(send),
            &byte_counts,
            &mut Typed(recv),
        )?;
        Ok(from.into_iter().map(|b| b / size_of::<T>()).collect())
    }

    /// [`Comm::all_to_all_v_into`] while `work` runs on this thread, so that the exchange
    /// and the work overlap; returns what both return. `work` may run collectives of
    /// other groups, never of this one. It is given a function to call now and then
    /// during long computation: MPI starts a non-blocking AlltoAllv, runs the work and
    /// waits, and moves the exchange only inside MPI calls (the work's own collectives,
    /// and that function's `MPI_Test`); the in-process backend, whose ranks are threads
    /// of one machine with no link to hide, exchanges first and then runs the work. The whole overlap counts as the exchange's
    /// time in its phase (the work's own collectives are not timed apart).
    pub fn all_to_all_v_during<T: Element, R>(
        &self,
        send: &[T],
        counts: &[usize],
        recv: &mut Vec<T>,
        phase: Phase,
        work: impl FnOnce(&mut dyn FnMut()) -> R,
    ) -> Result<(Vec<usize>, R)> {
        let _watch = self.activity.enter(Op::AllToAllV, Some(phase));
        let byte_counts = self.record_all_to_all::<T>(send.len(), counts, phase)?;
        let (mut work, mut done) = (Some(work), None);
        let from = self.backend.all_to_all_v_during(
            bytemuck::cast_slice(send),
            &byte_counts,
            &mut Typed(recv),
            &mut |progress| done = work.take().map(|w| w(progress)),
        )?;
        let done = done.expect("the backend ran the work");
        Ok((from.into_iter().map(|b| b / size_of::<T>()).collect(), done))
    }

    /// [`Comm::all_to_all_v_into`] of f32 values sent in `wire` precision: each value
    /// is rounded to it (nearest, ties to even) before it leaves and widened back to
    /// f32 on arrival, and the traffic counts the bytes sent (2 a value for fp16 and
    /// bf16). `counts` are in values. fp32 is the plain exchange.
    pub fn all_to_all_v_wire_into(
        &self,
        send: &[f32],
        counts: &[usize],
        recv: &mut Vec<f32>,
        phase: Phase,
        wire: WirePrecision,
    ) -> Result<Vec<usize>> {
        if wire == WirePrecision::Fp32 {
            return self.all_to_all_v_into(send, counts, recv, phase);
        }
        let (mut out, mut back) = self.take_wire();
        wire.encode(send, &mut out);
        let exchanged = self.all_to_all_v_into(&out, counts, &mut back, phase);
        if exchanged.is_ok() {
            wire.decode(&back, recv);
        }
        self.put_wire((out, back));
        exchanged
    }

    /// [`Comm::all_to_all_v_during`] of f32 values sent in `wire` precision, as
    /// [`Comm::all_to_all_v_wire_into`] sends them.
    pub fn all_to_all_v_wire_during<R>(
        &self,
        send: &[f32],
        counts: &[usize],
        recv: &mut Vec<f32>,
        (phase, wire): (Phase, WirePrecision),
        work: impl FnOnce(&mut dyn FnMut()) -> R,
    ) -> Result<(Vec<usize>, R)> {
        if wire == WirePrecision::Fp32 {
            return self.all_to_all_v_during(send, counts, recv, phase, work);
        }
        let (mut out, mut back) = self.take_wire();
        wire.encode(send, &mut out);
        let exchanged = self.all_to_all_v_during(&out, counts, &mut back, phase, work);
        if exchanged.is_ok() {
            wire.decode(&back, recv);
        }
        self.put_wire((out, back));
        exchanged
    }

    /// The 16-bit buffers of reduced-precision exchanges, taken out (give them back with
    /// [`Comm::put_wire`]; never held across an exchange by the lock).
    pub(crate) fn take_wire(&self) -> (Vec<u16>, Vec<u16>) {
        std::mem::take(&mut *self.wire.lock().expect("wire lock"))
    }

    /// Keeps the buffers [`Comm::take_wire`] gave, for the next exchange.
    pub(crate) fn put_wire(&self, bufs: (Vec<u16>, Vec<u16>)) {
        *self.wire.lock().expect("wire lock") = bufs;
    }

    /// Checks an AlltoAllv's `counts` against the `len` elements sent, records its
    /// bytes, and returns the byte count for each rank.
    fn record_all_to_all<T: Element>(
        &self,
        len: usize,
        counts: &[usize],
        phase: Phase,
    ) -> Result<Vec<usize>> {
        crate::backend::check_counts(counts, self.size(), len, "elements")?;
        let size = size_of::<T>();
        let mut t = self.traffic.lock().expect("traffic lock");
        for (r, &c) in counts.iter().enumerate() {
            t.record(phase, self.world_rank_of(r), (c * size) as u64);
        }
        Ok(counts.iter().map(|c| c * size).collect())
    }

    /// Every rank's `send` (sizes may differ), concatenated in rank order, with the
    /// element count from each.
    pub fn all_gather<T: Element>(&self, send: &[T], phase: Phase) -> Result<(Vec<T>, Vec<usize>)> {
        let mut recv = Vec::new();
        let from = self.all_gather_into(send, &mut recv, phase)?;
        Ok((recv, from))
    }

    /// [`Comm::all_gather`] into `recv` (resized; its allocation is reused).
    pub fn all_gather_into<T: Element>(
        &self,
        send: &[T],
        recv: &mut Vec<T>,
        phase: Phase,
    ) -> Result<Vec<usize>> {
        let _watch = self.activity.enter(Op::AllGather, Some(phase));
        let size = std::mem::size_of::<T>();
        {
            let mut t = self.traffic.lock().expect("traffic lock");
            for r in 0..self.size() {
                t.record(
                    phase,
                    self.world_rank_of(r),
                    std::mem::size_of_val(send) as u64,
                );
            }
        }
        let from = self
            .backend
            .all_gather_v(bytemuck::cast_slice(send), &mut Typed(recv))?;
        Ok(from.into_iter().map(|b| b / size).collect())
    }

    /// Sums `send` over the ranks and leaves chunk `r` (of `counts[r]` elements; the
    /// chunks tile `send`) on rank `r`. Contributions are added in rank order.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        phase: Phase,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.reduce_scatter_into(send, counts, &mut Vec::new(), &mut out, phase)?;
        Ok(out)
    }

    /// [`Comm::reduce_scatter`] into `out`, with `scratch` for what arrives (both
    /// resized; their allocations are reused).
    pub(crate) fn reduce_scatter_into<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        scratch: &mut Vec<T>,
        out: &mut Vec<T>,
        phase: Phase,
    ) -> Result<()> {
        let _watch = self.activity.enter(Op::ReduceScatter, Some(phase));
        let from = self.all_to_all_v_into(send, counts, scratch, phase)?;
        let mine = counts.get(self.rank()).copied().unwrap_or(0);
        if from.iter().any(|&c| c != mine) {
            return Err(Error::Mismatch(format!(
                "reduce_scatter: rank {} expects {mine} elements, ranks sent {from:?}",
                self.rank()
            )));
        }
        out.clear();
        out.extend_from_slice(&scratch[..mine]);
        for part in scratch.chunks_exact(mine.max(1)).skip(1) {
            for (o, &v) in out.iter_mut().zip(part) {
                *o = *o + v;
            }
        }
        Ok(())
    }

    /// Sums `buf` over the ranks, in place, the same bits on every rank: every element
    /// is the sum of the ranks' values in group-rank order. (For the topology-aware
    /// version, see [`crate::HierarchicalAllReduce`].)
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], phase: Phase) -> Result<()> {
        self.all_reduce_with(buf, &mut (Vec::new(), Vec::new()), phase)
    }

    /// [`Comm::all_reduce`] with scratch space kept by the caller across calls (a
    /// training step's gradients: no allocation per step).
    pub fn all_reduce_with<T: Element>(
        &self,
        buf: &mut [T],
        scratch: &mut (Vec<T>, Vec<T>),
        phase: Phase,
    ) -> Result<()> {
        let p = self.size();
        if p == 1 {
            return Ok(());
        }
        let _watch = self.activity.enter(Op::AllReduce, Some(phase));
        let counts = even_split(buf.len(), p);
        let (arrived, mine) = scratch;
        self.reduce_scatter_into(buf, &counts, arrived, mine, phase)?;
        self.all_gather_chunks(mine, buf, &counts, "all_reduce", phase)
    }

    /// The AllGather that ends an AllReduce: every rank's `mine` (chunk `r` of
    /// `counts[r]` elements on group rank `r`), concatenated in rank order, straight
    /// into `buf` (the chunks tile it). `op` names the collective in errors.
    pub(crate) fn all_gather_chunks<T: Element>(
        &self,
        mine: &[T],
        buf: &mut [T],
        counts: &[usize],
        op: &str,
        phase: Phase,
    ) -> Result<()> {
        let _watch = self.activity.enter(Op::AllGather, Some(phase));
        let size = std::mem::size_of::<T>();
        {
            let mut t = self.traffic.lock().expect("traffic lock");
            for r in 0..self.size() {
                t.record(
                    phase,
                    self.world_rank_of(r),
                    std::mem::size_of_val(mine) as u64,
                );
            }
        }
        let mut into = Exact(bytemuck::cast_slice_mut::<T, u8>(buf), Vec::new());
        let from = self
            .backend
            .all_gather_v(bytemuck::cast_slice(mine), &mut into)?;
        let from: Vec<usize> = from.into_iter().map(|b| b / size).collect();
        if from != counts {
            return Err(Error::Mismatch(format!(
                "{op}: expected chunks {counts:?}, got {from:?}"
            )));
        }
        Ok(())
    }

    /// Marks this rank as inside `op` (for the watchdog) until the guard drops; for
    /// collectives built outside this file from the ones here.
    pub(crate) fn enter(&self, op: Op, phase: Option<Phase>) -> Entered<'_> {
        self.activity.enter(op, phase)
    }

    /// Copies `root`'s `buf` to every rank (resizing theirs).
    pub fn broadcast<T: Element>(&self, buf: &mut Vec<T>, root: usize, phase: Phase) -> Result<()> {
        let _watch = self.activity.enter(Op::Broadcast, Some(phase));
        let p = self.size();
        if root >= p {
            return Err(Error::usage(
                "broadcast",
                format!("root {root} in a group of {p}"),
            ));
        }
        let (send, counts) = if self.rank() == root {
            let mut send = Vec::with_capacity(buf.len() * p);
            for _ in 0..p {
                send.extend_from_slice(buf);
            }
            (send, vec![buf.len(); p])
        } else {
            (Vec::new(), vec![0; p])
        };
        let (recv, _) = self.all_to_all_v(&send, &counts, phase)?;
        *buf = recv;
        Ok(())
    }

    /// Returns once every rank of the group has called it.
    pub fn barrier(&self) -> Result<()> {
        let _watch = self.activity.enter(Op::Barrier, None);
        self.backend.barrier()
    }

    /// Splits the group by `color`, ordering each new group by `(key, rank)`.
    pub fn split(&self, color: usize, key: usize) -> Result<Comm> {
        let _watch = self.activity.enter(Op::Split, None);
        Ok(Comm {
            backend: self.backend.split(color, key)?,
            topology: self.topology,
            traffic: Arc::clone(&self.traffic),
            activity: Arc::clone(&self.activity),
            wire: Mutex::default(),
        })
    }

    /// The ranks of this rank's host, ordered by local rank. Call on the world.
    pub fn intra_host(&self) -> Result<Comm> {
        let me = self.world_rank();
        self.split(self.topology.host_of(me), self.topology.local_rank(me))
    }

    /// The ranks with this rank's local rank on every host, ordered by host (the DMT
    /// paper's peers). Call on the world.
    pub fn peers(&self) -> Result<Comm> {
        let me = self.world_rank();
        self.split(self.topology.local_rank(me), self.topology.host_of(me))
    }

    /// Fails on every rank, naming the ranks, unless all ranks pass the same `value`
    /// (say, a hash of their configuration; `what` names it in the error).
    pub fn check_same(&self, what: &str, value: u64) -> Result<()> {
        let _watch = self.activity.enter(Op::CheckSame, Some(Phase::Control));
        let (all, _) = self.all_gather(&[value], Phase::Control)?;
        let differ: Vec<usize> = (0..all.len())
            .filter(|&r| all[r] != all[0])
            .map(|r| self.world_rank_of(r))
            .collect();
        if differ.is_empty() {
            Ok(())
        } else {
            Err(Error::Mismatch(format!(
                "{what} differs between rank {} and rank(s) {differ:?}",
                self.world_rank_of(0)
            )))
        }
    }
}

/// A typed vector as a backend's receive buffer.
struct Typed<'a, T>(&'a mut Vec<T>);

impl<T: Element> RecvBuf for Typed<'_, T> {
    fn bytes(&mut self, bytes: usize) -> &mut [u8] {
        let size = std::mem::size_of::<T>();
        // Every rank sends whole elements, so the total is a multiple of the size.
        self.0.resize(bytes.div_ceil(size), T::default());
        &mut bytemuck::cast_slice_mut::<T, u8>(&mut self.0[..])[..bytes]
    }
}

/// A slice that should receive exactly its own size; any other total (ranks that
/// disagree on the chunks) goes to a spare buffer and the caller's count check reports
/// it.
struct Exact<'a>(&'a mut [u8], Vec<u8>);

impl RecvBuf for Exact<'_> {
    fn bytes(&mut self, bytes: usize) -> &mut [u8] {
        if bytes == self.0.len() {
            &mut self.0[..]
        } else {
            self.1.resize(bytes, 0);
            &mut self.1[..]
        }
    }
}

/// Splits `n` items into `p` near-equal contiguous chunks (the first `n % p` one larger).
pub fn even_split(n: usize, p: usize) -> Vec<usize> {
    (0..p).map(|r| n / p + usize::from(r < n % p)).collect()
}
