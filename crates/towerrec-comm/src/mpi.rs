//! The MPI backend (feature `mpi`): one process per rank, started by `mpirun`.
//!
//! [`init_mpi`] initializes MPI and returns an [`MpiSession`]; the session finds the
//! cluster's [`Topology`] from the launcher's placement of the ranks and hands out the
//! world [`Comm`]. MPI is finalized when the session is dropped, so keep it alive for as
//! long as any `Comm` is used (a collective after that fails with [`Error::Mpi`]).
//!
//! # Hosts
//!
//! Ranks per host `L` is the size of this rank's shared-memory node
//! (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`), and the ranks must be laid out
//! host-major, world rank = host · `L` + local rank, the same number on every host
//! (`mpirun --map-by ppr:L:node` with OpenMPI, `-ppn L` with MPICH). The environment
//! variable `TOWERREC_RANKS_PER_HOST=L` overrides the detection, for hosts emulated on
//! one machine; it must be the same on every rank and divide the world size.
//!
//! # Failures
//!
//! - MPI errors abort the whole job: communicators keep MPI's default error handler,
//!   `MPI_ERRORS_ARE_FATAL`.
//! - [`init_mpi`] installs a panic hook that prints the panic with this rank's number
//!   and calls `MPI_Abort`, so a panicking rank brings the job down (mpirun exits
//!   non-zero) instead of leaving the others blocked in a collective. The hook fires on
//!   every panic of the process, also on one that would later be caught.
//! - An error is returned, not fatal: a rank that cannot go on after one (the others
//!   would wait for it in their next collective) ends the job with
//!   [`MpiSession::abort`], as the `towerrec` CLI does.
//! - A message larger than `i32::MAX` bytes (MPI counts and displacements are C
//!   `int`s) is refused with [`Error::Mpi`] on every rank of the exchange.
//! - A collective that makes no progress for the watchdog's timeout (a stopped or
//!   blocked rank; [`init_mpi_with`]) ends the job: a thread per process prints which
//!   collective, at which step, and which ranks did not answer it, then calls
//!   `MPI_Abort` (see `mpi_watchdog.rs`).
//!
//! # Threads
//!
//! MPI is initialized with `MPI_THREAD_MULTIPLE`, so `Comm`s may be used from any
//! thread, and different groups concurrently. Where the library provides less, the
//! backend serializes its MPI calls with a process-wide lock (then two threads of one
//! process must not block in collectives of different groups at the same time).

use crate::backend::{Backend, DuringWork, RecvBuf};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::mpi_watchdog::MpiWatchdog;
use crate::topology::Topology;
use crate::watchdog::{Activity, Watchdog};
use ::mpi::collective::SystemOperation;
use ::mpi::datatype::{Partition, PartitionMut};
use ::mpi::environment::Universe;
use ::mpi::topology::{Color, SimpleCommunicator};
use ::mpi::traits::*;
use ::mpi::Threading;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The environment variable that overrides the detected number of ranks per host.
pub const RANKS_PER_HOST_ENV: &str = "TOWERREC_RANKS_PER_HOST";

/// The largest message, in bytes, one MPI call moves (counts are C `int`s).
const MAX_MPI_BYTES: usize = i32::MAX as usize;

/// Whether MPI calls must be serialized (the library gave less than THREAD_MULTIPLE).
static SERIALIZE: AtomicBool = AtomicBool::new(false);
static MPI_LOCK: Mutex<()> = Mutex::new(());

/// Holds the process-wide MPI lock, where the threading level needs one.
fn mpi_guard() -> Option<MutexGuard<'static, ()>> {
    SERIALIZE
        .load(Ordering::SeqCst)
        .then(|| MPI_LOCK.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Fails once MPI is finalized (the [`MpiSession`] was dropped).
fn check_live(op: &str) -> Result<()> {
    if ::mpi::environment::is_finalized() {
        return Err(Error::Mpi(format!(
            "{op} after MPI was finalized (the MpiSession was dropped)"
        )));
    }
    Ok(())
}

fn to_c_int(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Mpi(format!("{what} {v} does not fit an MPI int")))
}

