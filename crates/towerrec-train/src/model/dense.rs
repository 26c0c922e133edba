//! The dense layers after the feature rows, written once for every schedule: a DMT
//! model's Tower Modules where they run in the model (one process, or a plan without
//! towers; paper §3.2), the interaction (DLRM's dot interaction or DCN's CrossNet, one
//! [`Layer`]) and the top MLP. [`Dense::forward`] scores feature rows (inference, and
//! the forward of a step); [`Dense::step_part`] is the forward, loss and backward of one
//! part of a training step ([`super::schedule`]), down to its feature rows' gradient.

use crate::slots::FeatureSlots;
use crate::stages::{resize, StageTimes};
use crate::times::{lap, PhaseTimes};
use crate::towers::ModelTowers;
use std::time::Instant;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::loss::bce_with_logits_sum;
use towerrec_core::{Layer, ParamMut};

/// The layers between the feature rows and the logits, with their buffers.
pub(crate) struct Dense {
    /// A DMT model's towers when they run here, mapping feature rows to interaction rows.
    pub(super) towers: Option<ModelTowers>,
    /// With towers: the interaction rows of the last forward, and their gradient.
    inter: Vec<f32>,
    inter_grad: Vec<f32>,
    pub(super) interaction: Box<dyn Layer<f32>>,
    /// The interaction's parameters' prefix in checkpoint names.
    pub(super) interaction_name: &'static str,
    pub(super) top: Mlp<f32>,
    /// Input of the top MLP, `B × top_in`, and its gradient.
    top_in: Vec<f32>,
    top_in_grad: Vec<f32>,
    /// In a step of several parts: the parameter gradients of the parts so far.
    kept: Vec<f32>,
}

/// One part of a step's samples: their feature rows and labels, and where their logits,
/// logit gradients and feature-row gradients go.
pub(super) struct PartRows<'a> {
    pub(super) rows: &'a [f32],
    pub(super) labels: &'a [f32],
    pub(super) logits: &'a mut [f32],
    pub(super) logits_grad: &'a mut [f32],
    pub(super) rows_grad: &'a mut [f32],
}

/// Where a part sits in its step: whether it is the first and the last (a whole step
/// is both), so that the parameter gradients of a step of several parts are summed.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) first: bool,
    pub(super) last: bool,
}

