//! Flat, SPTT and DMT embedding exchanges compared as the system grows: the DMT
//! paper's Figure 10 (DMT's speedup over a flat TorchRec baseline from 16 to 512 GPUs).

use crate::error::{Error, Result};
use crate::hardware::Hardware;
use crate::step::{simulate, Exchange, Mode, Scenario, Sharding, Step, TowerModules};
use crate::workload::Workload;

/// The exchanges a comparison can include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Flat,
    Sptt,
    Dmt,
}

impl Plan {
    /// Parses `flat`, `sptt`, `dmt`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "flat" => Ok(Plan::Flat),
            "sptt" => Ok(Plan::Sptt),
            "dmt" => Ok(Plan::Dmt),
            _ => Err(Error::invalid(
                "--compare",
                format!("'{name}' is not one of flat, sptt, dmt"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Plan::Flat => "flat",
            Plan::Sptt => "sptt",
            Plan::Dmt => "dmt",
        }
    }
}

/// One system size, every plan's step.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePoint {
    pub chips: usize,
    pub steps: Vec<(Plan, Step)>,
}

impl ScalePoint {
    /// The step of `plan`, when compared.
    pub fn step(&self, plan: Plan) -> Option<&Step> {
        self.steps.iter().find(|(p, _)| *p == plan).map(|(_, s)| s)
    }

    /// Step time of flat ÷ step time of `plan` (both must be compared).
    pub fn speedup(&self, plan: Plan) -> Option<f64> {
        Some(self.step(Plan::Flat)?.seconds / self.step(plan)?.seconds)
    }
}

/// Simulates `plans` for `workload` on `hw` resized to each of `chips`, with Tower
/// Modules of `compression` for DMT.
pub fn compare(
    workload: &Workload,
    hw: &Hardware,
    chips: &[usize],
    plans: &[Plan],
    mode: Mode,
    compression: f64,
) -> Result<Vec<ScalePoint>> {
    let towers = TowerModules::dlrm(workload, compression);
    chips
        .iter()
        .map(|&n| {
            let sized = hw.with_chips(n)?;
            let steps = plans
                .iter()
                .map(|&plan| {
                    let exchange = match plan {
                        Plan::Flat => Exchange::Flat,
                        Plan::Sptt => Exchange::Sptt,
                        Plan::Dmt => Exchange::Dmt(towers),
                    };
                    let scenario = Scenario {
                        mode,
                        sharding: Sharding::Unsharded,
                        exchange,
                    };
                    Ok((plan, simulate(workload, &sized, scenario)?))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ScalePoint { chips: n, steps })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_has_nothing_to_gain_from_towers_exchange() {
        // On one host the peer exchange is empty, so SPTT only adds its shuffles and
        // intra-host all-to-all: never faster than flat.
        let hw = Hardware::preset("h100-cluster").unwrap();
        let pts = compare(
            &Workload::dmt_dlrm(),
            &hw,
            &[8],
            &[Plan::Flat, Plan::Sptt],
            Mode::Training,
            2.0,
        )
        .unwrap();
        assert!(pts[0].speedup(Plan::Sptt).unwrap() <= 1.0);
        assert!(Plan::parse("towers").is_err());
    }
}
