//! The memory system of one chip, and the bandwidth it gives to random embedding-row
//! reads: the scale-in paper §IV-D2 and Figure 6, derived from DRAM timing parameters.
//!
//! With zero locality every row read opens a DRAM row (ACT), reads `ceil(row / burst)`
//! bursts from it and closes it again (auto-precharge). A channel (an HBM
//! pseudo-channel) then serves rows no faster than the slowest of:
//! - its data bus: the bursts themselves, plus the bus bubble between reads from
//!   different rows (`t_switch`, in clocks);
//! - its activate rate: one ACT per `tRRD_S` and four per `tFAW`;
//! - its bank groups: bursts to one bank group `tCCD_L` apart;
//! - its banks: each busy from ACT to the next possible ACT (`tRC`, or longer when the
//!   row's bursts outlast `tRAS`), `banks` of them in parallel;
//!
//! and refresh takes `tRFC` out of every `tREFI`. A chip has `units` stacks / DIMM
//! channels / devices of `channels` channels each. Machines measured by
//! `towerrec calibrate` give their measured random-read bandwidth by row size instead.

use crate::error::{check_non_negative, check_positive, Ceiling, Error, Result};
use serde::{Deserialize, Serialize};

/// Organisation and timing of one DRAM channel (HBM: one pseudo-channel), from a
/// datasheet or the JEDEC standard. Times are in ns unless named `_nck` (clocks of the
/// command clock, which runs at `data_rate_mts / clock_ratio` MHz).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DramTiming {
    pub name: String,
    pub data_rate_mts: f64,
    /// Data transfers per command clock (2 for DDR4 and HBM, 8 for GDDR6).
    pub clock_ratio: f64,
    pub channel_bits: u32,
    pub channels_per_unit: u32,
    pub burst_length: u32,
    pub banks: u32,
    pub bank_groups: u32,
    pub t_rcd: f64,
    pub t_rp: f64,
    pub t_ras: f64,
    pub t_rtp: f64,
    pub t_rrd_s: f64,
    pub t_faw: f64,
    pub t_ccd_l_nck: f64,
    /// Data-bus bubble between bursts of two different rows, in clocks.
    #[serde(default)]
    pub t_switch_nck: f64,
    pub t_rfc: f64,
    pub t_refi: f64,
}

/// Built-in DRAM timing tables (see docs/SIMULATOR.md for their sources).
const TIMINGS: &[(&str, &str)] = &[
    ("hbm2", include_str!("../presets/dram/hbm2.toml")),
    ("hbm2e", include_str!("../presets/dram/hbm2e.toml")),
    ("hbm3", include_str!("../presets/dram/hbm3.toml")),
    ("ddr4", include_str!("../presets/dram/ddr4.toml")),
    ("gddr6", include_str!("../presets/dram/gddr6.toml")),
];

