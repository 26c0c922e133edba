//! Collective communication cost: the latency–bandwidth model with the lower bounds of
//! the scale-in paper §IV-D, on a two-level network (fast links within a host, slower
//! links between hosts) whose cross-host efficiency falls with world size (the shape of
//! the DMT paper's Figure 5).
//!
//! Conventions: `bytes` is the per-chip buffer: what each chip sends in an all-to-all,
//! its input in a reduce-scatter or all-reduce, its output in an all-gather. A flat
//! collective over `n` chips must move at least `bytes·(n−1)/n` through every chip
//! (all-reduce: twice that); it takes `α + moved / β`.

use crate::error::{check_non_negative, check_positive, Ceiling, Error, Result};
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
/// one collective on one network level, and optionally the measurements they were
/// fitted to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlphaBeta {
    pub latency_us: f64,
    pub bandwidth_gbs: f64,
    /// Measured `[bytes moved through each chip, µs]` points, by growing size (from
    /// `towerrec calibrate`). Where given, a time within their range is interpolated
    /// between the two nearest points instead of read off the fitted line: a network
    /// stack's time is rarely one straight line from 8 B to 16 MiB (protocol switches,
    /// buffers, caches), and a fit weighted for every size misses the middle ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<[f64; 2]>,
}

impl AlphaBeta {
    /// The line `latency_us + moved / bandwidth_gbs` alone.
    pub fn fitted(latency_us: f64, bandwidth_gbs: f64) -> Self {
        AlphaBeta {
            latency_us,
            bandwidth_gbs,
            measured: Vec::new(),
        }
    }

    fn check(&self, what: &str) -> Result<()> {
        check_non_negative(
            &format!("{what}.latency_us"),
            self.latency_us,
            Ceiling::Micros,
        )?;
        check_positive(
            &format!("{what}.bandwidth_gbs"),
            self.bandwidth_gbs,
            Ceiling::GBs,
        )?;
        let ok = self.measured.iter().all(|&[m, us]| m >= 0.0 && us > 0.0)
            && self.measured.windows(2).all(|w| w[0][0] < w[1][0]);
        if ok {
            Ok(())
        } else {
            Err(Error::invalid(
                format!("{what}.measured"),
                "points must be [bytes ≥ 0, µs > 0] with bytes strictly growing",
            ))
        }
    }

    /// Seconds to move `moved` bytes through each chip: interpolated between the
    /// measured points around `moved`; below the smallest, that point's time; above the
    /// largest, that point's time plus the rest at the fitted bandwidth; without
    /// points, the fitted line.
    pub fn time(&self, moved: f64) -> f64 {
        let line = |m: f64| m / (self.bandwidth_gbs * 1e9);
        let (first, last) = match (self.measured.first(), self.measured.last()) {
            (Some(f), Some(l)) => (f, l),
            _ => return self.latency_us * 1e-6 + line(moved),
        };
        if moved <= first[0] {
            return first[1] * 1e-6;
        }
        if moved >= last[0] {
            return last[1] * 1e-6 + line(moved - last[0]);
        }
        // Validated points grow, so `i` is in 1..len; the clamp keeps unvalidated ones
        // (built in code) from indexing out of range.
        let i = self
            .measured
            .partition_point(|p| p[0] <= moved)
            .clamp(1, self.measured.len() - 1);
        let ([m0, t0], [m1, t1]) = (self.measured[i - 1], self.measured[i]);
        if m1 <= m0 {
            return t1 * 1e-6;
        }
        (t0 + (t1 - t0) * (moved - m0) / (m1 - m0)) * 1e-6
    }

    /// Whether [`AlphaBeta::time`] reads measured points.
    pub fn is_measured(&self) -> bool {
        !self.measured.is_empty()
    }
}

/// The collectives of one network level. All-reduce, all-gather and reduce-scatter
/// default to the all-to-all's figures when not given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
            all_to_all: AlphaBeta::fitted(latency_us, bandwidth_gbs),
            all_reduce: None,
            all_gather: None,
            reduce_scatter: None,
        }
    }

    /// The α–β pair of `op`.
    pub fn get(&self, op: Collective) -> &AlphaBeta {
        let given = match op {
            Collective::AllToAll => None,
            Collective::AllReduce => self.all_reduce.as_ref(),
            Collective::AllGather => self.all_gather.as_ref(),
            Collective::ReduceScatter => self.reduce_scatter.as_ref(),
        };
        given.unwrap_or(&self.all_to_all)
    }

    fn check(&self, what: &str) -> Result<()> {
        self.all_to_all.check(&format!("{what}.all_to_all"))?;
        for (name, ab) in [
            ("all_reduce", &self.all_reduce),
            ("all_gather", &self.all_gather),
            ("reduce_scatter", &self.reduce_scatter),
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
            check_positive("cross_host.scaling.knee", self.knee, Ceiling::Count)?;
        }
        check_positive(
            "cross_host.scaling.exponent",
            self.exponent,
            Ceiling::Factor,
        )?;
        check_non_negative(
            "cross_host.scaling.latency_per_log2",
            self.latency_per_log2,
            Ceiling::Factor,
        )
    }
}

