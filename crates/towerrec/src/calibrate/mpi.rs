//! `--backend mpi`: every rank of an `mpirun` job measures at once; rank 0 writes the
//! file. Present only in builds with the `mpi` feature.

use super::*;

#[cfg(not(feature = "mpi"))]
pub(super) fn run(_: &CalibrateArgs, _: &Settings) -> Result<()> {
    bail!(
        "this towerrec was built without MPI: install OpenMPI (apt-get install -y \
         libopenmpi-dev openmpi-bin libclang-dev) and build with \
         `cargo build --release --features mpi`, or use --backend in-process"
    )
}

#[cfg(feature = "mpi")]
pub(super) fn run(a: &CalibrateArgs, s: &Settings) -> Result<()> {
    let session = towerrec_comm::mpi::init_mpi()?;
    let result = measure(a, s, &session);
    if let Err(e) = &result {
        if session.size() > 1 {
            // One rank's failure must not leave the others waiting in a collective.
            eprintln!("towerrec calibrate, rank {}: {e:#}", session.rank());
            session.abort(1);
        }
    }
    result
}

#[cfg(feature = "mpi")]
fn measure(
    a: &CalibrateArgs,
    s: &Settings,
    session: &towerrec_comm::mpi::MpiSession,
) -> Result<()> {
    let topo = session.topology();
    if a.hosts.is_some() || a.ranks_per_host.is_some() {
        bail!(
            "with --backend mpi the launcher sets the hosts and ranks ({} × {}): drop --hosts and --ranks-per-host",
            topo.hosts,
            topo.ranks_per_host
        );
    }
    let started = Instant::now();
    let world = session.world()?;
    let root = world.rank() == 0;
    // The ranks of a host share its cores.
    let threads = a
        .threads
        .unwrap_or_else(|| (num_cores() / topo.ranks_per_host).max(1));
    let sizes = s.sizes;
    let progress = Progress::new(a.quiet || !root, (PROBES + 4 * sizes.len()) as u64);
    let barrier = || -> Result<()> { Ok(world.barrier()?) };
    let machine = measure_machine(s, threads, &progress, &barrier)?;
    // A chip is the mean rank.
    let mine = machine.to_vec();
    let (all, _) = world.all_gather(&mine, Phase::Control)?;
    let n = mine.len();
    let ranks = world.size();
    let mean: Vec<f64> = (0..n)
        .map(|i| (0..ranks).map(|r| all[r * n + i]).sum::<f64>() / ranks as f64)
        .collect();
    let per_chip = machine.with_figures(&mean);
    // Every host's group at once, then every peer group at once.
    let intra = world.intra_host()?;
    let shown = root.then_some(&progress);
    let intra_sweeps = if intra.size() > 1 {
        Some(sweep_both(&intra, &world, sizes, s, shown)?)
    } else {
        None
    };
    let peers = world.peers()?;
    let cross_sweeps = if peers.size() > 1 {
        Some(sweep_both(&peers, &world, sizes, s, shown)?)
    } else {
        None
    };
    // Every rank computes alike, then meets the others: what the first collective
    // after computation waits.
    let waits = super::sync_wait::measure(&world)?;
    progress.finish();
    if !root {
        return Ok(());
    }
    let nominal = Level::uniform(1.0, sig(per_chip.copy_gbs / 2.0));
    let intra_level = intra_sweeps.as_ref().map_or(nominal, Sweeps::level);
    let cross_level = cross_sweeps.as_ref().map(Sweeps::level);
    let mut notes = Vec::new();
    if intra_sweeps.is_none() {
        notes.push(
            "one rank per host: the intra-host level is nominal (1 µs, half the copy bandwidth)",
        );
    }
    if threads * topo.ranks_per_host > num_cores() {
        notes.push("more threads than cores on a host: the figures are optimistic");
    }
    let source = format!(
        "towerrec calibrate over MPI ({} × {} ranks, {threads} threads each, all measuring at once, \
         a chip is their mean): f32 GEMM {GEMM_N}³, MLP {} forward and backward, a {} MiB copy and \
         random gathers from a {} table; all_to_all_v and all_reduce of f32 within each host and \
         among each rank's peers, α–β fitted to medians; the wait at a barrier after the same work \
         on every rank{}{}",
        topo.hosts,
        topo.ranks_per_host,
        dims_label(),
        s.copy_bytes / MIB,
        human_bytes(s.table_bytes),
        if notes.is_empty() { "" } else { "; " },
        notes.join("; ")
    );
    let mut hw = hardware(topo, &per_chip, intra_level, cross_level, source);
    hw.system.sync_wait = waits;
    let mut header = format!(
        "# This machine, measured by `towerrec calibrate --backend mpi` ({} host(s) × {} rank(s), \
         {threads} threads per rank, {} s per measurement).\n",
        topo.hosts,
        topo.ranks_per_host,
        s.budget.as_secs_f64()
    );
    header += &per_chip.comment("Mean rank");
    let curve: Vec<String> = hw
        .system
        .sync_wait
        .iter()
        .map(|[w, t]| format!("{w} µs of work: {t}"))
        .collect();
    header += &format!(
        "# Wait at the first collective after the same work on every rank (mean of the ranks, µs): {}.\n",
        curve.join(", ")
    );
    let mut shown_sweeps = Vec::new();
    if let Some(sw) = &intra_sweeps {
        header += &sw.comment(&format!("the {} ranks of a host", topo.ranks_per_host));
        shown_sweeps.push((sw, "within a host"));
    }
    if let Some(sw) = &cross_sweeps {
        header += &sw.comment(&format!("{} peers, one per host", topo.hosts));
        shown_sweeps.push((sw, "across hosts"));
    }
    write_hardware(&a.out, &hw, &header)?;
    print_summary(&per_chip, &hw, &shown_sweeps, &a.out, started);
    Ok(())
}
