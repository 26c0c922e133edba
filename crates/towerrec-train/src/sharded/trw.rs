//! The output distribution of table-row-wise tables in two steps, as TorchRec's
//! table-row-wise sharding runs it: the row shards of a table, all on one host, first
//! sum their partial sums within the host (a ReduceScatter over the host's ranks: rank
//! `j` of the host sums the rows of the samples of every host's rank `j`), then each
//! sum crosses hosts once, to the sample's owner among the rank's peers. The flat path
//! sends every shard's partial sum of every sample to its owner instead: on `L` ranks a
//! host, `L` times the cross-host bytes.
//!
//! Partial sums are added in rank order from zero, as the flat path adds them at the
//! owner, so the two give the same bits (`tests/distributed.rs` trains every sharding
//! type, this one included, against one process). The backward runs the two steps in
//! reverse and leaves each shard the gradient of the whole global batch. Used when the
//! plan has no towers (SPTT handles its tables itself) and the cluster has hosts to
//! cross.

use super::lookup::LocalShard;
use super::output::{GradWork, OutputDist, RowsWork, StepPart};
use super::route::Router;
use super::spread::{firsts, Spread, TableState};
use crate::config::QComms;
use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_comm::{Comm, Phase, Topology};
use towerrec_plan::ShardingType;

/// The two communicators and the tables that go through them.
pub(super) struct HierTrw {
    /// The ranks of this rank's host, by local rank.
    host: Comm,
    /// This rank's local rank on every host, by host.
    peers: Comm,
    topology: Topology,
    /// Per host, its table-row-wise tables in table order.
    on_host: Vec<Vec<usize>>,
    /// Whether table `t` is table-row-wise (and so exchanged here).
    pub(super) mine: Vec<bool>,
    send: Vec<f32>,
    recv: Vec<f32>,
    /// This rank's sums: per table of its host, the rows of its peers' samples.
    sums: Vec<f32>,
}

impl HierTrw {
    /// The exchange of `tables`' table-row-wise tables over `comm` (the world), or
    /// `None` when there are none or one host. Collective (splits `comm`).
    pub(super) fn new(comm: &Comm, tables: &[TableState]) -> Result<Option<Self>> {
        let topology = comm.topology();
        let mine: Vec<bool> = tables
            .iter()
            .map(|t| t.sharding == ShardingType::TableRowWise)
            .collect();
        if topology.hosts < 2 || !mine.contains(&true) {
            return Ok(None);
        }
        let mut on_host = vec![Vec::new(); topology.hosts];
        for (t, table) in tables.iter().enumerate().filter(|&(t, _)| mine[t]) {
            on_host[topology.host_of(table.shards[0].rank)].push(t);
        }
        Ok(Some(HierTrw {
            host: comm.intra_host()?,
            peers: comm.peers()?,
            topology,
            on_host,
            mine,
            send: Vec::new(),
            recv: Vec::new(),
            sums: Vec::new(),
        }))
    }

    /// World ranks of every host's rank `j`, by host, with each one's first row among
    /// them (its samples' rows follow one another in host order).
    fn peers_of(&self, j: usize, samples: &[usize]) -> Vec<(usize, usize)> {
        let l = self.topology.ranks_per_host;
        let mut at = 0;
        (0..self.topology.hosts)
            .map(|h| {
                let w = h * l + j;
                at += samples[w];
                (w, at - samples[w])
            })
            .collect()
    }

    /// Start of each of `host`'s tables in `sums`, and the length of `sums`.
    fn layout(
        &self,
        host: usize,
        rows: usize,
        dims: impl Fn(usize) -> usize,
    ) -> (Vec<usize>, usize) {
        let mut at = 0;
        let starts = self.on_host[host]
            .iter()
            .map(|&t| {
                at += rows * dims(t);
                at - rows * dims(t)
            })
            .collect();
        (starts, at)
    }
}

/// A table-row-wise shard as the exchange places it: the index `k` of its table among
/// its host's, its columns `off..off + cols` of the table's `d`.
struct Held {
    k: usize,
    cols: usize,
    off: usize,
    d: usize,
}

impl HierTrw {
    /// The table-row-wise shards of host `h`'s local rank `i`, in wire order.
    fn held<'a>(&'a self, v: &'a View<'_>, h: usize, i: usize) -> impl Iterator<Item = Held> + 'a {
        let rank = h * self.topology.ranks_per_host + i;
        v.router
            .held_by(rank)
            .filter(|&(t, _)| self.mine[t])
            .map(move |(t, s)| {
                let shard = &v.tables[t].shards[s];
                let k = self.on_host[h]
                    .iter()
                    .position(|&u| u == t)
                    .expect("a table-row-wise table is on its shards' host");
                Held {
                    k,
                    cols: shard.num_columns(),
                    off: shard.columns.0,
                    d: v.tables[t].dim,
                }
            })
    }
}

