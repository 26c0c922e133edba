//! SPTT, DMT's semantics-preserving tower transform (paper §3.1, Figure 7): the output
//! distribution rewritten as steps inside a tower's hosts and steps among peers.
//!
//! Steps a (ids to shards) and b (lookup) are the flat ones. Then, on the rank of index
//! `i` in tower group `g` (a group is the 1 or K hosts that hold some towers, §3.1.3;
//! index = position of the host in the group × ranks per host + local rank):
//! - c, peer permute: each local shard's pooled rows are cut by destination in *peer
//!   order*, ranks sorted by (index in group, group): (0, 2, 1, 3) on 2 hosts × 2 ranks;
//! - d, an AlltoAllv among the group's ranks: index `j` receives, for every feature of
//!   the group's towers, the rows of the samples of its peers (index `j` in every group).
//!   Column-wise shards arrive as column blocks; row-wise shards as partial sums added in
//!   rank order (a ReduceScatter, summed as the flat path sums them);
//! - e, the (features, peers) → (peers, features) shuffle: the blocks are laid out as
//!   one *group row* per peer sample, features in tower order (where a Tower Module
//!   will run);
//! - f, an AlltoAllv among peers (one rank per group, so its world size is the number of
//!   groups): each sample owner receives every group's rows of its own samples.
//!
//! Backward runs f, e, d, c in reverse and leaves in every local shard the gradient of
//! the whole global batch in global sample order, as the flat path does, so the fused
//! updates are the same.
//!
//! A row-partitioned (OPER) table in a tower has all its copies on the tower's hosts:
//! its stores' partial sums enter step d as row-wise shards' do, but only for the bags
//! that read them ([`stores`]), and its shared rows sync within the group
//! ([`ShardedEmbeddings`]' sparse AllReduce over the group).
//!
//! A mean-pooled row-wise table is summed in step d and then divided, as the flat path
//! divides at the sample owner; the rank that sums holds other ranks' samples, so the
//! peers first share their samples' bag lengths (an AllGather among peers).

use super::flat::{mean_scale, place_block};
use super::sptt_stores as stores;
use super::ShardedEmbeddings;
use crate::error::{Error, Result};
use crate::slots::{FeatureSlots, Slot};
use crate::towers::ModelTowers;
use towerrec_comm::{Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_plan::Plan;

/// The tower groups and this rank's sub-communicators.
pub(super) struct Sptt {
    /// The ranks of this rank's tower group, by index.
    group: Comm,
    /// The ranks of this rank's index in every group, by group.
    peers: Comm,
    /// `rank_of[g][j]`: world rank of index `j` in group `g`.
    rank_of: Vec<Vec<usize>>,
    my_group: usize,
    my_index: usize,
    /// Per group, its towers' features in order: `(table, offset in the group row)`.
    features: Vec<Vec<(usize, usize)>>,
    /// Per group, the width of its rows.
    widths: Vec<usize>,
    /// Per table, its offset in its group's row, and its width.
    offset_of: Vec<usize>,
    dim_of: Vec<usize>,
    /// The mean-pooled row-split tables, and for each (in that order) the factor
    /// 1 / bag length of every group row of the step (`scales[m * rows + row]`).
    mean_split: Vec<usize>,
    scales: Vec<f32>,
    /// Per group, its towers: `(tower, first column in the group row, columns)`.
    towers: Vec<Vec<(usize, usize, usize)>>,
    /// A DMT model's Tower Modules, run between steps e and f (every rank holds all of
    /// them, and runs its group's).
    modules: Option<ModelTowers>,
    /// Group rows of every peer's samples (peers in group order), and their gradient.
    rows: Vec<f32>,
    /// The modules' outputs for those rows, and their gradient.
    outs: Vec<f32>,
    x: Vec<f32>,
    dx: Vec<f32>,
    send: Vec<f32>,
    recv: Vec<f32>,
    /// Whether this group's tables include row-partitioned ones: step d then also
    /// exchanges the samples of their stores' rows ([`stores`]), kept for the backward.
    addressed: bool,
    index_send: Vec<u64>,
    index_recv: Vec<u64>,
}

/// Where a DMT model's Tower Modules are synchronized: each tower's gradients are
/// summed over the ranks of its group alone, which run it; other ranks' copies of it
/// are refreshed from `owner[t]` before a checkpoint.
pub(crate) struct TowerDomain<'a> {
    /// This rank's tower group.
    pub(crate) group: &'a Comm,
    /// Per tower, whether this rank's group runs it.
    pub(crate) mine: Vec<bool>,
    /// Per tower, the world rank whose copy is the tower's (its group's first rank).
    pub(crate) owner: Vec<usize>,
    pub(crate) modules: &'a mut ModelTowers,
}

