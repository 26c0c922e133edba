//! Collective communication cost: the latency–bandwidth model with the lower bounds of
//! the scale-in paper §IV-D, on a two-level network (fast links within a host, slower
//! links between hosts) whose cross-host efficiency falls with world size (the shape of
//! the DMT paper's Figure 5).
//!
//! Conventions: `bytes` is the per-chip buffer: what each chip sends in an all-to-all,
//! its input in a reduce-scatter or all-reduce, its output in an all-gather. A flat
//! collective over `n` chips must move at least `bytes·(n−1)/n` through every chip
//! (all-reduce: twice that); it takes `α + moved / β`.

use crate::error::{check_non_negative, check_positive, Error, Result};
use serde::{Deserialize, Serialize};

/// The collective operations of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    AllToAll,
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Collective {
    /// Bytes each chip must move, over the chip's buffer, for `n` participants: the
    /// lower bounds of §IV-D.
    pub fn volume_factor(self, n: usize) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let f = (n - 1) as f64 / n as f64;
        match self {
            Collective::AllReduce => 2.0 * f,
            _ => f,
        }
    }
}

/// Latency (µs, software included) and bandwidth (GB/s per chip, each direction) of
/// one collective on one network level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlphaBeta {
    pub latency_us: f64,
    pub bandwidth_gbs: f64,
}

impl AlphaBeta {
    fn check(&self, what: &str) -> Result<()> {
        check_non_negative(&format!("{what}.latency_us"), self.latency_us)?;
        check_positive(&format!("{what}.bandwidth_gbs"), self.bandwidth_gbs)
    }

    /// Seconds to move `moved` bytes through each chip.
    pub fn time(&self, moved: f64) -> f64 {
        self.latency_us * 1e-6 + moved / (self.bandwidth_gbs * 1e9)
    }
}

/// The collectives of one network level. All-reduce, all-gather and reduce-scatter
/// default to the all-to-all's figures when not given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub all_to_all: AlphaBeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_reduce: Option<AlphaBeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_gather: Option<AlphaBeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_scatter: Option<AlphaBeta>,
}

impl Level {
    /// One α–β pair for every collective.
    pub fn uniform(latency_us: f64, bandwidth_gbs: f64) -> Self {
        Level {
            all_to_all: AlphaBeta {
                latency_us,
                bandwidth_gbs,
            },
            all_reduce: None,
            all_gather: None,
            reduce_scatter: None,
        }
    }

    /// The α–β pair of `op`.
    pub fn get(&self, op: Collective) -> AlphaBeta {
        let given = match op {
            Collective::AllToAll => None,
            Collective::AllReduce => self.all_reduce,
            Collective::AllGather => self.all_gather,
            Collective::ReduceScatter => self.reduce_scatter,
        };
        given.unwrap_or(self.all_to_all)
    }

    fn check(&self, what: &str) -> Result<()> {
        self.all_to_all.check(&format!("{what}.all_to_all"))?;
        for (name, ab) in [
            ("all_reduce", self.all_reduce),
            ("all_gather", self.all_gather),
            ("reduce_scatter", self.reduce_scatter),
        ] {
            if let Some(ab) = ab {
                ab.check(&format!("{what}.{name}"))?;
            }
        }
        Ok(())
    }
}

/// How the cross-host collective efficiency falls with the number of participants:
/// `eff(n) = 1 / (1 + ((n − 1) / knee)^exponent)`, applied to the cross-host bandwidth,
/// and latency growing as `α · (1 + latency_per_log2 · log2 n)`. With the defaults
/// (`knee = ∞`) the network does not degrade.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scaling {
    /// Participants at which the bandwidth efficiency has halved.
    pub knee: f64,
    pub exponent: f64,
    #[serde(default)]
    pub latency_per_log2: f64,
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling {
            knee: f64::INFINITY,
            exponent: 1.0,
            latency_per_log2: 0.0,
        }
    }
}

impl Scaling {
    /// Bandwidth efficiency for `n` participants.
    pub fn efficiency(&self, n: usize) -> f64 {
        if n <= 1 || !self.knee.is_finite() {
            return 1.0;
        }
        1.0 / (1.0 + ((n - 1) as f64 / self.knee).powf(self.exponent))
    }

    /// Latency multiplier for `n` participants.
    pub fn latency_factor(&self, n: usize) -> f64 {
        1.0 + self.latency_per_log2 * (n.max(1) as f64).log2()
    }

    fn check(&self) -> Result<()> {
        // An infinite knee (the default) is a network that does not degrade.
        if self.knee != f64::INFINITY {
            check_positive("cross_host.scaling.knee", self.knee)?;
        }
        check_positive("cross_host.scaling.exponent", self.exponent)?;
        check_non_negative("cross_host.scaling.latency_per_log2", self.latency_per_log2)
    }
}

/// The cross-host level: its collectives and how they scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossHost {
    #[serde(flatten)]
    pub level: Level,
    #[serde(default)]
    pub scaling: Scaling,
}

/// A set of chips a collective runs over: `hosts` hosts with `per_host` chips of the
/// group on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub hosts: usize,
    pub per_host: usize,
}

impl Group {
    pub fn size(&self) -> usize {
        self.hosts * self.per_host
    }
}

/// A two-level network: chips within a host, hosts joined by a slower fabric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    pub intra_host: Level,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_host: Option<CrossHost>,
}

