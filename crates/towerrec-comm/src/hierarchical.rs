//! [`HierarchicalAllReduce`]: the topology-aware AllReduce (intra-host ReduceScatter,
//! peer AllReduce, intra-host AllGather): `L` (ranks per host) times fewer bytes
//! across hosts than the flat AllReduce, its sub-communicators made once.

use crate::comm::{even_split, Comm, Element};
use crate::error::{Error, Result};
use crate::precision::WirePrecision;
use crate::traffic::Phase;
use crate::watchdog::Op;
use std::collections::BTreeMap;

/// A hierarchical AllReduce over one group (the world, or any group whose members
/// are the same number of ranks on every host they occupy), with its intra-host and
/// peer sub-communicators and scratch buffers made once.
///
/// [`Comm::all_reduce`] is one ReduceScatter and one AllGather over the whole group, so
/// on `H` hosts × `L` ranks every rank sends `2·(H−1)/H` of its buffer to other hosts.
/// This does it in three steps:
///
/// 1. ReduceScatter inside each host: local rank `j` ends with chunk `j` (of `L` near
///    equal chunks, [`crate::even_split`]) summed over its host, in local-rank order;
/// 2. AllReduce of chunk `j` among the peers (local rank `j` of every host), summed in
///    host order (itself a ReduceScatter and an AllGather over the peers);
/// 3. AllGather inside each host: every rank gets the `L` reduced chunks.
///
/// Only step 2 crosses hosts, with a chunk of `n/L` elements: `2·(H−1)/H · n/L`
/// elements per rank, `L` times fewer than the flat AllReduce (exactly `L` times over
/// the cluster; per rank, up to the rounding of the chunks when `H·L` does not divide
/// `n`). The intra-host traffic grows to `2·(L−1)/L · n` per rank. The two
/// sub-communicators are made once, by [`HierarchicalAllReduce::new`] (a split is a
/// collective, and a slow one on MPI), and kept with the scratch buffers for every
/// later call: build one per group and reuse it.
///
/// # Summation order
/// Element `i` of the result is `Σ_h (Σ_j x[h, j][i])`: first, on every host, the sum
/// of its ranks' values in local-rank order (`((x[h,0] + x[h,1]) + x[h,2]) + …`), then
/// the sum of those host sums in host order (`((s[0] + s[1]) + s[2]) + …`). Hosts and
/// local ranks are the world's ([`crate::Topology`]), whatever the group's own rank
/// order. So the result has the same bits on every rank, on every run and on both
/// backends (the sums are done by [`Comm`], above the transport). It is in general
/// *not* bitwise equal to [`Comm::all_reduce`], which sums all ranks in group-rank
/// order in one pass: float addition is not associative, and the association differs
/// once there are several hosts with several ranks each. With one host it is the
/// intra-host AllReduce, and with one rank per host the peer AllReduce: on the world,
/// the same bits and the same bytes as [`Comm::all_reduce`].
///
/// # Collectives and traffic
/// [`HierarchicalAllReduce::new`] and [`HierarchicalAllReduce::all_reduce`] are
/// collectives over the group: all its ranks call them, in the same order as their
/// other collectives, with buffers of the same length. The traffic is counted on the
/// group's counters (shared by all of a rank's communicators) against world ranks, so
/// intra-host and cross-host bytes are told apart as for every other collective, and
/// the watchdog names a stall in any of the steps `hierarchical_all_reduce`.
pub struct HierarchicalAllReduce<T: Element> {
    /// This rank's host's members of the group, ordered by local rank.
    host: Comm,
    /// The group's members with this rank's position on its host, one per host,
    /// ordered by host.
    peers: Comm,
    /// Hosts the group occupies.
    hosts: usize,
    /// Members of the group on each of its hosts.
    ranks_per_host: usize,
    /// This rank's reduced chunk (steps 1 and 2).
    chunk: Vec<T>,
    /// What arrives in a ReduceScatter, and the peers' chunk of the chunk.
    scratch: (Vec<T>, Vec<T>),
}