/// Ranks in peer order: sorted by (index in group, group), where `rank_of[g][j]` is the
/// rank of index `j` in group `g`.
pub(super) fn peer_order(rank_of: &[Vec<usize>]) -> Vec<usize> {
    let size = rank_of.first().map_or(0, Vec::len);
    (0..size)
        .flat_map(|j| rank_of.iter().map(move |g| g[j]))
        .collect()
}

/// `rank_of[g][j]` for the host groups of a plan on `topology`.
fn group_ranks(host_groups: &[Vec<usize>], topology: Topology) -> Vec<Vec<usize>> {
    host_groups
        .iter()
        .map(|hosts| hosts.iter().flat_map(|&h| topology.host_ranks(h)).collect())
        .collect()
}

impl Sptt {
    /// The towers of `plan` (validated) over `comm`, which must be the world; `dims[t]`
    /// is table `t`'s width and `index[name]` its number. Collective (splits `comm`).
    pub(super) fn new(
        comm: &Comm,
        plan: &Plan,
        dims: &[usize],
        index: impl Fn(&str) -> Option<usize>,
    ) -> Result<Self> {
        let topology = comm.topology();
        if comm.size() != topology.world_size() {
            return Err(Error::Cluster(
                "towers need the collection to span the whole world".into(),
            ));
        }
        let host_groups = plan.host_groups();
        let rank_of = group_ranks(&host_groups, topology);
        let me = comm.world_rank();
        let (my_group, my_index) = rank_of
            .iter()
            .enumerate()
            .find_map(|(g, ranks)| ranks.iter().position(|&r| r == me).map(|j| (g, j)))
            .ok_or_else(|| Error::Plan(format!("rank {me} is in no tower's hosts")))?;
        let mut features = vec![Vec::new(); host_groups.len()];
        let mut widths = vec![0; host_groups.len()];
        let mut offset_of = vec![0; dims.len()];
        let mut towers = vec![Vec::new(); host_groups.len()];
        for (ti, tower) in plan.towers.iter().enumerate() {
            let mut hosts = tower.hosts.clone();
            hosts.sort_unstable();
            let g = host_groups
                .iter()
                .position(|h| *h == hosts)
                .ok_or_else(|| Error::Plan("a tower's hosts are not a host group".into()))?;
            let start = widths[g];
            for name in &tower.features {
                let t = index(name)
                    .ok_or_else(|| Error::Plan(format!("tower feature '{name}' is not a table")))?;
                features[g].push((t, widths[g]));
                offset_of[t] = widths[g];
                widths[g] += dims[t];
            }
            towers[g].push((ti, start, widths[g] - start));
        }
        let group = comm.split(my_group, my_index)?;
        let peers = comm.split(my_index, my_group)?;
        Ok(Self {
            group,
            peers,
            rank_of,
            my_group,
            my_index,
            features,
            widths,
            offset_of,
            dim_of: dims.to_vec(),
            mean_split: Vec::new(),
            scales: Vec::new(),
            towers,
            modules: None,
            rows: Vec::new(),
            outs: Vec::new(),
            x: Vec::new(),
            dx: Vec::new(),
            send: Vec::new(),
            recv: Vec::new(),
            addressed: false,
            index_send: Vec::new(),
            index_recv: Vec::new(),
        })
    }

    /// Tables `addressed` are row-partitioned (their stores send only the rows read).
    pub(super) fn with_addressed(mut self, addressed: &[usize]) -> Self {
        self.addressed = addressed.iter().any(|&t| self.in_my_group(t));
        self
    }

    /// Tables `mean_split` (mean-pooled, split by rows) are divided by bag length after
    /// their partial sums are added in step d.
    pub(super) fn with_mean_split(mut self, mean_split: Vec<usize>) -> Self {
        self.mean_split = mean_split;
        self
    }

