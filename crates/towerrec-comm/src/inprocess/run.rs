//! Running an in-process cluster: one thread per rank, the world they share (the first
//! failure, the groups made by splits, every rank's watchdog activity), and how a run
//! ends when a rank fails or a collective stalls.

use super::{Group, InProcess, FAILURE_POLL};
use crate::comm::Comm;
use crate::error::Error;
use crate::topology::Topology;
use crate::watchdog::{Activity, Stall, Watchdog};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why an in-process cluster stopped: the first failure.
#[derive(Clone)]
enum Failure {
    /// A worker returned an error or panicked.
    Worker { rank: usize, reason: String },
    /// The watchdog fired.
    Stalled(Stall),
}

/// What all ranks of one in-process cluster share.
pub(super) struct World {
    pub(super) failed: AtomicBool,
    failure: Mutex<Option<Failure>>,
    /// Groups made by splits, by (parent group, parent's split count, color).
    pub(super) groups: Mutex<HashMap<(u64, u64, usize), Arc<Group>>>,
    pub(super) next_group: AtomicU64,
    /// Every rank's collectives and step, by world rank.
    pub(super) activity: Vec<Arc<Activity>>,
    pub(super) watchdog: Watchdog,
    /// Set once every rank's thread has returned.
    finished: AtomicBool,
}

impl World {
    fn new(ranks: usize, watchdog: Watchdog) -> Self {
        Self {
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            groups: Mutex::default(),
            next_group: AtomicU64::new(0),
            activity: (0..ranks).map(|_| Arc::default()).collect(),
            watchdog,
            finished: AtomicBool::new(false),
        }
    }

    /// Records `failure` unless there is one already; true if it was the first.
    fn record(&self, failure: Failure) -> bool {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        let first = f.is_none();
        if first {
            *f = Some(failure);
        }
        self.failed.store(true, Ordering::SeqCst);
        first
    }

    fn fail(&self, rank: usize, reason: String) {
        self.record(Failure::Worker { rank, reason });
    }

    /// Fails the world with `stall`; where asked, exits the process if the ranks'
    /// threads are not all back after the grace period.
    pub(super) fn stall(self: &Arc<Self>, stall: Stall) {
        if !self.record(Failure::Stalled(stall.clone())) {
            return;
        }
        if let Some(grace) = self.watchdog.exit_after() {
            let world = Arc::clone(self);
            // Detached: the scope of `run_in_process` cannot end while a rank's thread
            // is blocked, which is the case this thread is for.
            let _ = std::thread::Builder::new()
                .name("towerrec-watchdog".into())
                .spawn(move || world.exit_unless_finished(grace, &stall));
        }
    }

    fn exit_unless_finished(&self, grace: Duration, stall: &Stall) {
        let start = Instant::now();
        while start.elapsed() < grace {
            if self.finished.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(FAILURE_POLL);
        }
        if !self.finished.load(Ordering::SeqCst) {
            eprintln!(
                "error: {stall}; the blocked ranks did not return within {} s, so the \
                 process exits",
                grace.as_secs_f64()
            );
            std::process::exit(1);
        }
    }

    pub(super) fn failure(&self) -> Error {
        let f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        match f.clone() {
            Some(Failure::Worker { rank, reason }) => Error::PeerFailed { rank, reason },
            Some(Failure::Stalled(stall)) => Error::Stalled(stall),
            None => Error::PeerFailed {
                rank: usize::MAX,
                reason: "unknown".into(),
            },
        }
    }
}

/// Why an in-process cluster failed: the first worker to fail, and how.
#[derive(Debug)]
pub enum WorkerFailure<E> {
    /// The worker returned this error.
    Error { rank: usize, error: E },
    /// The worker panicked with this message.
    Panic { rank: usize, message: String },
    /// A collective made no progress for the watchdog's timeout.
    Stalled(Stall),
}

