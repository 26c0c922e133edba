//! Scoring a data stream with a model: predictions and AUC, log loss, normalized entropy.

use crate::error::{Error, Result};
use crate::forward::{default_group, PipelinedForward};
use crate::model::Model;
use crate::prefetch::{Prefetcher, ReadCounts, Share};
use crate::ranks::rank_slice;
use crate::read_check::check_read;
use std::borrow::Cow;
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
/// stream, scores its slice of each batch, and gets everyone's scores back.
pub fn score(
    model: &mut Model,
    stream: Box<dyn RecordStream>,
    batch_size: usize,
) -> Result<Scored> {
    // Every rank needs every label (the metrics are the global batch's), so it reads
    // whole batches.
    let mut reader = Prefetcher::start(stream, batch_size, 0, 2, Share::Whole);
    let mut probs = Vec::new();
    let mut labels = Vec::new();
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    // Batches are scored in groups, each group's lookups beside the previous group's
    // dense layers; logits come back in push order, so labels are kept at push time.
    let mut pipeline = PipelinedForward::new(model, default_group(batch_size));
    let mut done = |logits: &[f32], comm: Option<&Comm>| -> Result<()> {
        match comm {
            Some(comm) => {
                let (all, _) = comm.all_gather(logits, Phase::Control)?;
                probs.extend(all.iter().map(|&z| sigmoid(z)));
            }
            None => probs.extend(logits.iter().map(|&z| sigmoid(z))),
        }
        Ok(())
    };
    while let Some(batch) = reader.next() {
        let global = batch?.batch;
        labels.extend_from_slice(&global.labels);
        let mine = match rank_slice(&global, rank, world) {
            Cow::Borrowed(_) => Cow::Owned(global),
            Cow::Owned(slice) => Cow::Owned(slice),
        };
        pipeline.push(mine, &mut done)?;
    }
    pipeline.finish(&mut done)?;
    let skipped = reader.finish().skipped;
    Ok(Scored {
        probs,
        labels,
        skipped,
    })
}
