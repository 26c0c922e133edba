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
//! maps' backward ([`super::pipeline_back`]). One chunk is the exchange of
//! [`super::exchange`], steps c–f once.
//!
//! A step in halves (`cluster.overlap_halves`) cuts the chunks from the two halves of
//! every slice and runs the first half's dense layers during the last chunk's step f.
//!
//! What each sample's row holds is the same for every chunk count; the maps' weight
//! gradients are summed over the chunks' parts, so their order of summation (not their
//! value) depends on it.

use super::early::Early;
use super::{peer_order, Sptt};
use crate::config::QComms;
use crate::error::{Error, Result};
use crate::sharded::flat::place_block;
use crate::sharded::lookup::LocalShard;
use crate::sharded::output::RowsWork;
use crate::sharded::route::Router;
use crate::sharded::spread::firsts;
use crate::slots::{FeatureSlots, Slot};
use crate::towers::ModelTowers;
use towerrec_comm::{even_split, Comm, Phase};
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

/// Per world rank, its part of chunk `k` when the step runs in halves: chunks
/// `0..per_half` cut the first half of every slice (`n / 2` samples, as
/// [`crate::sharded::Part`] splits), the next `per_half` the second.
fn chunk_parts_in_halves(samples: &[usize], k: usize, per_half: usize) -> Vec<(usize, usize)> {
    samples
        .iter()
        .map(|&n| {
            let (start, len) = if k < per_half {
                (0, n / 2)
            } else {
                (n / 2, n - n / 2)
            };
            let sizes = even_split(len, per_half);
            let within = k % per_half;
            (start + sizes[..within].iter().sum::<usize>(), sizes[within])
        })
        .collect()
}

/// What every stage of one step reads: the layout of the step and this rank's place.
pub(super) struct Layout {
    pub(super) rank_of: Vec<Vec<usize>>,
    my_group: usize,
    my_index: usize,
    /// First global sample of each world rank's slice, and the global batch's size.
    firsts: Vec<usize>,
    global: usize,
    /// Per chunk, per world rank: its part ([`chunk_parts`], [`chunk_parts_in_halves`]).
    pub(super) parts: Vec<Vec<(usize, usize)>>,
    /// Per group index `j`: the tables the group-mate of index `j` holds, in its order.
    pub(super) held: Vec<Vec<usize>>,
    /// The table of each local shard.
    pub(super) tables: Vec<usize>,
    /// Width of this rank's group rows (its towers' outputs).
    pub(super) width: usize,
    /// Per group: where its step-f columns go in a feature row, and their count.
    pub(super) placed: Vec<(Vec<(Slot, usize)>, usize)>,
}

impl Layout {
    /// Per group, the group rows of its peer's samples of chunk `k`: (first row, count).
    pub(super) fn peer_rows(&self, k: usize) -> Vec<(usize, usize)> {
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
    pub(super) fn global_rows(&self, k: usize, w: usize) -> std::ops::Range<usize> {
        let (first, n) = self.parts[k][w];
        let f = self.firsts[w] + first;
        f..f + n
    }

    /// Chunk `k`'s samples of every world rank that has some, as global row ranges.
    pub(super) fn chunk_rows(&self, k: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..self.parts[k].len())
            .map(move |w| self.global_rows(k, w))
            .filter(|r| !r.is_empty())
    }

    /// Samples of the global batch.
    pub(super) fn global(&self) -> usize {
        self.global
    }

    pub(super) fn me(&self) -> usize {
        self.rank_of[self.my_group][self.my_index]
    }

    /// This rank's rows in the first half of a step in halves: those of the first half
    /// of the chunks ([`chunk_parts_in_halves`]).
    pub(super) fn first_half_rows(&self) -> usize {
        let me = self.me();
        let half = &self.parts[..self.parts.len() / 2];
        half.iter().map(|part| part[me].1).sum()
    }
}

/// The buffers of the chunks: group rows (or their gradient) and step f's payloads.
#[derive(Default)]
pub(super) struct ChunkBufs {
    pub(super) rows: Vec<Vec<f32>>,
    /// Per chunk, what step f brings (forward) or sends (backward).
    pub(super) peer: Vec<Vec<f32>>,
    /// The maps' parameter gradients summed per tower, and how many parts added to each.
    pub(super) sums: Vec<Vec<Vec<f32>>>,
    pub(super) seen: Vec<usize>,
}

