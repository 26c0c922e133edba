//! The in-process backend: the ranks are threads of one process exchanging through
//! shared memory. It needs no set-up, so the main job and most tests use it.
//!
//! Each group has a rendezvous: a rank deposits its message, the last to arrive
//! publishes the whole round, and everyone reads its part from that snapshot. A round
//! cannot be overwritten while a rank still reads it, since the next round needs every
//! rank to arrive. Waits poll a world-wide failure flag, so a panicking or failing
//! worker releases the others with [`Error::PeerFailed`] instead of a hang.
//!
//! An exchange copies each byte once: a rank publishes the address of its send buffer,
//! the receivers copy their parts straight into their own buffers, and a closing round
//! keeps every sender inside the call (its buffer alive) until all have copied.

use crate::backend::{Backend, RecvBuf};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::topology::Topology;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often a waiting rank checks whether another one has failed.
const FAILURE_POLL: Duration = Duration::from_millis(20);

/// Bytes a rank publishes for one round: borrowed from its send buffer, which outlives
/// every read (see [`InProcess::all_to_all_v`]), or owned.
struct Payload {
    ptr: *const u8,
    len: usize,
    _owned: Vec<u8>,
}

// SAFETY: the pointer is only read, by other ranks, while the publishing rank keeps the
// buffer alive and unmodified (it is blocked in the same exchange).
unsafe impl Send for Payload {}
unsafe impl Sync for Payload {}

impl Payload {
    fn borrowed(bytes: &[u8]) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            _owned: Vec::new(),
        }
    }

    fn owned(bytes: Vec<u8>) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            _owned: bytes,
        }
    }

    /// The bytes.
    ///
    /// # Safety
    /// For a borrowed payload, the publishing rank must still be inside the exchange
    /// that published it.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: ptr/len describe a live slice (owned here, or kept alive by the
        // caller's contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A rank's message: its payload and the byte count for each destination (`None`: the
/// whole payload for every rank).
type Msg = Arc<(Payload, Option<Vec<usize>>)>;

/// What all ranks of one in-process cluster share.
#[derive(Default)]
struct World {
    failed: AtomicBool,
    failure: Mutex<Option<(usize, String)>>,
    /// Groups made by splits, by (parent group, parent's split count, color).
    groups: Mutex<HashMap<(u64, u64, usize), Arc<Group>>>,
    next_group: AtomicU64,
}

impl World {
    fn fail(&self, rank: usize, reason: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some((rank, reason));
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    fn failure(&self) -> Error {
        let f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        let (rank, reason) = f.clone().unwrap_or((usize::MAX, "unknown".into()));
        Error::PeerFailed { rank, reason }
    }
}

struct Round {
    generation: u64,
    arrived: usize,
    slots: Vec<Option<Msg>>,
    /// The messages of the last completed round, by group rank.
    last: Arc<Vec<Msg>>,
}

struct Group {
    id: u64,
    /// World rank of each group rank.
    members: Vec<usize>,
    round: Mutex<Round>,
    cv: Condvar,
}

impl Group {
    fn new(id: u64, members: Vec<usize>) -> Self {
        let n = members.len();
        Self {
            id,
            members,
            round: Mutex::new(Round {
                generation: 0,
                arrived: 0,
                slots: vec![None; n],
                last: Arc::new(Vec::new()),
            }),
            cv: Condvar::new(),
        }
    }
}

/// One rank's handle on one group.
pub struct InProcess {
    world: Arc<World>,
    group: Arc<Group>,
    rank: usize,
    splits: AtomicU64,
}

impl InProcess {
    /// Deposits `msg` and returns every rank's message of this round. With
    /// `abandon_on_failure` false the wait ignores failed ranks: for the closing round of
    /// an exchange, which every rank that completed the opening round reaches.
    fn exchange(&self, msg: Msg, abandon_on_failure: bool) -> Result<Arc<Vec<Msg>>> {
        let g = &self.group;
        let mut round = g.round.lock().unwrap_or_else(|e| e.into_inner());
        if abandon_on_failure && self.world.failed.load(Ordering::SeqCst) {
            return Err(self.world.failure());
        }
        round.slots[self.rank] = Some(msg);
        round.arrived += 1;
        let generation = round.generation;
        if round.arrived == g.members.len() {
            let all: Vec<Msg> = round
                .slots
                .iter_mut()
                .map(|s| s.take().expect("every rank deposited"))
                .collect();
            round.last = Arc::new(all);
            round.arrived = 0;
            round.generation += 1;
            g.cv.notify_all();
            return Ok(Arc::clone(&round.last));
        }
        loop {
            let (r, _) =
                g.cv.wait_timeout(round, FAILURE_POLL)
                    .unwrap_or_else(|e| e.into_inner());
            round = r;
            if round.generation != generation {
                return Ok(Arc::clone(&round.last));
            }
            if abandon_on_failure && self.world.failed.load(Ordering::SeqCst) {
                return Err(self.world.failure());
            }
        }
    }

