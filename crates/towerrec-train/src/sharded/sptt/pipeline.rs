//! SPTT with the per-feature maps run before step d ([`super::early`]), in chunks of
//! samples, each chunk's peer exchange (step f) under the next chunk's work (beyond
//! the paper).
//!
//! Every world rank's slice of the global batch is cut into `chunks` near-equal parts;
//! chunk `k` is the `k`-th part of every slice. For each chunk in turn the forward maps
//! the chunk's pooled vectors, sends them through step d, lays them out as group rows
//! (step e) and sends those to the peers (step f). Step f of chunk `k` runs as a
//! non-blocking exchange ([`towerrec_comm::Comm::all_to_all_v_during`]) while this rank
//! maps chunk `k + 1` and runs its step d, so the cross-host link carries one chunk while
//! the host works on the next. The backward receives chunk 0's gradient through step f, then
//! receives chunk `k + 1`'s while it sends chunk `k`'s back through step d and runs its
//! maps' backward. One chunk is the exchange of [`super::exchange`], steps c–f once.
//!
//! What each sample's row holds is the same for every chunk count; the maps' weight
//! gradients are summed over the chunks' parts, so their order of summation (not their
//! value) depends on it.

use super::early::Early;
use super::{firsts, peer_order, Sptt};
use crate::error::{Error, Result};
use crate::sharded::flat::place_block;
use crate::sharded::lookup::LocalShard;
use crate::sharded::route::Router;
use crate::slots::{FeatureSlots, Slot};
use crate::towers::ModelTowers;
use towerrec_comm::{even_split, Comm, Phase};
use towerrec_core::layers::linear::Linear;
use towerrec_core::Layer;

/// Per world rank, its part of chunk `k` of `chunks`: (first sample, counted from the
/// start of the rank's slice, and count).
fn chunk_parts(samples: &[usize], k: usize, chunks: usize) -> Vec<(usize, usize)> {
    samples
        .iter()
        .map(|&n| {
            let sizes = even_split(n, chunks);
            (sizes[..k].iter().sum(), sizes[k])
        })
        .collect()
}

/// What every stage of one step reads: the layout of the step and this rank's place.
struct Layout {
    rank_of: Vec<Vec<usize>>,
    my_group: usize,
    my_index: usize,
    /// First global sample of each world rank's slice.
    firsts: Vec<usize>,
    /// Per chunk, per world rank: its part ([`chunk_parts`]).
    parts: Vec<Vec<(usize, usize)>>,
    /// Per group index `j`: the tables the group-mate of index `j` holds, in its order.
    held: Vec<Vec<usize>>,
    /// The table of each local shard.
    tables: Vec<usize>,
    /// Width of this rank's group rows (its towers' outputs).
    width: usize,
    /// Per group: where its step-f columns go in a feature row, and their count.
    placed: Vec<(Vec<(Slot, usize)>, usize)>,
}

impl Layout {
    /// Per group, the group rows of its peer's samples of chunk `k`: (first row, count).
    fn peer_rows(&self, k: usize) -> Vec<(usize, usize)> {
        let mut at = 0;
        self.rank_of
            .iter()
            .map(|g| {
                let n = self.parts[k][g[self.my_index]].1;
                at += n;
                (at - n, n)
            })
            .collect()
    }

    /// Global rows of world rank `w`'s part of chunk `k`.
    fn global_rows(&self, k: usize, w: usize) -> std::ops::Range<usize> {
        let (first, n) = self.parts[k][w];
        let f = self.firsts[w] + first;
        f..f + n
    }

    /// Chunk `k`'s samples of every world rank that has some, as global row ranges.
    fn chunk_rows(&self, k: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..self.parts[k].len())
            .map(move |w| self.global_rows(k, w))
            .filter(|r| !r.is_empty())
    }

    fn me(&self) -> usize {
        self.rank_of[self.my_group][self.my_index]
    }
}

/// The buffers of the chunks: group rows (or their gradient) and step f's payloads.
#[derive(Default)]
pub(super) struct ChunkBufs {
    rows: Vec<Vec<f32>>,
    /// Per chunk, what step f brings (forward) or sends (backward).
    peer: Vec<Vec<f32>>,
    /// The maps' parameter gradients summed per tower, and how many parts added to each.
    sums: Vec<Vec<Vec<f32>>>,
    seen: Vec<usize>,
}

impl ChunkBufs {
    fn ensure(&mut self, chunks: usize) {
        self.rows.resize_with(chunks, Vec::new);
        self.peer.resize_with(chunks, Vec::new);
    }
}

