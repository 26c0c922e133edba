//! Byte accounting: what every collective moved between every pair of ranks, by phase,
//! classified intra-host or cross-host by the [`Topology`].
//!
//! Each rank records the payload bytes it *sends* to every other world rank (bytes a
//! rank keeps for itself cross no link and are not counted). The counts are the
//! payload of the collectives as this crate performs them, identical on every backend;
//! the control messages a backend may add (MPI's exchange of counts before an
//! AlltoAllv) are not payload and are not counted.
//!
//! Beside the bytes, each rank's record carries the wall time it spent inside
//! collectives, by phase: moving the bytes, and waiting for the slowest rank.

pub use crate::phase::Phase;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Bytes moved, split by where they went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bytes {
    pub intra_host: u64,
    pub cross_host: u64,
}

impl Bytes {
    pub fn total(&self) -> u64 {
        self.intra_host + self.cross_host
    }
}

impl std::ops::AddAssign for Bytes {
    fn add_assign(&mut self, o: Bytes) {
        self.intra_host += o.intra_host;
        self.cross_host += o.cross_host;
    }
}

/// The bytes one rank has sent, by phase and destination world rank, and its time
/// inside collectives by phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankTraffic {
    pub topology: Topology,
    pub rank: usize,
    /// `sent[phase][dest]`, phases in [`Phase::ALL`] order.
    sent: Vec<Vec<u64>>,
    /// Nanoseconds inside collectives, by phase in [`Phase::ALL`] order.
    #[serde(default)]
    nanos: Vec<u64>,
}

impl RankTraffic {
    /// Nothing sent yet.
    pub fn new(topology: Topology, rank: usize) -> Self {
        Self {
            topology,
            rank,
            sent: vec![vec![0; topology.world_size()]; Phase::ALL.len()],
            nanos: vec![0; Phase::ALL.len()],
        }
    }

    /// Sets the time inside collectives so far, by phase in [`Phase::ALL`] order.
    pub(crate) fn set_collective_nanos(&mut self, nanos: Vec<u64>) {
        debug_assert_eq!(nanos.len(), Phase::ALL.len());
        self.nanos = nanos;
    }

    /// Seconds this rank spent inside the collectives of `phase`, waiting included.
    pub fn collective_seconds(&self, phase: Phase) -> f64 {
        self.nanos.get(phase.index()).copied().unwrap_or(0) as f64 * 1e-9
    }

    /// Counts `bytes` sent to world rank `dest` in `phase` (nothing if `dest` is self).
    pub fn record(&mut self, phase: Phase, dest: usize, bytes: u64) {
        if dest != self.rank {
            self.sent[phase.index()][dest] += bytes;
        }
    }

    /// Bytes sent to `dest` in `phase`.
    pub fn to(&self, phase: Phase, dest: usize) -> u64 {
        self.sent[phase.index()][dest]
    }

    /// Bytes sent in `phase`, intra-host and cross-host.
    pub fn phase(&self, phase: Phase) -> Bytes {
        let mut b = Bytes::default();
        for (dest, &n) in self.sent[phase.index()].iter().enumerate() {
            if self.topology.is_cross_host(self.rank, dest) {
                b.cross_host += n;
            } else {
                b.intra_host += n;
            }
        }
        b
    }

    /// Bytes sent in every phase together.
    pub fn total(&self) -> Bytes {
        let mut b = Bytes::default();
        for p in Phase::ALL {
            b += self.phase(p);
        }
        b
    }

    /// The difference `self − earlier` (traffic between two snapshots).
    pub fn since(&self, earlier: &RankTraffic) -> RankTraffic {
        let mut out = self.clone();
        for (row, old) in out.sent.iter_mut().zip(&earlier.sent) {
            for (v, o) in row.iter_mut().zip(old) {
                *v -= o;
            }
        }
        for (v, o) in out.nanos.iter_mut().zip(&earlier.nanos) {
            *v = v.saturating_sub(*o);
        }
        out
    }