    /// Fills `scales` for the `total` group rows of this step: every peer's bag lengths
    /// of the mean-pooled row-split tables, shared among the peers.
    fn gather_mean_scales(&mut self, batch: &Batch, peer_rows: &[(usize, usize)]) -> Result<()> {
        self.scales.clear();
        let m = self.mean_split.len();
        if m == 0 {
            return Ok(());
        }
        let b = batch.batch_size();
        let mut lens: Vec<u64> = Vec::with_capacity(m * b);
        for &t in &self.mean_split {
            let ids = batch.sparse.feature(t);
            lens.extend((0..b).map(|k| ids.ids(k).len() as u64));
        }
        let (all, from) = self.peers.all_gather(&lens, Phase::TowerPeer)?;
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        self.scales.resize(m * total, 1.0);
        let mut at = 0;
        for (&(first, n), &count) in peer_rows.iter().zip(&from) {
            if count != m * n {
                return Err(Error::Cluster(format!(
                    "a peer sent {count} bag lengths where {} were expected",
                    m * n
                )));
            }
            for (i, chunk) in all[at..at + count].chunks_exact(n.max(1)).enumerate() {
                for (k, &len) in chunk.iter().enumerate() {
                    self.scales[i * total + first + k] = mean_scale(len as usize);
                }
            }
            at += count;
        }
        Ok(())
    }

    /// Divides this group's mean-pooled row-split slots of the `total` rows by their
    /// bags' lengths.
    fn scale_mean_rows(&mut self, total: usize) {
        let width = self.widths[self.my_group];
        for (i, &t) in self.mean_split.iter().enumerate() {
            if !self.features[self.my_group].iter().any(|&(f, _)| f == t) {
                continue;
            }
            let cols = self.offset_of[t]..self.offset_of[t] + self.dim_of[t];
            let scales = &self.scales[i * total..(i + 1) * total];
            for (row, &s) in self.rows.chunks_exact_mut(width.max(1)).zip(scales) {
                if s != 1.0 {
                    row[cols.clone()].iter_mut().for_each(|v| *v *= s);
                }
            }
        }
    }

    /// The factor of group row `row` of table `t` (1 for tables not mean-pooled and
    /// split by rows).
    fn mean_scale_of(&self, t: usize, row: usize, total: usize) -> f32 {
        mean_scale_of(&self.mean_split, &self.scales, t, row, total)
    }

    /// This rank's tower group: the ranks of the hosts that hold its towers' tables.
    pub(super) fn group(&self) -> &Comm {
        &self.group
    }

    /// Whether table `t` is in one of this rank's group's towers.
    pub(super) fn in_my_group(&self, t: usize) -> bool {
        self.features[self.my_group].iter().any(|&(f, _)| f == t)
    }

    /// Takes a DMT model's Tower Modules, to run them between steps e and f.
    pub(super) fn adopt(&mut self, modules: ModelTowers) {
        self.modules = Some(modules);
    }

    pub(super) fn modules_mut(&mut self) -> Option<&mut ModelTowers> {
        self.modules.as_mut()
    }