impl<T: Element> HierarchicalAllReduce<T> {
    /// The reducer of `group` (collective: all of the group's ranks call it).
    ///
    /// The group may be the world or a sub-communicator whose members are the same
    /// number of ranks on every host that has any (whole hosts, or the same local ranks
    /// of several hosts, say); on any other group it fails with [`Error::Usage`] on
    /// every rank (the check needs no communication, so all ranks agree) and the caller
    /// should use the flat [`Comm::all_reduce`]. It does not fall back silently: the
    /// summation order and the traffic would not be the ones documented here.
    pub fn new(group: &Comm) -> Result<Self> {
        let t = group.topology();
        let mut by_host: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for r in 0..group.size() {
            let w = group.world_rank_of(r);
            by_host
                .entry(t.host_of(w))
                .or_default()
                .push(t.local_rank(w));
        }
        let hosts = by_host.len();
        let ranks_per_host = by_host.values().map(Vec::len).max().unwrap_or(0);
        if by_host.values().any(|l| l.len() != ranks_per_host) {
            let layout: Vec<String> = by_host
                .iter()
                .map(|(h, l)| format!("host {h}: {}", l.len()))
                .collect();
            return Err(Error::usage(
                "hierarchical_all_reduce",
                format!(
                    "the group's ranks must be the same number on every host it spans, \
                     but it has {} (ranks by host); use the flat all_reduce",
                    layout.join(", ")
                ),
            ));
        }
        let me = group.world_rank();
        let (my_host, my_local) = (t.host_of(me), t.local_rank(me));
        let mut locals = by_host.remove(&my_host).unwrap_or_default();
        locals.sort_unstable();
        let position = locals
            .iter()
            .position(|&l| l == my_local)
            .ok_or_else(|| Error::Mismatch(format!("rank {me} is not in its own group")))?;
        let host = group.split(my_host, my_local)?;
        let peers = group.split(position, my_host)?;
        if host.size() != ranks_per_host || peers.size() != hosts {
            return Err(Error::Mismatch(format!(
                "hierarchical_all_reduce: rank {me} expected {ranks_per_host} ranks on its \
                 host and {hosts} peers, the splits gave {} and {}",
                host.size(),
                peers.size()
            )));
        }
        Ok(Self {
            host,
            peers,
            hosts,
            ranks_per_host,
            chunk: Vec::new(),
            scratch: (Vec::new(), Vec::new()),
        })
    }

    /// Sums `buf` over the group, in place: the same bits on every rank, summed on each
    /// host in local-rank order and then over the hosts in host order (see
    /// [`HierarchicalAllReduce`]). Every rank's `buf` must have the same length (else
    /// [`Error::Mismatch`] or [`Error::Usage`] on the ranks that can tell, and
    /// [`Error::PeerFailed`] or the watchdog's error on the others).
    pub fn all_reduce(&mut self, buf: &mut [T], phase: Phase) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let _watch = self.host.enter(Op::HierarchicalAllReduce, Some(phase));
        if self.hosts == 1 {
            return self.host.all_reduce_with(buf, &mut self.scratch, phase);
        }
        if self.ranks_per_host == 1 {
            return self.peers.all_reduce_with(buf, &mut self.scratch, phase);
        }
        let counts = even_split(buf.len(), self.ranks_per_host);
        self.host
            .reduce_scatter_into(buf, &counts, &mut self.scratch.0, &mut self.chunk, phase)?;
        self.peers
            .all_reduce_with(&mut self.chunk, &mut self.scratch, phase)?;
        self.host
            .all_gather_chunks(&self.chunk, buf, &counts, "hierarchical_all_reduce", phase)
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> usize {
        self.hosts * self.ranks_per_host
    }

    /// Hosts the group spans.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The group's ranks on each of its hosts.
    pub fn ranks_per_host(&self) -> usize {
        self.ranks_per_host
    }

    /// This rank's host's members of the group, ordered by local rank (for other
    /// intra-host collectives, without another split).
    pub fn intra_host(&self) -> &Comm {
        &self.host
    }

    /// The group's ranks at this rank's position on every host, ordered by host (for
    /// other peer collectives, without another split).
    pub fn peers(&self) -> &Comm {
        &self.peers
    }
}

impl HierarchicalAllReduce<f32> {
    /// [`HierarchicalAllReduce::all_reduce`] in `wire` precision (fp32: the plain
    /// one): the host's ReduceScatter, the peers' AllReduce and the host's AllGather
    /// each send rounded values ([`Comm::all_reduce_wire`]); every rank gets the same
    /// bits.
    pub fn all_reduce_wire(
        &mut self,
        buf: &mut [f32],
        phase: Phase,
        wire: WirePrecision,
    ) -> Result<()> {
        let me = self;
        if wire == WirePrecision::Fp32 {
            return me.all_reduce(buf, phase);
        }
        if me.size() == 1 {
            return Ok(());
        }
        let _watch = me.host.enter(Op::HierarchicalAllReduce, Some(phase));
        if me.hosts == 1 {
            return me.host.all_reduce_wire(buf, &mut me.scratch, phase, wire);
        }
        if me.ranks_per_host == 1 {
            return me.peers.all_reduce_wire(buf, &mut me.scratch, phase, wire);
        }
        let counts = even_split(buf.len(), me.ranks_per_host);
        me.host
            .reduce_scatter_wire(buf, &counts, &mut me.scratch.0, &mut me.chunk, phase, wire)?;
        me.peers
            .all_reduce_wire(&mut me.chunk, &mut me.scratch, phase, wire)?;
        me.host
            .all_gather_chunks_wire(&me.chunk, buf, &counts, phase, wire)
    }
}