/// MPI initialized for this process, and the cluster layout found at start.
///
/// Dropping it finalizes MPI (collectively: every rank must drop its session).
pub struct MpiSession {
    topology: Topology,
    rank: usize,
    threading: Threading,
    /// This process's collectives, shared by every `Comm` of the session.
    activity: Arc<Activity>,
    watchdog: MpiWatchdog,
    // Last: finalizes MPI when dropped.
    _universe: Universe,
}

impl Drop for MpiSession {
    fn drop(&mut self) {
        // Before the universe finalizes MPI: the thread frees its communicator.
        self.watchdog.stop();
    }
}

/// [`init_mpi_with`] the default [`Watchdog`] (a timeout of
/// [`crate::DEFAULT_COLLECTIVE_TIMEOUT`]).
pub fn init_mpi() -> Result<MpiSession> {
    init_mpi_with(Watchdog::default())
}

/// Initializes MPI, installs the abort-on-panic hook, finds the [`Topology`] (see the
/// [module documentation](self)) and starts `watchdog`'s thread. Collective: every
/// rank of the job calls it once.
///
/// Fails if MPI is already initialized in this process, if `TOWERREC_RANKS_PER_HOST`
/// is invalid or differs between ranks, or if the ranks are not laid out host-major
/// with the same number on every host; every rank returns the same error.
pub fn init_mpi_with(watchdog: Watchdog) -> Result<MpiSession> {
    let (universe, threading) = ::mpi::initialize_with_threading(Threading::Multiple)
        .ok_or_else(|| Error::Mpi("MPI is already initialized in this process".into()))?;
    SERIALIZE.store(threading != Threading::Multiple, Ordering::SeqCst);
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    install_abort_on_panic(rank, size);
    let topology = detect_topology(&world)?;
    let activity = Arc::new(Activity::default());
    let multiple = threading == Threading::Multiple;
    let watchdog = MpiWatchdog::start(&world, Arc::clone(&activity), watchdog, multiple)?;
    Ok(MpiSession {
        topology,
        rank,
        threading,
        activity,
        watchdog,
        _universe: universe,
    })
}

impl MpiSession {
    /// This process's world rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.topology.world_size()
    }

    /// The cluster layout: hosts × ranks per host.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Whether the MPI library runs with `MPI_THREAD_MULTIPLE` (else the backend
    /// serializes its calls; see the [module documentation](self)).
    pub fn thread_multiple(&self) -> bool {
        self.threading == Threading::Multiple
    }

    /// A backend over `MPI_COMM_WORLD`.
    pub fn world_backend(&self) -> MpiBackend {
        MpiBackend {
            comm: ManuallyDrop::new(SimpleCommunicator::world()),
            rank: self.rank,
            members: (0..self.size()).collect(),
        }
    }

    /// The world communicator, with its own traffic counters. Call it once and split
    /// the result for sub-groups.
    pub fn world(&self) -> Result<Comm> {
        Comm::watched(
            Box::new(self.world_backend()),
            self.topology,
            Arc::clone(&self.activity),
        )
    }

    /// Ends the whole job: `MPI_Abort` on the world with `code` (the launcher kills the
    /// other ranks and exits non-zero). For an error on one rank, which would otherwise
    /// leave the others blocked in a collective, and this one in `MPI_Finalize`.
    /// Does not take the serializing lock: another thread may hold it, blocked.
    pub fn abort(&self, code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }
}

/// Prints a panic with the rank, then aborts the whole MPI job.
fn install_abort_on_panic(rank: usize, size: usize) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        if ::mpi::environment::is_initialized() && !::mpi::environment::is_finalized() {
            crate::stderr::print_line(&format!(
                "towerrec-comm: rank {rank} of {size} panicked: {info}; \
                 calling MPI_Abort to stop the job"
            ));
            SimpleCommunicator::world().abort(101);
        }
    }));
}