    /// The sync domain of the adopted Tower Modules, if any.
    pub(super) fn domain(&mut self) -> Option<TowerDomain<'_>> {
        let towers = self.towers.iter().map(Vec::len).sum();
        let mut mine = vec![false; towers];
        let mut owner = vec![0; towers];
        for (g, list) in self.towers.iter().enumerate() {
            for &(t, _, _) in list {
                mine[t] = g == self.my_group;
                owner[t] = self.rank_of[g][0];
            }
        }
        let modules = self.modules.as_mut()?;
        Some(TowerDomain {
            group: &self.group,
            mine,
            owner,
            modules,
        })
    }

    /// Columns of group `g`'s towers' outputs.
    fn out_width(&self, g: usize, modules: &ModelTowers) -> usize {
        self.towers[g]
            .iter()
            .map(|&(t, _, _)| modules.out_dim(t))
            .sum()
    }

    /// Columns group `g` sends in step f: its towers' outputs, or its group rows.
    fn sent_width(&self, g: usize) -> usize {
        match &self.modules {
            Some(m) => self.out_width(g, m),
            None => self.widths[g],
        }
    }

    /// Runs this group's Tower Modules on the `total` group rows into `outs`. The rows
    /// are not needed after (step f sends `outs`): a tower as wide as the row takes
    /// their buffer whole instead of a copy.
    fn run_modules(&mut self, total: usize) {
        let Some(mut modules) = self.modules.take() else {
            return;
        };
        let g = self.my_group;
        let (width, out_width) = (self.widths[g], self.out_width(g, &modules));
        self.outs.clear();
        self.outs.resize(total * out_width, 0.0);
        let mut at = 0;
        for &(t, start, cols) in &self.towers[g] {
            if cols == width {
                // `rows` holds exactly `total` rows (step e sized it).
                std::mem::swap(&mut self.x, &mut self.rows);
            } else {
                self.x.clear();
                for row in self.rows.chunks_exact(width.max(1)).take(total) {
                    self.x.extend_from_slice(&row[start..start + cols]);
                }
            }
            let o = modules.out_dim(t);
            let y = modules.forward_tower(t, &mut self.x, total);
            for (dst, src) in self
                .outs
                .chunks_exact_mut(out_width.max(1))
                .zip(y.chunks_exact(o.max(1)))
            {
                dst[at..at + o].copy_from_slice(src);
            }
            at += o;
        }
        self.modules = Some(modules);
    }

    /// The reverse of [`Sptt::run_modules`]: from the gradient of `outs` (in `outs`),
    /// the gradient of the group rows into `rows`.
    fn modules_backward(&mut self, total: usize) {
        let Some(mut modules) = self.modules.take() else {
            return;
        };
        modules.zero_grads();
        let g = self.my_group;
        let (width, out_width) = (self.widths[g], self.out_width(g, &modules));
        // The towers tile the row and each writes its whole input gradient: no zeroing.
        self.rows.resize(total * width, 0.0);
        self.rows.truncate(total * width);
        let mut at = 0;
        for &(t, start, cols) in &self.towers[g] {
            let o = modules.out_dim(t);
            self.x.clear();
            for row in self.outs.chunks_exact(out_width.max(1)).take(total) {
                self.x.extend_from_slice(&row[at..at + o]);
            }
            at += o;
            if cols == width {
                modules.backward_tower(t, &self.x, &mut self.rows, total);
                continue;
            }
            self.dx.resize(total * cols, 0.0);
            self.dx.truncate(total * cols);
            modules.backward_tower(t, &self.x, &mut self.dx, total);
            for (row, d) in self
                .rows
                .chunks_exact_mut(width.max(1))
                .zip(self.dx.chunks_exact(cols.max(1)))
            {
                row[start..start + cols].copy_from_slice(d);
            }
        }
        self.modules = Some(modules);
    }

    /// Samples of each peer of this rank (in group order) and the first group row of each.
    fn peer_rows(&self, samples: &[usize]) -> Vec<(usize, usize)> {
        let mut at = 0;
        self.rank_of
            .iter()
            .map(|g| {
                let n = samples[g[self.my_index]];
                at += n;
                (at - n, n)
            })
            .collect()
    }
}

impl Sptt {
    /// Where group `g`'s step-f columns go in a row laid out by `slots`: `(slot, first
    /// column in the group's block)`, per tower output with modules, else per table.
    fn placed(&self, g: usize, slots: &FeatureSlots) -> Vec<(Slot, usize)> {
        match &self.modules {
            Some(m) => {
                let mut at = 0;
                self.towers[g]
                    .iter()
                    .map(|&(t, _, _)| {
                        let o = m.out_dim(t);
                        at += o;
                        (slots.slot(t), at - o)
                    })
                    .collect()
            }
            None => self.features[g]
                .iter()
                .map(|&(t, off)| (slots.slot(t), off))
                .collect(),
        }
    }
}

/// The factor of group row `row` of table `t` among the `total` rows: from `scales`
/// for the tables of `mean_split`, else 1.
fn mean_scale_of(mean_split: &[usize], scales: &[f32], t: usize, row: usize, total: usize) -> f32 {
    match mean_split.iter().position(|&m| m == t) {
        Some(i) => scales[i * total + row],
        None => 1.0,
    }
}

/// First global sample of each world rank's slice.
fn firsts(samples: &[usize]) -> Vec<usize> {
    samples
        .iter()
        .scan(0, |at, &n| {
            *at += n;
            Some(*at - n)
        })
        .collect()
}

impl ShardedEmbeddings {
    /// SPTT steps c–f: this rank's `b_local` feature rows in `out`.
    pub(super) fn sptt_output_dist(
        &mut self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let Some(mut sp) = self.sptt.take() else {
            return Err(Error::Plan("no towers".into()));
        };
        let result = self.sptt_forward(&mut sp, batch, out, slots);
        self.sptt = Some(sp);
        result
    }

