//! The error type of towerrec-serve: what a request gets back (each variant has its
//! HTTP status) and what stops the server.

use axum::http::StatusCode;

/// Errors of a request or of the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (its body, a row, a value); the message says where.
    #[error("{0}")]
    BadRequest(String),
    /// The body or its rows are over the server's limits.
    #[error("{0}")]
    TooLarge(String),
    /// The body's Content-Type is not one the server reads.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The client did not send its body in time.
    #[error("{0}")]
    Timeout(String),
    /// A missing or wrong bearer token.
    #[error("a valid bearer token is required (Authorization: Bearer …)")]
    Unauthorized,
    /// Too many requests at once, or the scoring queue is full: retry later.
    #[error("{0}")]
    Overloaded(String),
    /// The scorer failed or has stopped.
    #[error("scoring failed: {0}")]
    Scoring(String),
    /// The server could not start or run (binding, the metrics recorder).
    #[error("{0}")]
    Server(String),
    /// The model's data cannot be encoded from rows.
    #[error(transparent)]
    Data(#[from] towerrec_data::Error),
}

impl Error {
    /// The HTTP status a request failing with this error gets.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) | Error::Data(_) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Scoring(_) | Error::Server(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` label of the errors counter (docs/SERVING.md, "Metrics").
    pub fn reason(&self) -> &'static str {
        match self {
            Error::BadRequest(_) | Error::Data(_) => "bad_request",
            Error::TooLarge(_) => "too_large",
            Error::UnsupportedMediaType(_) => "media_type",
            Error::Timeout(_) => "timeout",
            Error::Unauthorized => "unauthorized",
            Error::Overloaded(_) => "overloaded",
            Error::Scoring(_) | Error::Server(_) => "internal",
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
