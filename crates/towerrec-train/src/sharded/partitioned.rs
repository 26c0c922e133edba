//! Row-partitioned tables (OPER §5): each rank's store of a table (the partitions it
//! owns, then its replicas), the lookups the address map routes to it, and the
//! synchronisation of rows held by more than one rank.
//!
//! Reads go through the ordinary stages: the router sends every id to the nearest
//! copy of its row (the rank itself when it holds one), the store pools partial sums,
//! the flat output distribution sums them at the sample's owner, and the backward
//! brings each store the gradient of what it pooled. A row with one copy is then
//! updated by the fused backward as any shard's row. A row with copies on several
//! ranks must change the same way everywhere: each store sums, per such row, the
//! gradient of every read it served (local aggregation), the ranks exchange only the
//! rows they touched with their sums (the local-aggregated sparse AllReduce of §5.3,
//! an AllGather of `(row, gradient)` pairs), and every copy applies the sum over the
//! ranks, added in rank order, through [`EmbeddingBag::apply_row_grads`]: the same
//! bits on every rank that holds the row.

use super::lookup::LocalShard;
use crate::error::{Error, Result};
use crate::init::TableInit;
use std::ops::Range;
use std::sync::Arc;
use towerrec_comm::{Comm, Phase};
use towerrec_core::batch::JaggedView;
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer};
use towerrec_plan::partitioned::TableAddresses;
use towerrec_plan::{Shard, TablePlan, Topology};

/// What a row-partitioned table's store on this rank needs beyond a shard's.
pub(super) struct Store {
    map: Arc<TableAddresses>,
    /// The table row at each offset.
    rows: Vec<usize>,
    /// Offsets of rows with copies elsewhere, sorted.
    shared: Vec<Range<usize>>,
}

impl Store {
    fn is_shared(&self, offset: usize) -> bool {
        let i = self.shared.partition_point(|r| r.end <= offset);
        self.shared.get(i).is_some_and(|r| r.contains(&offset))
    }
}

/// The address map of a row-partitioned `entry`, and one shard per rank that stores
/// any of its rows (rows `0..stored`, every column).
pub(super) fn stores(
    entry: &TablePlan,
    rows: usize,
    dim: usize,
    topology: Topology,
) -> (Arc<TableAddresses>, Vec<Shard>) {
    let map = Arc::new(TableAddresses::new(entry, rows, topology.world_size()));
    let shards = (0..topology.world_size())
        .filter_map(|rank| {
            let (owned, replica) = map.stored(rank);
            (owned + replica > 0).then_some(Shard {
                rank,
                rows: (0, owned + replica),
                columns: (0, dim),
            })
        })
        .collect();
    (map, shards)
}

/// This rank's store of table `t`, initialised as one process initialises the table.
#[allow(clippy::too_many_arguments)]
pub(super) fn local_store(
    t: usize,
    name: &str,
    shard: Shard,
    map: &Arc<TableAddresses>,
    init: &TableInit,
    optimizer: SparseOptimizer,
) -> Result<LocalShard> {
    let rows = map.stored_rows(shard.rank);
    let bag = EmbeddingBag::try_from_fn(
        format!("{name}@{}", shard.rank),
        rows.len(),
        shard.num_columns(),
        // Partial sums: the sample's owner adds them and divides for a mean.
        Pooling::Sum,
        optimizer,
        |r, row| init.fill_row(rows[r], 0, row),
    )?;
    let store = Store {
        map: Arc::clone(map),
        shared: map.shared_offsets(shard.rank),
        rows,
    };
    Ok(LocalShard::new(t, shard, bag).with_store(store))
}

/// Per table, the rows of shared copies this rank's reads touched and their summed
/// gradients: `(table, rows, grads)`.
pub(super) type Touched = Vec<(usize, Vec<u64>, Vec<f32>)>;

