//! The one error type of this crate.

use std::path::PathBuf;

/// What can be wrong with a hardware description, a workload, or a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A hardware or workload value that makes no sense (zero chips, negative latency…).
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    /// A preset name nobody knows.
    #[error("unknown {kind} preset '{name}' (known: {known})")]
    UnknownPreset {
        kind: &'static str,
        name: String,
        known: String,
    },
    /// A TOML file that does not parse as a hardware description.
    #[error("{}: {error}", path.display())]
    Toml {
        path: PathBuf,
        // Not named `source`: the message already includes it, and a chain printer
        // (anyhow's `{:#}`) would print it twice.
        error: Box<toml::de::Error>,
    },
    /// A file that could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A plot that could not be drawn.
    #[error("plot {}: {reason}", path.display())]
    Plot { path: PathBuf, reason: String },
    /// A chart that could not be drawn (into a string, before any file).
    #[error("chart '{title}': {reason}")]
    Chart { title: String, reason: String },
    /// A sharding plan its cost model could not price.
    #[error("{0}")]
    Plan(towerrec_plan::Error),
}

impl From<towerrec_plan::Error> for Error {
    fn from(e: towerrec_plan::Error) -> Self {
        Error::Plan(e)
    }
}

impl Error {
    pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

/// A finite number above zero (false for NaN).
pub(crate) fn positive(x: f64) -> bool {
    x > 0.0 && x.is_finite()
}

/// A finite number at or above zero (false for NaN).
pub(crate) fn non_negative(x: f64) -> bool {
    x >= 0.0 && x.is_finite()
}

/// The largest value a hardware file may give a quantity of each kind: far beyond any
/// chip, memory or network built (docs/SIMULATOR.md, "Hardware files"), so that a
/// typo or a unit slip (GB/s for MB/s) is refused rather than simulated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ceiling {
    /// TFLOP/s of one chip: 10^5 (100 PFLOP/s).
    Tflops,
    /// GFLOP/s of one kernel: 10^8.
    Gflops,
    /// GB/s of a memory or a link: 10^5 (100 TB/s).
    GBs,
    /// Mega-transfers per second of a DRAM interface: 10^6.
    Mts,
    /// A time in µs: 10^8 (100 s).
    Micros,
    /// A time in ns: 10^11 (100 s).
    Nanos,
    /// Bytes of one row or message: 2^40.
    Bytes,
    /// A count (participants, vector width, clock cycles): 10^9.
    Count,
    /// A dimensionless factor (a clock ratio, an exponent): 10^3.
    Factor,
}

impl Ceiling {
    pub(crate) fn max(self) -> f64 {
        match self {
            Ceiling::Tflops | Ceiling::GBs => 1e5,
            Ceiling::Gflops | Ceiling::Micros => 1e8,
            Ceiling::Mts => 1e6,
            Ceiling::Nanos => 1e11,
            Ceiling::Bytes => (1u64 << 40) as f64,
            Ceiling::Count => 1e9,
            Ceiling::Factor => 1e3,
        }
    }
}

impl Ceiling {
    /// The smallest non-zero value of each kind: below it a figure is a slip too (a
    /// link of 10^-300 GB/s gives a finite but meaningless step).
    pub(crate) fn min_positive(self) -> f64 {
        match self {
            Ceiling::Tflops => 1e-9,
            Ceiling::Gflops | Ceiling::GBs | Ceiling::Factor => 1e-6,
            Ceiling::Mts | Ceiling::Bytes | Ceiling::Count => 1e-3,
            Ceiling::Micros | Ceiling::Nanos => 1e-6,
        }
    }
}

fn check_ceiling(key: &str, x: f64, ceiling: Ceiling) -> Result<()> {
    if x != 0.0 && x < ceiling.min_positive() {
        return Err(Error::invalid(
            key,
            format!(
                "must be at least {:e} (or 0 where 0 is allowed), got {x:?}: no hardware comes \
                 near it (a unit slip?)",
                ceiling.min_positive()
            ),
        ));
    }
    if x <= ceiling.max() {
        return Ok(());
    }
    Err(Error::invalid(
        key,
        format!(
            "must be at most {:e}, got {x:?}: no hardware comes near it (a unit slip?)",
            ceiling.max()
        ),
    ))
}

/// `key` holds a finite number above zero (a rate, bandwidth, size or time), at most
/// `ceiling`.
pub(crate) fn check_positive(key: &str, x: f64, ceiling: Ceiling) -> Result<()> {
    if positive(x) {
        return check_ceiling(key, x, ceiling);
    }
    Err(Error::invalid(
        key,
        format!("must be a finite number > 0, got {x:?}"),
    ))
}

/// `key` holds a finite number at or above zero (a latency or overhead that may be 0),
/// at most `ceiling`.
pub(crate) fn check_non_negative(key: &str, x: f64, ceiling: Ceiling) -> Result<()> {
    if non_negative(x) {
        return check_ceiling(key, x, ceiling);
    }
    Err(Error::invalid(
        key,
        format!("must be a finite number ≥ 0, got {x:?}"),
    ))
}

/// `key` holds a fraction of a peak: in [10^-6, 1].
pub(crate) fn check_efficiency(key: &str, x: f64) -> Result<()> {
    if (1e-6..=1.0).contains(&x) {
        return Ok(());
    }
    Err(Error::invalid(
        key,
        format!("must be a fraction of the peak in [1e-6, 1], got {x:?}"),
    ))
}

/// `key` holds a share in [0, 1] (0 meaning none of it, e.g. no overlap).
pub(crate) fn check_share(key: &str, x: f64) -> Result<()> {
    if (0.0..=1.0).contains(&x) {
        return Ok(());
    }
    Err(Error::invalid(
        key,
        format!("must be within 0..1, got {x:?}"),
    ))
}
