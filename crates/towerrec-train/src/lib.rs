//! towerrec-train: model assembly (DLRM, DCN-v2), the trainer, evaluation and checkpoints.
//!
//! This trainer is single-process; the sharded embedding collection that executes
//! a plan over many workers joins this crate with the distributed runtime.

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod evaluate;
pub mod model;
mod prefetch;
pub mod trainer;

pub use config::Config;
pub use error::{Error, Result};
pub use model::Model;
pub use trainer::{train, EvalReport, Observer, Silent, StepReport, Summary, TrainOptions};