impl Dense {
    pub(super) fn new(
        towers: Option<ModelTowers>,
        interaction: Box<dyn Layer<f32>>,
        interaction_name: &'static str,
        top: Mlp<f32>,
    ) -> Self {
        Self {
            towers,
            inter: Vec::new(),
            inter_grad: Vec::new(),
            interaction,
            interaction_name,
            top,
            top_in: Vec::new(),
            top_in_grad: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Computes `b` logits into `logits` (at least `b` long) from the feature rows
    /// `rows` laid out by `slots`.
    pub(crate) fn forward(
        &mut self,
        rows: &[f32],
        slots: &FeatureSlots,
        b: usize,
        logits: &mut [f32],
    ) -> StageTimes {
        let mut times = StageTimes::default();
        let start = Instant::now();
        let x: &[f32] = match &mut self.towers {
            Some(towers) => {
                towers.forward(rows, slots, &mut self.inter, b);
                &self.inter
            }
            None => rows,
        };
        resize(&mut self.top_in, b * self.interaction.out_dim());
        self.interaction.forward(x, &mut self.top_in, b);
        times.interaction = start.elapsed().as_secs_f64();
        let start = Instant::now();
        self.top.forward(&self.top_in, &mut logits[..b], b);
        times.top = start.elapsed().as_secs_f64();
        times
    }

    /// The forward of one part of a training step, its loss and its backward down to
    /// its feature rows' gradient; returns the loss summed over its samples. `scale`
    /// is each sample's share of the mean loss. The parameter gradients of a step's
    /// parts are summed in part order (each layer's backward overwrites them, so the
    /// earlier parts' are kept aside). Calls `progress` between layers (an exchange
    /// beside it moves only then on MPI); adds each layer's time to `times`.
    pub(super) fn step_part(
        &mut self,
        part: PartRows<'_>,
        slots: &FeatureSlots,
        (scale, place): (f32, Place),
        times: &mut PhaseTimes,
        progress: &mut dyn FnMut(),
    ) -> f64 {
        let b = part.labels.len();
        let whole = place.first && place.last;
        if b == 0 && !whole {
            self.end_part(place, false);
            return 0.0;
        }
        let t = self.forward(part.rows, slots, b, part.logits);
        times.interaction_forward += t.interaction;
        times.top_forward += t.top;
        let mut mark = Instant::now();
        let loss = bce_with_logits_sum(part.logits, part.labels, Some(part.logits_grad));
        part.logits_grad.iter_mut().for_each(|g| *g *= scale);
        lap(&mut mark, &mut times.top_forward);
        progress();
        resize(&mut self.top_in_grad, self.top_in.len());
        let (x, y, dy) = (&self.top_in, &*part.logits, &*part.logits_grad);
        self.top.backward(x, y, dy, Some(&mut self.top_in_grad), b);
        lap(&mut mark, &mut times.top_backward);
        progress();
        let (y, dy) = (&self.top_in, &self.top_in_grad);
        match &mut self.towers {
            Some(towers) => {
                resize(&mut self.inter_grad, self.inter.len());
                let dx = Some(&mut self.inter_grad[..]);
                self.interaction.backward(&self.inter, y, dy, dx, b);
                towers.backward(&self.inter_grad, slots, part.rows_grad, b);
            }
            None => {
                let dx = Some(&mut *part.rows_grad);
                self.interaction.backward(part.rows, y, dy, dx, b);
            }
        }
        if !whole {
            self.end_part(place, true);
        }
        lap(&mut mark, &mut times.interaction_backward);
        progress();
        loss
    }

    /// After a part of a step of several: the first part's parameter gradients kept
    /// aside (zero if it had no samples), later ones summed with them, and the last
    /// part's sum left in the parameters (or, with no samples, the sum so far).
    fn end_part(&mut self, place: Place, ran: bool) {
        let Dense {
            towers,
            interaction,
            top,
            kept,
            ..
        } = self;
        let mut params = part_params(towers.as_mut(), interaction, top);
        if place.first {
            kept.clear();
        }
        let mut at = 0;
        for p in &mut params {
            let n = p.grad.len();
            if place.first {
                if ran {
                    kept.extend_from_slice(p.grad);
                } else {
                    kept.resize(kept.len() + n, 0.0);
                }
            } else {
                let mine = &mut kept[at..at + n];
                if ran {
                    p.grad
                        .iter_mut()
                        .zip(mine.iter())
                        .for_each(|(g, &k)| *g += k);
                    if !place.last {
                        mine.copy_from_slice(p.grad);
                    }
                } else if place.last {
                    p.grad.copy_from_slice(mine);
                }
            }
            at += n;
        }
    }

    /// Parameters with their gradients, named as in checkpoints: the Tower Modules
    /// that run here (`towers`: those run elsewhere, in SPTT), the interaction's, the
    /// top MLP's.
    pub(super) fn params<'a>(
        &'a mut self,
        bottom: Option<&'a mut Mlp<f32>>,
        towers: Option<&'a mut ModelTowers>,
    ) -> Vec<ParamMut<'a, f32>> {
        let mut out = Vec::new();
        let towers = towers.or(self.towers.as_mut());
        if let Some(t) = towers {
            out.extend(t.params());
        }
        if let Some(bottom) = bottom {
            out.extend(prefixed("bottom", bottom.params()));
        }
        out.extend(prefixed(self.interaction_name, self.interaction.params()));
        out.extend(prefixed("top", self.top.params()));
        out
    }
}

/// The parameters of the layers that run per part: the Tower Modules that run here,
/// the interaction and the top MLP.
fn part_params<'a>(
    towers: Option<&'a mut ModelTowers>,
    interaction: &'a mut Box<dyn Layer<f32>>,
    top: &'a mut Mlp<f32>,
) -> Vec<ParamMut<'a, f32>> {
    let mut out = towers.map_or_else(Vec::new, ModelTowers::params);
    out.extend(interaction.params());
    out.extend(top.params());
    out
}

fn prefixed<'a>(
    prefix: &str,
    params: Vec<ParamMut<'a, f32>>,
) -> impl Iterator<Item = ParamMut<'a, f32>> + 'a {
    let prefix = prefix.to_string();
    params.into_iter().map(move |mut p| {
        p.name = format!("{prefix}.{}", p.name);
        p
    })
}

/// What the back of a forward uses: the dense layers after the feature rows, and the
/// rows' slots.
pub(crate) struct Back<'a> {
    pub dense: &'a mut Dense,
    pub slots: &'a FeatureSlots,
}

impl Back<'_> {
    /// Computes `b` logits into `logits` (resized to `b`) from the feature rows of a
    /// front.
    pub fn run(&mut self, features: &[f32], b: usize, logits: &mut Vec<f32>) -> StageTimes {
        resize(logits, b);
        self.dense.forward(features, self.slots, b, logits)
    }
}
