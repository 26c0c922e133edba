//! The subcommands: argument parsing and the glue from arguments to the library crates.

use crate::progress::Bar;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use towerrec_comm::Watchdog;
use towerrec_data::{BadRows, DataConfig, Part};
use towerrec_train::checkpoint::Checkpoint;
use towerrec_train::evaluate::score;
use towerrec_train::{Config, Model, TrainOptions};

/// What to do with a malformed data row.
#[derive(Clone, Copy, ValueEnum)]
pub enum BadRowsArg {
    /// Stop with an error naming the file, line and field.
    Fail,
    /// Skip the row, count it and report the count at the end.
    Skip,
}

impl From<BadRowsArg> for BadRows {
    fn from(b: BadRowsArg) -> Self {
        match b {
            BadRowsArg::Fail => BadRows::Fail,
            BadRowsArg::Skip => BadRows::Skip,
        }
    }
}

/// Which part of a data set.
#[derive(Clone, Copy, ValueEnum)]
pub enum PartArg {
    Train,
    Eval,
}

impl From<PartArg> for Part {
    fn from(p: PartArg) -> Self {
        match p {
            PartArg::Train => Part::Train,
            PartArg::Eval => Part::Eval,
        }
    }
}

#[derive(Args)]
pub struct TrainArgs {
    /// Run config (TOML). Without it: the embedded quickstart (synthetic Criteo-like data).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key: `--set train.batch_size=512 --set 'data.split={kind="tail",eval_rows=2000}'`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Run directory for metrics, checkpoints and the summary [default: runs/<config name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this directory from its checkpoint (its config.toml is used).
    #[arg(long, conflicts_with = "config")]
    resume: Option<PathBuf>,
    /// Training data file, overriding the config's.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Evaluation data file, overriding the config's (evaluates on the whole file).
    #[arg(long)]
    eval_data: Option<PathBuf>,
    /// Whether malformed rows stop the run or are skipped and counted [default: the config's, else fail].
    #[arg(long, value_enum)]
    bad_rows: Option<BadRowsArg>,
    /// Stop after this many steps (overrides train.max_steps).
    #[arg(long)]
    max_steps: Option<u64>,
    /// Write a checkpoint and stop after this many steps; `--resume` continues from it.
    #[arg(long)]
    stop_after: Option<u64>,
    /// Worker threads [default: the config's train.threads, else one per core]; on a
    /// cluster, shared among its ranks.
    #[arg(long)]
    threads: Option<usize>,
    /// Hosts of an in-process cluster (overrides cluster.hosts).
    #[arg(long)]
    hosts: Option<usize>,
    /// Ranks per host of an in-process cluster (overrides cluster.ranks_per_host).
    #[arg(long)]
    ranks_per_host: Option<usize>,
    /// Sharding plan (JSON from `towerrec plan`) [default: the config's cluster.plan, else greedy].
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Where the ranks run: threads of this process, or MPI processes (launch with
    /// `mpirun`; hosts and ranks per host come from the launcher; needs a build with
    /// `--features mpi`).
    #[arg(long, value_enum, default_value_t = Backend::InProcess)]
    backend: Backend,
    /// On a cluster: seconds a collective may make no progress (a rank stopped, hung or
    /// blocked) before the run ends with an error naming the collective, the step and
    /// the ranks not heard from. MPI: the job ends by MPI_Abort. In-process: the run
    /// fails, and the process exits if a blocked rank's thread is still not back 2 s
    /// later.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "300",
        value_parser = parse_collective_timeout,
        allow_negative_numbers = true
    )]
    collective_timeout: Watchdog,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args)]
