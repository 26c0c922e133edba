//! towerrec-comm: the cluster a model is spread over, and the collectives that move its
//! data, with every byte counted.
//!
//! - [`Topology`]: hosts × ranks per host, intra-host and peer groups (DMT §3.1).
//! - [`Comm`]: AlltoAllv, AllReduce, ReduceScatter, AllGather, Broadcast, Barrier and
//!   splits, for f32/f64 and integer payloads, over a [`Backend`]; and an AlltoAllv
//!   that overlaps the caller's work ([`Comm::all_to_all_v_during`]: non-blocking on
//!   MPI; in-process, the exchange and then the work).
//! - Quantized communication ([`WirePrecision`]): f32 payloads of an AlltoAllv sent as
//!   fp16 or bf16 ([`Comm::all_to_all_v_wire_into`]), and AllReduces in bf16
//!   ([`Comm::all_reduce_wire`], [`HierarchicalAllReduce::all_reduce_wire`]), the bytes
//!   counted as sent.
//! - Exchanges over MPI's 2 GiB a call, in rounds ([`Comm::all_to_all_v_in_rounds`],
//!   [`Comm::all_gather_in_rounds`], at most [`ROUND_BYTES`] a round).
//! - [`HierarchicalAllReduce`]: the topology-aware AllReduce (intra-host ReduceScatter,
//!   peer AllReduce, intra-host AllGather), its sub-communicators made once; `L` times
//!   fewer cross-host bytes than [`Comm::all_reduce`] on `L` ranks per host.
//! - Backends: in-process threads ([`run_in_process`], the default) and MPI (feature
//!   `mpi`: `init_mpi`, `MpiSession`, `MpiBackend`; see the `mpi` module).
//! - [`RankTraffic`] / [`ClusterTraffic`]: bytes by phase, source and destination,
//!   intra-host or cross-host.
//! - [`selftest`]: a deterministic run of every collective, to compare backends and
//!   check a cluster (`examples/comm_selftest.rs`).
//! - [`Watchdog`]: a collective that makes no progress for a set time ends the job
//!   with [`Error::Stalled`] ([`Stall`]: the collective, the step, the ranks not heard
//!   from) instead of a hang, on both backends.

mod backend;
mod comm;
mod error;
mod hierarchical;
mod inprocess;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "mpi")]
mod mpi_watchdog;
mod phase;
mod precision;
mod rounds;
mod selftest;
mod stall;
mod stderr;
mod topology;
mod traffic;
mod watchdog;
mod wire_reduce;

#[cfg(feature = "mpi")]
pub use self::mpi::{init_mpi, init_mpi_with, MpiBackend, MpiSession, RANKS_PER_HOST_ENV};
pub use backend::{Backend, DuringWork, RecvBuf};
pub use comm::{even_split, Comm, Element};
pub use error::{Error, Result};
pub use hierarchical::HierarchicalAllReduce;
pub use inprocess::{run_in_process, run_in_process_with, InProcess, WorkerFailure};
pub use precision::WirePrecision;
pub use rounds::ROUND_BYTES;
pub use selftest::{selftest, SelfTestReport};
pub use stderr::print_line;
pub use topology::Topology;
pub use traffic::{Bytes, ClusterTraffic, Phase, RankTraffic};
pub use watchdog::{Stall, Watchdog, DEFAULT_COLLECTIVE_TIMEOUT, MIN_COLLECTIVE_TIMEOUT};