    /// Adds `other`'s counts (of the same rank) to these.
    pub fn add(&mut self, other: &RankTraffic) {
        for (row, o) in self.sent.iter_mut().zip(&other.sent) {
            for (v, x) in row.iter_mut().zip(o) {
                *v += x;
            }
        }
        for (v, x) in self.nanos.iter_mut().zip(&other.nanos) {
            *v += x;
        }
    }

    /// Flattened `[phase][dest]` counts, then the nanoseconds by phase (for gathering
    /// over a `Comm`).
    pub fn to_flat(&self) -> Vec<u64> {
        let sent = self.sent.iter().flatten();
        sent.chain(&self.nanos).copied().collect()
    }
}

/// The traffic of the whole cluster: every rank's [`RankTraffic`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTraffic {
    pub topology: Topology,
    pub ranks: Vec<RankTraffic>,
}

impl ClusterTraffic {
    /// From each rank's flattened counts ([`RankTraffic::to_flat`]) in rank order.
    pub fn from_flat(topology: Topology, flat: &[u64]) -> Self {
        let world = topology.world_size();
        let bytes = world * Phase::ALL.len();
        let per_rank = bytes + Phase::ALL.len();
        assert_eq!(flat.len(), per_rank * world, "one flat row per rank");
        let ranks = flat
            .chunks_exact(per_rank)
            .enumerate()
            .map(|(rank, row)| RankTraffic {
                topology,
                rank,
                sent: row[..bytes]
                    .chunks_exact(world)
                    .map(<[u64]>::to_vec)
                    .collect(),
                nanos: row[bytes..].to_vec(),
            })
            .collect();
        Self { topology, ranks }
    }

    /// Bytes `src` sent to `dst` in `phase`.
    pub fn pair(&self, phase: Phase, src: usize, dst: usize) -> u64 {
        self.ranks[src].to(phase, dst)
    }

    /// Bytes moved in `phase` by all ranks.
    pub fn phase(&self, phase: Phase) -> Bytes {
        let mut b = Bytes::default();
        for r in &self.ranks {
            b += r.phase(phase);
        }
        b
    }

    /// Bytes moved in all phases by all ranks.
    pub fn total(&self) -> Bytes {
        let mut b = Bytes::default();
        for r in &self.ranks {
            b += r.total();
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_and_skips_self() {
        let t = Topology::new(2, 2).unwrap();
        let mut r = RankTraffic::new(t, 1);
        r.record(Phase::InputDist, 0, 10);
        r.record(Phase::InputDist, 1, 99);
        r.record(Phase::InputDist, 3, 7);
        r.record(Phase::DenseGradSync, 2, 5);
        assert_eq!(
            r.phase(Phase::InputDist),
            Bytes {
                intra_host: 10,
                cross_host: 7
            }
        );
        assert_eq!(r.total().total(), 22);
        let before = r.clone();
        r.record(Phase::InputDist, 0, 4);
        assert_eq!(r.since(&before).phase(Phase::InputDist).intra_host, 4);
        let mut flat = Vec::new();
        for rank in 0..4 {
            let mut x = RankTraffic::new(t, rank);
            x.record(Phase::OutputDist, (rank + 1) % 4, rank as u64 + 1);
            let mut nanos = vec![0; Phase::ALL.len()];
            nanos[Phase::TowerPeer.index()] = 1_000_000 * (rank as u64 + 1);
            x.set_collective_nanos(nanos);
            flat.extend(x.to_flat());
        }
        let c = ClusterTraffic::from_flat(t, &flat);
        assert_eq!(c.pair(Phase::OutputDist, 3, 0), 4);
        assert_eq!(c.ranks[2].collective_seconds(Phase::TowerPeer), 3e-3);
        assert_eq!(c.ranks[2].collective_seconds(Phase::OutputDist), 0.0);
        let earlier = c.ranks[0].clone();
        let mut twice = earlier.clone();
        twice.add(&earlier);
        assert_eq!(twice.since(&earlier), earlier);
        // 0→1 and 2→3 stay on their hosts, 1→2 and 3→0 cross.
        assert_eq!(
            c.phase(Phase::OutputDist),
            Bytes {
                intra_host: 1 + 3,
                cross_host: 2 + 4
            }
        );
    }
}
