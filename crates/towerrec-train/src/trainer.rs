//! The training loop: batches in, fused forward/backward/update, periodic evaluation,
//! the metrics log, checkpoints and resume; in one process, or as one rank of a cluster
//! (each rank trains on its slice of every global batch; see [`crate::cluster`]).
//!
//! Outputs in the run directory (written by rank 0): `config.toml` (the resolved config), `metrics.jsonl`
//! (one JSON object per logged step and per evaluation), `checkpoint.safetensors` and,
//! at the end, `summary.json`.

use crate::checkpoint::{self, Checkpoint, Progress};
use crate::cluster::{global_sum, rank_slice, ClusterReport};
use crate::config::{Config, ModelKind};
use crate::error::{Error, Result};
use crate::evaluate::score;
use crate::model::Model;
use crate::prefetch::Prefetcher;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use towerrec_comm::RankTraffic;
use towerrec_core::loss::bce_with_logits_sum;
use towerrec_core::metrics::EvalMetrics;
use towerrec_core::Batch;
use towerrec_data::{open, schema, DataConfig, Part};

/// How a run is started.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Run directory: metrics, checkpoints and the summary go here.
    pub out_dir: PathBuf,
    /// Continue from the checkpoint in `out_dir`.
    pub resume: bool,
    /// Write a checkpoint and stop after this many steps (to test or split a run).
    pub stop_after: Option<u64>,
    /// On a cluster: how long a collective may make no progress before the run fails
    /// (in-process; under MPI the session's watchdog, set at `init_mpi_with`, applies).
    pub watchdog: towerrec_comm::Watchdog,
}

/// One logged training step.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: u64,
    /// Mean loss over the steps since the last report.
    pub loss: f64,
    pub samples_per_sec: f64,
    pub lr: f64,
}

/// One evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub step: u64,
    pub split: &'static str,
    pub auc: Option<f64>,
    pub logloss: f64,
    pub ne: f64,
    pub samples: usize,
}

/// What a run ends with (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub auc: Option<f64>,
    pub logloss: f64,
    pub ne: f64,
    pub train_samples_per_sec: f64,
    pub steps: u64,
    pub model: ModelKind,
    pub params: usize,
    pub train_samples: u64,
    pub eval_samples: usize,
    pub skipped_train_rows: u64,
    pub skipped_eval_rows: u64,
    /// True when the run stopped early at `stop_after` (a checkpoint to resume from was written).
    pub stopped_early: bool,
    /// On a cluster: the topology, and time and bytes per step by phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
}

/// Receives progress as a run goes (the CLI draws a progress bar from it).
pub trait Observer {
    /// Called once before the first step. `total_steps` is known for synthetic data or
    /// when `max_steps` is set.
    fn on_start(&mut self, _params: usize, _total_steps: Option<u64>, _resumed_at: u64) {}
    fn on_step(&mut self, _report: &StepReport) {}
    fn on_eval(&mut self, _report: &EvalReport) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// The metrics log; a sink on ranks other than 0.
struct MetricsLog {
    path: PathBuf,
    out: Option<BufWriter<File>>,
}

impl MetricsLog {
    fn open(path: PathBuf, append: bool, write: bool) -> Result<Self> {
        if !write {
            return Ok(Self { path, out: None });
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Self {
            path,
            out: Some(BufWriter::new(file)),
        })
    }

    fn write<T: Serialize>(&mut self, record: &T) -> Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let line = serde_json::to_string(record).map_err(|e| Error::io(&self.path, e.into()))?;
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| Error::io(&self.path, e))
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::io(path, e.into()))?;
    std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
}

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

/// Failure injection for testing how a cluster goes down (docs/CLUSTER.md):
/// `TOWERREC_FAIL_RANK=R` makes rank `R` return an error right after its step
/// `TOWERREC_FAIL_STEP` (default 1) instead of going on.
const FAIL_RANK_ENV: &str = "TOWERREC_FAIL_RANK";
const FAIL_STEP_ENV: &str = "TOWERREC_FAIL_STEP";

/// The rank and step `TOWERREC_FAIL_RANK` / `TOWERREC_FAIL_STEP` ask to fail, if set.
fn injected_failure() -> Result<Option<(usize, u64)>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let Some(rank) = var(FAIL_RANK_ENV) else {
        return Ok(None);
    };
    let bad = |name: &str, v: &str| {
        Error::Cluster(format!("{name}={v}: expected a non-negative integer"))
    };
    let rank = rank.trim().parse().map_err(|_| bad(FAIL_RANK_ENV, &rank))?;
    let step = match var(FAIL_STEP_ENV) {
        Some(s) => s.trim().parse().map_err(|_| bad(FAIL_STEP_ENV, &s))?,
        None => 1,
    };
    Ok(Some((rank, step)))
}

