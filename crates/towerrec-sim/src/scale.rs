//! Flat, SPTT and DMT embedding exchanges compared as the system grows: the DMT
//! paper's Figure 10 (DMT's speedup over a flat TorchRec baseline from 16 to 512 GPUs),
//! and the same comparison for any model, towers and hardware.

use crate::error::{Error, Result};
use crate::hardware::Hardware;
use crate::step::{simulate_parts, Exchange, Mode, RankLoad, Scenario, Sharding, Step};
use crate::towers::{TowerCosts, Towers};
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
    /// The DMT towers at this size (when SPTT or DMT is compared).
    pub towers: Option<TowerCosts>,
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

/// Simulates `plans` for `workload` on `hw` resized to each of `chips`, in whole steps.
/// SPTT and DMT use the towers `towers(hosts)` returns for the size's number of hosts
/// (SPTT with their modules replaced by pass-through).
pub fn compare(
    workload: &Workload,
    hw: &Hardware,
    chips: &[usize],
    plans: &[Plan],
    mode: Mode,
    towers: &dyn Fn(usize) -> Result<Towers>,
) -> Result<Vec<ScalePoint>> {
    compare_parts(workload, hw, chips, plans, mode, towers, 1)
}

/// [`compare`] with training steps in `parts` where each exchange splits
/// ([`simulate_parts`]).
pub fn compare_parts(
    workload: &Workload,
    hw: &Hardware,
    chips: &[usize],
    plans: &[Plan],
    mode: Mode,
    towers: &dyn Fn(usize) -> Result<Towers>,
    parts: usize,
) -> Result<Vec<ScalePoint>> {
    chips
        .iter()
        .map(|&n| {
            let sized = hw.with_chips(n)?;
            let needs_towers = plans.iter().any(|p| *p != Plan::Flat);
            let layout = if needs_towers {
                Some(towers(sized.hosts)?)
            } else {
                None
            };
            let mut dmt_costs = None;
            let steps = plans
                .iter()
                .map(|&plan| {
                    let exchange = match (plan, &layout) {
                        (Plan::Sptt, Some(t)) => {
                            Exchange::Towers(t.pass_through().costs(workload, sized.hosts)?)
                        }
                        (Plan::Dmt, Some(t)) => {
                            let c = t.costs(workload, sized.hosts)?;
                            dmt_costs = Some(c);
                            Exchange::Towers(c)
                        }
                        _ => Exchange::Flat,
                    };
                    let scenario = Scenario {
                        mode,
                        sharding: Sharding::Unsharded,
                        exchange,
                    };
                    let step = simulate_parts(workload, &sized, scenario, RankLoad::EVEN, parts)?;
                    Ok((plan, step))
                })
                .collect::<Result<Vec<_>>>()?;
            let towers = match (dmt_costs, &layout) {
                (Some(c), _) => Some(c),
                (None, Some(t)) => Some(t.costs(workload, sized.hosts)?),
                (None, None) => None,
            };
            Ok(ScalePoint {
                chips: n,
                steps,
                towers,
            })
        })
        .collect()
}

/// The band of cross-host scaling knees `--reproduce dmt` shows (docs/SIMULATOR.md):
/// the DMT paper's Figure 5 says only that NCCL's collectives "drop sharply versus
/// scale" from 8 GPUs up, without values, so the knee is not known. From 128 (a
/// collective over 512 GPUs keeps 20% of its bandwidth) to 2048 (80%).
pub const KNEES: [f64; 5] = [128.0, 256.0, 512.0, 1024.0, 2048.0];

/// `hw` with the cross-host scaling knee set to `knee` (participants at which the
/// cross-host bandwidth efficiency halves; `f64::INFINITY`: no loss with scale).
pub fn with_knee(hw: &Hardware, knee: f64) -> Result<Hardware> {
    let mut hw = hw.clone();
    let Some(cross) = hw.network.cross_host.as_mut() else {
        return Err(Error::invalid(
            format!("hardware '{}'", hw.name),
            "has no cross-host network to scale",
        ));
    };
    cross.scaling.knee = knee;
    hw.validate()?;
    Ok(hw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TowerModuleKind;

    #[test]
    fn one_host_has_nothing_to_gain_from_towers_exchange() {
        // On one host the peer exchange is empty, so SPTT only adds its shuffles and
        // intra-host all-to-all: never faster than flat.
        let hw = Hardware::preset("h100-cluster").unwrap();
        let w = Workload::dmt_dlrm();
        let towers = |hosts| Towers::per_host(&w, TowerModuleKind::Identity, hosts);
        let pts = compare(
            &w,
            &hw,
            &[8],
            &[Plan::Flat, Plan::Sptt],
            Mode::Training,
            &towers,
        )
        .unwrap();
        assert!(pts[0].speedup(Plan::Sptt).unwrap() <= 1.0);
        assert!(Plan::parse("towers").is_err());
    }

    #[test]
    fn a_later_knee_only_helps_the_flat_exchange_less_than_towers() {
        // Cross-host efficiency falling faster with world size slows every exchange, the
        // flat one (world = all GPUs) most.
        let hw = Hardware::preset("h100-cluster").unwrap();
        let w = Workload::dmt_dlrm();
        let kind = Towers::module_for(&w, 2.0).unwrap();
        let towers = |hosts| Towers::per_host(&w, kind, hosts);
        let speedup = |knee| {
            let hw = with_knee(&hw, knee).unwrap();
            let p = compare(
                &w,
                &hw,
                &[512],
                &[Plan::Flat, Plan::Dmt],
                Mode::Training,
                &towers,
            )
            .unwrap();
            p[0].speedup(Plan::Dmt).unwrap()
        };
        assert!(speedup(128.0) > speedup(512.0));
        assert!(speedup(512.0) > speedup(f64::INFINITY));
        assert!(with_knee(&Hardware::preset("recspeed").unwrap(), 64.0).is_err());
    }
}
