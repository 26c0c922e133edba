//! The one error type of this crate.

/// What can go wrong in a collective or in setting up a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another worker failed (panicked, returned an error or died); this worker's
    /// collective was abandoned.
    #[error("worker rank {rank} failed: {reason}")]
    PeerFailed { rank: usize, reason: String },
    /// A collective was called with arguments that do not fit the group.
    #[error("{op}: {detail}")]
    Usage { op: &'static str, detail: String },
    /// A topology that cannot exist.
    #[error("invalid topology: {0}")]
    Topology(String),
    /// The ranks disagree about something that must be the same everywhere.
    #[error("ranks disagree: {0}")]
    Mismatch(String),
    /// The MPI backend reported an error.
    #[error("MPI: {0}")]
    Mpi(String),
    /// A collective made no progress for the watchdog's timeout (see [`crate::Watchdog`]).
    #[error("{0}")]
    Stalled(crate::stall::Stall),
}

impl Error {
    pub(crate) fn usage(op: &'static str, detail: impl Into<String>) -> Self {
        Error::Usage {
            op,
            detail: detail.into(),
        }
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;