    fn sptt_forward(
        &mut self,
        sp: &mut Sptt,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        let firsts = firsts(&self.samples);
        // c, d: every group-mate gets its peers' rows of every local shard (a store's:
        // only the bags it served, their samples on the index channel).
        sp.send.clear();
        sp.index_send.clear();
        let mut counts = vec![0; sp.group.size()];
        let mut index_counts = vec![0; sp.group.size()];
        let order = peer_order(&sp.rank_of);
        for (j, dests) in order.chunks(sp.rank_of.len()).enumerate() {
            let (before, index_before) = (sp.send.len(), sp.index_send.len());
            for l in &self.local {
                if l.store().is_some() {
                    stores::send_rows(l, dests, &mut sp.send, &mut sp.index_send);
                    continue;
                }
                let cols = l.columns();
                for &w in dests {
                    let (f, n) = (firsts[w], self.samples[w]);
                    sp.send
                        .extend_from_slice(&l.pooled[f * cols..(f + n) * cols]);
                }
            }
            counts[j] = sp.send.len() - before;
            index_counts[j] = sp.index_send.len() - index_before;
        }
        if sp.addressed {
            sp.group.all_to_all_v_into(
                &sp.index_send,
                &index_counts,
                &mut sp.index_recv,
                Phase::TowerIntra,
            )?;
        }
        sp.group
            .all_to_all_v_into(&sp.send, &counts, &mut sp.recv, Phase::TowerIntra)?;
        // e: the blocks laid out as group rows, peers in group order.
        let peer_rows = sp.peer_rows(&self.samples);
        let width = sp.widths[sp.my_group];
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        sp.rows.clear();
        sp.rows.resize(total * width, 0.0);
        let (mut at, mut iat) = (0, 0);
        for j in 0..sp.group.size() {
            for (t, s) in self.router.held_by(sp.rank_of[sp.my_group][j]) {
                let table = &self.tables[t];
                let shard = &table.shards[s];
                let (cols, off) = (shard.num_columns(), sp.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if table.addresses.is_some() {
                        let b = stores::Block {
                            first,
                            width,
                            off,
                            cols,
                        };
                        let (index, recv) = (&sp.index_recv, &sp.recv);
                        stores::add_rows(index, &mut iat, recv, &mut at, &mut sp.rows, b);
                        continue;
                    }
                    let block = &sp.recv[at..at + n * cols];
                    at += n * cols;
                    let rows = &mut sp.rows[first * width..(first + n) * width];
                    place_block(rows, width, off, block, cols, table.row_split());
                }
            }
        }
        sp.gather_mean_scales(batch, &peer_rows)?;
        sp.scale_mean_rows(total);
        // Between e and f: the Tower Modules, if any.
        sp.run_modules(total);
        // f: each peer gets the rows of its own samples.
        let sent = sp.sent_width(sp.my_group);
        let counts: Vec<usize> = peer_rows.iter().map(|&(_, n)| n * sent).collect();
        let rows = if sp.modules.is_some() {
            &sp.outs
        } else {
            &sp.rows
        };
        sp.peers
            .all_to_all_v_into(rows, &counts, &mut sp.recv, Phase::TowerPeer)?;
        let b_local = batch.batch_size();
        let out_width = slots.width();
        let mut at = 0;
        for g in 0..sp.features.len() {
            let w = sp.sent_width(g);
            let placed = sp.placed(g, slots);
            let block = &sp.recv[at..at + b_local * w];
            at += b_local * w;
            for (row, part) in out
                .chunks_exact_mut(out_width)
                .zip(block.chunks_exact(w.max(1)))
            {
                for &(slot, off) in &placed {
                    row[slot.range()].copy_from_slice(&part[off..off + slot.width]);
                }
            }
        }
        Ok(())
    }

    /// Reverse of [`ShardedEmbeddings::sptt_output_dist`]: leaves in each local shard's
    /// `grad` the gradient of the whole global batch.
    pub(super) fn sptt_output_grad(&mut self, grad: &[f32], slots: &FeatureSlots) -> Result<()> {
        let Some(mut sp) = self.sptt.take() else {
            return Err(Error::Plan("no towers".into()));
        };
        let result = self.sptt_backward(&mut sp, grad, slots);
        self.sptt = Some(sp);
        result
    }

