//! Hosts × ranks per host, and the process groups of the DMT paper §3.1.
//!
//! Rank `g = host · L + local` where `L` is ranks per host. A rank's *peers* are the
//! ranks with the same local rank on every host (`g % L` equal); the intra-host group is
//! the `L` ranks of one host.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// A cluster of `hosts` hosts with `ranks_per_host` workers each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub hosts: usize,
    pub ranks_per_host: usize,
}

impl Topology {
    /// A topology of at least one host with at least one rank.
    pub fn new(hosts: usize, ranks_per_host: usize) -> Result<Self> {
        if hosts == 0 || ranks_per_host == 0 {
            return Err(Error::Topology(format!(
                "{hosts} hosts × {ranks_per_host} ranks per host: both must be at least 1"
            )));
        }
        hosts
            .checked_mul(ranks_per_host)
            .ok_or_else(|| Error::Topology(format!("{hosts} × {ranks_per_host} overflows")))?;
        Ok(Self {
            hosts,
            ranks_per_host,
        })
    }

    /// One process, one rank.
    pub fn single() -> Self {
        Self {
            hosts: 1,
            ranks_per_host: 1,
        }
    }

    /// Number of ranks in the world.
    pub fn world_size(&self) -> usize {
        self.hosts * self.ranks_per_host
    }

    /// The host of world rank `rank`.
    pub fn host_of(&self, rank: usize) -> usize {
        rank / self.ranks_per_host
    }

    /// The rank of `rank` within its host.
    pub fn local_rank(&self, rank: usize) -> usize {
        rank % self.ranks_per_host
    }

    /// World rank of local rank `local` on `host`.
    pub fn rank(&self, host: usize, local: usize) -> usize {
        host * self.ranks_per_host + local
    }

    /// Whether traffic between two world ranks crosses hosts.
    pub fn is_cross_host(&self, a: usize, b: usize) -> bool {
        self.host_of(a) != self.host_of(b)
    }

    /// World ranks on `host`, in order.
    pub fn host_ranks(&self, host: usize) -> std::ops::Range<usize> {
        self.rank(host, 0)..self.rank(host, self.ranks_per_host)
    }

    /// World ranks with local rank `local` (one per host), in host order.
    pub fn peer_ranks(&self, local: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.hosts).map(move |h| self.rank(h, local))
    }
}

impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}", self.hosts, self.ranks_per_host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_hosts_and_peers() {
        let t = Topology::new(2, 3).unwrap();
        assert_eq!(t.world_size(), 6);
        assert_eq!((t.host_of(4), t.local_rank(4)), (1, 1));
        assert_eq!(t.rank(1, 1), 4);
        assert!(t.is_cross_host(2, 3));
        assert!(!t.is_cross_host(3, 5));
        assert_eq!(t.host_ranks(1).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(t.peer_ranks(2).collect::<Vec<_>>(), vec![2, 5]);
    }

    #[test]
    fn rejects_empty() {
        assert!(Topology::new(0, 2).is_err());
        assert!(Topology::new(2, 0).is_err());
    }
}
