//! The one error type of this crate.

use std::path::PathBuf;

/// What can be wrong with a plan or a request for one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plan entry that does not fit the model or the topology.
    #[error("plan entry for table '{table}': {reason}")]
    Entry { table: String, reason: String },
    /// A plan-wide problem (missing tables, memory budget, topology).
    #[error("plan: {0}")]
    Plan(String),
    /// The JSON could not be read (not a source: the message includes it, and a chain
    /// printer would print it twice).
    #[error("plan JSON: {0}")]
    Json(serde_json::Error),
    /// A table of the model that no plan can hold (no rows, no columns, a name used
    /// twice, a pooling factor that is not a number).
    #[error("model table '{table}': {reason}")]
    Table { table: String, reason: String },
    /// A request a planner cannot satisfy as asked (a topology without ranks, zero
    /// column shards, cost parameters that are not positive).
    #[error("planning request: {0}")]
    Request(String),
    /// A tower partition that cannot be made as asked (no features, more towers than
    /// features, features of different widths, a size ratio below 1, non-finite input)
    /// or a partition file that does not hold each feature exactly once.
    #[error("tower partition: {0}")]
    Partition(String),
    /// A plan file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        // Not named `source`: the message already includes it.
        error: std::io::Error,
    },
    /// A plan file is not valid plan JSON.
    #[error("plan JSON in {}: {error}", path.display())]
    JsonFile {
        path: PathBuf,
        error: serde_json::Error,
    },
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e)
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;