/// What the exchange reads of the collection.
struct View<'a> {
    local: &'a mut [LocalShard],
    router: &'a Router,
    tables: &'a [TableState],
    /// Samples of each world rank, and the first of each in the global batch.
    samples: &'a [usize],
    pub(super) firsts: &'a [usize],
    /// The wire precision both ways.
    wire: QComms,
}

impl HierTrw {
    /// Writes this rank's rows of every table-row-wise table into `out` (`slots`).
    fn forward(&mut self, v: View<'_>, out: &mut [f32], slots: &FeatureSlots) -> Result<()> {
        let topo = self.topology;
        let me = self.host.world_rank();
        let (h, j) = (topo.host_of(me), topo.local_rank(me));
        // Within the host: to local rank k, every shard's rows of the samples of k's peers.
        self.send.clear();
        let mut counts = vec![0; topo.ranks_per_host];
        for (k, count) in counts.iter_mut().enumerate() {
            let before = self.send.len();
            for l in v.local.iter().filter(|l| self.mine[l.table]) {
                let cols = l.columns();
                for (w, _) in self.peers_of(k, v.samples) {
                    let (f, n) = (v.firsts[w], v.samples[w]);
                    self.send
                        .extend_from_slice(&l.pooled[f * cols..(f + n) * cols]);
                }
            }
            *count = self.send.len() - before;
        }
        self.host.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::OutputDist,
            v.wire.forward,
        )?;
        let peers = self.peers_of(j, v.samples);
        let rows: usize = peers.iter().map(|&(w, _)| v.samples[w]).sum();
        let dim = |t: usize| v.tables[t].dim;
        let (starts, len) = self.layout(h, rows, dim);
        self.sums.clear();
        self.sums.resize(len, 0.0);
        let mut at = 0;
        for i in 0..topo.ranks_per_host {
            let held: Vec<Held> = self.held(&v, h, i).collect();
            for Held { k, cols, off, d } in held {
                for &(w, first) in &peers {
                    for r in 0..v.samples[w] {
                        let dst = starts[k] + (first + r) * d + off;
                        let sum = &mut self.sums[dst..dst + cols];
                        sum.iter_mut()
                            .zip(&self.recv[at..at + cols])
                            .for_each(|(a, &x)| *a += x);
                        at += cols;
                    }
                }
            }
        }
        // Across hosts: to each peer, its samples' sums of this host's tables.
        self.send.clear();
        let mut counts = vec![0; topo.hosts];
        for (g, &(w, first)) in peers.iter().enumerate() {
            let before = self.send.len();
            for (k, &t) in self.on_host[h].iter().enumerate() {
                let d = dim(t);
                let start = starts[k] + first * d;
                self.send
                    .extend_from_slice(&self.sums[start..start + v.samples[w] * d]);
            }
            counts[g] = self.send.len() - before;
        }
        self.peers.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::OutputDist,
            v.wire.forward,
        )?;
        let width = slots.width();
        let b_local = v.samples[me];
        let mut at = 0;
        for tables in &self.on_host {
            for &t in tables {
                let (range, d) = (slots.slot(t).range(), dim(t));
                for (row, part) in out
                    .chunks_exact_mut(width)
                    .take(b_local)
                    .zip(self.recv[at..at + b_local * d].chunks_exact(d.max(1)))
                {
                    row[range.clone()].copy_from_slice(part);
                }
                at += b_local * d;
            }
        }
        Ok(())
    }

    /// From the gradient of this rank's rows (`grad`, each table's columns already
    /// scaled as the flat path scales them, by `scale(t, sample)`), each local
    /// table-row-wise shard's gradient of the whole global batch.
    fn backward(
        &mut self,
        v: View<'_>,
        grad: &[f32],
        slots: &FeatureSlots,
        scale: impl Fn(usize, usize) -> f32,
    ) -> Result<()> {
        let topo = self.topology;
        let me = self.host.world_rank();
        let (h, j) = (topo.host_of(me), topo.local_rank(me));
        let width = slots.width();
        let dim = |t: usize| v.tables[t].dim;
        // Across hosts, reversed: to each host, this rank's gradient of its tables.
        self.send.clear();
        let mut counts = vec![0; topo.hosts];
        for (g, count) in counts.iter_mut().enumerate() {
            let before = self.send.len();
            for &t in &self.on_host[g] {
                let range = slots.slot(t).range();
                for (b, row) in grad.chunks_exact(width).enumerate() {
                    let part = &row[range.clone()];
                    match scale(t, b) {
                        1.0 => self.send.extend_from_slice(part),
                        s => self.send.extend(part.iter().map(|&x| x * s)),
                    }
                }
            }
            *count = self.send.len() - before;
        }
        self.peers.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::OutputDist,
            v.wire.backward,
        )?;
        // The received blocks come by peer, then table: lay them out by table.
        let peers = self.peers_of(j, v.samples);
        let rows: usize = peers.iter().map(|&(w, _)| v.samples[w]).sum();
        let (starts, len) = self.layout(h, rows, dim);
        self.sums.clear();
        self.sums.resize(len, 0.0);
        let mut at = 0;
        for &(w, first) in &peers {
            for (k, &t) in self.on_host[h].iter().enumerate() {
                let n = v.samples[w] * dim(t);
                let start = starts[k] + first * dim(t);
                self.sums[start..start + n].copy_from_slice(&self.recv[at..at + n]);
                at += n;
            }
        }
        // Within the host, reversed: to local rank i, its shards' columns of those rows.
        self.send.clear();
        let mut counts = vec![0; topo.ranks_per_host];
        for (i, count) in counts.iter_mut().enumerate() {
            let before = self.send.len();
            let held: Vec<Held> = self.held(&v, h, i).collect();
            for Held { k, cols, off, d } in held {
                let block = &self.sums[starts[k]..starts[k] + rows * d];
                for row in block.chunks_exact(d.max(1)) {
                    self.send.extend_from_slice(&row[off..off + cols]);
                }
            }
            *count = self.send.len() - before;
        }
        self.host.all_to_all_v_wire_into(
            &self.send,
            &counts,
            &mut self.recv,
            Phase::OutputDist,
            v.wire.backward,
        )?;
        let global: usize = v.samples.iter().sum();
        for l in v.local.iter_mut().filter(|l| self.mine[l.table]) {
            l.grad.clear();
            l.grad.resize(global * l.columns(), 0.0);
        }
        let mut at = 0;
        for k in 0..topo.ranks_per_host {
            for l in v.local.iter_mut().filter(|l| self.mine[l.table]) {
                let cols = l.columns();
                for (w, _) in self.peers_of(k, v.samples) {
                    let (f, n) = (v.firsts[w], v.samples[w]);
                    l.grad[f * cols..(f + n) * cols].copy_from_slice(&self.recv[at..at + n * cols]);
                    at += n * cols;
                }
            }
        }
        Ok(())
    }
}