impl<E: std::fmt::Display> std::fmt::Display for WorkerFailure<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerFailure::Error { rank, error } => write!(f, "rank {rank} failed: {error}"),
            WorkerFailure::Panic { rank, message } => write!(f, "rank {rank} panicked: {message}"),
            WorkerFailure::Stalled(stall) => write!(f, "{stall}"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for WorkerFailure<E> {}

/// Runs `worker` once per rank of `topology`, each on its own thread with the world
/// [`Comm`], and returns the results in rank order.
///
/// If a worker returns an error or panics, the collectives the others are blocked in
/// fail with [`Error::PeerFailed`] and the first failure is returned. The watchdog
/// has its default timeout ([`crate::DEFAULT_COLLECTIVE_TIMEOUT`]).
pub fn run_in_process<R, E, F>(
    topology: Topology,
    worker: F,
) -> std::result::Result<Vec<R>, WorkerFailure<E>>
where
    R: Send,
    E: Send + std::fmt::Display,
    F: Fn(Comm) -> std::result::Result<R, E> + Sync,
{
    run_in_process_with(topology, Watchdog::default(), worker)
}

/// [`run_in_process`] with `watchdog`: a collective that waits longer than its timeout
/// fails on every rank with [`Error::Stalled`], which is returned
/// ([`WorkerFailure::Stalled`]) once every rank's thread is back. A rank blocked
/// outside the collectives holds that return up until it comes back, unless the
/// watchdog was told to exit the process ([`Watchdog::exit_process_after`]).
pub fn run_in_process_with<R, E, F>(
    topology: Topology,
    watchdog: Watchdog,
    worker: F,
) -> std::result::Result<Vec<R>, WorkerFailure<E>>
where
    R: Send,
    E: Send + std::fmt::Display,
    F: Fn(Comm) -> std::result::Result<R, E> + Sync,
{
    let n = topology.world_size();
    let world = Arc::new(World::new(n, watchdog));
    let root = Arc::new(Group::new(
        world.next_group.fetch_add(1, Ordering::SeqCst),
        (0..n).collect(),
    ));
    let outcomes: Vec<std::thread::Result<std::result::Result<R, E>>> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    let backend = InProcess {
                        world: Arc::clone(&world),
                        group: Arc::clone(&root),
                        rank,
                        splits: AtomicU64::new(0),
                    };
                    let (world, worker) = (Arc::clone(&world), &worker);
                    std::thread::Builder::new()
                        .name(format!("rank-{rank}"))
                        .spawn_scoped(scope, move || {
                            let activity = Arc::clone(&world.activity[rank]);
                            let comm = Comm::watched(Box::new(backend), topology, activity)
                                .expect("the backend has the topology's size");
                            let out =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    worker(comm)
                                }));
                            match &out {
                                Ok(Ok(_)) => {}
                                Ok(Err(e)) => world.fail(rank, e.to_string()),
                                Err(p) => world.fail(rank, panic_message(p.as_ref())),
                            }
                            out
                        })
                        .expect("spawning a worker thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(Err))
                .collect()
        });
    world.finished.store(true, Ordering::SeqCst);
    let failure = world
        .failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let first = match failure {
        Some(Failure::Stalled(stall)) => return Err(WorkerFailure::Stalled(stall)),
        Some(Failure::Worker { rank, .. }) => Some(rank),
        None => None,
    };
    let mut results = Vec::with_capacity(n);
    for (rank, out) in outcomes.into_iter().enumerate() {
        match out {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(error)) if first == Some(rank) => {
                return Err(WorkerFailure::Error { rank, error })
            }
            Err(p) if first == Some(rank) => {
                return Err(WorkerFailure::Panic {
                    rank,
                    message: panic_message(p.as_ref()),
                })
            }
            _ => {}
        }
    }
    if let Some(Failure::Worker { rank, reason }) = failure {
        return Err(WorkerFailure::Panic {
            rank,
            message: reason,
        });
    }
    Ok(results)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
}
