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
//! gradient of every read it served (local aggregation); the ranks gather which rows
//! anyone touched and all-reduce the sums of those rows only (the local-aggregated
//! sparse AllReduce of §5.3; `[cluster] replica_sync` also offers a dense all-reduce
//! of every shared row and an AllGather of every rank's `(row, sum)` pairs), and every
//! copy applies the same sum through [`EmbeddingBag::apply_row_grads`]: the same bits
//! on every rank that holds the row.

use super::lookup::LocalShard;
use super::store::{Store, Touched};
use crate::config::ReplicaSync;
use crate::error::{Error, Result};
use crate::init::TableInit;
use std::collections::BTreeMap;
use std::sync::Arc;
use towerrec_comm::{Comm, HierarchicalAllReduce, Phase};
use towerrec_core::batch::JaggedView;
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer, TablePrecision};
use towerrec_plan::partitioned::TableAddresses;
use towerrec_plan::{Plan, Shard, TablePlan, TableSpec, Topology};

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

/// Every row of `entry` with copies on several ranks, sorted.
pub(super) fn shared_rows(entry: &TablePlan, map: &TableAddresses) -> Vec<u64> {
    let mut rows: Vec<u64> = entry
        .partitions
        .iter()
        .filter(|p| !p.replicas.is_empty())
        .flat_map(|p| p.order.0..p.order.1)
        .map(|pos| map.order().row_at(pos) as u64)
        .collect();
    rows.sort_unstable();
    rows
}

/// This rank's store of table `t`, initialised as one process initialises the table.
pub(super) fn local_store(
    t: usize,
    (name, precision): (&str, TablePrecision),
    shard: Shard,
    map: &Arc<TableAddresses>,
    init: &TableInit,
    optimizer: SparseOptimizer,
) -> Result<LocalShard> {
    let rows = map.stored_rows(shard.rank);
    // Its rows are the map's, not a range: their stochastic rounding is keyed by each
    // one's global row, as anywhere else (docs/CONFIG.md, `model.table_precision`).
    let mut bag = EmbeddingBag::try_from_fn_in(
        precision,
        format!("{name}@{}", shard.rank),
        rows.len(),
        shard.num_columns(),
        // Partial sums: the sample's owner adds them and divides for a mean.
        Pooling::Sum,
        optimizer,
        |r, row| init.fill_row(rows[r], 0, row),
    )?;
    let global: Vec<u64> = rows.iter().map(|&r| r as u64).collect();
    let key = EmbeddingBag::rounding_key(name);
    bag.set_rounding_rows(key, global.into(), shard.columns.0 as u64)?;
    let shared = map.shared_offsets(shard.rank);
    let store = Store::new(rows, shared);
    Ok(LocalShard::new(t, shard, bag).with_store(store))
}

impl LocalShard {
    /// The fused update of the rows only this store holds, and the summed gradient of
    /// each shared row the last forward read, by table row.
    pub(super) fn update_split(&mut self, lr: f32) -> Result<(Vec<u64>, Vec<f32>)> {
        let cols = self.columns();
        let (offsets, values, grad, store) = self.backward_parts();
        let store = store.expect("a row-partitioned store");
        let mut own_offsets = Vec::with_capacity(offsets.len());
        own_offsets.push(0);
        let mut own = Vec::with_capacity(values.len());
        // Each shared row's reads are summed in sample order, as one process sums them
        // (reads of one row within one bag add the same gradient).
        let mut reads = Vec::with_capacity(values.len());
        for b in 0..offsets.len() - 1 {
            for &v in &values[offsets[b]..offsets[b + 1]] {
                match store.sum_place(v as usize) {
                    Some(at) => reads.push((b as u32, at)),
                    None => own.push(v),
                }
            }
            own_offsets.push(own.len());
        }
        store.add_reads(&reads, grad, cols);
        let (rows, grads) = store.take_shared_sums(cols);
        let view = JaggedView::new(&own_offsets, &own)?;
        let grad = std::mem::take(&mut self.grad);
        let done = self.bag.backward_update(view, &grad, cols, 0, lr);
        self.grad = grad;
        done?;
        Ok((rows, grads))
    }

