//! The evaluations of a training run: scoring the eval part of the data, checked for
//! emptiness, malformed rows and non-finite results, kept out of the per-step figures.

use super::checks::non_finite_culprit;
use super::EvalReport;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::evaluate::score;
use crate::model::Model;
use towerrec_comm::RankTraffic;
use towerrec_data::{open, Part};

/// [`evaluate`], keeping its phase times out of the model's and adding what it sent to
/// `traffic`.
pub(super) fn evaluate_aside(
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
/// An empty eval part, too many malformed rows or a non-finite log loss is an error.
fn evaluate(model: &mut Model, cfg: &Config, step: u64) -> Result<(EvalReport, u64)> {
    let stream = open(&cfg.data, Part::Eval, cfg.train.bad_rows, &cfg.base_dir)?;
    let started = std::time::Instant::now();
    let scored = score(model, stream, cfg.eval_batch_size())?;
    let seconds = started.elapsed().as_secs_f64();
    let source = cfg.data.describe(Part::Eval, &cfg.base_dir);
    let m = match scored.checked_metrics(cfg.train.max_bad_fraction, &source) {
        Err(Error::NonFinite { what, .. }) => {
            return Err(Error::NonFinite {
                what,
                place: format!("the evaluation at step {step}"),
                culprit: non_finite_culprit(model, None),
            })
        }
        other => other?,
    };
    Ok((
        EvalReport {
            step,
            split: "eval",
            auc: m.auc,
            logloss: m.logloss,
            ne: m.ne,
            samples: m.count,
            samples_per_sec: m.count as f64 / seconds.max(1e-9),
        },
        scored.skipped,
    ))
}
