//! The in-process backend: the ranks are threads of one process exchanging through
//! shared memory. It needs no set-up, so the main job and most tests use it.
//!
//! Each group has a rendezvous: a rank deposits its message, the last to arrive
//! publishes the whole round, and everyone reads its part from that snapshot. A round
//! cannot be overwritten while a rank still reads it, since the next round needs every
//! rank to arrive. Waits poll a world-wide failure flag, so a panicking or failing
//! worker releases the others with [`Error::PeerFailed`] instead of a hang.
//!
//! The same polls are the watchdog ([`Watchdog`]): a rank that has waited for a round
//! for the timeout fails the world with [`Error::Stalled`], naming the ranks of its
//! group that have not arrived and where each one is (every rank's [`Activity`] is
//! visible here), and the others are released with the same error.
//!
//! An exchange copies each byte once: a rank publishes the address of its send buffer,
//! the receivers copy their parts straight into their own buffers, and a closing round
//! keeps every sender inside the call (its buffer alive) until all have copied.

mod run;

use crate::backend::{Backend, RecvBuf};
use crate::error::{Error, Result};
use crate::watchdog::{Op, Stall};
use run::World;
pub use run::{run_in_process, run_in_process_with, WorkerFailure};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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
        // Read the clock only once the wait outlasts a poll: most rounds complete before.
        let mut waiting_since: Option<Instant> = None;
        loop {
            let (r, _) =
                g.cv.wait_timeout(round, FAILURE_POLL)
                    .unwrap_or_else(|e| e.into_inner());
            round = r;
            if round.generation != generation {
                return Ok(Arc::clone(&round.last));
            }
            if abandon_on_failure {
                if self.world.failed.load(Ordering::SeqCst) {
                    return Err(self.world.failure());
                }
                // The closing round is not watched: every rank reaching it is only
                // copying, and leaving it early would free a buffer others still read.
                let since = *waiting_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.world.watchdog.timeout() {
                    self.world.stall(self.stall_report(&round));
                    return Err(self.world.failure());
                }
            }
        }
    }

    /// The watchdog's report for a round that has waited too long: this rank's
    /// collective and step, and the group's ranks that have not arrived.
    fn stall_report(&self, round: &Round) -> Stall {
        let members = &self.group.members;
        let me = self.world.activity[members[self.rank]].snapshot();
        let missing: Vec<usize> = (0..members.len())
            .filter(|&r| round.slots[r].is_none())
            .map(|r| members[r])
            .collect();
        let note = missing
            .iter()
            .map(|&w| format!("rank {w} {}", self.world.activity[w].snapshot().describe()))
            .collect::<Vec<_>>()
            .join("; ");
        Stall {
            rank: members[self.rank],
            collective: me.op.map_or("exchange", Op::name),
            phase: me.phase,
            step: me.step,
            timeout: self.world.watchdog.timeout(),
            silent: Some(missing),
            note: Some(note),
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