/// [`evaluate`], keeping its phase times out of the model's and adding what it sent to
/// `traffic`.
fn evaluate_aside(
    model: &mut Model,
    cfg: &Config,
    step: u64,
    traffic: &mut Option<RankTraffic>,
) -> Result<(EvalReport, u64)> {
    let times = model.phase_times().clone();
    let before = model.comm().map(|c| c.traffic());
    let out = evaluate(model, cfg, step)?;
    model.restore_times(times);
    if let (Some(acc), Some(before), Some(comm)) = (traffic.as_mut(), before, model.comm()) {
        acc.add(&comm.traffic().since(&before));
    }
    Ok(out)
}

/// Evaluates `model` on the eval part of the data (every rank of a cluster calls it).
fn evaluate(model: &mut Model, cfg: &Config, step: u64) -> Result<(EvalReport, u64)> {
    let stream = open(&cfg.data, Part::Eval, cfg.train.bad_rows, &cfg.base_dir)?;
    let scored = score(model, stream, cfg.eval_batch_size())?;
    let m: EvalMetrics = scored.metrics();
    Ok((
        EvalReport {
            step,
            split: "eval",
            auc: m.auc,
            logloss: m.logloss,
            ne: m.ne,
            samples: m.count,
        },
        scored.skipped,
    ))
}

/// Trains as `cfg` says in this process, writing into `opts.out_dir`.
pub fn train(cfg: &Config, opts: &TrainOptions, observer: &mut dyn Observer) -> Result<Summary> {
    let data_schema = schema(&cfg.data, &cfg.base_dir)?;
    cfg.validate_against(&data_schema)?;
    let model = Model::build(&cfg.model, &cfg.optimizer, &data_schema, cfg.train.seed)?;
    train_model(cfg, opts, model, observer)
}

