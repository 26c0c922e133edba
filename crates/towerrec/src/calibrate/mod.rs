//! `towerrec calibrate`: measures this machine and writes a hardware description
//! ([`towerrec_sim::Hardware`], TOML) so that the simulator can predict runs here.
//!
//! What it measures:
//!
//! - **Compute**: f32 GEMM at 1024³ ([`probe::gemm_gflops`], best repetition), and
//!   towerrec's own MLP layers forward and backward at a recommendation-model shape: their
//!   rate over the GEMM's is the `efficiency` the simulator applies to dense layers.
//! - **Memory**: streaming bandwidth (a large copy, read + write counted,
//!   [`probe::copy_bandwidth`]) and random-gather bandwidth for rows of 64, 128, 256 and
//!   512 bytes from a large table on 2 MiB pages with software prefetch, the layout
//!   towerrec's embedding tables use ([`probe::gather_bandwidth_in`], best repetition).
//! - **Reader**: towerrec's synthetic data generator building batches on one thread,
//!   per sample and per Zipf or uniform id ([`reader`]); a chip pays its CPU time over
//!   the chip's threads (the simulator's `data_read` phase).
//! - **Collectives**: `all_to_all_v` and `all_reduce` of f32 on the requested cluster,
//!   over per-rank buffers from 8 B to 16 MiB, through the backend towerrec trains on
//!   (threads of this process, or MPI). Each point is the median over repetitions of the
//!   slowest rank's time; latency α and bandwidth β are fitted by least squares (on
//!   relative error, so that small and large messages weigh alike) to
//!   `time = α + moved / β`, with `moved` the per-rank volume of the simulator's lower
//!   bounds ([`Collective::volume_factor`]).
//!
//! The file describes `hosts × ranks-per-host` chips. In-process, all ranks are threads
//! sharing this machine's cores and memory, so each chip gets `1/ranks` of the measured
//! rates; there is no network, so the cross-host level repeats the measured collective
//! figures. With MPI every rank measures compute and memory at once with its share of
//! the cores, and a chip gets the mean; the intra-host level is measured within each
//! host and the cross-host level among the peers (one rank per host).
//!
//! - **Waits** (MPI): every rank computes the same work, then all meet; a round's time
//!   beyond the work at the rate the ranks sustain together and beyond the barrier's
//!   own latency (`[system] sync_wait`; ranks sharing cores finish at different times).
//!
//! The file also records how towerrec runs a step on a CPU: the sparse update reads and
//! writes its rows, lookups do not overlap the exchanges, and the dense all-reduce runs
//! after the backward pass, not under it.

use crate::commands::Backend;
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use towerrec_comm::{Comm, Phase, Topology};
use towerrec_core::probe::{self, HugePageBuf, Pages, Rate};
use towerrec_sim::{
    AlphaBeta, Collective, Compute, CrossHost, Hardware, Level, MemorySystem, Network, ReaderCosts,
    Scaling, SystemTraits,
};

mod collectives;
mod machine;
mod mpi;
mod reader;
mod report;
#[cfg(any(feature = "mpi", test))]
mod sync_wait;
#[cfg(test)]
mod tests;

use collectives::*;
use machine::*;
use reader::ReaderNs;
use report::*;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// GEMM size of the compute probe.
const GEMM_N: usize = 1024;

/// The MLP of the efficiency probe (a DLRM top MLP) and its batch.
const MLP_DIMS: [usize; 4] = [384, 512, 256, 1];
const MLP_BATCH: usize = 2048;
/// The dot interaction probe: as many vectors as DLRM on Criteo's 26 tables has (the
/// bottom MLP's output and 26 pooled rows), at these vector widths.
const INTERACTION_VECTORS: usize = 27;
const INTERACTION_WIDTHS: [usize; 5] = [8, 16, 32, 64, 128];

/// Row sizes of the random-gather probes.
const ROW_BYTES: [usize; 4] = [64, 128, 256, 512];

