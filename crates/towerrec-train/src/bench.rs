//! Timing of whole training and inference steps on batches held in memory, so that the
//! measured rate is the model's, not the reader's (`towerrec bench model`), in one
//! process or on an in-process cluster.

use crate::cluster::{build_rank_model, prepare_in_process, run_ranks};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::forward::PipelinedForward;
use crate::model::Model;
use crate::ranks::rank_slice;
use crate::trainer::train_step;
use serde::Serialize;
use std::time::Instant;
use towerrec_comm::{Comm, Topology};
use towerrec_core::Batch;
use towerrec_data::{next_batch, open, schema, Part};
use towerrec_plan::Plan;

/// What to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Forward, loss, backward and the fused updates.
    Train,
    /// Forward only, over a stream of batches in groups: each group's lookups, table
    /// by table over its batches, beside the previous group's dense layers
    /// ([`PipelinedForward`]), as `towerrec evaluate` scores.
    Infer,
    /// Forward only, each batch finished before the next starts (serving one request
    /// batch at a time).
    InferSerial,
}

/// Measured rates of one benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub mode: Mode,
    pub batch_size: usize,
    pub steps_per_rep: usize,
    /// Batches per group of the pipelined inference (`Mode::Infer` only).
    pub group: Option<usize>,
    /// Samples per second of each repetition.
    pub samples_per_sec: Vec<f64>,
    pub median_samples_per_sec: f64,
    /// Milliseconds per step in each phase, averaged over the timed steps.
    pub phase_ms_per_step: Vec<(String, f64)>,
}

/// The median of a non-empty list (NaN for an empty one).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Loads up to `count` training batches of `cfg`'s data into memory.
pub fn load_batches(cfg: &Config, count: usize) -> Result<Vec<Batch>> {
    let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir)?;
    let mut batches = Vec::with_capacity(count);
    while batches.len() < count {
        match next_batch(stream.as_mut(), cfg.train.batch_size)? {
            Some(b) if b.batch_size() == cfg.train.batch_size => batches.push(b),
            _ => break,
        }
    }
    Ok(batches)
}

/// How long to time: `reps` repetitions of `steps` steps after `warmup` untimed ones.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub warmup: usize,
    pub steps: usize,
    pub reps: usize,
    /// Batches per group of the pipelined inference ([`Mode::Infer`]); `warmup` and
    /// `steps` are rounded up to multiples of it, so that every repetition holds whole
    /// groups.
    pub group: usize,
}

/// Times whole steps of `cfg`'s model in this process, cycling over `batches`.
pub fn bench_model(
    cfg: &Config,
    batches: &[Batch],
    mode: Mode,
    timing: Timing,
) -> Result<BenchResult> {
    if mode == Mode::Train {
        cfg.refuse_int8("training")?;
    }
    let data_schema = schema(&cfg.data, &cfg.base_dir)?;
    cfg.validate_against(&data_schema)?;
    let mut model = Model::for_run(cfg, &data_schema, cfg.train.seed, None)?;
    bench_built(&mut model, cfg, batches, mode, timing)
}

/// Times whole steps of `cfg`'s model on an in-process cluster of `topology` (each
/// global batch split over the ranks, as in training); rank 0's timings.
pub fn bench_cluster(
    cfg: &Config,
    batches: &[Batch],
    mode: Mode,
    timing: Timing,
    topology: Topology,
    plan: Option<Plan>,
    threads_per_rank: usize,
) -> Result<BenchResult> {
    let (data_schema, plan) =
        prepare_in_process(cfg, topology, plan, None, &mut crate::trainer::Silent)?;
    let results = run_ranks(topology, threads_per_rank, |comm: Comm| {
        let mut model = build_rank_model(cfg, &data_schema, comm, &plan, None)?;
        bench_built(&mut model, cfg, batches, mode, timing)
    })?;
    Ok(results.into_iter().next().expect("rank 0's result"))
}

fn bench_built(
    model: &mut Model,
    cfg: &Config,
    batches: &[Batch],
    mode: Mode,
    timing: Timing,
) -> Result<BenchResult> {
    if batches.is_empty() {
        return Err(Error::Config {
            file: "bench".into(),
            message: "the data has fewer samples than one batch".into(),
        });
    }
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    let timing = match mode {
        Mode::Infer => {
            let group = timing.group.max(1);
            let whole = |n: usize| n.div_ceil(group) * group;
            Timing {
                warmup: whole(timing.warmup),
                steps: whole(timing.steps),
                reps: timing.reps,
                group,
            }
        }
        Mode::Train | Mode::InferSerial => timing,
    };
    let (rates, times) = match mode {
        Mode::Train => {
            let (mut logits, mut grad) = (Vec::new(), Vec::new());
            let rates = time_steps(
                model,
                batches,
                timing,
                |model, batch| train_step(model, batch, lrs, &mut logits, &mut grad).map(drop),
                |model| model.reset_times(),
            )?;
            (rates, model.phase_times().clone())
        }
        Mode::InferSerial => {
            let mut logits = Vec::new();
            let rates = time_steps(
                model,
                batches,
                timing,
                |model, batch| model.forward(&rank_slice(batch, rank, world), &mut logits),
                |model| model.reset_times(),
            )?;
            (rates, model.phase_times().clone())
        }
        Mode::Infer => {
            // Scoring a stream as `towerrec evaluate` does: groups of batches, each
            // group's lookups beside the previous group's dense layers.
            let mut pipeline = PipelinedForward::new(model, timing.group);
            let rates = time_steps(
                &mut pipeline,
                batches,
                timing,
                |p, batch| p.push(rank_slice(batch, rank, world), |_, _| Ok(())),
                |p| p.reset_times(),
            )?;
            let times = pipeline.phase_times().clone();
            pipeline.finish(|_, _| Ok(()))?;
            (rates, times)
        }
    };
    let Timing { steps, reps, .. } = timing;
    let timed = (reps * steps) as f64;
    let phase_ms_per_step = times
        .entries()
        .iter()
        .filter(|(_, t)| *t > 0.0)
        .map(|(name, t)| (name.to_string(), t * 1e3 / timed))
        .collect();
    Ok(BenchResult {
        mode,
        phase_ms_per_step,
        batch_size: cfg.train.batch_size,
        steps_per_rep: steps,
        group: (mode == Mode::Infer).then_some(timing.group),
        median_samples_per_sec: median(&rates),
        samples_per_sec: rates,
    })
}

/// Runs `warmup` untimed steps, resets the phase times, then times `reps` repetitions
/// of `steps` steps, cycling over `batches`; returns the samples/s of each.
fn time_steps<'a, S>(
    state: &mut S,
    batches: &'a [Batch],
    Timing {
        warmup,
        steps,
        reps,
        ..
    }: Timing,
    mut step: impl FnMut(&mut S, &'a Batch) -> Result<()>,
    reset_times: impl FnOnce(&mut S),
) -> Result<Vec<f64>> {
    let batch = |i: usize| &batches[i % batches.len()];
    for i in 0..warmup {
        step(state, batch(i))?;
    }
    reset_times(state);
    let mut rates = Vec::with_capacity(reps);
    let mut i = warmup;
    for _ in 0..reps {
        let start = Instant::now();
        let mut samples = 0usize;
        for _ in 0..steps {
            step(state, batch(i))?;
            samples += batch(i).batch_size();
            i += 1;
        }
        rates.push(samples as f64 / start.elapsed().as_secs_f64().max(1e-9));
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_lists() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