pub struct EvalArgs {
    /// A checkpoint file, or a run directory holding checkpoint.safetensors.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Data file to score (same format as the run's data) [default: the run's eval split].
    #[arg(long)]
    data: Option<PathBuf>,
    /// Write one predicted probability per line here.
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Whether malformed rows stop the run or are skipped and counted.
    #[arg(long, value_enum, default_value = "fail")]
    bad_rows: BadRowsArg,
    /// Worker threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args)]
pub struct DatagenArgs {
    /// Config whose [data] section is synthetic [default: the embedded quickstart].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output file (preprocessed binary format).
    #[arg(long)]
    out: PathBuf,
    /// Which part to generate.
    #[arg(long, value_enum, default_value = "train")]
    part: PartArg,
}

#[derive(Args)]
pub struct PreprocessArgs {
    /// Config whose [data] section describes the text data.
    #[arg(long)]
    config: PathBuf,
    /// Input data file, overriding the config's.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output file (preprocessed binary format).
    #[arg(long)]
    out: PathBuf,
    /// Which part of the config's split to convert.
    #[arg(long, value_enum, default_value = "train")]
    part: PartArg,
    /// Whether malformed rows stop the conversion or are skipped and counted.
    #[arg(long, value_enum, default_value = "fail")]
    bad_rows: BadRowsArg,
}

pub fn set_threads(threads: usize) -> Result<()> {
    if threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .context("setting up the thread pool")?;
    }
    Ok(())
}

/// How long an in-process run waits, after its watchdog fired, for the blocked ranks'
/// threads before exiting the process (they may never come back).
const STALL_EXIT_GRACE: Duration = Duration::from_secs(2);

fn parse_collective_timeout(s: &str) -> std::result::Result<Watchdog, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, not {s:?}"))?;
    Watchdog::new(secs)
        .map(|w| w.exit_process_after(STALL_EXIT_GRACE))
        .map_err(|e| e.to_string())
}

/// Paths given on the command line are relative to the working directory, while paths
/// in a config are relative to the config file: make the former absolute.
fn absolute(p: Option<PathBuf>) -> Result<Option<PathBuf>> {
    p.map(|p| std::path::absolute(&p).with_context(|| format!("resolving {}", p.display())))
        .transpose()
}

fn load_config(path: Option<&Path>, overrides: &[String]) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p, overrides)?,
        None => Config::quickstart(overrides)?,
    })
}

/// Where a cluster's ranks run.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    InProcess,
    Mpi,
}

pub fn train(a: TrainArgs) -> Result<()> {
    let (mut cfg, out, resume) = match &a.resume {
        Some(dir) => {
            let ckpt = Checkpoint::read(&towerrec_train::checkpoint::resolve(dir))
                .with_context(|| format!("resuming from {}", dir.display()))?;
            let cfg = ckpt.config()?;
            (cfg, a.out.clone().unwrap_or_else(|| dir.clone()), true)
        }
        None => {
            let cfg = load_config(a.config.as_deref(), &a.set)?;
            let name = a.config.as_ref().and_then(|p| p.file_stem()).map_or_else(
                || "quickstart".to_string(),
                |s| s.to_string_lossy().into_owned(),
            );
            (
                cfg,
                a.out
                    .clone()
                    .unwrap_or_else(|| Path::new("runs").join(name)),
                false,
            )
        }
    };
    cfg.override_data(absolute(a.data.clone())?, absolute(a.eval_data.clone())?);
    if let Some(b) = a.bad_rows {
        cfg.train.bad_rows = b.into();
    }
    if let Some(n) = a.max_steps {
        cfg.train.max_steps = Some(n);
    }
    if let Some(h) = a.hosts {
        cfg.cluster.hosts = h;
    }
    if let Some(r) = a.ranks_per_host {
        cfg.cluster.ranks_per_host = r;
    }
    if let Some(p) = absolute(a.plan.clone())? {
        cfg.cluster.plan = Some(p);
    }
    if cfg.cluster.hosts == 0 || cfg.cluster.ranks_per_host == 0 {
        bail!("--hosts and --ranks-per-host must be at least 1");
    }
    let mpi = if a.backend == Backend::Mpi {
        Some(mpi::start(a.collective_timeout)?)
    } else {
        None
    };
    let result = train_on(&a, cfg, out, resume, mpi.as_ref());
    if let (Err(e), Some(session)) = (&result, &mpi) {
        // Returning would leave the other ranks blocked in a collective and this one in
        // MPI_Finalize: end the whole job instead.
        eprintln!(
            "error: rank {} of {}: {e:#}; calling MPI_Abort to stop the job",
            session.rank(),
            session.size()
        );
        session.abort(1);
    }
    result
}

