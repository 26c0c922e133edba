//! towerrec-plan: sharding plans for embedding tables, their validation, and planners.
//!
//! The vocabulary is TorchRec's (table-wise, row-wise, column-wise, table-row-wise,
//! data-parallel). A [`Plan`] says which rank holds which block of every table; it is
//! JSON ([`Plan::load`], [`Plan::save`]), checked against the model and the cluster by
//! [`Plan::validate`], and made by the [`planners`]: one baseline per sharding type and
//! a cost- and memory-aware [`planners::greedy`], the default. [`oper`] is the OPER
//! paper's planner (§3.2–§4: access-aware partitioning of rows, balanced placement,
//! hot-row replication), over the same types: its plans hold row-partitioned tables
//! ([`partitioned`]).
//! A [`CostModel`] prices a plan per rank and phase ([`PlanCost`]): the greedy
//! planner's model ([`CostParams`]) and OPER's ([`oper::OperModel`]) implement it.
//!
//! [`partition`] is DMT's Tower Partitioner: sparse features into balanced towers of
//! features that interact, learned from a trained model's embeddings.

mod cost;
mod error;
mod json;
pub mod oper;
pub mod partition;
pub mod partitioned;
mod plan;
pub mod planners;
mod rating;
mod validate;

pub use cost::{estimate, CostParams};
pub use error::{Error, Result};
pub use plan::{
    Partition, Plan, Shard, ShardingType, TablePlan, TableSpec, TowerPlan, MAX_WORLD_SIZE,
};
pub use rating::{CostModel, PhaseCost, PlanCost};
/// The cluster shape plans are made for (re-exported from `towerrec-comm`).
pub use towerrec_comm::Topology;
