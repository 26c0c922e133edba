//! Scoring a data stream with a model: predictions and AUC, log loss, normalized entropy.

use crate::error::{Error, Result};
use crate::forward::{default_group, PipelinedForward};
use crate::model::Model;
use crate::prefetch::{Prefetcher, ReadCounts, Share};
use crate::read_check::check_read;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::VecDeque;
use towerrec_comm::{Comm, Phase};
use towerrec_core::layers::activation::sigmoid;
use towerrec_core::metrics::EvalMetrics;
use towerrec_data::RecordStream;

/// Scores and labels of an evaluation pass.
pub struct Scored {
    pub probs: Vec<f32>,
    pub labels: Vec<f32>,
    /// Rows skipped as malformed.
    pub skipped: u64,
}

impl Scored {
    /// AUC, log loss and normalized entropy of the predictions.
    pub fn metrics(&self) -> EvalMetrics {
        EvalMetrics::compute(&self.probs, &self.labels)
    }

    /// [`Scored::metrics`] of a pass over `source` that read samples, skipped no more
    /// than `max_bad_fraction` of its rows as malformed and gave a finite log loss;
    /// else the error that says which.
    pub fn checked_metrics(&self, max_bad_fraction: f64, source: &str) -> Result<EvalMetrics> {
        let read = ReadCounts {
            rows: self.labels.len() as u64,
            skipped: self.skipped,
        };
        check_read("evaluation", read, true, max_bad_fraction, source)?;
        let m = self.metrics();
        if !m.logloss.is_finite() {
            return Err(Error::NonFinite {
                what: format!("evaluation log loss ({})", m.logloss),
                place: format!("the evaluation of {source}"),
                culprit: "the model's predictions are not finite".into(),
            });
        }
        Ok(m)
    }
}

/// Scores every sample of `stream`. On a sharded model every rank calls it with the same
/// stream, reads and scores its slice of each batch, and gets everyone's scores and
/// labels back (in global order: the slices are contiguous, by rank).
pub fn score(
    model: &mut Model,
    stream: Box<dyn RecordStream>,
    batch_size: usize,
) -> Result<Scored> {
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    let share = if world > 1 {
        Share::Rank(rank, world)
    } else {
        Share::Whole
    };
    let mut reader = Prefetcher::start(stream, batch_size, 0, 2, share);
    let mut probs = Vec::new();
    let mut labels = Vec::new();
    // Labels of the batches pushed and not yet scored: the pipeline returns logits in
    // push order.
    let pending: RefCell<VecDeque<Vec<f32>>> = RefCell::new(VecDeque::new());
    // Batches are scored in groups, each group's lookups beside the previous group's
    // dense layers.
    let mut pipeline = PipelinedForward::new(model, default_group(batch_size));
    let mut done = |logits: &[f32], comm: Option<&Comm>| -> Result<()> {
        let mine = pending
            .borrow_mut()
            .pop_front()
            .expect("a batch's labels are pushed with it");
        match comm {
            Some(comm) => {
                // (logit, label) pairs, so that one gather brings both.
                let pairs: Vec<f32> = logits
                    .iter()
                    .zip(&mine)
                    .flat_map(|(&z, &y)| [z, y])
                    .collect();
                let (all, _) = comm.all_gather(&pairs, Phase::Control)?;
                for pair in all.chunks_exact(2) {
                    probs.push(sigmoid(pair[0]));
                    labels.push(pair[1]);
                }
            }
            None => {
                probs.extend(logits.iter().map(|&z| sigmoid(z)));
                labels.extend_from_slice(&mine);
            }
        }
        Ok(())
    };
    while let Some(fed) = reader.next() {
        let mine = fed?.batch;
        pending.borrow_mut().push_back(mine.labels.clone());
        pipeline.push(Cow::Owned(mine), &mut done)?;
    }
    pipeline.finish(&mut done)?;
    let mut skipped = reader.finish().skipped;
    if let Some(comm) = model.comm() {
        // Each rank read its own rows; the metrics check every rank's malformed ones.
        let mut all = [skipped];
        comm.all_reduce(&mut all, Phase::Control)?;
        skipped = all[0];
    }
    Ok(Scored {
        probs,
        labels,
        skipped,
    })
}
