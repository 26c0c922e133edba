//! The collective watchdog: a collective that makes no progress for a set time ends the
//! job with an error ([`Stall`]) naming the collective, the training step and the ranks
//! not heard from, instead of leaving the other ranks waiting forever for a stopped or
//! blocked one.
//!
//! Every rank keeps an [`Activity`]: which collective it is in (if any), how many it
//! has entered, and the training step its trainer last reported ([`crate::Comm::set_step`]).
//! Entering and leaving a collective is a load and a store on one atomic, so the
//! watchdog costs nothing measurable per collective and no extra messages. What watches
//! it depends on the backend:
//!
//! - in-process, a rank waiting in a collective checks the time as it waits (it already
//!   wakes up every few milliseconds to look for failed ranks) and sees every other
//!   rank's activity, so it names the ranks of its group that have not arrived;
//! - under MPI, a thread per process polls its own activity and, when a collective has
//!   not moved for the timeout, asks the other processes over a separate communicator
//!   whether they are alive, then calls `MPI_Abort` (see `mpi_watchdog.rs`).

use crate::error::{Error, Result};
use crate::phase::Phase;
pub use crate::stall::Stall;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a collective may make no progress before the job ends, unless set.
pub const DEFAULT_COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// The shortest collective timeout accepted. The watchdogs look at the collectives
/// every few milliseconds (the MPI thread at most every 5 ms, an in-process rank as it
/// wakes to look for failed ranks), so a shorter timeout would fire late or, under MPI,
/// not at all; and no healthy collective of a training step is that reliably fast.
pub const MIN_COLLECTIVE_TIMEOUT: Duration = Duration::from_millis(10);

/// The watchdog's settings for a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watchdog {
    timeout: Duration,
    exit_after: Option<Duration>,
}

impl Default for Watchdog {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_COLLECTIVE_TIMEOUT,
            exit_after: None,
        }
    }
}

impl Watchdog {
    /// A watchdog that ends a collective making no progress for `timeout_secs` seconds
    /// (finite, and at least [`MIN_COLLECTIVE_TIMEOUT`]).
    pub fn new(timeout_secs: f64) -> Result<Self> {
        let timeout = Some(timeout_secs)
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .filter(|d| *d >= MIN_COLLECTIVE_TIMEOUT)
            .ok_or_else(|| {
                Error::usage(
                    "watchdog",
                    format!(
                        "the collective timeout must be a finite number of seconds, at least \
                         {} (the watchdog looks every few milliseconds), not {timeout_secs:?}",
                        MIN_COLLECTIVE_TIMEOUT.as_secs_f64()
                    ),
                )
            })?;
        Ok(Self {
            timeout,
            exit_after: None,
        })
    }

    /// In-process clusters: if the ranks a stalled collective waits for have not
    /// returned `grace` after the watchdog fired (a thread blocked outside the
    /// collectives, which nothing can release), print the error and exit the process
    /// with status 1 instead of waiting for them. For programs (the CLI), not libraries.
    pub fn exit_process_after(self, grace: Duration) -> Self {
        Self {
            exit_after: Some(grace),
            ..self
        }
    }

    /// How long a collective may make no progress.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// See [`Watchdog::exit_process_after`].
    pub fn exit_after(&self) -> Option<Duration> {
        self.exit_after
    }

    /// How often the MPI watchdog thread looks at its rank: often enough to fire within
    /// a few percent of the timeout, rarely enough to cost nothing.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))] // the MPI watchdog's
    pub(crate) fn poll_interval(&self) -> Duration {
        (self.timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(250))
    }
}

/// The collectives, as the watchdog names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    AllToAllV = 1,
    AllGather,
    ReduceScatter,
    AllReduce,
    Broadcast,
    Barrier,
    Split,
    CheckSame,
    HierarchicalAllReduce,
}

impl Op {
    const ALL: [Op; 9] = [
        Op::AllToAllV,
        Op::AllGather,
        Op::ReduceScatter,
        Op::AllReduce,
        Op::Broadcast,
        Op::Barrier,
        Op::Split,
        Op::CheckSame,
        Op::HierarchicalAllReduce,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::AllToAllV => "all_to_all_v",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::AllReduce => "all_reduce",
            Op::Broadcast => "broadcast",
            Op::Barrier => "barrier",
            Op::Split => "split",
            Op::CheckSame => "check_same",
            Op::HierarchicalAllReduce => "hierarchical_all_reduce",
        }
    }

    fn from_code(code: u64) -> Option<Op> {
        Op::ALL.into_iter().find(|&op| op as u64 == code)
    }
}

