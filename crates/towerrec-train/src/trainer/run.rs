//! One training run, start to end: start-up (resume, data check), the epochs and steps,
//! periodic logs, evaluations and checkpoints, and the summary.
//!
//! Start-up ends once the model is built, the checkpoint applied and the data opened;
//! only then is the run directory changed ([`crate::rundir::begin`]), so a run that
//! fails at start-up leaves it as it was.

use super::checks::{at, place};
use super::drift::{self, DriftWatch};
use super::evaluation::evaluate_aside;
use super::log::{write_json, MetricsLog};
use super::{train_step_on_slice, EvalReport, Observer, Silent, StepReport, Summary, TrainOptions};
use crate::checkpoint::{self, Checkpoint, DataFile, Progress};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::prefetch::{Prefetcher, ReadCounts, Share};
use crate::ranks::global_sum;
use crate::read_check::check_read;
use crate::report::{gather_bytes, gather_phase_ms, ClusterReport};
use crate::rundir::{self, METRICS_FILE, SUMMARY_FILE};
use crate::times::PhaseTimes;
use std::path::PathBuf;
use std::time::Instant;
use towerrec_comm::RankTraffic;
use towerrec_data::{open, open_epoch, DataConfig, Part, RecordStream};

/// Steps the run will take, where the data says how many samples it has.
fn total_steps(cfg: &Config) -> Option<u64> {
    let from_data = match &cfg.data {
        DataConfig::Synthetic(s) if s.train_samples > 0 => {
            Some(s.train_samples.div_ceil(cfg.train.batch_size as u64) * cfg.train.epochs as u64)
        }
        _ => None,
    };
    match (from_data, cfg.train.max_steps) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a run of `cfg` that stands at `progress` has no step left to take.
pub fn finished(cfg: &Config, progress: Progress) -> bool {
    progress.epoch as usize >= cfg.train.epochs
        || progress.step >= cfg.train.max_steps.unwrap_or(u64::MAX)
}

/// Epoch `epoch`'s training rows, in file order or, with `train.shuffle`, in the
/// epoch's own random order (docs/DATA.md, "Shuffling"). The order is a function of
/// the data, the seed and the epoch: every rank of a cluster reads the same global
/// order, and a resumed run passes over the same batches it trained on.
fn open_train(cfg: &Config, epoch: u64) -> Result<Box<dyn RecordStream>> {
    Ok(open_epoch(
        &cfg.data,
        Part::Train,
        cfg.train.bad_rows,
        &cfg.base_dir,
        cfg.train.shuffle_of(epoch),
    )?)
}

/// Fails where `part` of the data yields no sample (reading up to its first).
fn check_has_samples(cfg: &Config, part: Part) -> Result<()> {
    let mut stream = open(&cfg.data, part, cfg.train.bad_rows, &cfg.base_dir)?;
    if stream.next_record()?.is_some() {
        return Ok(());
    }
    let name = match part {
        Part::Train => "training",
        Part::Eval => "evaluation",
    };
    let read = ReadCounts {
        rows: 0,
        skipped: stream.skipped(),
    };
    let source = cfg.data.describe(part, &cfg.base_dir);
    check_read(name, read, true, cfg.train.max_bad_fraction, &source)
}

/// Loss, steps and samples since the last report, when the window started, and the
/// phase times and traffic (and evaluations' traffic) as they stood then.
struct Window {
    loss: f64,
    steps: u64,
    samples: u64,
    start: Instant,
    times: PhaseTimes,
    traffic: Option<(RankTraffic, RankTraffic)>,
}

impl Window {
    /// A window starting now, on `model` whose evaluations have sent `eval_traffic`.
    fn new(model: &Model, eval_traffic: Option<&RankTraffic>) -> Self {
        let traffic = model
            .comm()
            .zip(eval_traffic)
            .map(|(c, e)| (c.traffic(), e.clone()));
        Self {
            loss: 0.0,
            steps: 0,
            samples: 0,
            start: Instant::now(),
            times: model.phase_times().clone(),
            traffic,
        }
    }
}

/// Why a pass over the training data ended.
enum PassEnd {
    /// The data ran out: the epoch is done.
    Data,
    /// `max_steps` was reached.
    MaxSteps,
    /// `stop_after` was reached: a checkpoint was written and the run stops.
    StopAfter,
}

/// A run under way: the model, where it stands and what it has written.
struct Run<'a> {
    cfg: &'a Config,
    opts: &'a TrainOptions,
    model: Model,
    observer: &'a mut dyn Observer,
    progress: Progress,
    log: MetricsLog,
    ckpt_path: PathBuf,
    data_files: Vec<DataFile>,
    window: Window,
    train_time: f64,
    samples_run: u64,
    /// The part of `train_time` and `samples_run` in the first step of each pass.
    first_steps: (f64, u64),
    skipped_train: u64,
    skipped_eval: u64,
    last_eval: Option<EvalReport>,
    /// What evaluations send, kept out of the per-step figures.
    eval_traffic: Option<RankTraffic>,
    fail_at: Option<(usize, u64)>,
    stall_at: Option<(usize, u64)>,
    /// The step at which `--stop-after` stops the run (counted from where it started).
    stop_at: Option<u64>,
    /// `[cluster.drift]` on a cluster: the rows read since the last check.
    drift: Option<DriftWatch>,
    /// After the rows moved inside the run: the config with the plan they moved to,
    /// which checkpoints then hold.
    moved_cfg: Option<Config>,
}

