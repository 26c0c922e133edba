//! The error type of towerrec-core.

/// Errors raised by core operations on user-controlled input (ids, shapes, configs).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shape or length did not match what the operation needs.
    #[error("shape mismatch in {context}: expected {expected}, got {got}")]
    Shape {
        context: String,
        expected: String,
        got: String,
    },
    /// An embedding id was outside its table.
    #[error("id {id} out of range for table '{table}' with {rows} rows")]
    IdOutOfRange { table: String, id: u64, rows: usize },
    /// A configuration value was invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The memory for a buffer (an embedding table, its optimizer state) could not be
    /// had: its size overflows, or the system refused it.
    #[error(
        "cannot allocate {what}: {bytes} bytes ({:.2} GiB); the tables are too large for \
         this machine (use fewer rows, or shard them over more hosts)",
        *bytes as f64 / (1u64 << 30) as f64
    )]
    OutOfMemory { what: String, bytes: u128 },
}

/// Result alias for towerrec-core.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Shorthand for a [`Error::Shape`] error.
    pub fn shape(context: impl Into<String>, expected: impl ToString, got: impl ToString) -> Self {
        Error::Shape {
            context: context.into(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }
}
