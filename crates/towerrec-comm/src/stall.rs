//! [`Stall`]: what the collective watchdog reports (see `watchdog.rs`); its own file so
//! that the crate's error type can hold it without importing the watchdog.

use crate::phase::Phase;
use std::time::Duration;

/// A collective that made no progress for the watchdog's timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// The world rank that noticed.
    pub rank: usize,
    /// The collective it was in (`all_to_all_v`, `barrier`, …).
    pub collective: &'static str,
    /// The traffic phase the collective was called for, where it has one.
    pub phase: Option<Phase>,
    /// The training step that rank was in (0 before the first; see
    /// [`crate::Comm::set_step`]).
    pub step: u64,
    /// The watchdog's timeout.
    pub timeout: Duration,
    /// World ranks not heard from; `None` where the backend cannot tell.
    pub silent: Option<Vec<usize>>,
    /// What is known of those ranks, if anything (in-process: where each one is).
    pub note: Option<String>,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {}: collective {}", self.rank, self.collective)?;
        if let Some(p) = self.phase {
            write!(f, " (phase {})", p.name())?;
        }
        write!(
            f,
            " at step {} made no progress for {} s; ranks not heard from: ",
            self.step,
            self.timeout.as_secs_f64()
        )?;
        match &self.silent {
            Some(ranks) => write!(f, "{ranks:?}")?,
            None => write!(f, "unknown")?,
        }
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        Ok(())
    }
}