/// Bits of [`Activity::current`]: the collective (0: none) and the phase + 1 (0: none)
/// in the low 16, the count of collectives entered above.
const OP_BITS: u64 = 0xff;
const PHASE_SHIFT: u32 = 8;
const SEQ_SHIFT: u32 = 16;

/// One rank's collectives and step, shared by all its groups and read by the watchdog.
/// A cache line of its own: in-process, the ranks' records are written by different
/// threads at every collective.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Activity {
    current: AtomicU64,
    step: AtomicU64,
    /// Nanoseconds spent inside outermost collectives, by phase ([`Phase::ALL`] order):
    /// what the cluster summary reports as time in collectives (waiting included).
    nanos: [AtomicU64; Phase::ALL.len()],
}

/// What a rank was doing at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Collectives entered so far (tells one collective from the next of the same kind).
    pub seq: u64,
    pub op: Option<Op>,
    pub phase: Option<Phase>,
    pub step: u64,
}

impl Snapshot {
    /// Two words, to send to another rank.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))] // the MPI watchdog's
    pub(crate) fn to_words(self) -> [u64; 2] {
        let op = self.op.map_or(0, |o| o as u64);
        let phase = self.phase.map_or(0, |p| p as u64 + 1);
        [self.seq << SEQ_SHIFT | phase << PHASE_SHIFT | op, self.step]
    }

    pub(crate) fn from_words([current, step]: [u64; 2]) -> Self {
        let phase = (current >> PHASE_SHIFT) & 0xff;
        Self {
            seq: current >> SEQ_SHIFT,
            op: Op::from_code(current & OP_BITS),
            phase: Phase::ALL.get((phase as usize).wrapping_sub(1)).copied(),
            step,
        }
    }

    /// "outside any collective at step 3", "in all_reduce (phase control) at step 3".
    pub(crate) fn describe(&self) -> String {
        match self.op {
            None => format!("outside any collective at step {}", self.step),
            Some(op) => {
                let phase = self
                    .phase
                    .map_or(String::new(), |p| format!(" (phase {})", p.name()));
                format!("in {}{phase} at step {}", op.name(), self.step)
            }
        }
    }
}

impl Activity {
    /// Marks this rank as inside `op` until the guard drops. A collective built from
    /// others (AllReduce from ReduceScatter and AllGather) is named by the outermost.
    /// A rank runs one collective at a time (see [`crate::Comm`]), so a plain load and
    /// store suffice.
    pub(crate) fn enter(&self, op: Op, phase: Option<Phase>) -> Entered<'_> {
        let current = self.current.load(Ordering::Relaxed);
        if current & OP_BITS != 0 {
            return Entered(None);
        }
        let seq = (current >> SEQ_SHIFT) + 1;
        let phase = phase.map_or(0, |p| p as u64 + 1);
        self.current.store(
            seq << SEQ_SHIFT | phase << PHASE_SHIFT | op as u64,
            Ordering::Release,
        );
        Entered(Some((self, seq, phase, Instant::now())))
    }

    /// Nanoseconds spent inside collectives so far, by phase ([`Phase::ALL`] order).
    pub(crate) fn collective_nanos(&self) -> Vec<u64> {
        self.nanos
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    pub(crate) fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot::from_words([
            self.current.load(Ordering::Acquire),
            self.step.load(Ordering::Relaxed),
        ])
    }
}

/// Leaves the collective when dropped (also when it fails or unwinds), adding the time
/// it took to its phase. Holds the activity, the sequence number, the phase code (0:
/// none) and when the collective was entered; `None` inside another collective.
pub(crate) struct Entered<'a>(Option<(&'a Activity, u64, u64, Instant)>);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some((activity, seq, phase, start)) = self.0 {
            activity.current.store(seq << SEQ_SHIFT, Ordering::Release);
            if let Some(n) = (phase as usize)
                .checked_sub(1)
                .and_then(|i| activity.nanos.get(i))
            {
                let elapsed = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                n.fetch_add(elapsed, Ordering::Relaxed);
            }
        }
    }
}

