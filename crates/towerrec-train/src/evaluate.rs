//! Scoring a data stream with a model: predictions and AUC, log loss, normalized entropy.

use crate::error::Result;
use crate::model::Model;
use crate::prefetch::Prefetcher;
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

/// Scores every sample of `stream`.
pub fn score(
    model: &mut Model,
    stream: Box<dyn RecordStream>,
    batch_size: usize,
) -> Result<Scored> {
    let mut reader = Prefetcher::start(stream, batch_size, 0, 2);
    let mut probs = Vec::new();
    let mut labels = Vec::new();
    let mut logits = Vec::new();
    while let Some(batch) = reader.next() {
        let batch = batch?;
        model.forward(&batch, &mut logits)?;
        probs.extend(logits.iter().map(|&z| sigmoid(z)));
        labels.extend_from_slice(&batch.labels);
    }
    let skipped = reader.finish();
    Ok(Scored {
        probs,
        labels,
        skipped,
    })
}
