//! The fused backward: aggregate the gradient of every row a batch touched, then apply
//! the table's optimizer once per unique row.
//!
//! Aggregation sorts `(row, sample)` pairs, so each row's contributions are summed in
//! the same order (by sample, then by position in the bag) whatever the thread count:
//! results are bitwise reproducible. Rows are then updated in parallel, which is safe
//! because unique rows are disjoint slices of the table.

use super::{EmbeddingBag, Pooling, Scratch, State, PAR_MIN_WORK, PAR_TASK_WORK};
use crate::batch::JaggedView;
use crate::error::Result;
use rayon::prelude::*;

/// Below this many pairs a sequential sort is faster than rayon's.
const PAR_SORT_MIN: usize = 1 << 14;

impl EmbeddingBag {
    /// Backward of [`EmbeddingBag::forward`] fused with the optimizer update.
    ///
    /// `grad[b·stride + offset .. b·stride + offset + dim]` is `dL/d(pooled output of
    /// sample b)`. The gradients of duplicate ids, across the batch and within a bag, are
    /// summed first (mean pooling scales each by `1/bag length`); then each unique row
    /// gets one optimizer update with learning rate `lr`. The step count goes up by one,
    /// even for a batch without ids, so that Adam's bias correction counts steps of the
    /// whole model.
    ///
    /// Errors, before changing anything, on an id `≥ rows` or a layout that does not fit
    /// `grad` (as [`EmbeddingBag::forward`]).
    pub fn backward_update(
        &mut self,
        ids: JaggedView<'_>,
        grad: &[f32],
        stride: usize,
        offset: usize,
        lr: f32,
    ) -> Result<()> {
        let batch = ids.batch_size();
        self.check_layout("backward gradient", batch, grad.len(), stride, offset)?;
        self.check_ids(&ids)?;
        self.step += 1;
        if self.dim == 0 || ids.values.is_empty() {
            return Ok(());
        }
        let dim = self.dim;
        let Self {
            pooling,
            weights,
            state,
            scratch,
            step,
            ..
        } = self;
        aggregate(scratch, ids, grad, stride, offset, dim, *pooling);
        let Scratch {
            pairs,
            segments,
            grad: agg,
        } = scratch;
        let unique = segments.len() - 1;
        let unique_rows = segments[..unique].iter().map(|&s| pairs[s].0);
        let parallel = unique * dim >= PAR_MIN_WORK;
        let min_len = (PAR_TASK_WORK / dim).max(1);
        let w_rows = pick_rows(weights, dim, unique_rows.clone());
        match state {
            State::Sgd => {
                let f = |(w, g): (&mut [f32], &[f32])| {
                    for (w, &g) in w.iter_mut().zip(g) {
                        *w -= lr * g;
                    }
                };
                if parallel {
                    w_rows
                        .into_par_iter()
                        .zip(agg.par_chunks(dim))
                        .with_min_len(min_len)
                        .for_each(f);
                } else {
                    w_rows.into_iter().zip(agg.chunks(dim)).for_each(f);
                }
            }
            State::RowWiseAdagrad { acc, eps } => {
                let eps = *eps;
                let acc_rows = pick_rows(acc, 1, unique_rows);
                let f = |((w, a), g): ((&mut [f32], &mut [f32]), &[f32])| {
                    let sq: f64 = g.iter().map(|&g| (g as f64) * (g as f64)).sum();
                    a[0] += (sq / dim as f64) as f32;
                    let mult = lr / (a[0].sqrt() + eps);
                    for (w, &g) in w.iter_mut().zip(g) {
                        *w -= mult * g;
                    }
                };
                if parallel {
                    w_rows
                        .into_par_iter()
                        .zip(acc_rows)
                        .zip(agg.par_chunks(dim))
                        .with_min_len(min_len)
                        .for_each(f);
                } else {
                    w_rows
                        .into_iter()
                        .zip(acc_rows)
                        .zip(agg.chunks(dim))
                        .for_each(f);
                }
            }
            State::Adam {
                m,
                v,
                beta1,
                beta2,
                eps,
            } => {
                let (beta1, beta2, eps) = (*beta1, *beta2, *eps);
                // torch.optim.Adam's arrangement: bias corrections in f64, folded into
                // the step size and the denominator.
                let t = *step as f64;
                let bc1 = 1.0 - (beta1 as f64).powf(t);
                let bc2 = 1.0 - (beta2 as f64).powf(t);
                let step_size = (lr as f64 / bc1) as f32;
                let bc2_sqrt = bc2.sqrt() as f32;
                let m_rows = pick_rows(m, dim, unique_rows.clone());
                let v_rows = pick_rows(v, dim, unique_rows);
                let f = |w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]| {
                    for (((w, m), v), &g) in w.iter_mut().zip(m).zip(v).zip(g) {
                        *m = beta1 * *m + (1.0 - beta1) * g;
                        *v = beta2 * *v + (1.0 - beta2) * g * g;
                        *w -= step_size * *m / (v.sqrt() / bc2_sqrt + eps);
                    }
                };
                if parallel {
                    w_rows
                        .into_par_iter()
                        .zip(m_rows)
                        .zip(v_rows)
                        .zip(agg.par_chunks(dim))
                        .with_min_len(min_len)
                        .for_each(|(((w, m), v), g)| f(w, m, v, g));
                } else {
                    w_rows
                        .into_iter()
                        .zip(m_rows)
                        .zip(v_rows)
                        .zip(agg.chunks(dim))
                        .for_each(|(((w, m), v), g)| f(w, m, v, g));
                }
            }
        }
        Ok(())
    }
}

