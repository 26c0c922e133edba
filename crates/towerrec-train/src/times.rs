//! [`PhaseTimes`]: where the time of a model's steps goes, phase by phase.

use std::time::Instant;

/// Wall time spent in each phase of the steps so far, in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PhaseTimes {
    pub embedding_forward: f64,
    pub bottom_forward: f64,
    pub interaction_forward: f64,
    pub top_forward: f64,
    pub top_backward: f64,
    pub interaction_backward: f64,
    pub bottom_backward: f64,
    pub embedding_backward_update: f64,
    pub dense_grad_sync: f64,
    pub dense_update: f64,
}

impl PhaseTimes {
    /// Each phase with its name.
    pub fn entries(&self) -> [(&'static str, f64); 10] {
        [
            ("embedding_forward", self.embedding_forward),
            ("bottom_forward", self.bottom_forward),
            ("interaction_forward", self.interaction_forward),
            ("top_forward", self.top_forward),
            ("top_backward", self.top_backward),
            ("interaction_backward", self.interaction_backward),
            ("bottom_backward", self.bottom_backward),
            ("embedding_backward_update", self.embedding_backward_update),
            ("dense_grad_sync", self.dense_grad_sync),
            ("dense_update", self.dense_update),
        ]
    }

    /// The time spent in each phase since `earlier` (a reading of the same clock).
    pub fn since(&self, earlier: &PhaseTimes) -> PhaseTimes {
        PhaseTimes {
            embedding_forward: self.embedding_forward - earlier.embedding_forward,
            bottom_forward: self.bottom_forward - earlier.bottom_forward,
            interaction_forward: self.interaction_forward - earlier.interaction_forward,
            top_forward: self.top_forward - earlier.top_forward,
            top_backward: self.top_backward - earlier.top_backward,
            interaction_backward: self.interaction_backward - earlier.interaction_backward,
            bottom_backward: self.bottom_backward - earlier.bottom_backward,
            embedding_backward_update: self.embedding_backward_update
                - earlier.embedding_backward_update,
            dense_grad_sync: self.dense_grad_sync - earlier.dense_grad_sync,
            dense_update: self.dense_update - earlier.dense_update,
        }
    }
}

/// Adds the time since `*mark` to `slot` and moves the mark.
pub(crate) fn lap(mark: &mut Instant, slot: &mut f64) {
    let now = Instant::now();
    *slot += (now - *mark).as_secs_f64();
    *mark = now;
}
