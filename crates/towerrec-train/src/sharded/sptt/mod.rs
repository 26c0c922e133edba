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
//! Per-feature Tower Modules run before step d instead, where the tables are looked up,
//! when every table is whole on one rank ([`early`]).
//!
//! A mean-pooled row-wise table is summed in step d and then divided, as the flat path
//! divides at the sample owner; the rank that sums holds other ranks' samples, so the
//! peers first share their samples' bag lengths (an AllGather among peers).

mod early;
mod exchange;
mod modules;
mod pipeline;
mod pipeline_back;
mod stores;

pub(crate) use modules::TowerDomain;

use crate::slots::{FeatureSlots, Slot};

use super::spread::mean_scale;
use crate::config::QComms;
use crate::error::{Error, Result};
use crate::towers::ModelTowers;
use towerrec_comm::{Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_plan::Plan;

/// The tower groups and this rank's sub-communicators.
pub(in crate::sharded) struct Sptt {
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
    /// Set when the modules run where the tables are looked up, before step d
    /// ([`early`]).
    early: Option<early::Early>,
    /// With the modules before step d: the samples of a step go through steps c–f in
    /// this many chunks, each chunk's step f under the next one's work ([`pipeline`]).
    chunks: usize,
    chunk_bufs: pipeline::ChunkBufs,
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
    /// The wire precision of steps d and f, both ways (`[cluster.qcomms]`).
    wire: QComms,
}

/// Ranks in peer order: sorted by (index in group, group), where `rank_of[g][j]` is the
/// rank of index `j` in group `g`.
fn peer_order(rank_of: &[Vec<usize>]) -> Vec<usize> {
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
    pub(in crate::sharded) fn new(
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
            early: None,
            chunks: crate::config::DEFAULT_TOWER_CHUNKS,
            chunk_bufs: Default::default(),
            rows: Vec::new(),
            outs: Vec::new(),
            x: Vec::new(),
            dx: Vec::new(),
            send: Vec::new(),
            recv: Vec::new(),
            addressed: false,
            index_send: Vec::new(),
            index_recv: Vec::new(),
            wire: QComms::default(),
        })
    }

    /// Tables `addressed` are row-partitioned (their stores send only the rows read).
    pub(in crate::sharded) fn with_addressed(mut self, addressed: &[usize]) -> Self {
        self.addressed = addressed.iter().any(|&t| self.in_my_group(t));
        self
    }

    /// Tables `mean_split` (mean-pooled, split by rows) are divided by bag length after
    /// their partial sums are added in step d.
    pub(in crate::sharded) fn with_mean_split(mut self, mean_split: Vec<usize>) -> Self {
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

    /// Runs the exchange, where the modules run before step d, in `chunks` chunks of
    /// samples (1: one exchange of the whole step).
    pub(in crate::sharded) fn set_chunks(&mut self, chunks: usize) {
        self.chunks = chunks.max(1);
    }

    /// The wire precision of steps d and f, both ways.
    pub(in crate::sharded) fn set_wire(&mut self, wire: QComms) {
        self.wire = wire;
    }

    /// This rank's tower group: the ranks of the hosts that hold its towers' tables.
    pub(in crate::sharded) fn group(&self) -> &Comm {
        &self.group
    }

    /// Whether table `t` is in one of this rank's group's towers.
    pub(in crate::sharded) fn in_my_group(&self, t: usize) -> bool {
        self.features[self.my_group].iter().any(|&(f, _)| f == t)
    }

    /// Runs the adopted modules before step d from now on, if every module is one map
    /// per feature and every one of the `tables` tables is in a tower and `whole(t, its
    /// width)` ([`early::Early::plan`]); `local` counts the local shards.
    pub(in crate::sharded) fn move_maps_to_lookup(
        &mut self,
        tables: usize,
        local: usize,
        whole: impl Fn(usize, usize) -> bool,
    ) {
        let Some(modules) = &self.modules else {
            return;
        };
        let whole = |t: usize| whole(t, self.dim_of[t]);
        let (towers, features) = (&self.towers, &self.features);
        self.early = early::Early::plan(modules, towers, features, (tables, local), whole);
    }

    /// Takes a DMT model's Tower Modules, to run them between steps e and f.
    pub(in crate::sharded) fn adopt(&mut self, modules: ModelTowers) {
        self.modules = Some(modules);
    }

    pub(in crate::sharded) fn modules_mut(&mut self) -> Option<&mut ModelTowers> {
        self.modules.as_mut()
    }

    /// The sync domain of the adopted Tower Modules, if any.
    pub(in crate::sharded) fn domain(&mut self) -> Option<TowerDomain<'_>> {
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
    pub(super) fn sent_width(&self, g: usize) -> usize {
        match &self.modules {
            Some(m) => self.out_width(g, m),
            None => self.widths[g],
        }
    }

    /// Where group `g`'s step-f columns go in a row laid out by `slots`: `(slot, first
    /// column in the group's block)`, per tower output with modules, else per table.
    pub(super) fn placed(&self, g: usize, slots: &FeatureSlots) -> Vec<(Slot, usize)> {
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

    /// This group's rows and buffers, and the adopted modules (the whole-step path
    /// runs them between steps e and f). Only with modules.
    fn group_rows(&mut self) -> (modules::GroupRows<'_>, &mut ModelTowers) {
        let g = self.my_group;
        let rows = modules::GroupRows {
            towers: &self.towers[g],
            width: self.widths[g],
            rows: &mut self.rows,
            outs: &mut self.outs,
            x: &mut self.x,
            dx: &mut self.dx,
        };
        let modules = self.modules.as_mut().expect("called with modules");
        (rows, modules)
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

/// The factor of group row `row` of table `t` among the `total` rows: from `scales`
/// for the tables of `mean_split`, else 1.
fn mean_scale_of(mean_split: &[usize], scales: &[f32], t: usize, row: usize, total: usize) -> f32 {
    match mean_split.iter().position(|&m| m == t) {
        Some(i) => scales[i * total + row],
        None => 1.0,
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
