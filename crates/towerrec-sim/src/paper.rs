//! The scale-in paper's Tables XVI (inference) and XVII (training) upper bounds for
//! RecSpeed and the DGX-2, and their reproduction by [`simulate`].

use crate::collective::{AlphaBeta, Level};
use crate::error::Result;
use crate::hardware::Hardware;
use crate::step::{simulate, Exchange, Mode, Scenario, Sharding, Step};
use crate::workload::Workload;

/// One cell pair of the tables: a system running one configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperFigure {
    /// "Sm. Unshard", "Lg. Shard", …
    pub config: &'static str,
    /// Hardware preset.
    pub system: &'static str,
    pub mode: Mode,
    pub large: bool,
    pub sharding: Sharding,
    /// The paper's QPS (queries or training steps of the configuration's batch per
    /// second).
    pub qps: f64,
    /// Inference: memory utilization; training: share of time in the dense all-reduce.
    pub share: f64,
}

const fn fig(
    config: &'static str,
    system: &'static str,
    mode: Mode,
    large: bool,
    sharding: Sharding,
    qps: f64,
    share: f64,
) -> PaperFigure {
    PaperFigure {
        config,
        system,
        mode,
        large,
        sharding,
        qps,
        share,
    }
}

use Mode::{Inference as I, Training as T};
use Sharding::{Sharded as S, Unsharded as U};

/// Tables XVI and XVII as printed.
pub const FIGURES: [PaperFigure; 16] = [
    fig("Sm. Unshard", "recspeed", I, false, U, 300e3, 0.67),
    fig("Sm. Shard", "recspeed", I, false, S, 207e3, 0.47),
    fig("Lg. Unshard", "recspeed", I, true, U, 56e3, 0.93),
    fig("Lg. Shard", "recspeed", I, true, S, 30e3, 0.50),
    fig("Sm. Unshard", "dgx2", I, false, U, 4.9e3, 0.018),
    fig("Sm. Shard", "dgx2", I, false, S, 4.5e3, 0.016),
    fig("Lg. Unshard", "dgx2", I, true, U, 4.7e3, 0.15),
    fig("Lg. Shard", "dgx2", I, true, S, 2.1e3, 0.07),
    fig("Sm. Unshard", "recspeed", T, false, U, 99e3, 0.33),
    fig("Sm. Shard", "recspeed", T, false, S, 83e3, 0.28),
    fig("Lg. Unshard", "recspeed", T, true, U, 25e3, 0.09),
    fig("Lg. Shard", "recspeed", T, true, S, 16e3, 0.06),
    fig("Sm. Unshard", "dgx2", T, false, U, 2.2e3, 0.31),
    fig("Sm. Shard", "dgx2", T, false, S, 2.1e3, 0.30),
    fig("Lg. Unshard", "dgx2", T, true, U, 2.0e3, 0.28),
    fig("Lg. Shard", "dgx2", T, true, S, 1.2e3, 0.18),
];

/// A figure of the paper beside the simulator's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reproduced {
    pub paper: PaperFigure,
    pub qps: f64,
    pub share: f64,
}

impl Reproduced {
    /// Simulated ÷ paper QPS.
    pub fn qps_ratio(&self) -> f64 {
        self.qps / self.paper.qps
    }
}

/// Simulates every figure of Tables XVI and XVII.
pub fn reproduce() -> Result<Vec<Reproduced>> {
    FIGURES
        .iter()
        .map(|&paper| {
            let hw = Hardware::preset(paper.system)?;
            let step = simulate(
                &Workload::rm2(paper.large),
                &hw,
                Scenario {
                    mode: paper.mode,
                    sharding: paper.sharding,
                    exchange: Exchange::Flat,
                },
            )?;
            let share = match paper.mode {
                Mode::Inference => step.memory_utilization(),
                Mode::Training => step.allreduce_share(),
            };
            Ok(Reproduced {
                paper,
                qps: step.qps(),
                share,
            })
        })
        .collect()
}