/// The mutable state one chunk's stage works on besides its own buffers.
struct Work<'a> {
    early: &'a mut Early,
    maps: &'a mut ModelTowers,
    group: &'a Comm,
    send: &'a mut Vec<f32>,
    recv: &'a mut Vec<f32>,
}

impl Sptt {
    /// The forward with the maps before step d: this rank's feature rows in `out`.
    pub(super) fn pipelined_forward(
        &mut self,
        local: &[LocalShard],
        router: &Router,
        samples: &[usize],
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let lay = self.layout(local, router, samples, slots);
        let chunks = lay.parts.len();
        let (mut work, bufs, peers) = self.chunk_parts(chunks)?;
        for (li, l) in local.iter().enumerate() {
            let w = work.early.of_table[l.table].2;
            let rows = l.pooled.len() / l.columns().max(1);
            // Every value is written, chunk by chunk.
            work.early.outs[li].resize(rows * w, 0.0);
        }
        map_and_lay_out(&lay, local, &mut work, 0, &mut bufs.rows[0], &mut || {})?;
        let counts_of = |k: usize| -> Vec<usize> {
            let rows = lay.peer_rows(k);
            rows.iter().map(|&(_, n)| n * lay.width).collect()
        };
        for k in 0..chunks {
            let (done, next) = bufs.rows.split_at_mut(k + 1);
            let into = &mut bufs.peer[k];
            match next.first_mut() {
                Some(next_rows) => {
                    let (_, laid) = peers.all_to_all_v_during(
                        &done[k],
                        &counts_of(k),
                        into,
                        Phase::TowerPeer,
                        |progress| {
                            map_and_lay_out(&lay, local, &mut work, k + 1, next_rows, progress)
                        },
                    )?;
                    laid?;
                }
                None => {
                    peers.all_to_all_v_into(&done[k], &counts_of(k), into, Phase::TowerPeer)?;
                }
            }
            place_chunk(&lay, k, &bufs.peer[k], slots.width(), out);
        }
        Ok(())
    }

