//! The backward of SPTT's pipeline ([`super::pipeline`]): chunk 0's gradient comes
//! back through step f first, then each chunk goes back through steps e–c and its maps
//! while the next chunk's step f runs. In a step in halves the first chunk's step f runs
//! while the dense layers write the second half's gradient.

use super::pipeline::{ChunkBufs, Layout, Pipeline, Work};
use crate::error::Result;
use crate::sharded::lookup::LocalShard;
use crate::sharded::output::GradWork;
use crate::slots::FeatureSlots;
use towerrec_comm::{Comm, Phase};
use towerrec_core::layers::linear::Linear;
use towerrec_core::Layer;

/// The reverse of the pipelined forward, in whole steps, from the gradient `grad` of
/// its output: leaves in each local shard's `grad` the gradient of the whole global
/// batch, and in the maps their parameter gradients.
pub(super) fn backward(
    (lay, mut work, bufs, peers): Pipeline<'_>,
    local: &mut [LocalShard],
    grad: &[f32],
    slots: &FeatureSlots,
) -> Result<()> {
    let chunks = lay.parts.len();
    let counts: Vec<Vec<usize>> = (0..chunks)
        .map(|k| chunk_grads(&lay, k, grad, slots.width(), &mut bufs.peer[k]))
        .collect();
    prepare_backward(local, &mut work, bufs, lay.global());
    peers.all_to_all_v_wire_into(
        &bufs.peer[0],
        &counts[0],
        &mut bufs.rows[0],
        Phase::TowerPeer,
        work.wire.backward,
    )?;
    chunks_backward(&lay, local, &mut work, bufs, peers, &counts)
}

/// [`backward`] of a forward in halves, from a gradient whose first half (`n / 2` rows
/// of `grad`) is ready: `work_on_second` writes the second half's while the first
/// chunk's step f runs.
pub(super) fn backward_in_halves(
    (lay, mut work, bufs, peers): Pipeline<'_>,
    local: &mut [LocalShard],
    grad: &mut [f32],
    slots: &FeatureSlots,
    work_on_second: GradWork<'_>,
) -> Result<()> {
    let (chunks, width) = (lay.parts.len(), slots.width());
    let mut counts: Vec<Vec<usize>> = (0..chunks / 2)
        .map(|k| chunk_grads(&lay, k, grad, width, &mut bufs.peer[k]))
        .collect();
    prepare_backward(local, &mut work, bufs, lay.global());
    let second = &mut grad[lay.first_half_rows() * width..];
    peers.all_to_all_v_wire_during(
        &bufs.peer[0],
        &counts[0],
        &mut bufs.rows[0],
        (Phase::TowerPeer, work.wire.backward),
        |progress| work_on_second(second, progress),
    )?;
    for k in chunks / 2..chunks {
        counts.push(chunk_grads(&lay, k, grad, width, &mut bufs.peer[k]));
    }
    chunks_backward(&lay, local, &mut work, bufs, peers, &counts)
}

/// Step f reversed, chunk `k`'s payload in `send`: each group's columns of this rank's
/// rows of the chunk (of `grad`, `width` columns a row); returns the count for each
/// group.
fn chunk_grads(
    lay: &Layout,
    k: usize,
    grad: &[f32],
    width: usize,
    send: &mut Vec<f32>,
) -> Vec<usize> {
    let (first, n) = lay.parts[k][lay.me()];
    let rows = &grad[first * width..(first + n) * width];
    send.clear();
    let counts = lay
        .placed
        .iter()
        .map(|(placed, _)| {
            let before = send.len();
            for row in rows.chunks_exact(width) {
                for (slot, _) in placed {
                    send.extend_from_slice(&row[slot.range()]);
                }
            }
            send.len() - before
        })
        .collect();
    counts
}

/// Before a backward's chunks: the maps' gradients zeroed, and every local shard's
/// map-output gradient and vectors' gradient sized for the `global` samples.
fn prepare_backward(
    local: &mut [LocalShard],
    work: &mut Work,
    bufs: &mut ChunkBufs,
    global: usize,
) {
    work.maps.zero_grads();
    bufs.seen.clear();
    bufs.seen.resize(work.maps.tower_count(), 0);
    let early = &mut *work.early;
    for (li, l) in local.iter_mut().enumerate() {
        early.douts[li].resize(global * early.of_table[l.table].2, 0.0);
        // The maps write every value of the vectors' gradient, chunk by chunk.
        l.grad.resize(l.pooled.len(), 0.0);
    }
}