/// One optimizer step on a global batch: this rank's share of its mean loss (the sum
/// over ranks is the global mean) after forward, backward and update. On a cluster,
/// every rank calls it with the same global batch and trains on its slice.
pub fn train_step(
    model: &mut Model,
    global: &Batch,
    (dense_lr, sparse_lr): (f32, f32),
    logits: &mut Vec<f32>,
    grad: &mut Vec<f32>,
) -> Result<f64> {
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    let batch = rank_slice(global, rank, world);
    model.forward(&batch, logits)?;
    grad.resize(logits.len(), 0.0);
    let n = global.batch_size().max(1);
    let loss_sum = bce_with_logits_sum(logits, &batch.labels, Some(grad));
    let scale = 1.0 / n as f32;
    grad.iter_mut().for_each(|g| *g *= scale);
    model.backward_update(&batch, logits, grad, dense_lr, sparse_lr)?;
    Ok(loss_sum / n as f64)
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
    if root {
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    }
    let mut silent = Silent;
    let observer: &mut dyn Observer = if root { observer } else { &mut silent };
    let ckpt_path = out.join(checkpoint::CHECKPOINT_FILE);
    let mut progress = Progress::default();
    if opts.resume {
        let ckpt = Checkpoint::read(&ckpt_path)?;
        ckpt.apply(&mut model)?;
        progress = ckpt.progress()?;
    }
    if root {
        std::fs::write(out.join("config.toml"), cfg.to_toml())
            .map_err(|e| Error::io(out.join("config.toml"), e))?;
    }
    let mut log = MetricsLog::open(out.join("metrics.jsonl"), opts.resume, root)?;
    let first_step = progress.step;
    let traffic_start = model.comm().map(|c| c.traffic());
    // What evaluations send, kept out of the per-step figures.
    let mut eval_traffic = model.comm().map(|c| {
        let t = c.traffic();
        t.since(&t)
    });
    model.reset_times();
    let params = model.param_count();
    observer.on_start(params, total_steps(cfg), progress.step);

    let (dense_lr, sparse_lr) = (cfg.optimizer.dense_lr, cfg.optimizer.sparse_lr);
    let max_steps = cfg.train.max_steps.unwrap_or(u64::MAX);
    let mut logits = Vec::new();
    let mut grad = Vec::new();
    let mut window = (0.0f64, 0u64, 0u64, Instant::now()); // loss sum, steps, samples, start
    let mut train_time = 0.0f64;
    let mut train_samples_run = 0u64;
    let mut skipped_train = 0u64;
    let mut skipped_eval = 0u64;
    let mut last_eval: Option<EvalReport> = None;
    let mut stopped_early = false;
    let fail_at = injected_failure()?;
    let stall_at = crate::inject::stall_at()?;

    'epochs: while (progress.epoch as usize) < cfg.train.epochs && progress.step < max_steps {
        let stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir)?;
        let mut reader =
            Prefetcher::start(stream, cfg.train.batch_size, progress.batch_in_epoch, 4);
        let mut step_start = Instant::now();
        while let Some(batch) = reader.next() {
            let global = batch?;
            let factor = cfg.optimizer.schedule.factor(progress.step);
            let lrs = ((dense_lr * factor) as f32, (sparse_lr * factor) as f32);
            if let Some(comm) = model.comm() {
                comm.set_step(progress.step + 1);
            }
            let loss = train_step(&mut model, &global, lrs, &mut logits, &mut grad)?;
            let b = global.batch_size() as u64;
            progress.step += 1;
            if let Some((rank, step)) = fail_at {
                if progress.step == step && model.comm().map_or(0, |c| c.rank()) == rank {
                    return Err(Error::Cluster(format!(
                        "injected failure on rank {rank} at step {step} ({FAIL_RANK_ENV})"
                    )));
                }
            }
            crate::inject::stall_if_asked(stall_at, &model, progress.step);
            progress.batch_in_epoch += 1;
            progress.samples += b;
            train_samples_run += b;
            train_time += step_start.elapsed().as_secs_f64();
            window.0 += loss;
            window.1 += 1;
            window.2 += b;

            if progress.step % cfg.train.log_every == 0 {
                let report = StepReport {
                    step: progress.step,
                    loss: global_sum(&model, window.0)? / window.1 as f64,
                    samples_per_sec: window.2 as f64 / window.3.elapsed().as_secs_f64().max(1e-9),
                    lr: dense_lr * factor,
                };
                log.write(&report)?;
                observer.on_step(&report);
                window = (0.0, 0, 0, Instant::now());
            }
            if cfg.train.eval_every > 0 && progress.step % cfg.train.eval_every == 0 {
                let (report, skipped) =
                    evaluate_aside(&mut model, cfg, progress.step, &mut eval_traffic)?;
                skipped_eval = skipped;
                log.write(&report)?;
                observer.on_eval(&report);
                last_eval = Some(report);
                window.3 = Instant::now();
            }
            let at_stop = opts.stop_after == Some(progress.step);
            if at_stop
                || (cfg.train.checkpoint_every > 0
                    && progress.step % cfg.train.checkpoint_every == 0)
            {
                checkpoint::save(&ckpt_path, &mut model, cfg, progress)?;
                window.3 = Instant::now();
            }
            if at_stop {
                stopped_early = true;
                skipped_train += reader.finish();
                break 'epochs;
            }
            if progress.step >= max_steps {
                skipped_train += reader.finish();
                break 'epochs;
            }
            step_start = Instant::now();
        }
        skipped_train += reader.finish();
        progress.epoch += 1;
        progress.batch_in_epoch = 0;
    }

    let report = if stopped_early {
        last_eval
    } else {
        if progress.step % cfg.train.log_every != 0 && window.1 > 0 {
            let report = StepReport {
                step: progress.step,
                loss: global_sum(&model, window.0)? / window.1 as f64,
                samples_per_sec: window.2 as f64 / window.3.elapsed().as_secs_f64().max(1e-9),
                lr: dense_lr
                    * cfg
                        .optimizer
                        .schedule
                        .factor(progress.step.saturating_sub(1)),
            };
            log.write(&report)?;
            observer.on_step(&report);
        }
        checkpoint::save(&ckpt_path, &mut model, cfg, progress)?;
        let (report, skipped) = evaluate_aside(&mut model, cfg, progress.step, &mut eval_traffic)?;
        skipped_eval = skipped;
        log.write(&report)?;
        observer.on_eval(&report);
        Some(report)
    };
    let cluster = match traffic_start {
        Some(start) => Some(ClusterReport::gather(
            &model,
            &start,
            eval_traffic.as_ref(),
            progress.step - first_step,
        )?),
        None => None,
    };
    let summary = Summary {
        auc: report.as_ref().and_then(|r| r.auc),
        logloss: report.as_ref().map_or(f64::NAN, |r| r.logloss),
        ne: report.as_ref().map_or(f64::NAN, |r| r.ne),
        train_samples_per_sec: train_samples_run as f64 / train_time.max(1e-9),
        steps: progress.step,
        model: model.kind(),
        params,
        train_samples: progress.samples,
        eval_samples: report.as_ref().map_or(0, |r| r.samples),
        skipped_train_rows: skipped_train,
        skipped_eval_rows: skipped_eval,
        stopped_early,
        cluster,
    };
    if !stopped_early && root {
        write_json(&out.join("summary.json"), &summary)?;
    }
    Ok(summary)
}