/// Per-rank buffer sizes of the collective sweeps: a factor of 4 apart, since the
/// simulator interpolates between them and a step's collectives fall anywhere.
const SIZES: [usize; 12] = [
    8,
    32,
    128,
    512,
    2 * KIB,
    8 * KIB,
    32 * KIB,
    128 * KIB,
    512 * KIB,
    2 * MIB,
    8 * MIB,
    16 * MIB,
];
const QUICK_SIZES: [usize; 4] = [8, KIB, 64 * KIB, MIB];

/// Upper bound on the memory the collective sweeps of all in-process ranks may hold.
const ALL_RANKS_BYTES: usize = 512 * MIB;

/// The most in-process ranks calibrate will start.
const MAX_IN_PROCESS_RANKS: usize = 1024;

/// The most repetitions of one collective point.
const MAX_REPS: usize = 1000;

#[derive(Args)]
pub struct CalibrateArgs {
    /// Where to write the hardware description (TOML).
    #[arg(long, default_value = "calibrated.toml")]
    out: PathBuf,
    /// Hosts of the in-process cluster the file describes [default: 1].
    #[arg(long)]
    hosts: Option<usize>,
    /// Ranks per host of the in-process cluster [default: 1].
    #[arg(long)]
    ranks_per_host: Option<usize>,
    /// Threads for the measurements [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Seconds per compute and memory measurement (a quarter of it per collective point).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Much shorter measurements on smaller buffers (for tests; the figures are rougher).
    #[arg(long)]
    quick: bool,
    /// Where the ranks run: threads of this process, or MPI processes under `mpirun`
    /// (hosts and ranks per host from the launcher; needs a build with `--features mpi`).
    #[arg(long, value_enum, default_value_t = Backend::InProcess)]
    backend: Backend,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// The measurement budgets and sizes, from the arguments.
struct Settings {
    budget: Duration,
    /// How the compute and memory rates are taken: the best repetition in-process (the
    /// process has the machine), sustained under MPI (a host's ranks share its cores).
    rate: Rate,
    point_budget: Duration,
    min_reps: usize,
    copy_bytes: usize,
    table_bytes: usize,
    sizes: &'static [usize],
}

impl Settings {
    fn new(a: &CalibrateArgs) -> Result<Self> {
        if !(a.seconds > 0.0 && a.seconds <= 600.0) {
            bail!(
                "--seconds must be above 0 and at most 600, not {}",
                a.seconds
            );
        }
        if a.threads == Some(0) {
            bail!("--threads must be at least 1");
        }
        let seconds = if a.quick {
            a.seconds.min(0.05)
        } else {
            a.seconds
        };
        Ok(Settings {
            budget: Duration::from_secs_f64(seconds),
            rate: match a.backend {
                Backend::InProcess => Rate::Best,
                Backend::Mpi => Rate::Sustained,
            },
            point_budget: Duration::from_secs_f64(seconds / 4.0),
            min_reps: if a.quick { 3 } else { 5 },
            copy_bytes: if a.quick { 64 * MIB } else { 256 * MIB },
            table_bytes: if a.quick { 256 * MIB } else { 1024 * MIB },
            sizes: if a.quick { &QUICK_SIZES } else { &SIZES },
        })
    }
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    let s = Settings::new(&a)?;
    check_out(&a.out)?;
    let mut files = towerrec_train::files::Files::new("calibrate");
    files.output("--out", &a.out)?;
    crate::commands::clean(&files);
    match a.backend {
        Backend::InProcess => in_process(&a, &s),
        Backend::Mpi => mpi::run(&a, &s),
    }
}

/// Fails before measuring if `out` cannot be written.
fn check_out(out: &Path) -> Result<()> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "--out {}: the directory {} does not exist",
            out.display(),
            dir.display()
        );
    }
    if out.is_dir() {
        bail!("--out {} is a directory", out.display());
    }
    Ok(())
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Measures this process's machine, then the collectives of an in-process cluster.
fn in_process(a: &CalibrateArgs, s: &Settings) -> Result<()> {
    let hosts = a.hosts.unwrap_or(1);
    let per_host = a.ranks_per_host.unwrap_or(1);
    if hosts == 0 || per_host == 0 {
        bail!("--hosts and --ranks-per-host must be at least 1");
    }
    let topo = Topology::new(hosts, per_host)?;
    let ranks = topo.world_size();
    if ranks > MAX_IN_PROCESS_RANKS {
        bail!("{ranks} in-process ranks: at most {MAX_IN_PROCESS_RANKS}");
    }
    let started = Instant::now();
    let threads = a.threads.unwrap_or_else(num_cores);
    // One chip has no collective: measure two ranks, so that the file has a network.
    let sweep_topo = if ranks == 1 {
        Topology::new(1, 2)?
    } else {
        topo
    };
    let sweep_ranks = sweep_topo.world_size();
    let sizes: Vec<usize> = s
        .sizes
        .iter()
        .copied()
        .filter(|&b| b * sweep_ranks * 3 <= ALL_RANKS_BYTES || b <= KIB)
        .collect();
    let progress = Progress::new(a.quiet, (PROBES + 2 * sizes.len()) as u64);
    let machine = measure_machine(s, threads, &progress, &|| Ok(()))?;
    let sweeps = towerrec_comm::run_in_process(sweep_topo, |comm: Comm| {
        let shown = (comm.rank() == 0).then_some(&progress);
        sweep_both(&comm, &comm, &sizes, s, shown)
    })
    .map_err(|f| anyhow::anyhow!("{f}"))?;
    progress.finish();
    let sweeps = sweeps.into_iter().next().expect("rank 0 reports");
    let per_chip = machine.shared_by(ranks);
    let over = format!("{sweep_ranks} in-process ranks");
    let network_note = if ranks == 1 {
        "; one chip has no collective: the network figures are those of 2 in-process ranks"
    } else if hosts > 1 {
        "; cross_host repeats the measured figures (in-process ranks have no network)"
    } else {
        ""
    };
    let share = if ranks == 1 {
        "all of it for the one chip".to_string()
    } else {
        format!("each of the {ranks} chips given 1/{ranks} (in-process ranks share the cores and memory)")
    };
    let source = format!(
        "towerrec calibrate: f32 GEMM {GEMM_N}³, MLP {} forward and backward at batch {MLP_BATCH}, \
         a {} MiB copy and random gathers (2 MiB pages, prefetch) from a {} table with {threads} \
         threads, {share}; all_to_all_v and all_reduce of f32 over {over}, α–β fitted to medians{network_note}",
        dims_label(),
        s.copy_bytes / MIB,
        human_bytes(s.table_bytes),
    );
    let level = sweeps.level();
    let hw = hardware(
        topo,
        &per_chip,
        level.clone(),
        (hosts > 1).then_some(level),
        source,
    );
    let mut header = format!(
        "# This machine, measured by `towerrec calibrate` (in-process, {hosts} host(s) × {per_host} rank(s), \
         {threads} threads, {} s per measurement).\n",
        s.budget.as_secs_f64()
    );
    header += &machine.comment(&format!("Whole machine, {threads} threads"));
    if ranks > 1 {
        header += &format!(
            "# Each of the {ranks} chips gets 1/{ranks} of these (the ranks share this machine).\n"
        );
    }
    header += &sweeps.comment(&over);
    write_hardware(&a.out, &hw, &header)?;
    print_summary(&machine, &hw, &[(&sweeps, "in-process")], &a.out, started);
    Ok(())
}

/// `384-512-256-1`.
fn dims_label() -> String {
    let d: Vec<String> = MLP_DIMS.iter().map(|d| d.to_string()).collect();
    d.join("-")
}