/// Fills `scratch` with the sorted `(row, sample)` pairs, the start of each unique row's
/// run, and each unique row's summed gradient. Ids and layout were checked by the caller,
/// and there is at least one id.
fn aggregate(
    scratch: &mut Scratch,
    ids: JaggedView<'_>,
    grad: &[f32],
    stride: usize,
    offset: usize,
    dim: usize,
    pooling: Pooling,
) {
    let Scratch {
        pairs,
        segments,
        grad: agg,
    } = scratch;
    pairs.clear();
    pairs.reserve(ids.values.len());
    for b in 0..ids.batch_size() {
        pairs.extend(ids.ids(b).iter().map(|&id| (id as usize, b)));
    }
    // `(row, sample)` is a total order in which equal keys are interchangeable, so the
    // unstable sorts give one result whatever the thread count.
    if pairs.len() >= PAR_SORT_MIN {
        pairs.par_sort_unstable();
    } else {
        pairs.sort_unstable();
    }
    segments.clear();
    segments.push(0);
    for i in 1..pairs.len() {
        if pairs[i].0 != pairs[i - 1].0 {
            segments.push(i);
        }
    }
    segments.push(pairs.len());
    let unique = segments.len() - 1;
    agg.clear();
    agg.resize(unique * dim, 0.0);
    let pairs = &pairs[..];
    let sum_row = |(dst, seg): (&mut [f32], &[usize])| {
        for &(_, b) in &pairs[seg[0]..seg[1]] {
            let src = &grad[b * stride + offset..b * stride + offset + dim];
            let scale = match pooling {
                Pooling::Sum => 1.0,
                Pooling::Mean => 1.0 / (ids.offsets[b + 1] - ids.offsets[b]) as f32,
            };
            for (d, &g) in dst.iter_mut().zip(src) {
                *d += scale * g;
            }
        }
    };
    if pairs.len() * dim >= PAR_MIN_WORK {
        let per_row = (pairs.len() / unique).max(1) * dim;
        agg.par_chunks_mut(dim)
            .zip(segments.par_windows(2))
            .with_min_len((PAR_TASK_WORK / per_row).max(1))
            .for_each(sum_row);
    } else {
        agg.chunks_mut(dim)
            .zip(segments.windows(2))
            .for_each(sum_row);
    }
}

/// Splits `rows` (strictly increasing) out of `buf` as disjoint `width`-long slices,
/// in `O(rows.len())`, so that they can be updated in parallel without `unsafe`.
fn pick_rows(buf: &mut [f32], width: usize, rows: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut out = Vec::with_capacity(rows.size_hint().0);
    let mut rest = buf;
    let mut base = 0;
    for r in rows {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut((r - base) * width);
        let (row, tail) = tail.split_at_mut(width);
        out.push(row);
        rest = tail;
        base = r + 1;
    }
    out
}