    /// Applies the summed gradients of shared rows (`rows` sorted) this store holds.
    pub(super) fn apply_shared(&mut self, rows: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let cols = self.columns();
        let store = self.store().expect("a row-partitioned store");
        let mut mine = Vec::with_capacity(rows.len());
        let mut picked = Vec::with_capacity(rows.len());
        // Both sorted by row: one merge.
        let mut held = store.shared_by_row().iter().peekable();
        for (i, &row) in rows.iter().enumerate() {
            while held.next_if(|&&(r, _)| r < row).is_some() {}
            if let Some(&(_, offset)) = held.next_if(|&&(r, _)| r == row) {
                mine.push(offset as u64);
                picked.push(i);
            }
        }
        if mine.len() == rows.len() {
            // The common case: this store holds a copy of every row summed.
            return Ok(self.bag.apply_row_grads(&mine, grads, lr)?);
        }
        let mine_grads: Vec<f32> = picked
            .iter()
            .flat_map(|&i| &grads[i * cols..(i + 1) * cols])
            .copied()
            .collect();
        self.bag.apply_row_grads(&mine, &mine_grads, lr)?;
        Ok(())
    }
}

/// How this rank sums the gradients of shared rows with the other ranks.
pub(super) struct SharedSync {
    pub(super) mode: ReplicaSync,
    /// Built at the first sync (collective, as every sync is).
    reducer: Option<HierarchicalAllReduce<f32>>,
    /// Per table, every row with copies on several ranks, sorted: the dense mode's rows.
    shared: Vec<(usize, Vec<u64>)>,
    /// The all-reduced buffer, kept to reuse its memory from step to step.
    buf: Vec<f32>,
}

impl SharedSync {
    /// The sync of tables whose shared rows are `shared` (`(table, rows)`).
    pub(super) fn new(shared: Vec<(usize, Vec<u64>)>) -> Self {
        SharedSync {
            mode: ReplicaSync::default(),
            reducer: None,
            shared,
            buf: Vec::new(),
        }
    }

    /// Every shared row's gradient summed over the ranks, from this rank's `touched`
    /// rows (each row's sum over the ranks in rank order, or as the all-reduce orders
    /// it: the same bits on every rank), handed to `apply(table, rows, sums)` table by
    /// table.
    pub(super) fn sum(
        &mut self,
        comm: &Comm,
        touched: &Touched,
        dims: &[usize],
        mut apply: impl FnMut(usize, &[u64], &[f32]) -> Result<()>,
    ) -> Result<()> {
        match self.mode {
            ReplicaSync::AllGather => {
                for (t, rows, sums) in gather_sums(comm, touched, dims)? {
                    apply(t, &rows, &sums)?;
                }
                Ok(())
            }
            ReplicaSync::Sparse => {
                let union = touched_union(comm, touched)?;
                self.reduce(comm, &union, touched, dims, false, apply)
            }
            ReplicaSync::Dense => {
                let rows = std::mem::take(&mut self.shared);
                let done = self.reduce(comm, &rows, touched, dims, true, apply);
                self.shared = rows;
                done
            }
        }
    }