    fn sptt_backward(&mut self, sp: &mut Sptt, grad: &[f32], slots: &FeatureSlots) -> Result<()> {
        // f reversed: each group's columns of this rank's rows to that group's peer.
        sp.send.clear();
        let mut counts = vec![0; sp.peers.size()];
        for (g, count) in counts.iter_mut().enumerate() {
            let before = sp.send.len();
            let placed = sp.placed(g, slots);
            for row in grad.chunks_exact(slots.width()) {
                for (slot, _) in &placed {
                    sp.send.extend_from_slice(&row[slot.range()]);
                }
            }
            *count = sp.send.len() - before;
        }
        let peer_rows = sp.peer_rows(&self.samples);
        let total: usize = peer_rows.iter().map(|&(_, n)| n).sum();
        if sp.modules.is_some() {
            sp.peers
                .all_to_all_v_into(&sp.send, &counts, &mut sp.outs, Phase::TowerPeer)?;
            sp.modules_backward(total);
        } else {
            sp.peers
                .all_to_all_v_into(&sp.send, &counts, &mut sp.rows, Phase::TowerPeer)?;
        }
        // e, d, c reversed: each shard's columns of its group-mates' peers' rows.
        let width = sp.widths[sp.my_group];
        sp.send.clear();
        let mut counts = vec![0; sp.group.size()];
        let mut iat = 0;
        for (j, count) in counts.iter_mut().enumerate() {
            let before = sp.send.len();
            for (t, s) in self.router.held_by(sp.rank_of[sp.my_group][j]) {
                let shard = &self.tables[t].shards[s];
                let (cols, off) = (shard.num_columns(), sp.offset_of[t] + shard.columns.0);
                for &(first, n) in &peer_rows {
                    if self.tables[t].addresses.is_some() {
                        // The gradients of the rows the store sent, in its order.
                        let (index, rows, send) = (&sp.index_recv, &sp.rows, &mut sp.send);
                        stores::for_each_row(index, &mut iat, first, |r| {
                            let part = &rows[r * width + off..r * width + off + cols];
                            match mean_scale_of(&sp.mean_split, &sp.scales, t, r, total) {
                                1.0 => send.extend_from_slice(part),
                                scale => send.extend(part.iter().map(|&g| g * scale)),
                            }
                        });
                        continue;
                    }
                    let rows = &sp.rows[first * width..(first + n) * width];
                    for (k, row) in rows.chunks_exact(width.max(1)).enumerate() {
                        let part = &row[off..off + cols];
                        let scale = sp.mean_scale_of(t, first + k, total);
                        if scale != 1.0 {
                            sp.send.extend(part.iter().map(|&g| g * scale));
                        } else {
                            sp.send.extend_from_slice(part);
                        }
                    }
                }
            }
            *count = sp.send.len() - before;
        }
        sp.group
            .all_to_all_v_into(&sp.send, &counts, &mut sp.recv, Phase::TowerIntra)?;
        let firsts = firsts(&self.samples);
        let global: usize = self.samples.iter().sum();
        for l in &mut self.local {
            let rows = match l.store() {
                Some(_) => l.bags_from().iter().sum(),
                None => global,
            };
            l.grad.clear();
            l.grad.resize(rows * l.columns(), 0.0);
        }
        let mut at = 0;
        for j in 0..sp.group.size() {
            for l in &mut self.local {
                let cols = l.columns();
                for g in &sp.rank_of {
                    let w = g[j];
                    if l.store().is_some() {
                        stores::place_grads(l, w, &sp.recv, &mut at);
                        continue;
                    }
                    let (f, n) = (firsts[w], self.samples[w]);
                    l.grad[f * cols..(f + n) * cols].copy_from_slice(&sp.recv[at..at + n * cols]);
                    at += n * cols;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_order_is_the_papers() {
        let t = Topology::new(2, 2).unwrap();
        let one_host_groups = group_ranks(&[vec![0], vec![1]], t);
        assert_eq!(peer_order(&one_host_groups), vec![0, 2, 1, 3]);
        let t = Topology::new(4, 2).unwrap();
        let pairs = group_ranks(&[vec![0, 1], vec![2, 3]], t);
        assert_eq!(pairs, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(peer_order(&pairs), vec![0, 4, 1, 5, 2, 6, 3, 7]);
    }
}