impl OutputDist for HierTrw {
    fn max_parts(&self) -> usize {
        1
    }

    /// The table-row-wise tables' rows of this rank's samples into `out`.
    fn forward_part(
        &mut self,
        sp: &mut Spread,
        step: StepPart<'_>,
        out: &mut [f32],
        _: Option<RowsWork<'_>>,
    ) -> Result<()> {
        let StepPart { batch, slots, .. } = step;
        let firsts = firsts(&sp.samples);
        self.forward(view(sp, &firsts), &mut out[..step.rows_len()], slots)?;
        let samples = 0..batch.batch_size();
        sp.scale_mean_rows(batch, (out, slots), |t| self.mine[t], samples);
        Ok(())
    }

    fn backward_part(
        &mut self,
        _: &mut Spread,
        _: StepPart<'_>,
        _: &mut [f32],
        _: GradWork<'_>,
    ) -> Result<()> {
        unreachable!("table-row-wise tables across hosts run whole steps")
    }

    /// The reverse of the forward from the gradient of this rank's rows.
    fn backward_last(&mut self, sp: &mut Spread, step: StepPart<'_>, grad: &[f32]) -> Result<()> {
        let StepPart { batch, slots, .. } = step;
        let firsts = firsts(&sp.samples);
        let scales: Vec<Option<Vec<f32>>> = (0..sp.tables.len())
            .map(|t| {
                let f = sp.mean_scales(batch, t)?;
                Some((0..batch.batch_size()).map(f).collect())
            })
            .collect();
        let scale = |t: usize, b: usize| scales[t].as_ref().map_or(1.0, |s| s[b]);
        self.backward(view(sp, &firsts), grad, slots, scale)
    }
}

/// What the two-step exchange reads, with `firsts` of this step's samples.
fn view<'a>(sp: &'a mut Spread, firsts: &'a [usize]) -> View<'a> {
    View {
        local: &mut sp.local,
        router: &sp.router,
        tables: &sp.tables,
        samples: &sp.samples,
        firsts,
        wire: sp.wire,
    }
}
