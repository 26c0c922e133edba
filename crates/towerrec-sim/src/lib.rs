//! towerrec-sim: predicts recommendation-model training and inference on hardware one
//! does not have.
//!
//! - [`Hardware`]: chips (compute, a [`MemorySystem`] derived from DRAM timings or
//!   measured), hosts, and a two-level [`Network`] of collectives; TOML, with presets
//!   for the scale-in paper's RecSpeed and DGX-2, a DGX-A100 and an H100 cluster.
//! - [`Workload`]: a DLRM/DCN model's FLOPs and bytes per sample (the paper's Table XII
//!   DLRM-RM2 as presets).
//! - [`Towers`]: a DMT model's towers as towerrec builds them (tables per tower, Tower
//!   Module, hosts per tower) and what SPTT and the modules cost on a cluster.
//! - [`ReaderCosts`] and [`SyntheticIds`]: what generating a step's samples costs.
//! - [`simulate`]: one inference query or training step, phase by phase, for unsharded
//!   or fully sharded tables and a flat, SPTT or DMT embedding exchange;
//!   [`simulate_parts`] the same step in micro-batches, as towerrec's runtime runs it.
//! - [`simulate_plan`]: a particular sharding plan's step, each rank priced by the
//!   lookups and traffic a `towerrec_plan::CostModel` gives it.
//! - [`paper`]: the scale-in paper's Tables XVI and XVII, reproduced.
//! - [`scale`]: the DMT-over-flat speedup against the number of GPUs.
//! - [`plot`]: the papers' figures as SVG.

mod collective;
mod error;
mod hardware;
mod memory;
pub mod paper;
mod plans;
pub mod plot;
mod reader;
pub mod scale;
mod step;
mod towers;
mod workload;

pub use collective::{
    AlphaBeta, Collective, CrossHost, Group, Level, LevelShares, Network, Scaling,
};
pub use error::{Error, Result};
pub use hardware::{Compute, Hardware, SystemTraits};
pub use memory::{DramTiming, MemorySystem, TimingRef};
pub use plans::{cost_params, rank_loads, simulate_plan, PlanStep};
pub use reader::{ReaderCosts, SyntheticIds};
pub use step::{
    simulate, simulate_parts, simulate_rank, Exchange, Mode, Overlap, Phase, RankLoad, Resource,
    Scenario, Sharding, Step, MAX_PARTS,
};
pub use towerrec_core::layers::tower::TowerModuleKind;
pub use towers::{GroupLoad, TowerCosts, Towers};
pub use workload::{DenseCounts, Interaction, InteractionInput, TableGroup, Workload};
