//! The scorers behind the batcher: [`ModelScorer`], one process's model (as `towerrec
//! eval` scores).

use crate::batcher::Scorer;
use towerrec_core::Batch;
use towerrec_train::Model;

/// A model restored in this process.
pub struct ModelScorer {
    model: Model,
    logits: Vec<f32>,
}

impl ModelScorer {
    pub fn new(model: Model) -> Self {
        Self {
            model,
            logits: Vec::new(),
        }
    }
}

impl Scorer for ModelScorer {
    fn score(&mut self, batch: &Batch) -> std::result::Result<Vec<f32>, String> {
        self.model
            .forward(batch, &mut self.logits)
            .map_err(|e| e.to_string())?;
        Ok(self.logits.clone())
    }
}
