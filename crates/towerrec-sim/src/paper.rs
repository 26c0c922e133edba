//! The scale-in paper's Tables XVI (inference) and XVII (training) upper bounds for
//! RecSpeed and the DGX-2, and their reproduction by [`simulate`].

use crate::error::Result;
use crate::hardware::Hardware;
use crate::step::{simulate, Exchange, Mode, Scenario, Sharding};
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_reproduction() {
        let rows = reproduce().unwrap();
        println!("{}", markdown(&rows));
    }
}