/// The backward's chunks after chunk 0's step f brought its group rows' gradient into
/// `bufs.rows[0]`: chunk `k` goes back through steps e–c and its maps while chunk
/// `k + 1`'s step f runs (`bufs.peer[k + 1]` with `counts[k + 1]`); then the maps'
/// parameter gradients summed over the chunks.
fn chunks_backward(
    lay: &Layout,
    local: &mut [LocalShard],
    work: &mut Work,
    bufs: &mut ChunkBufs,
    peers: &Comm,
    counts: &[Vec<usize>],
) -> Result<()> {
    let chunks = lay.parts.len();
    let ChunkBufs {
        rows,
        peer: sends,
        sums,
        seen,
    } = bufs;
    let wire = work.wire.backward;
    for k in 0..chunks {
        let (done, next) = rows.split_at_mut(k + 1);
        let mut back = |progress: &mut dyn FnMut()| -> Result<()> {
            send_back(lay, work, k, &done[k])?;
            maps_backward(lay, local, work, k, (sums, seen), progress);
            Ok(())
        };
        match next.first_mut() {
            Some(next_rows) => {
                let (_, r) = peers.all_to_all_v_wire_during(
                    &sends[k + 1],
                    &counts[k + 1],
                    next_rows,
                    (Phase::TowerPeer, wire),
                    back,
                )?;
                r?;
            }
            None => back(&mut || {})?,
        }
    }
    for (tower, &n) in seen.iter().enumerate() {
        if n > 0 {
            let map = work.maps.per_feature_map(tower);
            for (p, sum) in map.params().into_iter().zip(&sums[tower]) {
                p.grad.copy_from_slice(sum);
            }
        }
    }
    Ok(())
}

/// Steps e, d, c reversed for chunk `k`: from the gradient of its group rows `rows`,
/// every local shard's map-output gradient of the chunk's samples (in `douts`).
fn send_back(lay: &Layout, work: &mut Work, k: usize, rows: &[f32]) -> Result<()> {
    let early = &mut *work.early;
    let peer_rows = lay.peer_rows(k);
    let send = &mut *work.send;
    send.clear();
    let mut counts = vec![0; work.group.size()];
    for (j, held) in lay.held.iter().enumerate() {
        let before = send.len();
        for &t in held {
            let (_, off, cols) = early.of_table[t];
            for &(first, n) in &peer_rows {
                let block = &rows[first * lay.width..(first + n) * lay.width];
                for row in block.chunks_exact(lay.width.max(1)) {
                    send.extend_from_slice(&row[off..off + cols]);
                }
            }
        }
        counts[j] = send.len() - before;
    }
    let recv = &mut *work.recv;
    work.group.all_to_all_v_wire_into(
        send,
        &counts,
        recv,
        Phase::TowerIntra,
        work.wire.backward,
    )?;
    let mut at = 0;
    for j in 0..lay.held.len() {
        for (dout, &t) in early.douts.iter_mut().zip(&lay.tables) {
            let w = early.of_table[t].2;
            for g in &lay.rank_of {
                let r = lay.global_rows(k, g[j]);
                let n = r.len() * w;
                dout[r.start * w..r.end * w].copy_from_slice(&recv[at..at + n]);
                at += n;
            }
        }
    }
    Ok(())
}

/// Chunk `k`'s maps' backward: each local shard's vectors' gradient of the chunk's
/// samples into its `grad`, and the maps' parameter gradients added to `sums` (per
/// tower; `seen` counts the parts added); `progress` is called after each shard.
fn maps_backward(
    lay: &Layout,
    local: &mut [LocalShard],
    work: &mut Work,
    k: usize,
    (sums, seen): (&mut Vec<Vec<Vec<f32>>>, &mut [usize]),
    progress: &mut dyn FnMut(),
) {
    let early = &*work.early;
    sums.resize_with(seen.len(), Vec::new);
    for (li, l) in local.iter_mut().enumerate() {
        let (tower, _, w) = early.of_table[l.table];
        let cols = l.columns();
        let map = work.maps.per_feature_map(tower);
        for r in lay.chunk_rows(k) {
            let (x, dx) = (
                &l.pooled[r.start * cols..r.end * cols],
                &mut l.grad[r.start * cols..r.end * cols],
            );
            let (y, dy) = (
                &early.outs[li][r.start * w..r.end * w],
                &early.douts[li][r.start * w..r.end * w],
            );
            map.backward(x, y, dy, Some(dx), r.len());
            add_grads(&mut sums[tower], map, seen[tower] == 0);
            seen[tower] += 1;
        }
        progress();
    }
}

/// Adds the parameter gradients `map`'s last backward wrote to `sums` (sets them when
/// `first`).
fn add_grads(sums: &mut Vec<Vec<f32>>, map: &mut Linear<f32>, first: bool) {
    let grads = map.params();
    if first {
        sums.resize(grads.len(), Vec::new());
        for (sum, p) in sums.iter_mut().zip(&grads) {
            sum.clear();
            sum.extend_from_slice(p.grad);
        }
    } else {
        for (sum, p) in sums.iter_mut().zip(&grads) {
            sum.iter_mut()
                .zip(p.grad.iter())
                .for_each(|(s, &g)| *s += g);
        }
    }
}