impl DramTiming {
    /// A built-in timing table: `hbm2`, `hbm2e`, `hbm3`, `ddr4`, `gddr6`.
    pub fn preset(name: &str) -> Result<Self> {
        let (_, text) =
            TIMINGS
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| Error::UnknownPreset {
                    kind: "DRAM",
                    name: name.into(),
                    known: TIMINGS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        toml::from_str(text).map_err(|e| Error::Toml {
            path: format!("<built-in {name}>").into(),
            error: Box::new(e),
        })
    }

    /// Checks every figure; an error names the key, under `prefix` (where the table
    /// sits in a hardware file).
    fn validate(&self, prefix: &str) -> Result<()> {
        let key = |k: &str| format!("{prefix}{k} (DRAM '{}')", self.name);
        for (k, v, ceiling) in [
            ("data_rate_mts", self.data_rate_mts, Ceiling::Mts),
            ("clock_ratio", self.clock_ratio, Ceiling::Factor),
            ("t_rcd", self.t_rcd, Ceiling::Nanos),
            ("t_rp", self.t_rp, Ceiling::Nanos),
            ("t_ras", self.t_ras, Ceiling::Nanos),
            ("t_rrd_s", self.t_rrd_s, Ceiling::Nanos),
            ("t_faw", self.t_faw, Ceiling::Nanos),
            ("t_ccd_l_nck", self.t_ccd_l_nck, Ceiling::Count),
            ("t_refi", self.t_refi, Ceiling::Nanos),
        ] {
            check_positive(&key(k), v, ceiling)?;
        }
        for (k, v, ceiling) in [
            ("t_rtp", self.t_rtp, Ceiling::Nanos),
            ("t_switch_nck", self.t_switch_nck, Ceiling::Count),
            ("t_rfc", self.t_rfc, Ceiling::Nanos),
        ] {
            check_non_negative(&key(k), v, ceiling)?;
        }
        for (k, v) in [
            ("channel_bits", self.channel_bits),
            ("channels_per_unit", self.channels_per_unit),
            ("burst_length", self.burst_length),
            ("banks", self.banks),
            ("bank_groups", self.bank_groups),
        ] {
            if v == 0 {
                return Err(Error::invalid(key(k), "must be at least 1"));
            }
        }
        if !self.banks.is_multiple_of(self.bank_groups) {
            return Err(Error::invalid(
                key("banks"),
                format!(
                    "must be a multiple of bank_groups ({}), got {}",
                    self.bank_groups, self.banks
                ),
            ));
        }
        if self.t_rfc >= self.t_refi {
            return Err(Error::invalid(
                key("t_rfc"),
                format!("must be shorter than t_refi ({})", self.t_refi),
            ));
        }
        Ok(())
    }

    /// Bytes one burst carries.
    pub fn burst_bytes(&self) -> f64 {
        f64::from(self.channel_bits) * f64::from(self.burst_length) / 8.0
    }

    /// Peak bytes/s of one channel.
    pub fn channel_peak(&self) -> f64 {
        self.channel_bits as f64 / 8.0 * self.data_rate_mts * 1e6
    }

    /// Command clock period, ns.
    fn t_ck(&self) -> f64 {
        self.clock_ratio * 1e3 / self.data_rate_mts
    }

    /// Nanoseconds one channel spends per random row of `row_bytes`: the slowest of
    /// its resources (module doc), refresh included.
    pub fn ns_per_row(&self, row_bytes: f64) -> f64 {
        let bursts = (row_bytes / self.burst_bytes()).ceil().max(1.0);
        let t_burst = self.burst_length as f64 * 1e3 / self.data_rate_mts;
        let t_ccd_l = self.t_ccd_l_nck * self.t_ck();
        let bus = bursts * t_burst + self.t_switch_nck * self.t_ck();
        let activate = self.t_rrd_s.max(self.t_faw / 4.0);
        let bank_group = bursts * t_ccd_l / self.bank_groups as f64;
        let open = self
            .t_ras
            .max(self.t_rcd + (bursts - 1.0) * t_ccd_l + self.t_rtp);
        let bank = (open + self.t_rp) / self.banks as f64;
        let slowest = bus.max(activate).max(bank_group).max(bank);
        slowest / (1.0 - self.t_rfc / self.t_refi)
    }

    /// Useful bytes/s of one channel for random rows of `row_bytes`.
    pub fn channel_random(&self, row_bytes: f64) -> f64 {
        row_bytes / (self.ns_per_row(row_bytes) * 1e-9)
    }
}

/// A reference to a timing table: a built-in name or a table written out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TimingRef {
    Preset(String),
    Custom(Box<DramTiming>),
}

/// The memory attached to one chip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemorySystem {
    /// Derived from DRAM timings: `units` stacks/channels/devices of `timing`, at
    /// `data_rate_mts` when given (else the table's rate).
    Dram {
        timing: TimingRef,
        units: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_rate_mts: Option<f64>,
    },
    /// Measured: streaming bandwidth and random-read bandwidth at some row sizes
    /// (`[row bytes, GB/s]`, interpolated linearly in row size, held at the ends).
    Measured {
        stream_gbs: f64,
        random_read: Vec<[f64; 2]>,
    },
}

impl MemorySystem {
    /// The timing table in effect, at the configured data rate.
    pub fn timing(&self) -> Result<Option<DramTiming>> {
        match self {
            MemorySystem::Dram {
                timing,
                data_rate_mts,
                ..
            } => {
                let mut t = match timing {
                    TimingRef::Preset(name) => DramTiming::preset(name)?,
                    TimingRef::Custom(t) => (**t).clone(),
                };
                if let Some(rate) = data_rate_mts {
                    t.data_rate_mts = *rate;
                }
                Ok(Some(t))
            }
            MemorySystem::Measured { .. } => Ok(None),
        }
    }