/// Hosts × ranks per host from the environment override or the shared-memory nodes,
/// checked to be host-major. Every rank decides from the same gathered data.
fn detect_topology(world: &SimpleCommunicator) -> Result<Topology> {
    let (rank, n) = (world.rank() as usize, world.size() as usize);
    // 0: unset; u64::MAX: unparsable.
    let env_l = match std::env::var(RANKS_PER_HOST_ENV) {
        Err(_) => 0,
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&l| l > 0 && l < u64::MAX)
            .unwrap_or(u64::MAX),
    };
    let (node_size, node_rank, leader) = {
        let _g = mpi_guard();
        let node = world.split_shared(rank as i32);
        let mut members = vec![0u64; node.size() as usize];
        node.all_gather_into(&(rank as u64), &mut members[..]);
        (node.size() as u64, node.rank() as u64, members[0])
    };
    let mine = [env_l, node_size, node_rank, leader];
    let mut all = vec![0u64; 4 * n];
    {
        let _g = mpi_guard();
        world.all_gather_into(&mine[..], &mut all[..]);
    }
    let rows: Vec<&[u64]> = all.chunks_exact(4).collect();

    if rows.iter().any(|r| r[0] != rows[0][0]) {
        let values: Vec<String> = rows
            .iter()
            .map(|r| match r[0] {
                0 => "unset".to_string(),
                u64::MAX => "invalid".to_string(),
                v => v.to_string(),
            })
            .collect();
        return Err(Error::Topology(format!(
            "{RANKS_PER_HOST_ENV} differs between ranks (by rank: {}); \
             export it to all of them (mpirun -x {RANKS_PER_HOST_ENV})",
            values.join(", ")
        )));
    }
    let l = match rows[0][0] {
        0 => None,
        u64::MAX => {
            return Err(Error::Topology(format!(
                "{RANKS_PER_HOST_ENV} must be a positive integer"
            )))
        }
        v => Some(v as usize),
    };
    if let Some(l) = l {
        if n % l != 0 {
            return Err(Error::Topology(format!(
                "{RANKS_PER_HOST_ENV}={l} does not divide the {n} ranks of the job"
            )));
        }
        return Topology::new(n / l, l);
    }

    let l = rows[0][1] as usize;
    let sizes: Vec<u64> = rows.iter().map(|r| r[1]).collect();
    if sizes.iter().any(|&s| s as usize != l) {
        return Err(Error::Topology(format!(
            "hosts run different numbers of ranks (ranks per host, by world rank: {sizes:?}); \
             launch the same number on every host, e.g. `mpirun --map-by ppr:L:node`"
        )));
    }
    for (g, r) in rows.iter().enumerate() {
        let (local, leader) = (r[2] as usize, r[3] as usize);
        if local != g % l || leader != g - g % l {
            return Err(Error::Topology(format!(
                "ranks are not laid out host-major (world rank = host × {l} + local rank): \
                 world rank {g} is local rank {local} of the host whose first rank is {leader}; \
                 launch with `mpirun --map-by ppr:{l}:node` (OpenMPI; MPICH: `-ppn {l}`)"
            )));
        }
    }
    Topology::new(n / l, l)
}

/// One rank's handle on an MPI communicator.
pub struct MpiBackend {
    /// Freed on drop unless MPI is already finalized.
    comm: ManuallyDrop<SimpleCommunicator>,
    rank: usize,
    /// World rank of each group rank.
    members: Vec<usize>,
}

// SAFETY: an MPI communicator handle is a process-wide value, not tied to the thread
// that made it. MPI is initialized with THREAD_MULTIPLE, or every call of this backend
// holds the process-wide MPI lock (`mpi_guard`), so using the handle from another
// thread is allowed by the MPI standard.
unsafe impl Send for MpiBackend {}

impl Drop for MpiBackend {
    fn drop(&mut self) {
        if !::mpi::environment::is_finalized() {
            let _g = mpi_guard();
            // SAFETY: dropped once, here; MPI_Comm_free on a live MPI (a no-op for the
            // world communicator).
            unsafe { ManuallyDrop::drop(&mut self.comm) };
        }
    }
}