/// Tells, from snapshots taken now and then, when one collective has lasted the
/// timeout: it counts from the first snapshot that saw it, so it fires at most one poll
/// interval late and never early.
#[derive(Debug)]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))] // the MPI watchdog's
pub(crate) struct Monitor {
    timeout: Duration,
    seen: Option<(u64, Instant)>,
}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl Monitor {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            seen: None,
        }
    }

    /// Whether `s`, taken at `now`, is a collective that has not moved for the timeout.
    pub(crate) fn stalled(&mut self, s: &Snapshot, now: Instant) -> bool {
        if s.op.is_none() {
            self.seen = None;
            return false;
        }
        match self.seen {
            Some((seq, since)) if seq == s.seq => now.duration_since(since) >= self.timeout,
            _ => {
                self.seen = Some((s.seq, now));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_must_be_finite_and_positive() {
        for bad in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            1e-12,
            1e-6,
            0.0099,
        ] {
            let e = Watchdog::new(bad).unwrap_err().to_string();
            assert!(e.contains("finite number of seconds, at least 0.01"), "{e}");
        }
        assert_eq!(
            Watchdog::new(0.01).unwrap().timeout(),
            MIN_COLLECTIVE_TIMEOUT
        );
        let w = Watchdog::new(2.5).unwrap();
        assert_eq!(w.timeout(), Duration::from_millis(2500));
        assert_eq!(w.exit_after(), None);
        assert_eq!(Watchdog::default().timeout(), DEFAULT_COLLECTIVE_TIMEOUT);
        assert_eq!(
            w.exit_process_after(Duration::from_secs(1)).exit_after(),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn activity_names_the_outermost_collective_and_counts_them() {
        let a = Activity::default();
        a.set_step(7);
        assert_eq!(a.snapshot().op, None);
        {
            let _outer = a.enter(Op::AllReduce, Some(Phase::DenseGradSync));
            let _inner = a.enter(Op::AllToAllV, Some(Phase::DenseGradSync));
            let s = a.snapshot();
            assert_eq!((s.seq, s.op, s.step), (1, Some(Op::AllReduce), 7));
            assert_eq!(s.phase, Some(Phase::DenseGradSync));
            assert_eq!(
                s.describe(),
                "in all_reduce (phase dense_grad_sync) at step 7"
            );
        }
        let s = a.snapshot();
        assert_eq!((s.seq, s.op), (1, None));
        assert_eq!(s.describe(), "outside any collective at step 7");
        let _b = a.enter(Op::Barrier, None);
        let s = a.snapshot();
        assert_eq!((s.seq, s.op, s.phase), (2, Some(Op::Barrier), None));
        assert_eq!(Snapshot::from_words(s.to_words()), s);
    }

    #[test]
    fn the_monitor_fires_only_on_one_collective_lasting_the_timeout() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut m = Monitor::new(Duration::from_millis(100));
        let snap = |seq, op| Snapshot {
            seq,
            op,
            phase: None,
            step: 1,
        };
        assert!(!m.stalled(&snap(1, Some(Op::Barrier)), at(0)));
        assert!(!m.stalled(&snap(1, Some(Op::Barrier)), at(99)));
        // Another collective of the same kind starts the count again.
        assert!(!m.stalled(&snap(2, Some(Op::Barrier)), at(150)));
        assert!(!m.stalled(&snap(2, Some(Op::Barrier)), at(200)));
        assert!(m.stalled(&snap(2, Some(Op::Barrier)), at(250)));
        // Outside any collective: never.
        assert!(!m.stalled(&snap(2, None), at(1000)));
        assert!(!m.stalled(&snap(2, None), at(5000)));
    }

    #[test]
    fn a_stall_reads_as_one_line() {
        let s = Stall {
            rank: 0,
            collective: "all_to_all_v",
            phase: Some(Phase::OutputDist),
            step: 4,
            timeout: Duration::from_secs(2),
            silent: Some(vec![1]),
            note: None,
        };
        assert_eq!(
            s.to_string(),
            "rank 0: collective all_to_all_v (phase output_dist) at step 4 made no progress \
             for 2 s; ranks not heard from: [1]"
        );
        let s = Stall {
            phase: None,
            collective: "barrier",
            timeout: Duration::from_millis(500),
            silent: None,
            note: Some("MPI without MPI_THREAD_MULTIPLE".into()),
            ..s
        };
        assert_eq!(
            s.to_string(),
            "rank 0: collective barrier at step 4 made no progress for 0.5 s; ranks not heard \
             from: unknown (MPI without MPI_THREAD_MULTIPLE)"
        );
    }
}