    /// Checks every figure; an error names the key.
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            MemorySystem::Dram {
                units,
                timing,
                data_rate_mts,
            } => {
                if *units == 0 {
                    return Err(Error::invalid("memory.units", "must be at least 1"));
                }
                if let Some(rate) = data_rate_mts {
                    check_positive("memory.data_rate_mts", *rate, Ceiling::Mts)?;
                }
                let prefix = match timing {
                    TimingRef::Preset(_) => "memory: ",
                    TimingRef::Custom(_) => "memory.timing.",
                };
                match self.timing()? {
                    Some(t) => t.validate(prefix),
                    None => Ok(()),
                }
            }
            MemorySystem::Measured {
                stream_gbs,
                random_read,
            } => {
                check_positive("memory.stream_gbs", *stream_gbs, Ceiling::GBs)?;
                if random_read.is_empty() {
                    return Err(Error::invalid(
                        "memory.random_read",
                        "needs at least one [row bytes, GB/s] point",
                    ));
                }
                for (i, p) in random_read.iter().enumerate() {
                    check_positive(
                        &format!("memory.random_read[{i}] row bytes"),
                        p[0],
                        Ceiling::Bytes,
                    )?;
                    check_positive(&format!("memory.random_read[{i}] GB/s"), p[1], Ceiling::GBs)?;
                }
                if random_read.windows(2).any(|w| w[0][0] >= w[1][0]) {
                    return Err(Error::invalid(
                        "memory.random_read",
                        "points must be sorted by row size, without repeats",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Peak (streaming) bytes/s of the chip's memory.
    pub fn peak(&self) -> f64 {
        match self {
            MemorySystem::Dram { units, .. } => {
                let t = self.timing_or_panic();
                t.channel_peak() * f64::from(t.channels_per_unit) * f64::from(*units)
            }
            MemorySystem::Measured { stream_gbs, .. } => stream_gbs * 1e9,
        }
    }

    /// Useful bytes/s of the chip's memory for random rows of `row_bytes`.
    pub fn random_read(&self, row_bytes: f64) -> f64 {
        match self {
            MemorySystem::Dram { units, .. } => {
                let t = self.timing_or_panic();
                t.channel_random(row_bytes) * f64::from(t.channels_per_unit) * f64::from(*units)
            }
            MemorySystem::Measured { random_read, .. } => interpolate(random_read, row_bytes) * 1e9,
        }
    }

    /// Streaming bytes/s (refresh taken out).
    pub fn stream(&self) -> f64 {
        match self {
            MemorySystem::Dram { .. } => {
                let t = self.timing_or_panic();
                self.peak() * (1.0 - t.t_rfc / t.t_refi)
            }
            MemorySystem::Measured { stream_gbs, .. } => stream_gbs * 1e9,
        }
    }

    fn timing_or_panic(&self) -> DramTiming {
        // validate() ran when the hardware was loaded, so the table resolves.
        self.timing()
            .expect("memory validated at load")
            .expect("a DRAM memory system")
    }
}

fn interpolate(points: &[[f64; 2]], x: f64) -> f64 {
    let first = points[0];
    let last = points[points.len() - 1];
    if x <= first[0] {
        return first[1];
    }
    if x >= last[0] {
        return last[1];
    }
    let i = points
        .iter()
        .position(|p| p[0] >= x)
        .expect("x inside the range");
    let (a, b) = (points[i - 1], points[i]);
    a[1] + (b[1] - a[1]) * (x - a[0]) / (b[0] - a[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dram(name: &str, rate: f64, units: u32) -> MemorySystem {
        MemorySystem::Dram {
            timing: TimingRef::Preset(name.into()),
            units,
            data_rate_mts: Some(rate),
        }
    }

    #[test]
    fn every_timing_table_loads_and_is_sane() {
        for (name, _) in TIMINGS {
            let t = DramTiming::preset(name).unwrap();
            t.validate("").unwrap();
            // Random reads never beat the bus, and bigger rows use it better.
            let mut last = 0.0;
            for row in [32.0, 64.0, 128.0, 256.0, 512.0] {
                let eff = t.channel_random(row) / t.channel_peak();
                assert!(eff > 0.0 && eff <= 1.0, "{name} {row}: {eff}");
                assert!(eff >= last - 1e-12, "{name} {row}: {eff} < {last}");
                last = eff;
            }
        }
    }

    #[test]
    fn peak_bandwidths_match_the_parts() {
        // HBM2E @ 3000 MT/s: 1024 bits per stack → 384 GB/s; 6 stacks (Table XIV).
        let m = dram("hbm2e", 3000.0, 6);
        m.validate().unwrap();
        assert!((m.peak() - 2304e9).abs() < 1e6, "{}", m.peak());
        // DDR4-3200: 25.6 GB/s per 64-bit channel (Table I).
        let m = dram("ddr4", 3200.0, 1);
        assert!((m.peak() - 25.6e9).abs() < 1e6, "{}", m.peak());
    }

    #[test]
    fn hbm_serves_small_rows_far_better_than_ddr4() {
        // Figure 6: HBM has considerably higher random-access performance; a 6-channel
        // DDR4 server is far lower, especially for small rows.
        let hbm = dram("hbm2e", 3000.0, 6);
        let ddr = dram("ddr4", 3200.0, 6);
        for row in [64.0, 256.0] {
            assert!(hbm.random_read(row) > 5.0 * ddr.random_read(row));
        }
        let ddr_eff = |row| ddr.random_read(row) / ddr.peak();
        assert!(ddr_eff(64.0) < ddr_eff(256.0));
    }

    #[test]
    fn measured_bandwidth_interpolates() {
        let m = MemorySystem::Measured {
            stream_gbs: 20.0,
            random_read: vec![[64.0, 8.0], [256.0, 12.0]],
        };
        m.validate().unwrap();
        assert_eq!(m.random_read(32.0), 8e9);
        assert_eq!(m.random_read(160.0), 10e9);
        assert_eq!(m.random_read(1024.0), 12e9);
        let unsorted = MemorySystem::Measured {
            stream_gbs: 20.0,
            random_read: vec![[256.0, 12.0], [64.0, 8.0]],
        };
        assert!(unsorted.validate().is_err());
    }
}