/// The reproduction as a Markdown table.
pub fn markdown(rows: &[Reproduced]) -> String {
    let mut out = String::from(
        "| table | system | config | paper QPS | simulated QPS | ratio | paper share | simulated share |\n|---|---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (table, share) = match r.paper.mode {
            Mode::Inference => ("XVI", "mem. util."),
            Mode::Training => ("XVII", "all-reduce"),
        };
        out.push_str(&format!(
            "| {table} | {} | {} | {:.1}K | {:.1}K | {:.2} | {:.1}% {share} | {:.1}% |\n",
            r.paper.system,
            r.paper.config,
            r.paper.qps / 1e3,
            r.qps / 1e3,
            r.qps_ratio(),
            r.paper.share * 100.0,
            r.share * 100.0,
        ));
    }
    out
}

/// The four configurations of §V-A: (label, large batch and rows, sharding).
pub const CONFIGS: [(&str, bool, Sharding); 4] = [
    (
        "Small batch/embeddings, unsharded",
        false,
        Sharding::Unsharded,
    ),
    ("Small batch/embeddings, sharded", false, Sharding::Sharded),
    (
        "Large batch/embeddings, unsharded",
        true,
        Sharding::Unsharded,
    ),
    ("Large batch/embeddings, sharded", true, Sharding::Sharded),
];

/// `hw` with every collective on its host at latency `latency_us` and bandwidth
/// `bandwidth_gbs` (the axes of Figures 8 to 13).
pub fn with_collectives(hw: &Hardware, latency_us: f64, bandwidth_gbs: f64) -> Hardware {
    let mut hw = hw.clone();
    let ab = AlphaBeta::fitted(latency_us, bandwidth_gbs);
    hw.network.intra_host = Level {
        all_to_all: ab.clone(),
        all_reduce: Some(ab.clone()),
        all_gather: Some(ab.clone()),
        reduce_scatter: Some(ab),
    };
    hw
}

/// One curve of a sweep: the bandwidth (GB/s) and (latency µs, QPS) points.
pub type Curve = (f64, Vec<(f64, f64)>);

/// QPS against collective latency, one curve per bandwidth (Figures 8, 9, 11).
pub fn qps_sweep(
    workload: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    latencies_us: &[f64],
    bandwidths_gbs: &[f64],
) -> Result<Vec<Curve>> {
    bandwidths_gbs
        .iter()
        .map(|&bw| {
            let points = latencies_us
                .iter()
                .map(|&lat| {
                    let step = simulate(workload, &with_collectives(hw, lat, bw), scenario)?;
                    Ok((lat, step.qps()))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((bw, points))
        })
        .collect()
}

/// The groups of Figures 12b and 13b: forward pass; backward computation; dense
/// all-reduce and dense update; sparse exchange and sparse update.
pub const BREAKDOWN: [&str; 4] = ["forward", "backward", "all-reduce", "sparse update"];

/// Exposed seconds of a training step in the [`BREAKDOWN`] groups.
pub fn breakdown(step: &Step) -> [f64; 4] {
    let mut out = [0.0; 4];
    for p in &step.phases {
        let group = match p.name {
            "dense_allreduce" | "dense_update" => 2,
            "embedding_grad_exchange" | "sparse_update" => 3,
            "top_mlp_backward"
            | "bottom_mlp_backward"
            | "tower_modules_backward"
            | "tower_sync" => 1,
            _ => 0,
        };
        out[group] += p.exposed;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_markdown_has_a_row_per_figure() {
        let rows = reproduce().unwrap();
        let md = markdown(&rows);
        assert_eq!(md.lines().count(), 2 + FIGURES.len());
        assert!(md.contains("| XVII | dgx2 | Lg. Shard | 1.2K |"), "{md}");
    }

    #[test]
    fn the_breakdown_covers_the_whole_step() {
        let hw = Hardware::preset("recspeed").unwrap();
        let scenario = Scenario {
            mode: Mode::Training,
            sharding: Sharding::Sharded,
            exchange: Exchange::Flat,
        };
        let step = simulate(&Workload::rm2(true), &hw, scenario).unwrap();
        let parts = breakdown(&step);
        let total: f64 = parts.iter().sum();
        assert!((total - step.seconds).abs() < 1e-12 * step.seconds);
        assert!(parts.iter().all(|p| *p > 0.0), "{parts:?}");
    }
}
