//! towerrec-train: model assembly (DLRM, DCN-v2), the trainer, evaluation and checkpoints.
//!
//! A model runs in one process or spread over the ranks of a cluster: its embedding
//! tables sharded by a plan ([`sharded`]), its dense layers replicated.

pub mod bench;
pub mod checkpoint;
pub mod cluster;
pub mod config;
mod embeddings;
pub mod error;
pub mod evaluate;
pub mod files;
mod finite;
pub mod forward;
mod init;
mod inject;
pub mod memory;
pub mod model;
mod prefetch;
mod ranks;
mod read_check;
mod report;
pub mod run_towers;
pub mod rundir;
pub mod sharded;
pub mod slots;
mod specs;
mod stages;
mod times;
mod towers;
pub mod trainer;

pub use config::Config;
pub use error::{Error, Result};
pub use model::Model;
pub use prefetch::ReadCounts;
pub use trainer::{
    train, DriftReport, EvalReport, Observer, Silent, StepReport, Summary, TrainOptions,
};