impl Network {
    pub(crate) fn check(&self, hosts: usize) -> Result<()> {
        self.intra_host.check("intra_host")?;
        match (&self.cross_host, hosts > 1) {
            (Some(c), _) => {
                c.level.check("cross_host")?;
                c.scaling.check()
            }
            (None, true) => Err(Error::invalid(
                "cross_host",
                format!("{hosts} hosts need a [cross_host] network"),
            )),
            (None, false) => Ok(()),
        }
    }

    /// Seconds for a flat collective `op` over `group` with a per-chip buffer of `bytes`:
    /// one algorithm over every chip, its traffic split between the levels in
    /// proportion to the peers each chip has on them, the slower level setting the time.
    pub fn flat(&self, op: Collective, bytes: f64, group: Group) -> f64 {
        let n = group.size();
        if n <= 1 {
            return 0.0;
        }
        let moved = bytes * op.volume_factor(n);
        let intra = self.intra_host.get(op);
        let cross = match (&self.cross_host, group.hosts > 1) {
            (Some(c), true) => c,
            _ => return intra.time(moved),
        };
        // Of a chip's n−1 peers, per_host−1 are on its host.
        let intra_share = (group.per_host - 1) as f64 / (n - 1) as f64;
        let ab = cross.level.get(op);
        let eff = cross.scaling.efficiency(n);
        let latency = ab.latency_us * 1e-6 * cross.scaling.latency_factor(n);
        let t_intra = moved * intra_share / (intra.bandwidth_gbs * 1e9);
        let t_cross = moved * (1.0 - intra_share) / (ab.bandwidth_gbs * 1e9 * eff);
        latency.max(intra.latency_us * 1e-6) + t_intra.max(t_cross)
    }

    /// Seconds for `op` within one host over `per_host` chips.
    pub fn intra(&self, op: Collective, bytes: f64, per_host: usize) -> f64 {
        self.flat(op, bytes, Group { hosts: 1, per_host })
    }

    /// Seconds for `op` among one chip per host over `hosts` hosts (the DMT paper's
    /// peer groups): cross-host links only.
    pub fn peers(&self, op: Collective, bytes: f64, hosts: usize) -> f64 {
        if hosts <= 1 {
            return 0.0;
        }
        match &self.cross_host {
            None => self.intra(op, bytes, hosts),
            Some(c) => {
                let ab = c.level.get(op);
                let latency = ab.latency_us * 1e-6 * c.scaling.latency_factor(hosts);
                let moved = bytes * op.volume_factor(hosts);
                latency + moved / (ab.bandwidth_gbs * 1e9 * c.scaling.efficiency(hosts))
            }
        }
    }

    /// Seconds for a hierarchical all-reduce over `group`: reduce-scatter within each
    /// host, all-reduce of each chip's 1/per_host slice among its peers, all-gather
    /// within the host (how NCCL and the DMT paper's tower sync cross hosts).
    pub fn hierarchical_all_reduce(&self, bytes: f64, group: Group) -> f64 {
        if group.hosts <= 1 {
            return self.intra(Collective::AllReduce, bytes, group.per_host);
        }
        let g = group.per_host;
        self.intra(Collective::ReduceScatter, bytes, g)
            + self.peers(Collective::AllReduce, bytes / g as f64, group.hosts)
            + self.intra(Collective::AllGather, bytes, g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_level() -> Network {
        Network {
            intra_host: Level::uniform(2.0, 400.0),
            cross_host: Some(CrossHost {
                level: Level::uniform(10.0, 50.0),
                scaling: Scaling {
                    knee: 64.0,
                    exponent: 1.0,
                    latency_per_log2: 0.1,
                },
            }),
        }
    }

    #[test]
    fn flat_on_one_level_is_the_lower_bound() {
        let net = Network {
            intra_host: Level::uniform(1.0, 1000.0),
            cross_host: None,
        };
        let g = Group {
            hosts: 1,
            per_host: 16,
        };
        let t = net.flat(Collective::AllToAll, 1.6e6, g);
        assert!((t - (1e-6 + 1.5e6 / 1e12)).abs() < 1e-15);
        let t = net.flat(Collective::AllReduce, 1.6e6, g);
        assert!((t - (1e-6 + 3.0e6 / 1e12)).abs() < 1e-15);
        assert_eq!(
            net.flat(
                Collective::AllReduce,
                1.6e6,
                Group {
                    hosts: 1,
                    per_host: 1
                }
            ),
            0.0
        );
    }

    #[test]
    fn crossing_hosts_costs_more_and_more_with_scale() {
        let net = two_level();
        let bytes = 8e6;
        let one_host = net.flat(
            Collective::AllToAll,
            bytes,
            Group {
                hosts: 1,
                per_host: 8,
            },
        );
        let mut last = one_host;
        for hosts in [2, 4, 8, 16, 32, 64] {
            let t = net.flat(Collective::AllToAll, bytes, Group { hosts, per_host: 8 });
            assert!(t > last, "{hosts} hosts: {t} ≤ {last}");
            last = t;
        }
        assert!(net.cross_host.unwrap().scaling.efficiency(65) - 0.5 < 1e-12);
    }

    #[test]
    fn hierarchical_all_reduce_beats_flat_across_hosts() {
        let net = two_level();
        let g = Group {
            hosts: 16,
            per_host: 8,
        };
        let flat = net.flat(Collective::AllReduce, 4e6, g);
        let hier = net.hierarchical_all_reduce(4e6, g);
        assert!(hier < flat, "{hier} vs {flat}");
    }
}