/// The rest of `train`, once MPI (if asked for) is up.
fn train_on(
    a: &TrainArgs,
    mut cfg: Config,
    out: PathBuf,
    resume: bool,
    mpi: Option<&mpi::Session>,
) -> Result<()> {
    if let Some(session) = mpi {
        let t = session.topology();
        if a.hosts.is_some() || a.ranks_per_host.is_some() {
            bail!("with --backend mpi the launcher sets the hosts and ranks ({t}): drop --hosts and --ranks-per-host");
        }
        cfg.cluster.hosts = t.hosts;
        cfg.cluster.ranks_per_host = t.ranks_per_host;
    }
    let threads = a.threads.unwrap_or(cfg.train.threads);
    let threads = match (mpi, threads) {
        // One pool per process: share the host's cores among its ranks.
        (Some(s), 0) => (num_cores() / s.topology().ranks_per_host).max(1),
        _ => threads,
    };
    set_threads(threads)?;
    if resume && a.out.is_some() {
        bail!("--out cannot be combined with --resume: a run continues in its own directory");
    }
    let opts = TrainOptions {
        out_dir: out.clone(),
        resume,
        stop_after: a.stop_after,
        watchdog: a.collective_timeout,
    };
    let root = mpi.is_none_or(|s| s.rank() == 0);
    let mut bar = Bar::new(a.quiet || !root);
    let started = Instant::now();
    let threads = if threads == 0 {
        rayon::current_num_threads()
    } else {
        threads
    };
    let summary = match mpi {
        Some(session) => mpi::train(session, &cfg, &opts, &mut bar)?,
        None => towerrec_train::cluster::train_configured(&cfg, &opts, threads, &mut bar)?,
    };
    bar.finish();
    if !root {
        return Ok(());
    }
    let auc = summary
        .auc
        .map_or_else(|| "n/a (one class only)".into(), |v| format!("{v:.4}"));
    if summary.stopped_early {
        println!(
            "stopped at step {} as asked; checkpoint in {} (continue with --resume {})",
            summary.steps,
            out.display(),
            out.display()
        );
        return Ok(());
    }
    if summary.skipped_train_rows + summary.skipped_eval_rows > 0 {
        println!(
            "skipped malformed rows: {} in training data, {} in evaluation data",
            summary.skipped_train_rows, summary.skipped_eval_rows
        );
    }
    if let Some(c) = &summary.cluster {
        print_cluster(c);
    }
    println!(
        "final eval: auc {auc} logloss {:.5} ne {:.5} | {} steps, {:.0} train samples/s, {:.1}s | run in {}",
        summary.logloss,
        summary.ne,
        summary.steps,
        summary.train_samples_per_sec,
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `--backend mpi`: present only in builds with the `mpi` feature.
mod mpi {
    use anyhow::Result;
    use towerrec_train::{Config, Summary, TrainOptions};

    #[cfg(feature = "mpi")]
    pub use towerrec_comm::mpi::MpiSession as Session;

    /// Stands in for an MPI session in builds without MPI; never constructed.
    #[cfg(not(feature = "mpi"))]
    pub enum Session {}

    #[cfg(not(feature = "mpi"))]
    impl Session {
        pub fn topology(&self) -> towerrec_comm::Topology {
            match *self {}
        }
        pub fn rank(&self) -> usize {
            match *self {}
        }
        pub fn size(&self) -> usize {
            match *self {}
        }
        pub fn abort(&self, _code: i32) -> ! {
            match *self {}
        }
    }

    #[cfg(feature = "mpi")]
    pub fn start(watchdog: towerrec_comm::Watchdog) -> Result<Session> {
        Ok(towerrec_comm::mpi::init_mpi_with(watchdog)?)
    }

    #[cfg(not(feature = "mpi"))]
    pub fn start(_: towerrec_comm::Watchdog) -> Result<Session> {
        anyhow::bail!(
            "this towerrec was built without MPI: install OpenMPI (apt-get install -y \
             libopenmpi-dev openmpi-bin libclang-dev) and build with \
             `cargo build --release --features mpi`"
        )
    }

    /// This process's rank of an MPI run.
    #[cfg(feature = "mpi")]
    pub fn train(
        session: &Session,
        cfg: &Config,
        opts: &TrainOptions,
        observer: &mut dyn towerrec_train::Observer,
    ) -> Result<Summary> {
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
        let plan = cfg.plan_path().map(towerrec_plan::Plan::load).transpose()?;
        let plan = towerrec_train::cluster::resolve_plan(cfg, &schema, session.topology(), plan)?;
        let comm = session.world()?;
        towerrec_train::cluster::check_plan_fits(cfg, &schema, &plan, [comm.rank()])?;
        Ok(towerrec_train::cluster::train_rank(
            cfg, opts, comm, &plan, observer,
        )?)
    }

    #[cfg(not(feature = "mpi"))]
    pub fn train(
        session: &Session,
        _: &Config,
        _: &TrainOptions,
        _: &mut dyn towerrec_train::Observer,
    ) -> Result<Summary> {
        match *session {}
    }
}

/// The per-step traffic and phase times of a cluster run.
fn print_cluster(c: &towerrec_train::cluster::ClusterReport) {
    println!(
        "cluster {} hosts × {} ranks: bytes per step (all ranks)   intra-host    cross-host",
        c.hosts, c.ranks_per_host
    );
    for p in &c.bytes_per_step {
        if p.intra_host + p.cross_host > 0.0 {
            println!(
                "  {:<44} {:>12} {:>13}",
                p.phase,
                human_bytes(p.intra_host),
                human_bytes(p.cross_host)
            );
        }
    }
    let phases: Vec<String> = c
        .phase_ms_per_step
        .iter()
        .filter(|(_, ms)| *ms > 0.0)
        .map(|(name, ms)| format!("{name} {ms:.2}"))
        .collect();
    println!("  rank 0 ms per step: {}", phases.join(", "));
}

fn human_bytes(b: f64) -> String {
    if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

pub fn eval(a: EvalArgs) -> Result<()> {
    set_threads(a.threads.unwrap_or(0))?;
    let ckpt = Checkpoint::read(&a.checkpoint)?;
    let mut cfg = ckpt.config()?;
    cfg.override_data(None, absolute(a.data)?);
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
    let mut model = Model::build(&cfg.model, &cfg.optimizer, &schema, cfg.train.seed)?;
    ckpt.apply(&mut model)?;
    let stream = towerrec_data::open(&cfg.data, Part::Eval, a.bad_rows.into(), &cfg.base_dir)?;
    let scored = score(&mut model, stream, cfg.eval_batch_size())?;
    if let Some(path) = &a.predictions {
        let text: String = scored.probs.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let m = scored.metrics();
    println!("{}", serde_json::to_string(&m)?);
    if scored.skipped > 0 {
        eprintln!("skipped {} malformed rows", scored.skipped);
    }
    Ok(())
}

fn write_part(cfg: &Config, part: Part, bad_rows: BadRows, out: &Path) -> Result<()> {
    let mut stream = towerrec_data::open(&cfg.data, part, bad_rows, &cfg.base_dir)?;
    let started = Instant::now();
    let rows = towerrec_data::write_binary(stream.as_mut(), out, |n| {
        if n % 1_000_000 == 0 {
            eprintln!("{n} rows");
        }
    })?;
    println!(
        "wrote {rows} rows to {} in {:.1}s{}",
        out.display(),
        started.elapsed().as_secs_f64(),
        match stream.skipped() {
            0 => String::new(),
            n => format!(" (skipped {n} malformed rows)"),
        }
    );
    Ok(())
}

pub fn datagen(a: DatagenArgs) -> Result<()> {
    let cfg = load_config(a.config.as_deref(), &a.set)?;
    if !matches!(cfg.data, DataConfig::Synthetic { .. }) {
        bail!("datagen needs a config whose [data] format is \"synthetic\"; use `towerrec preprocess` for files");
    }
    write_part(&cfg, a.part.into(), BadRows::Fail, &a.out)
}

pub fn preprocess(a: PreprocessArgs) -> Result<()> {
    let mut cfg = Config::load(&a.config, &a.set)?;
    cfg.override_data(absolute(a.data)?, None);
    write_part(&cfg, a.part.into(), a.bad_rows.into(), &a.out)
}