impl ChunkBufs {
    fn ensure(&mut self, chunks: usize) {
        self.rows.resize_with(chunks, Vec::new);
        self.peer.resize_with(chunks, Vec::new);
    }
}

/// The mutable state one chunk's stage works on besides its own buffers.
pub(super) struct Work<'a> {
    pub(super) early: &'a mut Early,
    pub(super) maps: &'a mut ModelTowers,
    pub(super) group: &'a Comm,
    pub(super) send: &'a mut Vec<f32>,
    pub(super) recv: &'a mut Vec<f32>,
    /// The wire precision both ways.
    pub(super) wire: QComms,
}

/// What one step of the pipeline works with: its layout, the chunks' state, their
/// buffers and the peer group ([`Sptt::pipeline`]).
pub(super) type Pipeline<'a> = (Layout, Work<'a>, &'a mut ChunkBufs, &'a Comm);

/// The forward with the maps before step d: this rank's feature rows in `out`. In
/// halves (the pipeline's chunks cut from the halves of every slice, the first half of
/// the chunks carrying the first half of each rank's samples) `during_last` runs on
/// this rank's finished first-half rows while the last chunk's step f runs.
pub(super) fn forward(
    (lay, mut work, bufs, peers): Pipeline<'_>,
    local: &[LocalShard],
    out: &mut [f32],
    slots: &FeatureSlots,
    mut during_last: Option<RowsWork<'_>>,
) -> Result<()> {
    let chunks = lay.parts.len();
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
                let (_, laid) = peers.all_to_all_v_wire_during(
                    &done[k],
                    &counts_of(k),
                    into,
                    (Phase::TowerPeer, work.wire.forward),
                    |progress| map_and_lay_out(&lay, local, &mut work, k + 1, next_rows, progress),
                )?;
                laid?;
            }
            // The last chunk's step f: the work, if any, on the first half's rows.
            None => match during_last.take() {
                Some(last) => {
                    let first = &out[..lay.first_half_rows() * slots.width()];
                    peers.all_to_all_v_wire_during(
                        &done[k],
                        &counts_of(k),
                        into,
                        (Phase::TowerPeer, work.wire.forward),
                        |progress| last(first, progress),
                    )?;
                }
                None => {
                    let wire = work.wire.forward;
                    peers.all_to_all_v_wire_into(
                        &done[k],
                        &counts_of(k),
                        into,
                        Phase::TowerPeer,
                        wire,
                    )?;
                }
            },
        }
        place_chunk(&lay, k, &bufs.peer[k], slots.width(), out);
    }
    Ok(())
}

impl Sptt {
    /// The pipeline of one step after the lookups: its layout (the chunks cut from the
    /// halves of every slice if `halves`), the chunks' state and the peer group.
    pub(super) fn pipeline(
        &mut self,
        local: &[LocalShard],
        router: &Router,
        samples: &[usize],
        slots: &FeatureSlots,
        halves: bool,
    ) -> Result<Pipeline<'_>> {
        let lay = self.layout(local, router, samples, slots, halves);
        let (work, bufs, peers) = self.chunk_parts(lay.parts.len())?;
        Ok((lay, work, bufs, peers))
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
            wire: self.wire,
        };
        Ok((work, &mut self.chunk_bufs, &self.peers))
    }

    /// The step's layout, its chunks cut from the halves of every slice if `halves`
    /// (`chunks` rounded up to even, at least 2).
    fn layout(
        &self,
        local: &[LocalShard],
        router: &Router,
        samples: &[usize],
        slots: &FeatureSlots,
        halves: bool,
    ) -> Layout {
        let per_half = self.chunks.div_ceil(2).max(1);
        let chunks = if halves {
            2 * per_half
        } else {
            self.chunks.max(1)
        };
        let part = |k| {
            if halves {
                chunk_parts_in_halves(samples, k, per_half)
            } else {
                chunk_parts(samples, k, chunks)
            }
        };
        let held = self.rank_of[self.my_group]
            .iter()
            .map(|&w| router.held_by(w).map(|(t, _)| t).collect())
            .collect();
        Layout {
            rank_of: self.rank_of.clone(),
            my_group: self.my_group,
            my_index: self.my_index,
            firsts: firsts(samples),
            global: samples.iter().sum(),
            parts: (0..chunks).map(part).collect(),
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
        .all_to_all_v_wire_into(send, &counts, recv, Phase::TowerIntra, work.wire.forward)?;
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