/// Trains `model` (whole, or this rank's part of a sharded one) as `cfg` says. On a
/// cluster every rank calls it; only rank 0 writes files and calls `observer`.
pub fn train_model(
    cfg: &Config,
    opts: &TrainOptions,
    mut model: Model,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let out = &opts.out_dir;
    let root = model.comm().is_none_or(|c| c.rank() == 0);
    if root && !opts.resume {
        rundir::check_new_run(out, opts.overwrite)?;
    }
    let mut silent = Silent;
    let observer: &mut dyn Observer = if root { observer } else { &mut silent };
    let ckpt_path = out.join(checkpoint::CHECKPOINT_FILE);
    let mut progress = Progress::default();
    if opts.resume {
        let ckpt = Checkpoint::read(&ckpt_path)?;
        if !opts.allow_data_change {
            ckpt.check_data(cfg)?;
        }
        ckpt.check_vocab(cfg)?;
        ckpt.check_towers(&mut model)?;
        ckpt.apply(&mut model)?;
        progress = ckpt.checked_progress(cfg)?;
    }
    // The data must open, and hold a sample of each part, before the directory is
    // touched: an empty evaluation part found after hours of training is no use.
    check_has_samples(cfg, Part::Train)?;
    check_has_samples(cfg, Part::Eval)?;
    let drift = match model.embeddings() {
        crate::embeddings::Embeddings::Sharded(sharded) => {
            let watch = DriftWatch::new(cfg)?;
            if watch.is_some() && !sharded.plan().towers.is_empty() {
                // The watch rates the plan and re-plans as flat OPER plans: not towers.
                return Err(Error::Plan(
                    "cluster.drift: the plan has DMT towers, and the drift watch rates and \
                     re-plans flat plans only: drop [cluster.drift] or train a plan without towers"
                        .into(),
                ));
            }
            watch
        }
        _ => None,
    };
    let data_files = if root {
        checkpoint::data_files(cfg)?
    } else {
        Vec::new()
    };
    let eval_traffic = model.comm().map(|c| {
        let t = c.traffic();
        t.since(&t)
    });
    let window = Window::new(&model, None);
    let mut run = Run {
        cfg,
        opts,
        model,
        observer,
        progress,
        // Nowhere until the directory is the run's (`Run::begun`).
        log: MetricsLog::open(out.join(METRICS_FILE), false)?,
        ckpt_path,
        data_files,
        window,
        train_time: 0.0,
        samples_run: 0,
        first_steps: (0.0, 0),
        skipped_train: 0,
        skipped_eval: 0,
        last_eval: None,
        eval_traffic,
        fail_at: crate::inject::failure_at()?,
        stall_at: crate::inject::stall_at()?,
        stop_at: opts.stop_after.map(|n| progress.step.saturating_add(n)),
        drift,
        moved_cfg: None,
    };
    if root {
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        if let Err(e) = rundir::begin(out, cfg, opts.resume.then_some(progress.step)) {
            let _ = rundir::end(out, false);
            return Err(e);
        }
    }
    let result = run.begun(root);
    if root {
        // Where it replaced a run (--overwrite): the old files go once this run has
        // finished, and come back if it failed (the error is the run's; the CLI says
        // the old run is as it was).
        let ended = rundir::end(out, result.is_ok());
        if result.is_ok() {
            ended?;
        }
    }
    result
}

