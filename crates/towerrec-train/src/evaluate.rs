//! Scoring a data stream with a model: predictions and AUC, log loss, normalized entropy.

use crate::cluster::rank_slice;
use crate::error::Result;
use crate::forward::PipelinedForward;
use crate::model::Model;
use crate::prefetch::Prefetcher;
use towerrec_comm::Phase;
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
}

/// Scores every sample of `stream`. On a sharded model every rank calls it with the same
/// stream, scores its slice of each batch, and gets everyone's scores back.
pub fn score(
    model: &mut Model,
    stream: Box<dyn RecordStream>,
    batch_size: usize,
) -> Result<Scored> {
    let mut reader = Prefetcher::start(stream, batch_size, 0, 2);
    let mut probs = Vec::new();
    let mut labels = Vec::new();
    let mut logits = Vec::new();
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    // Each batch's lookups overlap the previous batch's dense layers; the logits that
    // come back are the previous batch's, so its labels wait beside it.
    let mut pipeline = PipelinedForward::new(model);
    let mut pending: Option<Vec<f32>> = None;
    let mut collect = |pipeline: &PipelinedForward<'_>, logits: &mut Vec<f32>, batch_labels| {
        if let Some(comm) = pipeline.comm() {
            let (all, _) = comm.all_gather(logits, Phase::Control)?;
            *logits = all;
        }
        probs.extend(logits.iter().map(|&z| sigmoid(z)));
        labels.extend(batch_labels);
        Result::Ok(())
    };
    while let Some(batch) = reader.next() {
        let global = batch?;
        let finished = pipeline.push(&rank_slice(&global, rank, world), &mut logits)?;
        if let (true, Some(done)) = (finished, pending.take()) {
            collect(&pipeline, &mut logits, done)?;
        }
        pending = Some(global.labels);
    }
    if let (true, Some(done)) = (pipeline.finish(&mut logits)?, pending.take()) {
        collect(&pipeline, &mut logits, done)?;
    }
    let skipped = reader.finish();
    Ok(Scored {
        probs,
        labels,
        skipped,
    })
}
