//! The collective watchdog under MPI (feature `mpi`): a thread per process.
//!
//! Each process sees only itself, so its thread polls its own [`Activity`]. When one
//! collective has lasted the timeout, the thread sends its status to every other rank
//! over a communicator of its own (a duplicate of the world, so nothing it sends can
//! match the training's messages) and collects theirs for a grace period: every other
//! rank's thread answers the first status it receives with its own, so the ranks not
//! heard from are those whose process cannot answer (stopped, or gone). It then prints
//! the [`Stall`] and calls `MPI_Abort`, and the launcher kills the job.
//!
//! All of that needs `MPI_THREAD_MULTIPLE` (the training's collective is blocked in
//! MPI at the same time). Without it the thread makes no MPI call but `MPI_Abort`,
//! and reports the ranks not heard from as unknown.

use crate::error::{Error, Result};
use crate::watchdog::{Activity, Monitor, Op, Snapshot, Stall, Watchdog};
use ::mpi::request::{Request, Scope};
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use std::cell::OnceCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a rank whose watchdog fired waits to hear from the others. They answer
/// within one of their polls (at most 250 ms), so this is ample on any network.
const GRACE: Duration = Duration::from_secs(1);

/// How often the thread looks for answers once it has fired.
const FIRED_POLL: Duration = Duration::from_millis(10);

/// The tag of status messages on the watchdog's own communicator.
const TAG: i32 = 0x7d06;

/// Ranks heard from that were outside any collective, listed in the report at most.
const MAX_LISTED: usize = 8;

/// The watchdog's thread, stopped (before MPI is finalized) by [`MpiWatchdog::stop`].
pub(crate) struct MpiWatchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The watchdog's communicator, handed to its thread.
struct Channel(SimpleCommunicator);

// SAFETY: a channel exists only with MPI_THREAD_MULTIPLE, under which an MPI handle may
// be used from any thread; only the watchdog's thread uses it after the hand-over.
unsafe impl Send for Channel {}

impl MpiWatchdog {
    /// Starts watching `activity`, this process's. Collective over `world` (which it
    /// duplicates, with THREAD_MULTIPLE).
    pub(crate) fn start(
        world: &SimpleCommunicator,
        activity: Arc<Activity>,
        watchdog: Watchdog,
        thread_multiple: bool,
    ) -> Result<Self> {
        let channel = thread_multiple.then(|| Channel(world.duplicate()));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = Watcher {
            rank: world.rank() as usize,
            size: world.size() as usize,
            activity,
            watchdog,
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("towerrec-watchdog".into())
            .spawn(move || watcher.run(channel))
            .map_err(|e| Error::Mpi(format!("cannot start the watchdog's thread: {e}")))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (it frees its communicator).
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

struct Watcher {
    rank: usize,
    size: usize,
    activity: Arc<Activity>,
    watchdog: Watchdog,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn run(self, channel: Option<Channel>) {
        let mut monitor = Monitor::new(self.watchdog.timeout());
        let poll = self.watchdog.poll_interval();
        let Some(Channel(comm)) = channel else {
            while !self.stopped() {
                let s = self.activity.snapshot();
                if monitor.stalled(&s, Instant::now()) {
                    let why = "MPI without MPI_THREAD_MULTIPLE: the watchdog cannot ask the \
                               other ranks";
                    self.abort(&s, None, Some(why.into()));
                }
                std::thread::park_timeout(poll);
            }
            return;
        };
        // One buffer per possible message: every other rank sends its status once.
        let mut inboxes = vec![[0u64; 2]; self.size];
        let outbox = OnceCell::new();
        let mut heard: Vec<Option<Snapshot>> = vec![None; self.size];
        ::mpi::request::scope(|scope| {
            let mut spare = inboxes.iter_mut();
            let post = |buf| receive(&comm, scope, buf);
            let mut recv = spare.next().map(post);
            let mut sends: Vec<Request<'_, [u64], _>> = Vec::new();
            // Sends this rank's status to every other rank, once.
            let send_all = |sends: &mut Vec<_>| {
                if outbox.get().is_some() {
                    return;
                }
                let words: &[u64; 2] = outbox.get_or_init(|| self.activity.snapshot().to_words());
                for r in (0..self.size).filter(|&r| r != self.rank) {
                    sends.push(comm.process_at_rank(r as i32).immediate_send_with_tag(
                        scope,
                        &words[..],
                        TAG,
                    ));
                }
            };
            let mut fired: Option<(Snapshot, Instant)> = None;
            loop {
                while let Some(r) = recv.take() {
                    match r.test_with_data() {
                        Ok((status, words)) => {
                            let from = status.source_rank() as usize;
                            if let (Some(slot), Ok(w)) = (heard.get_mut(from), words.try_into()) {
                                *slot = Some(Snapshot::from_words(w));
                            }
                            send_all(&mut sends);
                            recv = spare.next().map(post);
                        }
                        Err(r) => {
                            recv = Some(r);
                            break;
                        }
                    }
                }
                sends = sends.into_iter().filter_map(|r| r.test().err()).collect();
                let now = Instant::now();
                if fired.is_none() {
                    let s = self.activity.snapshot();
                    if monitor.stalled(&s, now) {
                        send_all(&mut sends);
                        fired = Some((s, now));
                    }
                }
                if let Some((s, at)) = fired {
                    let all = (0..self.size).all(|r| r == self.rank || heard[r].is_some());
                    if all || now.duration_since(at) >= GRACE {
                        let (silent, note) = self.summary(&heard);
                        self.abort(&s, Some(silent), note);
                    }
                }
                if self.stopped() {
                    break;
                }
                std::thread::park_timeout(if fired.is_some() { FIRED_POLL } else { poll });
            }
            if let Some(r) = recv {
                r.cancel();
                r.wait();
            }
            // Only sent after a rank fired, and that rank aborts the job: never reached
            // in a job that ends normally.
            for r in sends {
                r.wait();
            }
        });
    }

    /// The ranks not heard from, and those heard from outside any collective (alive,
    /// but not where the others wait for them).
    fn summary(&self, heard: &[Option<Snapshot>]) -> (Vec<usize>, Option<String>) {
        let silent = (0..self.size)
            .filter(|&r| r != self.rank && heard[r].is_none())
            .collect();
        let outside: Vec<String> = heard
            .iter()
            .enumerate()
            .filter_map(|(r, s)| s.filter(|s| s.op.is_none()).map(|s| (r, s)))
            .take(MAX_LISTED)
            .map(|(r, s)| format!("rank {r} {}", s.describe()))
            .collect();
        let note = (!outside.is_empty()).then(|| format!("alive: {}", outside.join("; ")));
        (silent, note)
    }

    fn abort(&self, s: &Snapshot, silent: Option<Vec<usize>>, note: Option<String>) -> ! {
        let stall = Stall {
            rank: self.rank,
            collective: s.op.map_or("exchange", Op::name),
            phase: s.phase,
            step: s.step,
            timeout: self.watchdog.timeout(),
            silent,
            note,
        };
        crate::stderr::print_line(&format!(
            "error: {stall}; calling MPI_Abort to stop the job"
        ));
        SimpleCommunicator::world().abort(1)
    }
}

/// Posts the receive of one status message, from any rank, into `buf`.
fn receive<'a, S: Scope<'a>>(
    comm: &SimpleCommunicator,
    scope: S,
    buf: &'a mut [u64; 2],
) -> Request<'a, [u64], S> {
    comm.any_process()
        .immediate_receive_into_with_tag(scope, &mut buf[..], TAG)
}