/// The part of each global batch this process reads: its rank's slice on a cluster.
fn rank_share(model: &Model) -> Share {
    match model.comm() {
        Some(c) => Share::Rank(c.rank(), c.size()),
        None => Share::Whole,
    }
}

/// A resumed run's drift window before its stop, counted again from the data: the
/// batches since the last check within the epoch, each rank its part as it read them.
fn recount_window(
    cfg: &Config,
    model: &Model,
    watch: &mut DriftWatch,
    progress: Progress,
) -> Result<()> {
    let k = watch.window_before(progress.step, progress.batch_in_epoch);
    if k == 0 {
        return Ok(());
    }
    let stream = open_train(cfg, progress.epoch)?;
    let share = rank_share(model);
    let first = progress.batch_in_epoch - k;
    let mut reader = Prefetcher::start(stream, cfg.train.batch_size, first, 4, share);
    for _ in 0..k {
        let Some(fed) = reader.next() else {
            break;
        };
        let fed = fed?;
        watch.count(&fed.batch, fed.global_size as u64);
    }
    reader.finish();
    Ok(())
}

impl Run<'_> {
    /// The run once its directory is its own: the metrics log opened, a resumed drift
    /// window counted again, then [`Run::go`].
    fn begun(&mut self, root: bool) -> Result<Summary> {
        self.log = MetricsLog::open(self.opts.out_dir.join(METRICS_FILE), root)?;
        if let (Some(watch), true) = (&mut self.drift, self.opts.resume) {
            recount_window(self.cfg, &self.model, watch, self.progress)?;
        }
        self.go(root)
    }

    /// The epochs, the final evaluation and the summary.
    fn go(&mut self, root: bool) -> Result<Summary> {
        let first_step = self.progress.step;
        let traffic_start = self.model.comm().map(|c| c.traffic());
        self.model.reset_times();
        self.window = Window::new(&self.model, self.eval_traffic.as_ref());
        let params = self.model.param_count();
        self.observer
            .on_start(params, total_steps(self.cfg), self.progress.step);
        let mut stopped_early = false;
        while !finished(self.cfg, self.progress) && !stopped_early {
            stopped_early = self.epoch()?;
        }
        let report = if stopped_early {
            self.last_eval.clone()
        } else {
            Some(self.finish()?)
        };
        let cluster = match traffic_start {
            Some(start) => Some(ClusterReport::gather(
                &self.model,
                &start,
                self.eval_traffic.as_ref(),
                self.progress.step - first_step,
            )?),
            None => None,
        };
        let summary = Summary {
            auc: report.as_ref().and_then(|r| r.auc),
            logloss: report.as_ref().map_or(f64::NAN, |r| r.logloss),
            ne: report.as_ref().map_or(f64::NAN, |r| r.ne),
            train_samples_per_sec: self.samples_run as f64 / self.train_time.max(1e-9),
            steady_train_samples_per_sec: self.steady_rate(),
            steps: self.progress.step,
            model: self.model.kind(),
            params,
            dense_params: self.model.dense_param_count(),
            embedding_params: self.model.embedding_param_count(),
            flops_per_sample: self.model.forward_flops_per_sample(),
            train_samples: self.progress.samples,
            eval_samples: report.as_ref().map_or(0, |r| r.samples),
            eval_samples_per_sec: report.as_ref().map_or(0.0, |r| r.samples_per_sec),
            skipped_train_rows: self.skipped_train,
            skipped_eval_rows: self.skipped_eval,
            stopped_early,
            cluster,
        };
        if !stopped_early && root {
            write_json(&self.opts.out_dir.join(SUMMARY_FILE), &summary)?;
        }
        Ok(summary)
    }

    /// One pass over the training data (the rest of one, when resumed mid-epoch);
    /// true when the run stopped early as asked.
    fn epoch(&mut self) -> Result<bool> {
        let cfg = self.cfg;
        let stream = open_train(cfg, self.progress.epoch)?;
        let from_start = self.progress.batch_in_epoch == 0;
        if let (Some(watch), true) = (&mut self.drift, from_start) {
            watch.reset();
        }
        let share = rank_share(&self.model);
        let mut reader = Prefetcher::start(
            stream,
            cfg.train.batch_size,
            self.progress.batch_in_epoch,
            4,
            share,
        );
        let outcome = self.steps(&mut reader);
        let read = reader.finish();
        self.skipped_train += read.skipped;
        match outcome? {
            PassEnd::Data => {
                self.check_train_read(read, from_start)?;
                self.progress.epoch += 1;
                self.progress.batch_in_epoch = 0;
                Ok(false)
            }
            // Stopped partway: the epoch stays open, to be resumed where it stood.
            PassEnd::MaxSteps => Ok(false),
            PassEnd::StopAfter => Ok(true),
        }
    }

    fn check_train_read(&self, read: ReadCounts, from_start: bool) -> Result<()> {
        let cfg = self.cfg;
        check_read(
            "training",
            read,
            from_start,
            cfg.train.max_bad_fraction,
            &cfg.data.describe(Part::Train, &cfg.base_dir),
        )
    }

    /// The steps of one pass, until the data or the run ends.
    fn steps(&mut self, reader: &mut Prefetcher) -> Result<PassEnd> {
        let cfg = self.cfg;
        let (dense_lr, sparse_lr) = (cfg.optimizer.dense_lr, cfg.optimizer.sparse_lr);
        let max_steps = cfg.train.max_steps.unwrap_or(u64::MAX);
        let (mut logits, mut grad) = (Vec::new(), Vec::new());
        // The steps' time starts once every rank is ready: what a rank spent waiting for
        // the others to finish setting up is not training time.
        if let Some(comm) = self.model.comm() {
            comm.barrier()?;
        }
        let mut step_start = Instant::now();
        // The pass's first step waits for the reader's start (and pays the buffers'
        // first touch, the collectives' set-up): the steady rate leaves it out.
        let mut first_of_pass = true;
        while let Some(batch) = reader.next() {
            let fed = batch?;
            let factor = cfg.optimizer.schedule.factor(self.progress.step);
            let lrs = ((dense_lr * factor) as f32, (sparse_lr * factor) as f32);
            let p = self.progress;
            if let Some(comm) = self.model.comm() {
                comm.set_step(p.step + 1);
            }
            let (batch, n) = (&fed.batch, fed.global_size);
            let loss = train_step_on_slice(&mut self.model, batch, n, lrs, &mut logits, &mut grad)
                .map_err(|e| at(e, place(p.step + 1, p.epoch, p.batch_in_epoch + 1)))?;
            let b = n as u64;
            if let Some(watch) = &mut self.drift {
                watch.count(batch, b);
            }
            self.progress.step += 1;
            self.progress.batch_in_epoch += 1;
            self.progress.samples += b;
            self.inject_failure()?;
            crate::inject::stall_if_asked(self.stall_at, &self.model, self.progress.step);
            let took = step_start.elapsed().as_secs_f64();
            self.samples_run += b;
            self.train_time += took;
            if first_of_pass {
                self.first_steps.0 += took;
                self.first_steps.1 += b;
                first_of_pass = false;
            }
            self.window.loss += loss;
            self.window.steps += 1;
            self.window.samples += b;
            self.after_step(dense_lr * factor)?;
            if self.stop_at == Some(self.progress.step) {
                return Ok(PassEnd::StopAfter);
            }
            if self.progress.step >= max_steps {
                return Ok(PassEnd::MaxSteps);
            }
            step_start = Instant::now();
        }
        Ok(PassEnd::Data)
    }

    /// Train samples per second over the steps after the first of each pass, if any.
    fn steady_rate(&self) -> Option<f64> {
        let samples = self.samples_run - self.first_steps.1;
        let secs = self.train_time - self.first_steps.0;
        (samples > 0).then(|| samples as f64 / secs.max(1e-9))
    }

    fn inject_failure(&self) -> Result<()> {
        if let Some((rank, step)) = self.fail_at {
            if self.progress.step == step && self.model.comm().map_or(0, |c| c.rank()) == rank {
                return Err(Error::Cluster(format!(
                    "injected failure on rank {rank} at step {step} ({})",
                    crate::inject::FAIL_RANK_ENV
                )));
            }
        }
        Ok(())
    }

    /// The step's log line, evaluation and checkpoint, where they are due.
    fn after_step(&mut self, lr: f64) -> Result<()> {
        let (cfg, step) = (self.cfg, self.progress.step);
        if step % cfg.train.log_every == 0 {
            self.log_window(lr)?;
        }
        if cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0 {
            self.evaluate()?;
            self.window.start = Instant::now();
        }
        self.watch_drift()?;
        let at_stop = self.stop_at == Some(step);
        if at_stop || (cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0) {
            self.save()?;
            self.window.start = Instant::now();
        }
        Ok(())
    }

    /// A drift check, where one is due: logged, and said where a re-plan was written.
    fn watch_drift(&mut self) -> Result<()> {
        let Some(watch) = &mut self.drift else {
            return Ok(());
        };
        let crate::embeddings::Embeddings::Sharded(sharded) = self.model.embeddings() else {
            return Ok(());
        };
        let step = self.progress.step;
        let dir = std::path::absolute(&self.opts.out_dir)
            .map_err(|e| Error::io(&self.opts.out_dir, e))?;
        let Some((report, fresh)) = watch.check(sharded.comm(), sharded.plan(), step, &dir)? else {
            return Ok(());
        };
        if let (Some(plan), true) = (&fresh, report.moved) {
            self.model.move_rows(plan)?;
            let mut cfg = self.cfg.clone();
            cfg.cluster.plan.clone_from(&report.replan);
            self.moved_cfg = Some(cfg);
        }
        self.log.write(&drift::log_line(&report))?;
        self.observer.on_drift(&report);
        Ok(())
    }

    /// Logs the mean loss and speed since the last line, and each rank's time and the
    /// bytes per phase (collectives: every rank calls it).
    fn log_window(&mut self, lr: f64) -> Result<()> {
        let w = &self.window;
        let samples_per_sec = w.samples as f64 / w.start.elapsed().as_secs_f64().max(1e-9);
        let loss = global_sum(&self.model, w.loss)? / w.steps as f64;
        let times = self.model.phase_times().since(&w.times);
        let phase_ms_by_rank = gather_phase_ms(&self.model, &times, w.steps)?;
        let bytes_per_step = match (self.model.comm(), &w.traffic, &self.eval_traffic) {
            (Some(comm), Some((start, eval_start)), Some(eval_now)) => {
                let mine = comm
                    .traffic()
                    .since(start)
                    .since(&eval_now.since(eval_start));
                Some(gather_bytes(comm, &mine, w.steps)?.1)
            }
            _ => None,
        };
        let report = StepReport {
            step: self.progress.step,
            loss,
            samples_per_sec,
            lr,
            phase_ms_by_rank,
            bytes_per_step,
        };
        self.log.write(&report)?;
        self.observer.on_step(&report);
        self.window = Window::new(&self.model, self.eval_traffic.as_ref());
        Ok(())
    }

    fn evaluate(&mut self) -> Result<EvalReport> {
        let (report, skipped) = evaluate_aside(
            &mut self.model,
            self.cfg,
            self.progress.step,
            &mut self.eval_traffic,
        )?;
        self.skipped_eval = skipped;
        self.log.write(&report)?;
        self.observer.on_eval(&report);
        self.last_eval = Some(report.clone());
        Ok(report)
    }

    fn save(&mut self) -> Result<()> {
        // A run whose rows moved resumes on the plan they moved to.
        let cfg = self.moved_cfg.as_ref().unwrap_or(self.cfg);
        checkpoint::save(
            &self.ckpt_path,
            &mut self.model,
            cfg,
            self.progress,
            &self.data_files,
        )
    }

    /// The last log line, the final checkpoint and the final evaluation.
    fn finish(&mut self) -> Result<EvalReport> {
        let cfg = self.cfg;
        if !self.progress.step.is_multiple_of(cfg.train.log_every) && self.window.steps > 0 {
            let lr = cfg.optimizer.dense_lr
                * cfg
                    .optimizer
                    .schedule
                    .factor(self.progress.step.saturating_sub(1));
            self.log_window(lr)?;
        }
        self.save()?;
        self.evaluate()
    }
}
