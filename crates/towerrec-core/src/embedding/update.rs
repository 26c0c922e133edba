//! The fused backward: group the occurrences of every row a batch touched, then, per
//! unique row, sum its gradient and apply the table's optimizer once.
//!
//! Grouping sorts `row << sample_bits | sample` keys, built in `(sample, position)`
//! order. One sequential pass partitions them (stably) into buckets by the top bits of
//! the row; then tasks that own disjoint, contiguous ranges of buckets (so of rows) run
//! in parallel: each sorts its buckets (small, in cache) and updates its rows, summing
//! a row's gradient in a buffer that stays in L1 and updating the row straight away, so
//! no `unique rows × dim` gradient is ever materialized. Each row's contributions are
//! summed in `(sample, position in the bag)` order whatever the thread count or the
//! partition, so results are bitwise reproducible.

use super::kernels::{self, Isa, Packed, RowOpt, UpdateInput, UpdateTask};
use super::precision::Elem;
use super::{with_rows, EmbeddingBag, Scratch, State, Weights, PAR_MIN_WORK, PAR_TASK_WORK};
use crate::batch::JaggedView;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Average keys per bucket of the partition: small enough to sort in L1.
const KEYS_PER_BUCKET: usize = 32;
/// At most 2¹² buckets (32 KiB of counters).
const MAX_BUCKET_BITS: u32 = 12;

/// A task's weights, two state buffers and keys.
type TaskParts<'a, E> = (((&'a mut [E], &'a mut [f32]), &'a mut [f32]), &'a mut [u64]);

/// How the backward groups ids by row (tests force the fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grouping {
    /// Packed `(row, sample)` keys where they fit in 64 bits, partitioned by row.
    Auto,
    /// One comparison sort of `(row, sample)` pairs, on one thread (what `Auto` falls
    /// back to).
    #[cfg_attr(not(test), allow(dead_code))]
    Pairs,
}

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
        let layout = (stride, offset, true);
        self.backward_update_with(Isa::detect(), Grouping::Auto, ids, grad, layout, lr)
    }

    /// Applies the optimizer once to each of `rows` with its summed gradient
    /// (`grads[i·dim..(i+1)·dim]` for `rows[i]`), through the same fused kernels as
    /// [`EmbeddingBag::backward_update`]: the entry of row gradients summed elsewhere
    /// (a replicated row's gradient from every rank that read it). Does not count a
    /// step: call it in a step whose `backward_update` counted one. A row listed twice
    /// gets the sum of its gradients.
    pub fn apply_row_grads(&mut self, rows: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let offsets: Vec<usize> = (0..=rows.len()).collect();
        let ids = JaggedView::new(&offsets, rows)?;
        let layout = (self.dim, 0, false);
        self.backward_update_with(Isa::detect(), Grouping::Auto, ids, grads, layout, lr)
    }

    /// [`EmbeddingBag::backward_update`] with the kernels' compilation and the grouping
    /// chosen (tests compare them); `(stride, offset, count_step)` lay out `grad` and
    /// say whether this update counts a step.
    pub(super) fn backward_update_with(
        &mut self,
        isa: Isa,
        grouping: Grouping,
        ids: JaggedView<'_>,
        grad: &[f32],
        (stride, offset, count_step): (usize, usize, bool),
        lr: f32,
    ) -> Result<()> {
        if !self.precision().trainable() {
            return Err(Error::Config(format!(
                "embedding table '{}' is {}: it is for inference only and cannot be updated \
                 (train the fp32 checkpoint, then quantize it again)",
                self.name,
                self.precision()
            )));
        }
        let batch = ids.batch_size();
        self.check_layout("backward gradient", batch, grad.len(), stride, offset)?;
        let max_id = self.check_ids(&ids)?;
        if count_step {
            self.step += 1;
        }
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
            rounding,
            row_ids,
            ..
        } = self;
        let (opt, s1, s2, width1): (RowOpt, &mut [f32], &mut [f32], usize) = match state {
            State::Sgd => (RowOpt::Sgd { lr }, &mut [], &mut [], 0),
            State::RowWiseAdagrad { acc, eps } => (
                RowOpt::RowWiseAdagrad { lr, eps: *eps },
                &mut acc[..],
                &mut [],
                1,
            ),
            State::Adam {
                m,
                v,
                beta1,
                beta2,
                eps,
            } => {
                // torch.optim.Adam's arrangement: bias corrections in f64, folded into
                // the step size and the denominator.
                let t = *step as f64;
                let bc1 = 1.0 - (*beta1 as f64).powf(t);
                let bc2 = 1.0 - (*beta2 as f64).powf(t);
                let opt = RowOpt::Adam {
                    beta1: *beta1,
                    beta2: *beta2,
                    eps: *eps,
                    step_size: (lr as f64 / bc1) as f32,
                    bc2_sqrt: bc2.sqrt() as f32,
                };
                (opt, &mut m[..], &mut v[..], dim)
            }
        };
        let input = UpdateInput {
            dim,
            pooling: *pooling,
            offsets: ids.offsets,
            grad,
            stride,
            offset,
            opt,
            rounding: (rounding.0, rounding.1, rounding.2, *step),
            row_ids: row_ids.as_deref(),
        };
        with_rows!(
            weights,
            w => update_in(
                (isa, grouping),
                input,
                ids,
                max_id,
                &mut w[..],
                (s1, s2, width1),
                scratch,
            ),
            _q => unreachable!("int8 tables are refused above")
        );
        Ok(())
    }
}