    /// The reverse of [`Sptt::pipelined_forward`] from the gradient of its output:
    /// leaves in each local shard's `grad` the gradient of the whole global batch, and
    /// in the maps their parameter gradients.
    pub(super) fn pipelined_backward(
        &mut self,
        local: &mut [LocalShard],
        router: &Router,
        samples: &[usize],
        grad: &[f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let lay = self.layout(local, router, samples, slots);
        let chunks = lay.parts.len();
        let (mut work, bufs, peers) = self.chunk_parts(chunks)?;
        let counts: Vec<Vec<usize>> = (0..chunks)
            .map(|k| chunk_grads(&lay, k, grad, slots.width(), &mut bufs.peer[k]))
            .collect();
        work.maps.zero_grads();
        bufs.seen.clear();
        bufs.seen.resize(work.maps.tower_count(), 0);
        let global: usize = samples.iter().sum();
        let early = &mut *work.early;
        for (li, l) in local.iter_mut().enumerate() {
            early.douts[li].resize(global * early.of_table[l.table].2, 0.0);
            // The maps write every value of the vectors' gradient, chunk by chunk.
            l.grad.resize(l.pooled.len(), 0.0);
        }
        let sends = &bufs.peer;
        peers.all_to_all_v_into(&sends[0], &counts[0], &mut bufs.rows[0], Phase::TowerPeer)?;
        for k in 0..chunks {
            let (done, next) = bufs.rows.split_at_mut(k + 1);
            let (sums, seen) = (&mut bufs.sums, &mut bufs.seen);
            let mut back = |progress: &mut dyn FnMut()| -> Result<()> {
                send_back(&lay, &mut work, k, &done[k])?;
                maps_backward(&lay, local, &mut work, k, (sums, seen), progress);
                Ok(())
            };
            match next.first_mut() {
                Some(next_rows) => {
                    let (_, r) = peers.all_to_all_v_during(
                        &sends[k + 1],
                        &counts[k + 1],
                        next_rows,
                        Phase::TowerPeer,
                        back,
                    )?;
                    r?;
                }
                None => back(&mut || {})?,
            }
        }
        for (tower, &n) in bufs.seen.iter().enumerate() {
            if n > 0 {
                let map = work.maps.per_feature_map(tower);
                for (p, sum) in map.params().into_iter().zip(&bufs.sums[tower]) {
                    p.grad.copy_from_slice(sum);
                }
            }
        }
        Ok(())
    }

    /// What the chunks' stages change, apart: the maps and their buffers, the buffers of
    /// `chunks` chunks, and the peer group.
    fn chunk_parts(&mut self, chunks: usize) -> Result<(Work<'_>, &mut ChunkBufs, &Comm)> {
        let (Some(early), Some(maps)) = (&mut self.early, &mut self.modules) else {
            return Err(Error::Plan("no per-feature maps".into()));
        };
        self.chunk_bufs.ensure(chunks);
        let work = Work {
            early,
            maps,
            group: &self.group,
            send: &mut self.send,
            recv: &mut self.recv,
        };
        Ok((work, &mut self.chunk_bufs, &self.peers))
    }

    fn layout(
        &self,
        local: &[LocalShard],
        router: &Router,
        samples: &[usize],
        slots: &FeatureSlots,
    ) -> Layout {
        let chunks = self.chunks.max(1);
        let held = self.rank_of[self.my_group]
            .iter()
            .map(|&w| router.held_by(w).map(|(t, _)| t).collect())
            .collect();
        Layout {
            rank_of: self.rank_of.clone(),
            my_group: self.my_group,
            my_index: self.my_index,
            firsts: firsts(samples),
            parts: (0..chunks)
                .map(|k| chunk_parts(samples, k, chunks))
                .collect(),
            held,
            tables: local.iter().map(|l| l.table).collect(),
            width: self.sent_width(self.my_group),
            placed: (0..self.features.len())
                .map(|g| (self.placed(g, slots), self.sent_width(g)))
                .collect(),
        }
    }
}

/// Copies what step f brought for chunk `k` (`from_peers`) into this rank's rows of
/// `out` (`out_width` columns each).
fn place_chunk(lay: &Layout, k: usize, from_peers: &[f32], out_width: usize, out: &mut [f32]) {
    let (first, n) = lay.parts[k][lay.me()];
    let rows = &mut out[first * out_width..(first + n) * out_width];
    let mut at = 0;
    for (placed, w) in &lay.placed {
        let block = &from_peers[at..at + n * w];
        at += n * w;
        for (row, part) in rows
            .chunks_exact_mut(out_width)
            .zip(block.chunks_exact((*w).max(1)))
        {
            for &(slot, off) in placed {
                row[slot.range()].copy_from_slice(&part[off..off + slot.width]);
            }
        }
    }
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

/// Chunk `k`'s forward up to step f: its pooled vectors through their maps, step d,
/// and the group rows of step e in `rows`; `progress` is called after each shard's
/// map (it moves an exchange running meanwhile).
fn map_and_lay_out(
    lay: &Layout,
    local: &[LocalShard],
    work: &mut Work,
    k: usize,
    rows: &mut Vec<f32>,
    progress: &mut dyn FnMut(),
) -> Result<()> {
    let early = &mut *work.early;
    for (li, l) in local.iter().enumerate() {
        let (tower, _, w) = early.of_table[l.table];
        let cols = l.columns();
        let map = work.maps.per_feature_map(tower);
        for r in lay.chunk_rows(k) {
            let x = &l.pooled[r.start * cols..r.end * cols];
            map.forward(x, &mut early.outs[li][r.start * w..r.end * w], r.len());
        }
        progress();
    }
    // c, d: to each group-mate, every local shard's outputs of the samples of its peers.
    let send = &mut *work.send;
    send.clear();
    let mut counts = vec![0; work.group.size()];
    for (j, dests) in peer_order(&lay.rank_of)
        .chunks(lay.rank_of.len())
        .enumerate()
    {
        let before = send.len();
        for (li, l) in local.iter().enumerate() {
            let w = early.of_table[l.table].2;
            for &d in dests {
                let r = lay.global_rows(k, d);
                send.extend_from_slice(&early.outs[li][r.start * w..r.end * w]);
            }
        }
        counts[j] = send.len() - before;
    }
    let recv = &mut *work.recv;
    work.group
        .all_to_all_v_into(send, &counts, recv, Phase::TowerIntra)?;
    // e: the blocks laid out as group rows, peers in group order (every value written).
    let peer_rows = lay.peer_rows(k);
    let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
    rows.resize(total * lay.width, 0.0);
    let mut at = 0;
    for held in &lay.held {
        for &t in held {
            let (_, off, cols) = early.of_table[t];
            for &(first, n) in &peer_rows {
                let block = &recv[at..at + n * cols];
                at += n * cols;
                let rows = &mut rows[first * lay.width..(first + n) * lay.width];
                place_block(rows, lay.width, off, block, cols, false);
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
    work.group
        .all_to_all_v_into(send, &counts, recv, Phase::TowerIntra)?;
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