impl MpiBackend {
    /// An AlltoAllv, started non-blocking (`MPI_Ialltoallv`), `work` run (if any), and
    /// waited for. MPI moves a non-blocking collective only inside MPI calls: the work's
    /// own, and the `MPI_Test` of the function the work is given. Exchanges with and
    /// without work take the same MPI collective, so that `towerrec calibrate`'s one
    /// AlltoAll measurement prices both (and on the emulated cluster the non-blocking
    /// one is the faster: docs/CLUSTER.md, "AlltoAll").
    fn exchange(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
        work: Option<DuringWork<'_>>,
    ) -> Result<Vec<usize>> {
        let p = self.members.len();
        crate::backend::check_counts(counts, p, send.len(), "bytes")?;
        check_live("all_to_all_v")?;
        let _g = mpi_guard();
        // The counts first, then whether any rank's exchange is too large for MPI's
        // int counts (all must agree before the data moves).
        let send_counts: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
        let mut recv_counts = vec![0u64; p];
        self.comm
            .all_to_all_into(&send_counts[..], &mut recv_counts[..]);
        let recv_total: u64 = recv_counts.iter().sum();
        let too_big = i32::from(send.len() > MAX_MPI_BYTES || recv_total > MAX_MPI_BYTES as u64);
        let mut any_too_big = 0i32;
        self.comm
            .all_reduce_into(&too_big, &mut any_too_big, SystemOperation::max());
        if any_too_big != 0 {
            return Err(Error::Mpi(format!(
                "all_to_all_v: a rank of the group sends or receives more than {MAX_MPI_BYTES} \
                 bytes in one exchange, over MPI's int counts (rank {} sends {} and receives \
                 {recv_total}); split the exchange",
                self.members[self.rank],
                send.len()
            )));
        }
        let displs = |c: &[i32]| -> Vec<i32> {
            c.iter()
                .scan(0i32, |acc, &x| {
                    let d = *acc;
                    *acc += x;
                    Some(d)
                })
                .collect()
        };
        // Every value below is at most MAX_MPI_BYTES, checked above.
        let sc: Vec<i32> = counts.iter().map(|&c| c as i32).collect();
        let rc: Vec<i32> = recv_counts.iter().map(|&c| c as i32).collect();
        let (sd, rd) = (displs(&sc), displs(&rc));
        // An empty slice's address is 1 (its alignment), which OpenMPI reads as
        // MPI_IN_PLACE: give MPI a real byte instead.
        let dummy = [0u8; 1];
        let send = if send.is_empty() { &dummy[..] } else { send };
        let recv_len = recv_total as usize;
        let mut dummy_recv = [0u8; 1];
        let recv = match recv.bytes(recv_len) {
            [] => &mut dummy_recv[..],
            r => r,
        };
        let sp = Partition::new(send, &sc[..], &sd[..]);
        let mut rp = PartitionMut::new(recv, &rc[..], &rd[..]);
        drop(_g);
        ::mpi::request::scope(|scope| {
            let mut pending = Some({
                let _g = mpi_guard();
                self.comm
                    .immediate_all_to_all_varcount_into(scope, &sp, &mut rp)
            });
            if let Some(work) = work {
                work(&mut || {
                    if let Some(request) = pending.take() {
                        let _g = mpi_guard();
                        pending = request.test().err();
                    }
                });
            }
            if let Some(request) = pending {
                let _g = mpi_guard();
                request.wait();
            }
        });
        Ok(recv_counts.iter().map(|&c| c as usize).collect())
    }
}

impl Backend for MpiBackend {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn world_rank(&self, r: usize) -> usize {
        self.members[r]
    }

    fn all_to_all_v(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
    ) -> Result<Vec<usize>> {
        self.exchange(send, counts, recv, None)
    }

    fn all_to_all_v_during(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
        work: DuringWork<'_>,
    ) -> Result<Vec<usize>> {
        self.exchange(send, counts, recv, Some(work))
    }

    fn barrier(&self) -> Result<()> {
        check_live("barrier")?;
        let _g = mpi_guard();
        self.comm.barrier();
        Ok(())
    }

    fn split(&self, color: usize, key: usize) -> Result<Box<dyn Backend>> {
        let c = to_c_int(color, "split color")?;
        let k = to_c_int(key, "split key")?;
        check_live("split")?;
        let _g = mpi_guard();
        let comm = self
            .comm
            .split_by_color_with_key(Color::with_value(c), k)
            .ok_or_else(|| Error::Mpi("MPI_Comm_split returned MPI_COMM_NULL".into()))?;
        let me = self.members[self.rank] as u64;
        let mut members = vec![0u64; comm.size() as usize];
        comm.all_gather_into(&me, &mut members[..]);
        Ok(Box::new(MpiBackend {
            rank: comm.rank() as usize,
            comm: ManuallyDrop::new(comm),
            members: members.into_iter().map(|m| m as usize).collect(),
        }))
    }

    /// Stops the whole process, as a hung machine would: its watchdog stops too.
    fn hang(&self) {
        // SAFETY: raise only sends a signal to this process.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
