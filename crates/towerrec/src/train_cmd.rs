//! `towerrec train`: a run from a config or resumed from a checkpoint, in this process,
//! on an in-process cluster or as one rank of an MPI job; the run directory claimed
//! (locked, never over another run by accident) before anything is built.

use crate::commands::{absolute, check_threads, load_config, set_threads, Backend, BadRowsArg};
use crate::progress::Bar;
use anyhow::{bail, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use towerrec_comm::Watchdog;
use towerrec_data::BadRows;
use towerrec_train::checkpoint::{self, Checkpoint};
use towerrec_train::files::Files;
use towerrec_train::rundir::{self, Claim, RunDir, SUMMARY_FILE};
use towerrec_train::{Config, TrainOptions};

#[derive(Args)]
pub struct TrainArgs {
    /// Run config (TOML). Without it: the embedded quickstart (synthetic Criteo-like data).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config key: `--set train.batch_size=512 --set 'data.split={kind="tail",eval_rows=2000}'`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Run directory for metrics, checkpoints and the summary [default: runs/<config
    /// name>, or runs/<config name>-2, -3, … where that holds a run]; a directory that
    /// holds another run is refused unless --overwrite.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this directory from its checkpoint, with the checkpoint's
    /// config. A resume may change only how long and where the run goes: --max-steps,
    /// --stop-after, --threads, --hosts, --ranks-per-host, --plan, --backend,
    /// --max-bad-fraction, --data/--eval-data (same content, checked; a run that
    /// evaluates on a split of its data keeps it and takes no --eval-data), and --set on
    /// train.max_steps, train.epochs, train.threads, train.log_every, train.eval_every,
    /// train.checkpoint_every, train.eval_batch_size, train.max_bad_fraction,
    /// train.fingerprint_whole_mib and cluster.*; anything else is refused by name.
    #[arg(long, conflicts_with = "config")]
    resume: Option<PathBuf>,
    /// Replace the run already in --out instead of refusing: its files move aside (into
    /// .towerrec-replaced) when the new run starts writing, and are removed once it has
    /// finished; if it fails they are put back (after a kill, by the next command in
    /// the directory).
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// With --resume: accept data files whose content changed since the checkpoint.
    #[arg(long, requires = "resume")]
    allow_data_change: bool,
    /// Training data file, overriding the config's.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Evaluation data file, overriding the config's (evaluates on the whole file).
    #[arg(long)]
    eval_data: Option<PathBuf>,
    /// Whether malformed rows stop the run or are skipped and counted [default: the config's, else fail].
    #[arg(long, value_enum)]
    bad_rows: Option<BadRowsArg>,
    /// With --bad-rows skip: the largest share of malformed rows in a pass over the
    /// data before the run fails [default: the config's train.max_bad_fraction, else 0.01].
    #[arg(long, value_name = "FRACTION", value_parser = crate::commands::parse_fraction)]
    max_bad_fraction: Option<f64>,
    /// Stop after this many steps (overrides train.max_steps).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_steps: Option<u64>,
    /// Write a checkpoint and stop after this many steps of this run (on a resume,
    /// counted from the checkpoint's step); `--resume` continues from it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    stop_after: Option<u64>,
    /// Worker threads [default: the config's train.threads, else one per core]; on a
    /// cluster, shared among its ranks.
    #[arg(long)]
    threads: Option<usize>,
    /// Hosts of an in-process cluster (overrides cluster.hosts).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..4097))]
    hosts: Option<u64>,
    /// Ranks per host of an in-process cluster (overrides cluster.ranks_per_host).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..4097))]
    ranks_per_host: Option<u64>,
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

/// What the arguments ask to run: the config, the run directory, and the checkpoint
/// when resuming.
struct Resolved {
    cfg: Config,
    out: PathBuf,
    resume: Option<Checkpoint>,
}

/// The config of a resumed run: the checkpoint's, with only the changes a resume
/// allows.
fn resume_config(a: &TrainArgs, ckpt: &Checkpoint) -> Result<Config> {
    // The flags that set config keys are judged with `--set`, by one rule.
    let mut sets = a.set.clone();
    if let Some(b) = a.bad_rows {
        let name = match BadRows::from(b) {
            BadRows::Fail => "fail",
            BadRows::Skip => "skip",
        };
        sets.push(format!("train.bad_rows=\"{name}\""));
    }
    Ok(ckpt.config()?.with_resume_overrides(&sets)?)
}

fn resolve(a: &TrainArgs) -> Result<Resolved> {
    let (mut cfg, out, resume) = match &a.resume {
        Some(dir) => {
            if a.out.is_some() {
                bail!(
                    "--out cannot be combined with --resume: a run continues in its own directory"
                );
            }
            if !dir.exists() {
                bail!("--resume {}: no such run directory", dir.display());
            }
            crate::commands::recover_run_dir(dir)?;
            let ckpt = Checkpoint::read(&checkpoint::resolve(dir))?;
            (resume_config(a, &ckpt)?, dir.clone(), Some(ckpt))
        }
        None => {
            let cfg = load_config(a.config.as_deref(), &a.set)?;
            let name = a.config.as_ref().and_then(|p| p.file_stem()).map_or_else(
                || "quickstart".to_string(),
                |s| s.to_string_lossy().into_owned(),
            );
            let out = match &a.out {
                Some(out) => out.clone(),
                None => fresh_run_dir(&name),
            };
            (cfg, out, None)
        }
    };
    if let (Some(_), Some(e)) = (&resume, &a.eval_data) {
        // A resume keeps the run's data; the split decides what evaluates.
        let split = cfg.data.split();
        if *split != towerrec_data::Split::None {
            bail!(
                "--eval-data {}: the run in {} evaluates on a part of its data file ({}); a \
                 resume keeps that split, so it takes no other evaluation file (start a new \
                 run to change the data, or score the checkpoint with `towerrec eval --data`)",
                e.display(),
                out.display(),
                split.describe()
            );
        }
    }
    cfg.override_data(absolute(a.data.clone())?, absolute(a.eval_data.clone())?);
    if let Some(b) = a.bad_rows {
        cfg.train.bad_rows = b.into();
    }
    if let Some(f) = a.max_bad_fraction {
        cfg.train.max_bad_fraction = f;
    }
    if let Some(n) = a.max_steps {
        cfg.train.max_steps = Some(n);
    }
    if let Some(h) = a.hosts {
        cfg.cluster.hosts = h as usize;
    }
    if let Some(r) = a.ranks_per_host {
        cfg.cluster.ranks_per_host = r as usize;
    }
    if let Some(p) = absolute(a.plan.clone())? {
        cfg.cluster.plan = Some(p);
    }
    if cfg.cluster.world_size() > towerrec_train::config::MAX_WORLD_SIZE {
        bail!(
            "--hosts × --ranks-per-host must be at most {}",
            towerrec_train::config::MAX_WORLD_SIZE
        );
    }
    Ok(Resolved { cfg, out, resume })
}

/// The default run directory: `runs/NAME`, or the first of `runs/NAME-2`, `runs/NAME-3`,
/// … that holds no run, so that running the same config again never needs
/// `--overwrite` (an explicit `--out` does).
fn fresh_run_dir(name: &str) -> PathBuf {
    let runs = Path::new("runs");
    std::iter::once(runs.join(name))
        .chain((2u32..).map(|i| runs.join(format!("{name}-{i}"))))
        .find(|dir| towerrec_train::rundir::run_files(dir).is_empty())
        .expect("an unbounded sequence has a free name")
}

/// Whether `r` resumes a run that has already finished (summary written, no step
/// left); says so.
fn already_finished(r: &Resolved) -> Result<bool> {
    let Some(ckpt) = &r.resume else {
        return Ok(false);
    };
    let progress = ckpt.progress()?;
    if !r.out.join(SUMMARY_FILE).exists() || !towerrec_train::trainer::finished(&r.cfg, progress) {
        return Ok(false);
    }
    println!(
        "the run in {} already finished at step {}; nothing to do (its results: {}; to \
         train further, resume with a larger --max-steps or --set train.epochs=N)",
        r.out.display(),
        progress.step,
        r.out.join(SUMMARY_FILE).display()
    );
    Ok(true)
}

/// The rule on the run's files (`towerrec_train::files`): what the run reads, and its
/// run directory, where no input may be a file the run replaces.
fn check_files(a: &TrainArgs, r: &Resolved) -> Result<Files> {
    let mut files = Files::new("train");
    // A resumed run's config is the checkpoint's own, and its checkpoint the run's.
    let config = if r.resume.is_some() {
        None
    } else {
        a.config.as_deref()
    };
    files.config(config, &r.cfg)?;
    if let Some(p) = r.cfg.plan_path() {
        files.input("the plan", &p)?;
    }
    if r.resume.is_some() {
        files.run_dir("--resume", &r.out, rundir::resume_rewrites)?;
    } else {
        files.run_dir("--out", &r.out, rundir::new_run_replaces)?;
    }
    Ok(files)
}

pub fn train(a: TrainArgs) -> Result<()> {
    let resolved = resolve(&a)?;
    let files = check_files(&a, &resolved)?;
    if already_finished(&resolved)? {
        return Ok(());
    }
    let Resolved { cfg, out, resume } = resolved;
    let mpi = if a.backend == Backend::Mpi {
        Some(mpi::start(a.collective_timeout)?)
    } else {
        None
    };
    let replacing = a.overwrite && !rundir::run_files(&out).is_empty();
    let run = RunPlace {
        out: &out,
        resume: resume.is_some(),
        replacing,
    };
    let result = match train_on(&a, cfg, run, mpi.as_ref(), &files) {
        Err(e)
            if replacing
                && mpi.as_ref().is_none_or(|s| s.rank() == 0)
                && e.downcast_ref::<mpi::AgreedFailure>().is_none() =>
        {
            Err(anyhow::anyhow!(
                "{e:#}; the run that was in {} is kept as it was (--overwrite replaces it only \
                 once the new run has finished)",
                out.display()
            ))
        }
        r => r,
    };
    if let (Err(e), Some(_)) = (&result, &mpi) {
        if e.downcast_ref::<mpi::AgreedFailure>().is_some() {
            // Every rank met a set-up error, rank 0 has said it once, and none is inside
            // a collective: all leave through MPI_Finalize.
            // Finalizes MPI (without MPI, Session is an empty stand-in with no Drop).
            #[allow(clippy::drop_non_drop)]
            drop(mpi);
            std::process::exit(1);
        }
    }
    if let (Err(e), Some(session)) = (&result, &mpi) {
        // Returning would leave the other ranks blocked in a collective and this one in
        // MPI_Finalize: end the whole job instead.
        towerrec_comm::print_line(&format!(
            "error: rank {} of {}: {e:#}; calling MPI_Abort to stop the job",
            session.rank(),
            session.size()
        ));
        session.abort(1);
    }
    result
}

/// Where a run goes: its directory, whether it resumes there, and whether it replaces
/// another run there (`--overwrite`).
struct RunPlace<'a> {
    out: &'a Path,
    resume: bool,
    replacing: bool,
}

/// The rest of `train`, once MPI (if asked for) is up.
fn train_on(
    a: &TrainArgs,
    mut cfg: Config,
    RunPlace {
        out,
        resume,
        replacing,
    }: RunPlace,
    mpi: Option<&mpi::Session>,
    files: &Files,
) -> Result<()> {
    if let Some(session) = mpi {
        let t = session.topology();
        if a.hosts.is_some() || a.ranks_per_host.is_some() {
            bail!("with --backend mpi the launcher sets the hosts and ranks ({t}): drop --hosts and --ranks-per-host");
        }
        cfg.cluster.hosts = t.hosts;
        cfg.cluster.ranks_per_host = t.ranks_per_host;
    }
    let threads = match a.threads {
        Some(n) => check_threads(n, "--threads")?,
        None => check_threads(cfg.train.threads, "train.threads")?,
    };
    let threads = match (mpi, threads) {
        // One pool per process: share the host's cores among its ranks.
        (Some(s), 0) => (crate::commands::num_cores() / s.topology().ranks_per_host).max(1),
        _ => threads,
    };
    set_threads(threads)?;
    let opts = TrainOptions {
        out_dir: out.to_path_buf(),
        resume,
        stop_after: a.stop_after,
        overwrite: a.overwrite,
        allow_data_change: a.allow_data_change,
        watchdog: a.collective_timeout,
    };
    let root = mpi.is_none_or(|s| s.rank() == 0);
    // Held until the run ends: a second run in the same directory is refused.
    let _dir = if root {
        let claim = if resume {
            Claim::Resume
        } else {
            Claim::New {
                overwrite: a.overwrite,
            }
        };
        let dir = RunDir::claim(out, claim)?;
        if let Some(note) = dir.recovered() {
            eprintln!("{note}");
        }
        crate::commands::clean(files);
        Some(dir)
    } else {
        None
    };
    if root {
        for note in setting_notes(&cfg, mpi.is_some())? {
            eprintln!("{note}");
        }
    }
    let mut bar = Bar::new(a.quiet || !root);
    let started = Instant::now();
    let threads = if threads == 0 {
        rayon::current_num_threads()
    } else {
        threads
    };
    let outcome = match mpi {
        Some(session) => mpi::train(session, &cfg, &opts, &mut bar),
        None => towerrec_train::cluster::train_configured(&cfg, &opts, threads, &mut bar)
            .map_err(anyhow::Error::from),
    };
    bar.finish();
    if !root {
        return outcome.map(|_| ());
    }
    // The run's report, a failed run's too, once the directory is the run's (not after a
    // failure at start-up, which leaves it untouched, nor where a failed --overwrite
    // run has put the run it replaced back).
    let report = match &outcome {
        _ if !bar.began() => None,
        Err(_) if replacing => None,
        Err(e) => {
            // The reason goes into the run's log too, for a later `towerrec report`.
            let why = format!("{e:#}");
            if let Err(log) = rundir::log_failure(out, &why) {
                eprintln!("warning: the failure was not logged in the run directory: {log}");
            }
            Some(crate::report::write_for_run(out, Some(why)))
        }
        Ok(_) => Some(crate::report::write_for_run(out, None)),
    };
    match report {
        Some(Err(e)) => eprintln!("warning: the run's report was not written: {e:#}"),
        Some(Ok(path)) if outcome.is_err() => {
            eprintln!("report of the failed run: {}", path.display())
        }
        _ => {}
    }
    let summary = outcome?;
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
    let steady = summary
        .steady_train_samples_per_sec
        .map(|s| format!(" ({s:.0} after each pass's first step)"))
        .unwrap_or_default();
    println!(
        "final eval: auc {auc} logloss {:.5} ne {:.5} | {} steps, {:.0} train samples/s{steady}, {:.1}s | run in {}",
        summary.logloss,
        summary.ne,
        summary.steps,
        summary.train_samples_per_sec,
        started.elapsed().as_secs_f64(),
        out.display()
    );
    println!("report: {}", out.join(rundir::REPORT_FILE).display());
    Ok(())
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
    /// A set-up error every rank has agreed on (see [`agree`]), already said by rank 0.
    #[derive(Debug)]
    pub struct AgreedFailure;

    impl std::fmt::Display for AgreedFailure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("set-up failed on every rank (rank 0 said why)")
        }
    }

    impl std::error::Error for AgreedFailure {}

    #[cfg(feature = "mpi")]
    pub fn train(
        session: &Session,
        cfg: &Config,
        opts: &TrainOptions,
        observer: &mut dyn towerrec_train::Observer,
    ) -> Result<Summary> {
        let comm = session.world()?;
        let setup = || -> Result<(towerrec_plan::Plan, _)> {
            let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
            let plan = cfg.plan_path().map(towerrec_plan::Plan::load).transpose()?;
            let topology = session.topology();
            let recorded = towerrec_train::trainer::resumed_towers(opts)?;
            let plan = towerrec_train::cluster::resolve_plan(
                cfg,
                &schema,
                topology,
                plan,
                recorded.as_deref(),
            )?;
            let (size, rank) = (comm.size(), comm.rank());
            let need = towerrec_train::cluster::check_run_fits(cfg, &schema, &plan, size, [rank])?;
            Ok((plan, need))
        };
        let (plan, (need, whose)) = agree(&comm, setup())?;
        if comm.rank() == 0 {
            observer.on_memory(&whose, &need);
        }
        Ok(towerrec_train::cluster::train_rank(
            cfg, opts, comm, &plan, observer,
        )?)
    }

    /// Every rank's set-up outcome, gathered before the run's first collective: all
    /// succeeded, or rank 0 prints each distinct error once with the ranks that met it
    /// and every rank fails with an [`AgreedFailure`].
    #[cfg(feature = "mpi")]
    fn agree<T>(comm: &towerrec_comm::Comm, outcome: Result<T>) -> Result<T> {
        let mine = outcome.as_ref().err().map(|e| format!("{e:#}"));
        let chars: Vec<u32> = mine
            .as_deref()
            .unwrap_or("")
            .chars()
            .map(u32::from)
            .collect();
        let (all, counts) = comm.all_gather(&chars, towerrec_comm::Phase::Control)?;
        let mut errors: Vec<(String, Vec<usize>)> = Vec::new();
        let mut at = 0;
        for (rank, &n) in counts.iter().enumerate() {
            let text: String = all[at..at + n]
                .iter()
                .filter_map(|&c| char::from_u32(c))
                .collect();
            at += n;
            if text.is_empty() {
                continue;
            }
            match errors.iter_mut().find(|(t, _)| *t == text) {
                Some((_, ranks)) => ranks.push(rank),
                None => errors.push((text, vec![rank])),
            }
        }
        if errors.is_empty() {
            return outcome;
        }
        let size = comm.size();
        let text = errors
            .iter()
            .map(|(t, ranks)| match ranks.len() {
                n if n == size => format!("every rank: {t}"),
                1 => format!("rank {} of {size}: {t}", ranks[0]),
                _ => {
                    let r: Vec<String> = ranks.iter().map(usize::to_string).collect();
                    format!("ranks {} of {size}: {t}", r.join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join("\nerror: ");
        // Rank 0 says it before the barrier: a rank that left first would have mpirun
        // end the job before rank 0 had printed anything.
        if comm.rank() == 0 {
            towerrec_comm::print_line(&format!("error: {text}"));
        }
        comm.barrier()?;
        Err(AgreedFailure.into())
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

/// Settings this run does not use, or uses otherwise than their names say, said before
/// it starts (none is ignored silently).
fn setting_notes(cfg: &Config, mpi: bool) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let plan = cfg
        .plan_path()
        .map(|p| towerrec_plan::Plan::load(&p))
        .transpose()?;
    let one_process = !mpi && cfg.cluster.world_size() == 1 && plan.is_none();
    if cfg.cluster.drift.is_some() && one_process {
        notes.push(
            "warning: [cluster.drift] is ignored: this run is one process, whose tables are \
             not sharded (the drift watch re-plans a cluster's rows; docs/OPER.md)"
                .to_string(),
        );
    }
    let q = cfg.cluster.qcomms;
    if !q.is_fp32() {
        notes.push(match one_process {
            true => "warning: [cluster.qcomms] is ignored: this run is one process, which \
                     sends nothing (docs/DISTRIBUTED.md, \"Quantized communication\")"
                .to_string(),
            false => format!(
                "note: quantized communication: pooled embeddings travel as {}, their \
                 gradients as {} (output_dist, tower_intra, tower_peer), dense gradients as {} \
                 (docs/DISTRIBUTED.md)",
                q.forward, q.backward, q.dense
            ),
        });
    }
    notes.extend(dense_precision_note(&cfg.model));
    if let Some(listed) = cfg.model.towers.as_ref().and_then(|t| t.features.as_ref()) {
        notes.push(format!(
            "note: model.towers.features (or file) lists the towers, as configs before the \
             plan held them did: read once, these {} towers are this run's (its checkpoint \
             records them, and on a cluster its plan holds them; its config.toml says \
             count = {}); in a new config give count, and towers other than the naive \
             split by a plan (towerrec plan --towers-file; docs/DMT.md)",
            listed.len(),
            listed.len()
        ));
    }
    let model_towers = cfg.model.towers.is_some();
    match &plan {
        Some(p) if model_towers && p.towers.is_empty() => notes.push(format!(
            "warning: the plan {} has no towers: the model's towers (model.towers) run their \
             Tower Modules after a flat output exchange, without SPTT (docs/DMT.md)",
            cfg.plan_path().unwrap_or_default().display()
        )),
        Some(p) if !model_towers && !p.towers.is_empty() => notes.push(format!(
            "note: the plan {} has {} towers and the model none (no model.towers): the \
             embeddings cross hosts by SPTT, without Tower Modules (SPTT alone; docs/DMT.md)",
            cfg.plan_path().unwrap_or_default().display(),
            p.towers.len()
        )),
        _ => {}
    }
    Ok(notes)
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
    let spread: Vec<String> = c
        .phase_ms_per_step_by_rank
        .iter()
        .filter_map(|(name, ranks)| {
            let lo = ranks.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ranks.iter().copied().fold(0.0, f64::max);
            (hi > 0.0).then(|| format!("{name} {lo:.2}–{hi:.2}"))
        })
        .collect();
    println!("  ms per step, fastest–slowest rank: {}", spread.join(", "));
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

/// What computes the dense layers' products, when they are not plain fp32
/// (docs/CONFIG.md, `model.dense_precision`).
fn dense_precision_note(model: &towerrec_train::config::ModelConfig) -> Option<String> {
    use towerrec_core::matmul::{bf16_kernel, DensePrecision};
    let kernel = bf16_kernel();
    match (model.dense_precision, model.dense_precision_auto) {
        (DensePrecision::Bf16, auto) => Some(format!(
            "note: model.dense_precision = \"{}\": the dense layers' products take bf16 \
             operands and sum in f32 (f32 master weights), computed by {kernel} \
             (docs/CONFIG.md)",
            if auto { "auto\" chose \"bf16" } else { "bf16" }
        )),
        (DensePrecision::Fp32, true) => Some(format!(
            "note: model.dense_precision = \"auto\" chose \"fp32\": bf16 would be \
             computed by {kernel} (docs/CONFIG.md)"
        )),
        _ => None,
    }
}