/// The cross-host level: its collectives and how they scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    /// Of a chip's peers, the share on its own host (`per_host − 1` of `size − 1`;
    /// 0 for a chip alone): how a flat collective's traffic splits between the levels.
    pub fn intra_share(&self) -> f64 {
        let n = self.size();
        if n <= 1 {
            return 0.0;
        }
        (self.per_host - 1) as f64 / (n - 1) as f64
    }
}

/// A chip's bytes on each level of the network over an even spread's (1 = even).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelShares {
    /// With chips of its own host.
    pub intra: f64,
    /// With chips on other hosts.
    pub cross: f64,
}

impl LevelShares {
    pub const EVEN: LevelShares = LevelShares {
        intra: 1.0,
        cross: 1.0,
    };
}

/// A two-level network: chips within a host, hosts joined by a slower fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
        self.flat_scaled(op, bytes, group, LevelShares::EVEN)
    }

    /// [`Network::flat`] for a chip whose traffic on each level is `shares` of an even
    /// spread's: a chip of an uneven plan may exchange mostly within its host, or
    /// mostly across. A level the chip sends nothing on costs it nothing.
    pub fn flat_scaled(
        &self,
        op: Collective,
        bytes: f64,
        group: Group,
        shares: LevelShares,
    ) -> f64 {
        let n = group.size();
        if n <= 1 {
            return 0.0;
        }
        let moved = bytes * op.volume_factor(n);
        let intra = self.intra_host.get(op);
        let cross = match (&self.cross_host, group.hosts > 1) {
            (Some(c), true) => c,
            // One host: every peer is within it.
            _ if shares.intra > 0.0 => return intra.time(moved * shares.intra),
            _ => return 0.0,
        };
        let intra_share = group.intra_share();
        let intra_bytes = moved * intra_share * shares.intra;
        let cross_bytes = moved * (1.0 - intra_share) * shares.cross;
        let ab = cross.level.get(op);
        let eff = cross.scaling.efficiency(n);
        if intra.is_measured() || ab.is_measured() {
            // Measured curves include their latency: each level's share at its own
            // curve, the slower level setting the time.
            let t_intra = if intra_share > 0.0 && shares.intra > 0.0 {
                intra.time(intra_bytes)
            } else {
                0.0
            };
            let t_cross = if shares.cross > 0.0 {
                ab.time(cross_bytes / eff)
            } else {
                0.0
            };
            return t_intra.max(t_cross);
        }
        let latency = |share: f64, l: f64| if share > 0.0 { l } else { 0.0 };
        let latency = latency(
            shares.cross,
            ab.latency_us * 1e-6 * cross.scaling.latency_factor(n),
        )
        .max(latency(shares.intra, intra.latency_us * 1e-6));
        let t_intra = intra_bytes / (intra.bandwidth_gbs * 1e9);
        let t_cross = cross_bytes / (ab.bandwidth_gbs * 1e9 * eff);
        latency + t_intra.max(t_cross)
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
                let moved = bytes * op.volume_factor(hosts);
                let eff = c.scaling.efficiency(hosts);
                if ab.is_measured() {
                    return ab.time(moved / eff);
                }
                let latency = ab.latency_us * 1e-6 * c.scaling.latency_factor(hosts);
                latency + moved / (ab.bandwidth_gbs * 1e9 * eff)
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
        assert!(net.cross_host.as_ref().unwrap().scaling.efficiency(65) - 0.5 < 1e-12);
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

    #[test]
    fn measured_points_are_interpolated_and_extended_at_the_fitted_rate() {
        let mut ab = AlphaBeta::fitted(100.0, 0.05);
        assert!((ab.time(1e6) - (100e-6 + 1e6 / 0.05e9)).abs() < 1e-15);
        ab.measured = vec![[4.0, 100.0], [1e6, 30_000.0], [8e6, 160_000.0]];
        assert!((ab.time(1.0) - 100e-6).abs() < 1e-15);
        assert!((ab.time(1e6) - 0.03).abs() < 1e-12);
        // Half-way between the last two points, and 1 MB past the last one.
        assert!((ab.time(4.5e6) - 0.095).abs() < 1e-12);
        assert!((ab.time(9e6) - (0.16 + 1e6 / 0.05e9)).abs() < 1e-12);
        // On a two-level network the measured cross-host curve prices the cross share.
        let mut net = two_level();
        let cross = net.cross_host.as_mut().unwrap();
        cross.scaling = Scaling::default();
        cross.level.all_to_all = ab.clone();
        let g = Group {
            hosts: 2,
            per_host: 2,
        };
        // 4 chips: 3/4 of 12 MB leaves each chip, 2/3 of that (6 MB) across hosts.
        let t = net.flat(Collective::AllToAll, 12e6, g);
        let want = 0.03 + (0.16 - 0.03) * 5.0 / 7.0;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        assert!((net.peers(Collective::AllToAll, 2e6, 2) - 0.03).abs() < 1e-12);
        ab.measured = vec![[2.0, 1.0], [1.0, 2.0]];
        assert!(ab.check("x").is_err());
    }
}
