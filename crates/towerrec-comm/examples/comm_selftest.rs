//! Runs the collectives self-test and prints one line per rank:
//! `rank R hash H bytes_intra X bytes_cross Y`.
//!
//! ```sh
//! # in-process threads (default), 2 hosts × 2 ranks
//! cargo run -p towerrec-comm --example comm_selftest -- --hosts 2 --ranks-per-host 2
//! # MPI (the topology comes from the launcher)
//! cargo build -p towerrec-comm --features mpi --example comm_selftest
//! mpirun -np 4 target/debug/examples/comm_selftest --backend mpi
//! ```
//!
//! `--bench-mib N` then times an AlltoAll in which every rank sends `N` MiB to every
//! other rank (`--bench-reps R` times) and prints each host's cross-host send rate.
//! `--bench-allreduce-kib K` times the hierarchical AllReduce of `K` KiB of f32 (`R`
//! calls, each after a barrier) and prints the slowest rank's median milliseconds per
//! call.

use std::process::ExitCode;
use std::time::Instant;
use towerrec_comm::{run_in_process, selftest, Comm, HierarchicalAllReduce, Phase, Topology};

const USAGE: &str = "usage: comm_selftest [--backend inprocess|mpi] [--hosts H] \
[--ranks-per-host L] [--bench-mib N] [--bench-allreduce-kib K] [--bench-reps R]";

struct Args {
    mpi: bool,
    hosts: usize,
    ranks_per_host: usize,
    bench_mib: usize,
    bench_allreduce_kib: usize,
    bench_reps: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        mpi: false,
        hosts: 2,
        ranks_per_host: 2,
        bench_mib: 0,
        bench_allreduce_kib: 0,
        bench_reps: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--backend" => {
                a.mpi = match value.as_str() {
                    "inprocess" => false,
                    "mpi" => true,
                    other => return Err(format!("unknown backend {other}\n{USAGE}")),
                }
            }
            "--hosts" => a.hosts = number()?,
            "--ranks-per-host" => a.ranks_per_host = number()?,
            "--bench-mib" => a.bench_mib = number()?,
            "--bench-allreduce-kib" => a.bench_allreduce_kib = number()?,
            "--bench-reps" => a.bench_reps = number()?.max(1),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// The self-test line and, with `--bench-mib`, the benchmark lines (on rank 0).
fn run_rank(comm: &Comm, args: &Args) -> towerrec_comm::Result<Vec<String>> {
    let mut lines = vec![selftest(comm)?.to_string()];
    if args.bench_mib > 0 {
        lines.extend(bench(comm, args.bench_mib, args.bench_reps)?);
    }
    if args.bench_allreduce_kib > 0 {
        lines.extend(bench_all_reduce(
            comm,
            args.bench_allreduce_kib,
            args.bench_reps,
        )?);
    }
    Ok(lines)
}

/// The hierarchical AllReduce of `kib` KiB of f32, `reps` calls each started together
/// (after a barrier); returns, on rank 0, the slowest rank's median time per call.
fn bench_all_reduce(comm: &Comm, kib: usize, reps: usize) -> towerrec_comm::Result<Vec<String>> {
    let mut reducer = HierarchicalAllReduce::new(comm)?;
    let mut buf = vec![1.0f32; (kib << 10) / 4];
    reducer.all_reduce(&mut buf, Phase::Control)?; // warm-up
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        comm.barrier()?;
        let t0 = Instant::now();
        reducer.all_reduce(&mut buf, Phase::Control)?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let (medians, _) = comm.all_gather(&[times[times.len() / 2]], Phase::Control)?;
    if comm.rank() != 0 {
        return Ok(Vec::new());
    }
    let slowest = medians.iter().copied().fold(0.0, f64::max);
    Ok(vec![format!(
        "bench all_reduce {kib} KiB x {reps}: median {:.3} ms a call (slowest rank)",
        slowest * 1e3
    )])
}

/// Every rank sends `mib` MiB to every other rank, `reps` times; returns, on rank 0,
/// one line per host with the cross-host bytes it sent per second.
fn bench(comm: &Comm, mib: usize, reps: usize) -> towerrec_comm::Result<Vec<String>> {
    let (p, me) = (comm.size(), comm.rank());
    let n = (mib << 20) / 8;
    let counts: Vec<usize> = (0..p).map(|d| if d == me { 0 } else { n }).collect();
    let send = vec![me as u64; n * (p - 1)];
    comm.all_to_all_v(&send, &counts, Phase::Control)?; // warm-up
    comm.barrier()?;
    let before = comm.traffic();
    let t0 = Instant::now();
    for _ in 0..reps {
        comm.all_to_all_v(&send, &counts, Phase::Control)?;
    }
    comm.barrier()?;
    let secs = t0.elapsed().as_secs_f64();
    let cross = comm.traffic().since(&before).total().cross_host;
    let (times, _) = comm.all_gather(&[secs], Phase::Control)?;
    let (crosses, _) = comm.all_gather(&[cross], Phase::Control)?;
    if me != 0 {
        return Ok(Vec::new());
    }
    let t = comm.topology();
    let slowest = times.iter().copied().fold(0.0, f64::max);
    Ok((0..t.hosts)
        .map(|host| {
            let bytes: u64 = t.host_ranks(host).map(|r| crosses[r]).sum();
            format!(
                "bench host {host}: {mib} MiB to each other rank x {reps}: \
                 {bytes} bytes cross-host in {slowest:.3} s = {:.1} Mbit/s",
                bytes as f64 * 8.0 / slowest / 1e6
            )
        })
        .collect())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.mpi {
        return run_mpi(&args);
    }
    let topology = match Topology::new(args.hosts, args.ranks_per_host) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run_in_process(topology, |comm| run_rank(&comm, &args)) {
        Ok(per_rank) => {
            for line in per_rank.into_iter().flatten() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selftest failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(args: &Args) -> ExitCode {
    let session = match towerrec_comm::init_mpi() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("MPI set-up failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = session.world().and_then(|comm| run_rank(&comm, args));
    match out {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {}: selftest failed: {e}", session.rank());
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: &Args) -> ExitCode {
    eprintln!("built without MPI: rebuild with `--features mpi`");
    ExitCode::from(2)
}
