//! SPTT's step d for row-partitioned (OPER) tables inside a tower: each store sends a
//! group-mate only the partial sums of the bags that read it, with the bags' samples
//! on a second, index channel, and the receiver adds them into the group rows where
//! those samples are. A row-wise shard instead sends a row per sample, zero or not.
//!
//! Index channel, per destination index `j`, per local store in table order, per peer
//! of `j` in group order: the count `k` of that peer's bags the store served, then the
//! `k` samples (within the peer's slice). The float channel carries the `k` rows in the
//! same order. The backward sends the gradients of the same rows back, so the store
//! gets one row per bag it served, which is what its fused update reads.
//!
//! The sums skip only zeros that the flat path also skips, in the same order, so SPTT
//! stays bit for bit the flat path (crates/towerrec-train/tests/suite/sptt.rs).

use crate::sharded::lookup::LocalShard;

/// Appends to `send` and `index` store `l`'s rows for the peers `dests` (world ranks).
pub(super) fn send_rows(
    l: &LocalShard,
    dests: &[usize],
    send: &mut Vec<f32>,
    index: &mut Vec<u64>,
) {
    let cols = l.columns();
    for &w in dests {
        let (first, samples) = l.bags_of(w);
        index.push(samples.len() as u64);
        index.extend(samples.iter().map(|&s| u64::from(s)));
        send.extend_from_slice(&l.pooled[first * cols..(first + samples.len()) * cols]);
    }
}

/// Where one received store block goes: columns `off..off + cols` of the group rows
/// (`width` wide) from row `first` on (the peer's first sample).
#[derive(Clone, Copy)]
pub(super) struct Block {
    pub(super) first: usize,
    pub(super) width: usize,
    pub(super) off: usize,
    pub(super) cols: usize,
}

/// Reads one peer's block of one store: its count and samples from `index` at `*iat`;
/// calls `each(group row)` for every sample in order, and advances `*iat`.
pub(super) fn for_each_row(
    index: &[u64],
    iat: &mut usize,
    first: usize,
    mut each: impl FnMut(usize),
) {
    let k = index[*iat] as usize;
    for &s in &index[*iat + 1..*iat + 1 + k] {
        each(first + s as usize);
    }
    *iat += 1 + k;
}

/// Adds a received block (rows from `recv` at `*at`) into `rows`.
pub(super) fn add_rows(
    index: &[u64],
    iat: &mut usize,
    recv: &[f32],
    at: &mut usize,
    rows: &mut [f32],
    b: Block,
) {
    for_each_row(index, iat, b.first, |r| {
        let dst = &mut rows[r * b.width + b.off..r * b.width + b.off + b.cols];
        dst.iter_mut()
            .zip(&recv[*at..*at + b.cols])
            .for_each(|(d, &v)| *d += v);
        *at += b.cols;
    });
}

/// Copies the rows a store sent back from `recv` at `*at` to its gradient, at the bags
/// of peer `w` (the store's bag order).
pub(super) fn place_grads(l: &mut LocalShard, w: usize, recv: &[f32], at: &mut usize) {
    let cols = l.columns();
    let (first, samples) = l.bags_of(w);
    let len = samples.len() * cols;
    l.grad[first * cols..first * cols + len].copy_from_slice(&recv[*at..*at + len]);
    *at += len;
}