impl LocalShard {
    /// The fused update of the rows only this store holds, and the summed gradient of
    /// each shared row the last forward read, by table row.
    pub(super) fn update_split(&mut self, lr: f32) -> Result<(Vec<u64>, Vec<f32>)> {
        let cols = self.columns();
        let (offsets, values) = self.received();
        let store = self.store().expect("a row-partitioned store");
        let mut own_offsets = Vec::with_capacity(offsets.len());
        own_offsets.push(0);
        let mut own = Vec::with_capacity(values.len());
        // Shared rows by offset: (offset, occurrence) in (sample, position) order.
        let mut shared: Vec<(usize, usize)> = Vec::new();
        for b in 0..offsets.len() - 1 {
            for &v in &values[offsets[b]..offsets[b + 1]] {
                if store.is_shared(v as usize) {
                    shared.push((v as usize, b));
                } else {
                    own.push(v);
                }
            }
            own_offsets.push(own.len());
        }
        // A stable sort keeps each row's reads in (sample, position) order.
        shared.sort_by_key(|&(offset, _)| offset);
        let mut rows = Vec::new();
        let mut grads: Vec<f32> = Vec::new();
        for (i, &(offset, b)) in shared.iter().enumerate() {
            if i == 0 || shared[i - 1].0 != offset {
                rows.push(store.rows[offset] as u64);
                grads.resize(grads.len() + cols, 0.0);
            }
            let last = grads.len() - cols;
            let sum = &mut grads[last..];
            let g = &self.grad[b * cols..(b + 1) * cols];
            sum.iter_mut().zip(g).for_each(|(s, &x)| *s += x);
        }
        let view = JaggedView::new(&own_offsets, &own)?;
        let grad = std::mem::take(&mut self.grad);
        let done = self.bag.backward_update(view, &grad, cols, 0, lr);
        self.grad = grad;
        done?;
        Ok((rows, grads))
    }

    /// Applies the summed gradients of shared rows this store holds.
    pub(super) fn apply_shared(
        &mut self,
        rows: &[u64],
        grads: &[f32],
        lr: f32,
        me: usize,
        topology: Topology,
    ) -> Result<()> {
        let cols = self.columns();
        let store = self.store().expect("a row-partitioned store");
        let mut mine = Vec::new();
        let mut mine_grads = Vec::new();
        for (i, &row) in rows.iter().enumerate() {
            let at = store.map.locate(row as usize, me, topology);
            if at.rank == me {
                mine.push(at.offset as u64);
                mine_grads.extend_from_slice(&grads[i * cols..(i + 1) * cols]);
            }
        }
        self.bag.apply_row_grads(&mine, &mine_grads, lr)?;
        Ok(())
    }
}

/// The local-aggregated sparse AllReduce: every rank's touched shared rows and sums,
/// gathered; each row's sum over the ranks in rank order; `(table, rows, sums)`.
pub(super) fn all_reduce_touched(
    comm: &Comm,
    touched: &Touched,
    dims: &[usize],
) -> Result<Touched> {
    let mut keys = Vec::new();
    let mut grads = Vec::new();
    for (t, rows, g) in touched {
        keys.push(*t as u64);
        keys.push(rows.len() as u64);
        keys.extend_from_slice(rows);
        grads.extend_from_slice(g);
    }
    let (all_keys, key_counts) = comm.all_gather(&keys, Phase::SparseGradSync)?;
    let (all_grads, _) = comm.all_gather(&grads, Phase::SparseGradSync)?;
    // Per table, row → sum, in the order rows first arrive (rank order).
    let mut sums: std::collections::BTreeMap<usize, std::collections::BTreeMap<u64, Vec<f32>>> =
        Default::default();
    let (mut at, mut gat) = (0usize, 0usize);
    for &count in &key_counts {
        let end = at + count;
        while at < end {
            let (t, n) = (all_keys[at] as usize, all_keys[at + 1] as usize);
            let dim = *dims
                .get(t)
                .ok_or_else(|| Error::Cluster(format!("sparse sync: table {t} out of range")))?;
            at += 2;
            let table = sums.entry(t).or_default();
            for &row in &all_keys[at..at + n] {
                let g = &all_grads[gat..gat + dim];
                gat += dim;
                let sum = table.entry(row).or_insert_with(|| vec![0.0; dim]);
                sum.iter_mut().zip(g).for_each(|(s, &x)| *s += x);
            }
            at += n;
        }
    }
    Ok(sums
        .into_iter()
        .map(|(t, rows)| {
            let (keys, grads): (Vec<u64>, Vec<Vec<f32>>) = rows.into_iter().unzip();
            (t, keys, grads.concat())
        })
        .collect())
}
