//! The error type of towerrec-train.

use std::path::PathBuf;

/// Errors from building, training, evaluating or checkpointing a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config file could not be parsed or a value is invalid; the message names the key.
    #[error("config {file}: {message}")]
    Config { file: String, message: String },
    /// Reading or writing a file failed.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        // Not named `source`: the message already includes it, and a chain printer
        // (anyhow's `{:#}`) would print it twice.
        error: std::io::Error,
    },
    /// A checkpoint is missing, corrupt, or does not fit the model.
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    /// The data layer failed (bad file, bad row, ...).
    #[error(transparent)]
    Data(#[from] towerrec_data::Error),
    /// A sharding plan that cannot be executed.
    #[error("plan: {0}")]
    Plan(String),
    /// A run needs more memory than the machine has available; `what` names the parts.
    #[error(
        "not enough memory for {what}: {:.2} GiB needed, {:.2} GiB available on this \
         machine; use fewer rows or narrower layers, smaller batches, or shard the tables \
         over more hosts",
        *need as f64 / GIB,
        *available as f64 / GIB
    )]
    Memory {
        what: String,
        need: u128,
        available: u64,
    },
    /// The loss, a gradient or a parameter became NaN or infinite; `place` says when
    /// (step, epoch, batch) and `culprit` where, as far as known.
    #[error("non-finite {what} at {place}: {culprit}; the run stopped (lower the learning rates, check the data)")]
    NonFinite {
        what: String,
        place: String,
        culprit: String,
    },
    /// A part of the data yielded no samples.
    #[error("no {part} samples: {detail}")]
    NoData { part: &'static str, detail: String },
    /// More rows were malformed than `--max-bad-fraction` allows.
    #[error(
        "{skipped} of {rows} {part} rows ({:.2}%) were malformed and skipped, more than the \
         {:.2}% allowed (--max-bad-fraction {max_fraction}); fix the data, or raise the limit",
        100.0 * *skipped as f64 / (*rows).max(1) as f64,
        100.0 * max_fraction
    )]
    TooManyBadRows {
        part: &'static str,
        skipped: u64,
        rows: u64,
        max_fraction: f64,
    },
    /// The run directory cannot be used as asked (holds another run, is locked, ...).
    #[error("run directory {}: {message}", path.display())]
    RunDir { path: PathBuf, message: String },
    /// An output that would replace one of the command's inputs or a run's file, or a
    /// path that cannot be used (see [`crate::files`]); the message names both paths.
    #[error("{0}")]
    Files(String),
    /// A resumed run's position does not fit its data.
    #[error("resume: {0}")]
    Progress(String),
    /// A rank of a cluster run failed; the message names it.
    #[error("cluster: {0}")]
    Cluster(String),

    /// A model whose parts do not fit together (feature slots, towers).
    #[error("model: {0}")]
    Model(String),
    /// A plan could not be read or does not fit the model.
    #[error(transparent)]
    PlanFile(#[from] towerrec_plan::Error),
    /// A collective failed (another rank failed, ranks disagree, ...).
    #[error(transparent)]
    Comm(#[from] towerrec_comm::Error),
    /// A core operation failed (an id out of range, ...).
    #[error(transparent)]
    Core(#[from] towerrec_core::Error),
}

const GIB: f64 = (1u64 << 30) as f64;

/// Result alias for towerrec-train.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            error: source,
        }
    }
}