/// The rest of [`EmbeddingBag::backward_update_with`], over rows of element type `E`:
/// groups the occurrences by row and runs the update tasks.
fn update_in<E: Elem>(
    (isa, grouping): (Isa, Grouping),
    input: UpdateInput<'_>,
    ids: JaggedView<'_>,
    max_id: u64,
    weights: &mut [E],
    (s1, s2, width1): (&mut [f32], &mut [f32], usize),
    scratch: &mut Scratch,
) {
    let dim = input.dim;
    let batch = ids.batch_size();
    let n = ids.values.len();
    let sample_bits = bits(batch as u64 - 1);
    let row_bits = bits(max_id);
    if grouping == Grouping::Pairs || sample_bits + row_bits > 64 || sample_bits >= 64 {
        // Out of reach of real tables (rows × batch ≥ 2⁶⁴), kept for correctness.
        let pairs = &mut scratch.pairs;
        pairs.clear();
        pairs.reserve(n);
        for b in 0..batch {
            pairs.extend(ids.ids(b).iter().map(|&id| (id, b)));
        }
        // `(row, sample)` is a total order in which equal keys are interchangeable.
        pairs.sort_unstable();
        let task = UpdateTask {
            base: 0,
            occ: &pairs[..],
            w: &mut weights[..],
            s1,
            s2,
        };
        kernels::update_rows(isa, input, task);
        return;
    }
    let bucket_bits = row_bits
        .min(bits((n / KEYS_PER_BUCKET) as u64).max(1))
        .min(MAX_BUCKET_BITS);
    let Scratch {
        keys,
        sorted,
        counts,
        ..
    } = scratch;
    partition(
        keys,
        sorted,
        counts,
        ids,
        sample_bits,
        row_bits,
        bucket_bits,
    );
    let buckets = counts.len() - 1;
    // Bucket `k` holds rows `k << rows_bits_below ..`, keys `counts[k]..counts[k+1]`.
    let row_shift = row_bits - bucket_bits;
    let work = n * dim;
    let tasks = if work >= PAR_MIN_WORK {
        (rayon::current_num_threads() * 4)
            .min(work / PAR_TASK_WORK)
            .max(1)
    } else {
        1
    };
    // Cut the buckets into `tasks` ranges of about equal numbers of keys; every range
    // starts with a non-empty bucket, so their first rows increase strictly and
    // are rows of the table.
    let mut first_buckets = Vec::with_capacity(tasks + 1);
    for k in 0..buckets {
        let (lo, hi) = (counts[k], counts[k + 1]);
        if hi > lo && (first_buckets.is_empty() || lo * tasks >= first_buckets.len() * n) {
            first_buckets.push(k);
        }
    }
    let bases: Vec<usize> = first_buckets
        .iter()
        .enumerate()
        .map(|(t, &k)| if t == 0 { 0 } else { k << row_shift })
        .collect();
    first_buckets.push(buckets);
    let w_parts = split_rows(weights, dim, &bases);
    let s1_parts = split_rows(s1, width1, &bases);
    let s2_parts = split_rows(s2, dim, &bases);
    // Each task's keys, a disjoint slice of `sorted`.
    let mut key_parts = Vec::with_capacity(bases.len());
    let mut rest = &mut sorted[..];
    for w in first_buckets.windows(2) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(counts[w[1]] - counts[w[0]]);
        key_parts.push(head);
        rest = tail;
    }
    let counts = &counts[..];
    let first_buckets = &first_buckets[..];
    let run = |(t, (((w, s1), s2), keys)): (usize, TaskParts<'_, E>)| {
        // Sort each bucket: the task's keys are then sorted.
        let key0 = counts[first_buckets[t]];
        for k in first_buckets[t]..first_buckets[t + 1] {
            keys[counts[k] - key0..counts[k + 1] - key0].sort_unstable();
        }
        let task = UpdateTask {
            base: bases[t],
            occ: Packed {
                keys,
                shift: sample_bits,
            },
            w,
            s1,
            s2,
        };
        kernels::update_rows(isa, input, task);
    };
    if bases.len() > 1 {
        w_parts
            .into_par_iter()
            .zip(s1_parts)
            .zip(s2_parts)
            .zip(key_parts)
            .enumerate()
            .for_each(run);
    } else {
        w_parts
            .into_iter()
            .zip(s1_parts)
            .zip(s2_parts)
            .zip(key_parts)
            .enumerate()
            .for_each(run);
    }
}

