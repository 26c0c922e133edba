//! Hardware descriptions: chips (compute, memory system), how many per host and how
//! many hosts, and the network between them. Written as TOML; presets for the systems
//! of the scale-in paper (Tables XIV, XV) and the DMT paper (Table 1) are built in, and
//! `towerrec calibrate` writes one for the machine it runs on.

use crate::collective::Network;
use crate::error::{
    check_efficiency, check_non_negative, check_positive, check_share, Ceiling, Error, Result,
};
use crate::memory::MemorySystem;
use crate::reader::ReaderCosts;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Dense compute of one chip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    /// Peak dense FLOP/s in the precision the model runs in, in TFLOP/s.
    pub peak_tflops: f64,
    /// Fraction of the peak the model's layers reach (1.0: the paper's upper bounds).
    #[serde(default = "one")]
    pub efficiency: f64,
    /// Measured `[vector width, GFLOP/s]` of the dot interaction, forward and backward
    /// (`towerrec calibrate`), by increasing width; FLOPs counted as the model counts
    /// them (`2·F²·D` forward, twice that backward). A dot of short vectors runs far
    /// below the GEMM rate; without points the interaction runs at `efficiency`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interaction: Vec<[f64; 2]>,
    /// Peak dense FLOP/s with bf16 operands and f32 sums (a workload with
    /// `dense_bf16`), in TFLOP/s: `towerrec calibrate` measures the GEMM through the
    /// build's bf16 kernel (oneDNN, or the portable path: slower than f32). The
    /// `efficiency` applies to it as to `peak_tflops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_peak_tflops: Option<f64>,
}

fn one() -> f64 {
    1.0
}

/// What the system overlaps and buffers (the scale-in paper §V-B assumptions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemTraits {
    /// Enough on-chip buffering (§V-B, Table X): looked-up rows stay on chip until the
    /// sparse update, which then only writes them, and the dense weights live on chip,
    /// so their update costs no DRAM traffic. Without (CPUs): the sparse update reads,
    /// modifies and writes every row, and the dense update streams weights and
    /// gradients through DRAM.
    #[serde(default = "yes")]
    pub on_chip_buffers: bool,
    /// Fraction of the embedding lookups' memory time that runs under the output
    /// exchange (§V-B: "overlapping memory activity with communications"): 1.0 = fully.
    #[serde(default = "one")]
    pub lookup_comm_overlap: f64,
    /// Fraction of the dense all-reduce that runs under the backward pass (the paper
    /// pipelines it: 1.0; a trainer that all-reduces after the backward pass: 0.0).
    #[serde(default = "one")]
    pub allreduce_overlap: f64,
    /// Kernel time per pooled bag beyond its rows' memory time, in the lookup and in the
    /// fused sparse update, ns (what a CPU's per-bag bookkeeping costs; 0 for the
    /// paper's hardware).
    #[serde(default)]
    pub lookup_overhead_ns: f64,
    #[serde(default)]
    pub update_overhead_ns: f64,
    /// Fixed time per step outside the modelled phases (framework), µs.
    #[serde(default)]
    pub step_overhead_us: f64,
    /// The wait at a collective that follows computation, as `towerrec calibrate`
    /// measures it with every rank computing the same work and then meeting: `[work µs,
    /// wait µs]` by increasing work (ranks that share cores finish the same work at
    /// different times; dedicated chips wait about nothing). Empty: no wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_wait: Vec<[f64; 2]>,
    /// What towerrec's synthetic reader costs a chip (`towerrec calibrate` measures
    /// it); absent: reading is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic_reader: Option<ReaderCosts>,
}

fn yes() -> bool {
    true
}

impl Default for SystemTraits {
    fn default() -> Self {
        SystemTraits {
            on_chip_buffers: true,
            lookup_comm_overlap: 1.0,
            allreduce_overlap: 1.0,
            lookup_overhead_ns: 0.0,
            update_overhead_ns: 0.0,
            step_overhead_us: 0.0,
            sync_wait: Vec::new(),
            synthetic_reader: None,
        }
    }
}

impl SystemTraits {
    /// Seconds a collective waits for the other ranks after `work` seconds of
    /// computation since the last one: the measured curve, linear from (0, 0) to its
    /// first point and between points, flat after its last.
    pub fn sync_wait(&self, work: f64) -> f64 {
        let us = work * 1e6;
        let mut prev = [0.0, 0.0];
        for &[w, t] in &self.sync_wait {
            if us <= w {
                let f = if w > prev[0] {
                    (us - prev[0]) / (w - prev[0])
                } else {
                    1.0
                };
                return (prev[1] + f * (t - prev[1])) * 1e-6;
            }
            prev = [w, t];
        }
        prev[1] * 1e-6
    }
}

