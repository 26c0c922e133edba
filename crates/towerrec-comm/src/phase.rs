//! [`Phase`]: what a collective is for, by which traffic is counted and a stalled
//! collective is named.

use serde::{Deserialize, Serialize};

/// What a collective is for: the phases of a training step that move data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Sparse ids to the ranks that own their rows (forward), nothing backward.
    InputDist,
    /// Pooled embeddings back to the sample owners, and their gradients backward.
    OutputDist,
    /// DMT's SPTT step d (forward) and its reverse: pooled vectors exchanged among the
    /// ranks of a tower's hosts (an intra-host AlltoAll for a one-host tower).
    TowerIntra,
    /// DMT's SPTT step f and its reverse: tower outputs exchanged among peers (the same
    /// index in every tower group), one rank per tower group.
    TowerPeer,
    /// AllReduce of dense-layer gradients.
    DenseGradSync,
    /// AllReduce of a DMT Tower Module's gradients among its tower's ranks, and the
    /// refresh of other ranks' copies before a checkpoint.
    TowerGradSync,
    /// Gradient exchange of replicated (data-parallel) embedding rows.
    SparseGradSync,
    /// Everything else: set-up checks, evaluation gathers, checkpoints.
    Control,
}

impl Phase {
    /// Every phase, in the order reports list them.
    pub const ALL: [Phase; 8] = [
        Phase::InputDist,
        Phase::OutputDist,
        Phase::TowerIntra,
        Phase::TowerPeer,
        Phase::DenseGradSync,
        Phase::TowerGradSync,
        Phase::SparseGradSync,
        Phase::Control,
    ];

    /// The snake_case name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Phase::InputDist => "input_dist",
            Phase::OutputDist => "output_dist",
            Phase::TowerIntra => "tower_intra",
            Phase::TowerPeer => "tower_peer",
            Phase::DenseGradSync => "dense_grad_sync",
            Phase::TowerGradSync => "tower_grad_sync",
            Phase::SparseGradSync => "sparse_grad_sync",
            Phase::Control => "control",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