/// Splits `buf` (`width` floats per row; empty when the optimizer has no such state)
/// at the rows `bases` (increasing, the first 0) into one slice per base.
fn split_rows<'a, T>(buf: &'a mut [T], width: usize, bases: &[usize]) -> Vec<&'a mut [T]> {
    if buf.is_empty() {
        return bases.iter().map(|_| Default::default()).collect();
    }
    let mut out = Vec::with_capacity(bases.len());
    let mut rest = buf;
    for w in bases.windows(2) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut((w[1] - w[0]) * width);
        out.push(head);
        rest = tail;
    }
    out.push(rest);
    out
}

/// Number of bits needed to write `x`.
fn bits(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// Fills `sorted` with the keys `id << sample_bits | sample` of `ids`, partitioned
/// stably by their row's top `bucket_bits` (of `row_bits`), and `counts` with the start
/// of each bucket, then the number of keys. `keys` is scratch.
fn partition(
    keys: &mut Vec<u64>,
    sorted: &mut Vec<u64>,
    counts: &mut Vec<usize>,
    ids: JaggedView<'_>,
    sample_bits: u32,
    row_bits: u32,
    bucket_bits: u32,
) {
    let n = ids.values.len();
    let buckets = 1usize << bucket_bits;
    // `shift < 64`: the keys have `sample_bits + row_bits ≤ 64` bits and `bucket_bits ≥ 1`
    // when `row_bits ≥ 1`; with `row_bits = 0` every key is in bucket 0.
    let shift = sample_bits + row_bits - bucket_bits;
    let bucket = |k: u64| {
        if bucket_bits == 0 {
            0
        } else {
            (k >> shift) as usize
        }
    };
    counts.clear();
    counts.resize(buckets + 1, 0);
    keys.clear();
    keys.reserve(n);
    for b in 0..ids.batch_size() {
        for &id in ids.ids(b) {
            let k = (id << sample_bits) | b as u64;
            counts[bucket(k) + 1] += 1;
            keys.push(k);
        }
    }
    for k in 1..=buckets {
        counts[k] += counts[k - 1];
    }
    sorted.clear();
    sorted.resize(n, 0);
    // Scatter with a moving cursor per bucket (`counts[k]`), then shift the cursors back
    // to the bucket starts.
    for &k in keys.iter() {
        let d = bucket(k);
        sorted[counts[d]] = k;
        counts[d] += 1;
    }
    for k in (1..=buckets).rev() {
        counts[k] = counts[k - 1];
    }
    counts[0] = 0;
}