/// A system: `hosts × chips_per_host` identical chips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub name: String,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
    pub hosts: usize,
    pub chips_per_host: usize,
    pub compute: Compute,
    pub memory: MemorySystem,
    pub network: Network,
    #[serde(default)]
    pub system: SystemTraits,
}

/// The most chips a description may have (2^20), far beyond any system modelled, so
/// that sizes stay exact in every product the model forms.
pub const MAX_CHIPS: usize = 1 << 20;

/// The built-in presets: (name, TOML).
const PRESETS: &[(&str, &str)] = &[
    ("recspeed", include_str!("../presets/recspeed.toml")),
    ("reference", include_str!("../presets/reference.toml")),
    ("dgx2", include_str!("../presets/dgx2.toml")),
    ("dgx-a100", include_str!("../presets/dgx-a100.toml")),
    ("h100-cluster", include_str!("../presets/h100-cluster.toml")),
];

impl Hardware {
    /// Names of the built-in presets.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let (_, text) =
            PRESETS
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| Error::UnknownPreset {
                    kind: "hardware",
                    name: name.into(),
                    known: Self::preset_names().join(", "),
                })?;
        Self::from_toml(text, Path::new(name))
    }

    /// The TOML text of a preset (to start a file of one's own from).
    pub fn preset_toml(name: &str) -> Option<&'static str> {
        PRESETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// A preset name, or a path to a hardware TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        if PRESETS.iter().any(|(n, _)| *n == name_or_path) {
            return Self::preset(name_or_path);
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            return Err(Error::UnknownPreset {
                kind: "hardware",
                name: name_or_path.into(),
                known: format!("{}; nor is it a file", Self::preset_names().join(", ")),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|error| Error::Io {
            path: path.into(),
            error,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses and checks a hardware description; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self> {
        let hw: Hardware = toml::from_str(text).map_err(|e| Error::Toml {
            path: origin.into(),
            error: Box::new(e),
        })?;
        hw.validate().map_err(|e| match e {
            Error::Invalid { what, reason } => Error::Invalid {
                what: format!("{}: {what}", origin.display()),
                reason,
            },
            e => e,
        })?;
        Ok(hw)
    }

    /// The description as TOML text.
    pub fn to_toml(&self) -> std::result::Result<String, toml::ser::Error> {
        toml::to_string(self)
    }

    /// Writes the description as TOML, atomically (a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = self.to_toml().map_err(|e| Error::Io {
            path: path.into(),
            error: std::io::Error::other(e),
        })?;
        towerrec_core::fsio::write_atomic(path, text.as_bytes()).map_err(|error| Error::Io {
            path: path.into(),
            error,
        })
    }

    /// Checks every figure for sense; an error names the key.
    pub fn validate(&self) -> Result<()> {
        for (key, n) in [
            ("hosts", self.hosts),
            ("chips_per_host", self.chips_per_host),
        ] {
            if n == 0 {
                return Err(Error::invalid(key, "must be at least 1"));
            }
        }
        if self
            .hosts
            .checked_mul(self.chips_per_host)
            .is_none_or(|n| n > MAX_CHIPS)
        {
            return Err(Error::invalid(
                "hosts",
                format!("hosts × chips_per_host must be at most {MAX_CHIPS}"),
            ));
        }
        check_positive(
            "compute.peak_tflops",
            self.compute.peak_tflops,
            Ceiling::Tflops,
        )?;
        check_efficiency("compute.efficiency", self.compute.efficiency)?;
        if let Some(peak) = self.compute.bf16_peak_tflops {
            check_positive("compute.bf16_peak_tflops", peak, Ceiling::Tflops)?;
        }
        for (i, &[w, r]) in self.compute.interaction.iter().enumerate() {
            check_positive(
                &format!("compute.interaction[{i}] width"),
                w,
                Ceiling::Count,
            )?;
            check_positive(
                &format!("compute.interaction[{i}] GFLOP/s"),
                r,
                Ceiling::Gflops,
            )?;
            if i > 0 && w <= self.compute.interaction[i - 1][0] {
                return Err(Error::invalid(
                    "compute.interaction",
                    "points must be listed by strictly increasing width",
                ));
            }
        }
        let s = &self.system;
        check_share("system.lookup_comm_overlap", s.lookup_comm_overlap)?;
        check_share("system.allreduce_overlap", s.allreduce_overlap)?;
        check_non_negative(
            "system.lookup_overhead_ns",
            s.lookup_overhead_ns,
            Ceiling::Nanos,
        )?;
        check_non_negative(
            "system.update_overhead_ns",
            s.update_overhead_ns,
            Ceiling::Nanos,
        )?;
        check_non_negative(
            "system.step_overhead_us",
            s.step_overhead_us,
            Ceiling::Micros,
        )?;
        if let Some(r) = &s.synthetic_reader {
            r.validate()?;
        }
        for (i, &[w, t]) in s.sync_wait.iter().enumerate() {
            check_non_negative(&format!("system.sync_wait[{i}] work"), w, Ceiling::Micros)?;
            check_non_negative(&format!("system.sync_wait[{i}] wait"), t, Ceiling::Micros)?;
            if i > 0 && w <= s.sync_wait[i - 1][0] {
                return Err(Error::invalid(
                    "system.sync_wait",
                    "points must be listed by strictly increasing work",
                ));
            }
        }
        self.memory.validate()?;
        self.network.check(self.hosts)
    }

    /// All chips.
    pub fn chips(&self) -> usize {
        self.hosts * self.chips_per_host
    }

    /// The same system with `chips` chips: as many full hosts as needed (at least one),
    /// or fewer chips on one host.
    pub fn with_chips(&self, chips: usize) -> Result<Self> {
        let mut hw = self.clone();
        if chips == 0 || chips > MAX_CHIPS {
            return Err(Error::invalid(
                "--gpus",
                format!("a system needs 1 to {MAX_CHIPS} chips, not {chips}"),
            ));
        }
        if chips <= self.chips_per_host {
            hw.hosts = 1;
            hw.chips_per_host = chips;
        } else if chips.is_multiple_of(self.chips_per_host) {
            hw.hosts = chips / self.chips_per_host;
        } else {
            return Err(Error::invalid(
                "--gpus",
                format!(
                    "{chips} chips is not a whole number of {}-chip hosts",
                    self.chips_per_host
                ),
            ));
        }
        hw.validate()?;
        Ok(hw)
    }

    /// Seconds for `flops` of dense compute on one chip.
    pub fn compute_time(&self, flops: f64) -> f64 {
        flops / (self.compute.peak_tflops * 1e12 * self.compute.efficiency)
    }

    /// Seconds for `flops` of the dense layers' products on one chip: at
    /// `compute.bf16_peak_tflops` when `bf16` (an error without it), else as
    /// [`Hardware::compute_time`].
    pub fn dense_time(&self, flops: f64, bf16: bool) -> Result<f64> {
        if !bf16 {
            return Ok(self.compute_time(flops));
        }
        let peak = self.compute.bf16_peak_tflops.ok_or_else(|| {
            Error::invalid(
                "compute.bf16_peak_tflops",
                "the workload's dense layers are bf16 (model.dense_precision) but the \
                 hardware gives no bf16 rate: `towerrec calibrate` measures it, or set it",
            )
        })?;
        Ok(flops / (peak * 1e12 * self.compute.efficiency))
    }

    /// Seconds for `flops` of the dot interaction of vectors `width` wide on one chip:
    /// at the measured rate for that width (linear between measured widths, the end
    /// points' rates beyond them), else as any dense compute.
    pub fn interaction_time(&self, flops: f64, width: usize) -> f64 {
        let points = &self.compute.interaction;
        let (Some(first), Some(last)) = (points.first(), points.last()) else {
            return self.compute_time(flops);
        };
        let w = width as f64;
        let gflops = if w <= first[0] {
            first[1]
        } else if w >= last[0] {
            last[1]
        } else {
            let i = points
                .partition_point(|p| p[0] <= w)
                .clamp(1, points.len() - 1);
            let ([w0, r0], [w1, r1]) = (points[i - 1], points[i]);
            r0 + (r1 - r0) * (w - w0) / (w1 - w0)
        };
        flops / (gflops * 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error loading `text` as the file `name` gives.
    fn load_err(text: &str, name: &str) -> String {
        Hardware::from_toml(text, Path::new(name))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn every_preset_loads_and_round_trips() {
        for name in Hardware::preset_names() {
            let hw = Hardware::preset(name).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("{name}.toml"));
            hw.save(&path).unwrap();
            let back = Hardware::load(path.to_str().unwrap()).unwrap();
            assert_eq!(back, hw, "{name}");
        }
    }

    #[test]
    fn bad_descriptions_say_what_is_wrong() {
        let text = Hardware::preset_toml("recspeed").unwrap();
        let bad = text.replace("chips_per_host = 16", "chips_per_host = 0");
        let e = load_err(&bad, "x.toml");
        assert!(e.contains("chips_per_host"), "{e}");
        let bad = text.replace("hosts = 1", "hosts = 4");
        let e = load_err(&bad, "x.toml");
        assert!(e.contains("cross_host"), "{e}");
        let bad = format!("{text}\nwarp_drive = true\n");
        let e = load_err(&bad, "x.toml");
        assert!(e.contains("x.toml") && e.contains("warp_drive"), "{e}");
        assert!(Hardware::load("no-such-preset-or-file").is_err());
    }

    #[test]
    fn bf16_dense_layers_run_at_the_bf16_rate_or_are_refused_without_one() {
        let mut hw = Hardware::preset("h100-cluster").unwrap();
        let flops = 1e12;
        assert_eq!(hw.dense_time(flops, false).unwrap(), hw.compute_time(flops));
        let e = hw.dense_time(flops, true).unwrap_err().to_string();
        assert!(e.contains("compute.bf16_peak_tflops"), "{e}");
        hw.compute.bf16_peak_tflops = Some(2.0 * hw.compute.peak_tflops);
        hw.validate().unwrap();
        let (f32_secs, bf16_secs) = (hw.compute_time(flops), hw.dense_time(flops, true).unwrap());
        assert!((bf16_secs * 2.0 / f32_secs - 1.0).abs() < 1e-12);
        hw.compute.bf16_peak_tflops = Some(-1.0);
        assert!(hw.validate().is_err());
    }

    #[test]
    fn the_interaction_runs_at_its_measured_rate_by_width() {
        let mut hw = Hardware::preset("h100-cluster").unwrap();
        let flops = 1e9;
        // No points: as any dense compute.
        assert_eq!(hw.interaction_time(flops, 64), hw.compute_time(flops));
        hw.compute.interaction = vec![[8.0, 10.0], [64.0, 80.0]];
        hw.validate().unwrap();
        let secs = |w| hw.interaction_time(flops, w);
        assert!((secs(8) - 0.1).abs() < 1e-12);
        assert!((secs(64) - flops / 80e9).abs() < 1e-12);
        // Linear in the width between points; the end points' rates beyond them.
        assert!((secs(36) - flops / 45e9).abs() < 1e-12);
        assert_eq!(secs(4), secs(8));
        assert_eq!(secs(128), secs(64));
        // Loaded from a file, checked like every figure.
        let text = Hardware::preset_toml("h100-cluster").unwrap().replace(
            "efficiency = 0.25",
            "efficiency = 0.25\ninteraction = [[64.0, 80.0], [8.0, 10.0]]",
        );
        let e = load_err(&text, "hw.toml");
        assert!(e.contains("compute.interaction"), "{e}");
        let bad = text.replace("[[64.0, 80.0], [8.0, 10.0]]", "[[8.0, 0.0]]");
        let e = load_err(&bad, "hw.toml");
        assert!(e.contains("compute.interaction[0] GFLOP/s"), "{e}");
    }

    #[test]
    fn figures_out_of_range_are_errors_naming_the_key() {
        let text = Hardware::preset_toml("h100-cluster").unwrap();
        let cases = [
            (
                "efficiency = 0.25",
                "efficiency = 1.5",
                "compute.efficiency",
            ),
            (
                "efficiency = 0.25",
                "efficiency = 0.0",
                "compute.efficiency",
            ),
            (
                "efficiency = 0.25",
                "efficiency = nan",
                "compute.efficiency",
            ),
            (
                "peak_tflops = 989.0",
                "peak_tflops = inf",
                "compute.peak_tflops",
            ),
            ("units = 5", "units = 0", "memory.units"),
            (
                "data_rate_mts = 5200.0",
                "data_rate_mts = -1.0",
                "memory.data_rate_mts",
            ),
            (
                "all_to_all = { latency_us = 10.0,",
                "all_to_all = { latency_us = -1.0,",
                "intra_host.all_to_all.latency_us",
            ),
            (
                "bandwidth_gbs = 48.0 }\nall_reduce",
                "bandwidth_gbs = 0.0 }\nall_reduce",
                "cross_host.all_to_all.bandwidth_gbs",
            ),
            ("knee = 512.0", "knee = -512.0", "cross_host.scaling.knee"),
            (
                "exponent = 1.0",
                "exponent = nan",
                "cross_host.scaling.exponent",
            ),
            ("hosts = 8", "hosts = 1099511627776", "hosts"),
            // Finite but beyond any hardware: a unit slip.
            (
                "peak_tflops = 989.0",
                "peak_tflops = 1e30",
                "compute.peak_tflops",
            ),
            (
                "bandwidth_gbs = 48.0 }\nall_reduce",
                "bandwidth_gbs = 4.8e7 }\nall_reduce",
                "cross_host.all_to_all.bandwidth_gbs",
            ),
            (
                "all_to_all = { latency_us = 10.0,",
                "all_to_all = { latency_us = 1e300,",
                "intra_host.all_to_all.latency_us",
            ),
            (
                "data_rate_mts = 5200.0",
                "data_rate_mts = 5.2e12",
                "memory.data_rate_mts",
            ),
            ("knee = 512.0", "knee = 1e20", "cross_host.scaling.knee"),
        ];
        for (from, to, key) in cases {
            assert!(text.contains(from), "{from}");
            let e = Hardware::from_toml(&text.replace(from, to), Path::new("hw.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("hw.toml: {key}")), "{to}: {e}");
        }
        let with_system = format!("{text}\n[system]\nallreduce_overlap = 1.01\n");
        let e = load_err(&with_system, "hw.toml");
        assert!(
            e.contains("system.allreduce_overlap: must be within 0..1"),
            "{e}"
        );
        // A DRAM table written out: its keys are named under memory.timing.
        let ddr4 = r#"name = "x"
hosts = 1
chips_per_host = 1
[compute]
peak_tflops = 1.0
[memory]
model = "dram"
units = 1
[memory.timing]
name = "DDR4"
data_rate_mts = 3200.0
clock_ratio = 2.0
channel_bits = 64
channels_per_unit = 1
burst_length = 8
banks = 16
bank_groups = 4
t_rcd = 13.75
t_rp = 13.75
t_ras = 32.5
t_rtp = 7.5
t_rrd_s = 2.5
t_faw = 10.0
t_ccd_l_nck = 8.0
t_rfc = 350.0
t_refi = 7800.0
[network.intra_host]
all_to_all = { latency_us = 1.0, bandwidth_gbs = 1.0 }
"#;
        Hardware::from_toml(ddr4, Path::new("hw.toml")).unwrap();
        let e = Hardware::from_toml(
            &ddr4.replace("t_rcd = 13.75", "t_rcd = 0.0"),
            Path::new("hw.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("memory.timing.t_rcd (DRAM 'DDR4'): must be a finite number > 0"),
            "{e}"
        );
        let e = Hardware::from_toml(
            &ddr4.replace("banks = 16", "banks = 15"),
            Path::new("hw.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("memory.timing.banks"), "{e}");
    }

    /// Found by fuzzing: `peak_tflops = 2e-322` passed as positive and predicted an
    /// infinite step time.
    #[test]
    fn figures_too_small_for_any_hardware_are_refused_before_a_prediction() {
        use crate::{simulate, Exchange, Mode, Scenario, Sharding, Workload};
        let text = Hardware::preset_toml("reference").unwrap();
        let scenario = Scenario {
            mode: Mode::Training,
            sharding: Sharding::Unsharded,
            exchange: Exchange::Flat,
        };
        let w = Workload::rm2(false);
        let hw = Hardware::from_toml(text, Path::new("x.toml")).unwrap();
        assert!(simulate(&w, &hw, scenario).unwrap().seconds > 0.0);
        // Once it passed every check and predicted an infinite step (the fuzz test's
        // finding); now a figure below any hardware's is refused on load.
        let tiny = text.replace("peak_tflops = 200.0", "peak_tflops = 2e-322");
        let e = Hardware::from_toml(&tiny, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("compute.peak_tflops: must be at least 1e-9"),
            "{e}"
        );
    }

    #[test]
    fn scaling_a_cluster_keeps_whole_hosts() {
        let hw = Hardware::preset("h100-cluster").unwrap();
        let big = hw.with_chips(512).unwrap();
        assert_eq!((big.hosts, big.chips_per_host), (64, 8));
        let small = hw.with_chips(4).unwrap();
        assert_eq!((small.hosts, small.chips_per_host), (1, 4));
        assert!(hw.with_chips(12).is_err());
    }
}