    /// Publishes `send` (with per-destination `counts`, or all of it to everyone), copies
    /// this rank's part of every rank's payload into `recv`, and returns the byte count
    /// from each rank.
    fn copy_round(
        &self,
        send: &[u8],
        counts: Option<&[usize]>,
        recv: &mut dyn RecvBuf,
    ) -> Result<Vec<usize>> {
        let all = self.exchange(
            Arc::new((Payload::borrowed(send), counts.map(<[usize]>::to_vec))),
            true,
        )?;
        // Every rank now reads the others' buffers; the closing round (run on unwinding
        // too) keeps each sender here, its buffer alive, until all have read.
        let closing = ClosingRound(self);
        let part = |m: &Msg| -> (usize, usize) {
            match &m.1 {
                Some(c) => (c[..self.rank].iter().sum(), c[self.rank]),
                None => (0, m.0.len),
            }
        };
        let from: Vec<usize> = all.iter().map(|m| part(m).1).collect();
        let total: usize = from.iter().sum();
        let out = recv.bytes(total);
        if out.len() != total {
            return Err(Error::usage(
                "all_to_all_v",
                format!("a receive buffer of {} bytes for {total}", out.len()),
            ));
        }
        let mut at = 0;
        for m in all.iter() {
            let (start, len) = part(m);
            // SAFETY: the sender is inside this exchange until the closing round.
            let src = unsafe { m.0.bytes() };
            out[at..at + len].copy_from_slice(&src[start..start + len]);
            at += len;
        }
        drop(closing);
        Ok(from)
    }
}

/// Runs the closing round of an exchange when dropped.
struct ClosingRound<'a>(&'a InProcess);

impl Drop for ClosingRound<'_> {
    fn drop(&mut self) {
        // Cannot fail: it ignores failed ranks, and every rank of the group gets here.
        let _ = self
            .0
            .exchange(Arc::new((Payload::owned(Vec::new()), None)), false);
    }
}

impl Backend for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.members.len()
    }

    fn world_rank(&self, r: usize) -> usize {
        self.group.members[r]
    }

    fn all_to_all_v(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
    ) -> Result<Vec<usize>> {
        self.copy_round(send, Some(counts), recv)
    }

    fn all_gather_v(&self, send: &[u8], recv: &mut dyn RecvBuf) -> Result<Vec<usize>> {
        self.copy_round(send, None, recv)
    }

    fn barrier(&self) -> Result<()> {
        self.exchange(Arc::new((Payload::owned(Vec::new()), None)), true)
            .map(|_| ())
    }

    fn split(&self, color: usize, key: usize) -> Result<Box<dyn Backend>> {
        let mut mine = Vec::with_capacity(16);
        mine.extend_from_slice(&(color as u64).to_le_bytes());
        mine.extend_from_slice(&(key as u64).to_le_bytes());
        let all = self.exchange(Arc::new((Payload::owned(mine), None)), true)?;
        let word = |m: &Msg, i: usize| {
            // SAFETY: an owned payload.
            let b = unsafe { m.0.bytes() };
            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
        };
        let mut same: Vec<(usize, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, m)| word(m, 0) == color)
            .map(|(r, m)| (word(m, 1), r))
            .collect();
        same.sort_unstable();
        let members: Vec<usize> = same.iter().map(|&(_, r)| self.group.members[r]).collect();
        let rank = same
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("this rank is in its own color");
        let seq = self.splits.fetch_add(1, Ordering::SeqCst);
        let group = {
            let mut groups = self.world.groups.lock().map_err(|_| self.world.failure())?;
            let world = &self.world;
            Arc::clone(
                groups
                    .entry((self.group.id, seq, color))
                    .or_insert_with(|| {
                        Arc::new(Group::new(
                            world.next_group.fetch_add(1, Ordering::SeqCst),
                            members,
                        ))
                    }),
            )
        };
        Ok(Box::new(InProcess {
            world: Arc::clone(&self.world),
            group,
            rank,
            splits: AtomicU64::new(0),
        }))
    }
}

/// Why an in-process cluster failed: the first worker to fail, and how.
#[derive(Debug)]
pub enum WorkerFailure<E> {
    /// The worker returned this error.
    Error { rank: usize, error: E },
    /// The worker panicked with this message.
    Panic { rank: usize, message: String },
}

impl<E: std::fmt::Display> std::fmt::Display for WorkerFailure<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerFailure::Error { rank, error } => write!(f, "rank {rank} failed: {error}"),
            WorkerFailure::Panic { rank, message } => write!(f, "rank {rank} panicked: {message}"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for WorkerFailure<E> {}

/// Runs `worker` once per rank of `topology`, each on its own thread with the world
/// [`Comm`], and returns the results in rank order.
///
/// If a worker returns an error or panics, the collectives the others are blocked in
/// fail with [`Error::PeerFailed`] and the first failure is returned.
pub fn run_in_process<R, E, F>(
    topology: Topology,
    worker: F,
) -> std::result::Result<Vec<R>, WorkerFailure<E>>
where
    R: Send,
    E: Send + std::fmt::Display,
    F: Fn(Comm) -> std::result::Result<R, E> + Sync,
{
    let n = topology.world_size();
    let world = Arc::new(World::default());
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
                            let comm = Comm::new(Box::new(backend), topology)
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
    let first = world
        .failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|(rank, _)| *rank);
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
    if let Some(rank) = first {
        let message = world
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(|f| f.1)
            .unwrap_or_default();
        return Err(WorkerFailure::Panic { rank, message });
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