    /// All-reduces the gradients of `rows` (per table, sorted), this rank's from
    /// `touched` and zero elsewhere, and hands each table's to `apply`; `skip_zero`
    /// leaves out rows whose sum is zero.
    fn reduce(
        &mut self,
        comm: &Comm,
        rows: &[(usize, Vec<u64>)],
        touched: &Touched,
        dims: &[usize],
        skip_zero: bool,
        mut apply: impl FnMut(usize, &[u64], &[f32]) -> Result<()>,
    ) -> Result<()> {
        let mut starts = Vec::with_capacity(rows.len());
        let mut len = 0;
        for (t, r) in rows {
            starts.push(len);
            len += r.len() * dims[*t];
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.resize(len, 0.0);
        for (t, mine, grads) in touched {
            let Some(k) = rows.iter().position(|(u, _)| u == t) else {
                continue;
            };
            let (dim, all) = (dims[*t], &rows[k].1);
            for (i, row) in mine.iter().enumerate() {
                let j = all.binary_search(row).map_err(|_| {
                    Error::Cluster(format!(
                        "sparse sync: table {t} row {row} is not a shared row"
                    ))
                })?;
                let at = starts[k] + j * dim;
                buf[at..at + dim].copy_from_slice(&grads[i * dim..(i + 1) * dim]);
            }
        }
        if self.reducer.is_none() {
            self.reducer = Some(HierarchicalAllReduce::new(comm)?);
        }
        self.reducer
            .as_mut()
            .expect("built above")
            .all_reduce(&mut buf, Phase::SparseGradSync)?;
        let applied = rows.iter().zip(starts).try_for_each(|((t, r), start)| {
            let dim = dims[*t];
            let all = &buf[start..start + r.len() * dim];
            if !skip_zero {
                return apply(*t, r, all);
            }
            let mut keys = Vec::with_capacity(r.len());
            let mut sums = Vec::with_capacity(all.len());
            for (&row, g) in r.iter().zip(all.chunks_exact(dim)) {
                if !g.iter().all(|&x| x == 0.0) {
                    keys.push(row);
                    sums.extend_from_slice(g);
                }
            }
            apply(*t, &keys, &sums)
        });
        self.buf = buf;
        applied
    }
}

/// `(table, count, rows…)` of every table in `touched`.
fn encode_rows(touched: &Touched) -> Vec<u64> {
    let mut keys = Vec::new();
    for (t, rows, _) in touched {
        keys.push(*t as u64);
        keys.push(rows.len() as u64);
        keys.extend_from_slice(rows);
    }
    keys
}

/// Walks an all-gathered [`encode_rows`]: `f(table, rows, index of the first row)`.
fn decode_rows(all: &[u64], mut f: impl FnMut(usize, &[u64]) -> Result<()>) -> Result<()> {
    let mut at = 0;
    while at < all.len() {
        let (t, n) = (all[at] as usize, all[at + 1] as usize);
        at += 2;
        f(t, &all[at..at + n])?;
        at += n;
    }
    Ok(())
}

/// The rows any rank touched, per table, sorted (OPER §5.3's unique indices over the
/// global batch).
fn touched_union(comm: &Comm, touched: &Touched) -> Result<Vec<(usize, Vec<u64>)>> {
    let (all, _) = comm.all_gather(&encode_rows(touched), Phase::SparseGradSync)?;
    let mut union: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    decode_rows(&all, |t, rows| {
        union.entry(t).or_default().extend_from_slice(rows);
        Ok(())
    })?;
    Ok(union
        .into_iter()
        .map(|(t, mut rows)| {
            rows.sort_unstable();
            rows.dedup();
            (t, rows)
        })
        .collect())
}

/// The AllGather-based sparse AllReduce: every rank's touched rows and sums gathered,
/// each row's sum over the ranks in rank order.
fn gather_sums(comm: &Comm, touched: &Touched, dims: &[usize]) -> Result<Touched> {
    let grads: Vec<f32> = touched
        .iter()
        .flat_map(|(_, _, g)| g.iter().copied())
        .collect();
    let (all_keys, _) = comm.all_gather(&encode_rows(touched), Phase::SparseGradSync)?;
    let (all_grads, _) = comm.all_gather(&grads, Phase::SparseGradSync)?;
    let mut sums: BTreeMap<usize, BTreeMap<u64, Vec<f32>>> = BTreeMap::new();
    let mut gat = 0;
    decode_rows(&all_keys, |t, rows| {
        let dim = *dims
            .get(t)
            .ok_or_else(|| Error::Cluster(format!("sparse sync: table {t} out of range")))?;
        let table = sums.entry(t).or_default();
        for &row in rows {
            let g = &all_grads[gat..gat + dim];
            gat += dim;
            let sum = table.entry(row).or_insert_with(|| vec![0.0; dim]);
            sum.iter_mut().zip(g).for_each(|(s, &x)| *s += x);
        }
        Ok(())
    })?;
    Ok(sums
        .into_iter()
        .map(|(t, rows)| {
            let (keys, grads): (Vec<u64>, Vec<Vec<f32>>) = rows.into_iter().unzip();
            (t, keys, grads.concat())
        })
        .collect())
}

/// Adds to `bytes` (per rank of `plan`) what its row-partitioned tables need beyond
/// their rows, which [`Plan::rank_bytes`] counts: every such table's route cache on
/// every rank (each routes ids of any row), and each store's bookkeeping.
pub fn add_addressing_bytes(plan: &Plan, tables: &[TableSpec], bytes: &mut [u64]) {
    for entry in plan.tables.iter().filter(|e| !e.partitions.is_empty()) {
        let Some(spec) = tables.iter().find(|t| t.name == entry.table) else {
            continue;
        };
        let cache = super::route::route_cache_bytes(spec.rows);
        // (stored, shared) rows per rank.
        let mut held = vec![(0usize, 0usize); bytes.len()];
        for p in &entry.partitions {
            let shared = if p.replicas.is_empty() {
                0
            } else {
                p.num_rows()
            };
            for rank in p.holders() {
                if let Some(h) = held.get_mut(rank) {
                    h.0 += p.num_rows();
                    h.1 += shared;
                }
            }
        }
        for (b, &(stored, shared)) in bytes.iter_mut().zip(&held) {
            *b = b
                .saturating_add(cache)
                .saturating_add(super::store::bookkeeping_bytes(stored, shared));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_plan::{Partition, ShardingType};

    fn spec(name: &str, rows: usize) -> TableSpec {
        TableSpec {
            name: name.into(),
            rows,
            dim: 4,
            bytes_per_row: 16,
            pooling_factor: 1.0,
        }
    }

    #[test]
    fn addressing_counts_every_ranks_route_cache_and_each_stores_rows() {
        let part = |order, rank, replicas: Vec<usize>| Partition {
            order,
            rank,
            replicas,
        };
        let partitioned = |table: &str, rows: usize| TablePlan {
            table: table.into(),
            sharding: ShardingType::RowPartitioned,
            shards: Vec::new(),
            hot_rows: Vec::new(),
            partitions: vec![part((0, 3), 0, vec![1]), part((3, rows), 1, Vec::new())],
        };
        let whole = TablePlan {
            table: "whole".into(),
            sharding: ShardingType::TableWise,
            shards: vec![Shard {
                rank: 0,
                rows: (0, 10),
                columns: (0, 4),
            }],
            hot_rows: Vec::new(),
            partitions: Vec::new(),
        };
        let huge = 1 << 23;
        let plan = Plan {
            topology: Topology::new(1, 2).expect("topology"),
            tables: vec![partitioned("a", 10), whole, partitioned("huge", huge)],
            towers: Vec::new(),
        };
        let specs = [spec("a", 10), spec("whole", 10), spec("huge", huge)];
        let mut bytes = vec![5, 7];
        add_addressing_bytes(&plan, &specs, &mut bytes);
        use crate::sharded::store::bookkeeping_bytes;
        // Table `a`: a 40-byte route cache on both ranks; rank 0 stores the 3 shared
        // rows, rank 1 them and its own 7. Table `huge` has no route cache.
        let a = [40 + bookkeeping_bytes(3, 3), 40 + bookkeeping_bytes(10, 3)];
        let huge_rows = [bookkeeping_bytes(3, 3), bookkeeping_bytes(huge, 3)];
        assert_eq!(
            bytes,
            vec![5 + a[0] + huge_rows[0], 7 + a[1] + huge_rows[1]]
        );
        // Per row its table row, slot and bit; per shared row 28 bytes more.
        assert_eq!(bookkeeping_bytes(64, 0), 64 * 12 + 8);
        assert_eq!(bookkeeping_bytes(65, 1), 65 * 12 + 16 + 28);
    }
}
