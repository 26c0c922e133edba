//! The shards this rank holds, and their lookup: the second stage of the sharded
//! forward (DMT §3.1 step b). Each shard pools the bags of the whole global batch,
//! in global sample order, that the input distribution brought it, and its backward is
//! the fused optimizer update where the rows live.

use super::route::{bag_of, Part};
use super::store::{Store, Touched};
use crate::error::Result;
use std::ops::Range;
use towerrec_core::batch::JaggedView;
use towerrec_core::embedding::EmbeddingBag;
use towerrec_plan::Shard;

/// A shard held by this rank, with what its last forward received.
pub(super) struct LocalShard {
    pub(super) table: usize,
    pub(super) shard: Shard,
    pub(super) bag: EmbeddingBag,
    offsets: Vec<usize>,
    values: Vec<u64>,
    /// Pooled vectors of the whole global batch, `global batch × columns`.
    pub(super) pooled: Vec<f32>,
    /// Their gradient, as the output distribution's backward leaves it.
    pub(super) grad: Vec<f32>,
    /// A row-partitioned table's store: rows by address, some shared with other ranks.
    /// Its bags are only those that read it, `bags_from[src]` of them from each source
    /// in source order (other shards hold a bag per sample of the global batch).
    store: Option<Store>,
    bags_from: Vec<usize>,
    /// A store's bags' samples, each within its source's slice, in bag order.
    bag_samples: Vec<u32>,
}

impl LocalShard {
    pub(super) fn new(table: usize, shard: Shard, bag: EmbeddingBag) -> Self {
        Self {
            table,
            shard,
            bag,
            offsets: Vec::new(),
            values: Vec::new(),
            pooled: Vec::new(),
            grad: Vec::new(),
            store: None,
            bags_from: Vec::new(),
            bag_samples: Vec::new(),
        }
    }

    pub(super) fn with_store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    pub(super) fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// A row-partitioned store's bags from each source in the last forward (they are
    /// its pooled rows, in order).
    pub(super) fn bags_from(&self) -> &[usize] {
        &self.bags_from
    }

    /// A row-partitioned store's bags from source `src` in the last forward: the
    /// first bag's index, and each bag's sample within `src`'s slice.
    pub(super) fn bags_of(&self, src: usize) -> (usize, &[u32]) {
        let bags = self.bags_of_source(src, &[]);
        (bags.start, &self.bag_samples[bags])
    }

    /// What a row-partitioned store's backward reads and sums into: the last forward's
    /// bags (offsets, ids), their gradient and the store.
    pub(super) fn backward_parts(&mut self) -> (&[usize], &[u64], &[f32], Option<&mut Store>) {
        (&self.offsets, &self.values, &self.grad, self.store.as_mut())
    }

    pub(super) fn columns(&self) -> usize {
        self.shard.num_columns()
    }
}

/// Unpacks the input distribution's `recv` (from each source in order: its sample count,
/// then per local shard its lengths and ids; a row-partitioned store's lengths as in
/// [`super::route::Router::pack`]) into `local`; source `me`'s segment is `own`, which
/// never went through the exchange. Returns each source's sample count.
pub(super) fn unpack(
    recv: &[u64],
    own: &[u64],
    me: usize,
    sources: usize,
    local: &mut [LocalShard],
) -> Vec<usize> {
    for l in local.iter_mut() {
        l.offsets.clear();
        l.offsets.push(0);
        l.values.clear();
        l.bags_from.clear();
        l.bag_samples.clear();
    }
    let mut samples = Vec::with_capacity(sources);
    let (mut at, mut own_at) = (0, 0);
    for src in 0..sources {
        let (recv, at) = if src == me {
            (own, &mut own_at)
        } else {
            (recv, &mut at)
        };
        unpack_source(recv, at, local, &mut samples);
    }
    samples
}

/// Unpacks one source's segment of `recv` from `*at` on, moving `*at` past it.
fn unpack_source(recv: &[u64], at: &mut usize, local: &mut [LocalShard], samples: &mut Vec<usize>) {
    let n = recv[*at] as usize;
    *at += 1;
    samples.push(n);
    for l in local.iter_mut() {
        let mut end = *l.offsets.last().expect("offsets start with 0");
        let first = end;
        if l.store.is_some() {
            // Only the bags that read this store: `sample << 32 | length` each.
            let k = recv[*at] as usize;
            for &bag in &recv[*at + 1..*at + 1 + k] {
                let (sample, len) = bag_of(bag);
                end += len as usize;
                l.offsets.push(end);
                l.bag_samples.push(sample as u32);
            }
            *at += 1 + k;
            l.bags_from.push(k);
        } else {
            let lengths = &recv[*at..*at + n];
            *at += n;
            for &len in lengths {
                end += len as usize;
                l.offsets.push(end);
            }
        }
        l.values.extend_from_slice(&recv[*at..*at + end - first]);
        *at += end - first;
    }
}

impl LocalShard {
    /// Pools every bag it received into `pooled`.
    pub(super) fn pool(&mut self) -> Result<()> {
        self.pool_bags(0..self.offsets.len() - 1)
    }

    /// The bags that source `src` sent in the last forward (`samples`: each source's
    /// sample count, the bags of a shard that is not a row-partitioned store).
    pub(super) fn bags_of_source(&self, src: usize, samples: &[usize]) -> Range<usize> {
        let counts = if self.store.is_some() {
            &self.bags_from
        } else {
            samples
        };
        let first: usize = counts[..src].iter().sum();
        first..first + counts[src]
    }

    /// The bags that source `src` sent in the last forward for the samples of `part` of
    /// its slice (a store's bags are in sample order within each source).
    pub(super) fn part_of_source(&self, src: usize, samples: &[usize], part: Part) -> Range<usize> {
        let bags = self.bags_of_source(src, samples);
        let want = part.range(samples[src]);
        if self.store.is_none() {
            return bags.start + want.start..bags.start + want.end;
        }
        let of = &self.bag_samples[bags.clone()];
        let first = of.partition_point(|&s| (s as usize) < want.start);
        let end = of.partition_point(|&s| (s as usize) < want.end);
        bags.start + first..bags.start + end
    }

    /// Pools the bags it received except those of `own` into `pooled`, whose rows for
    /// `own` are left as they are.
    pub(super) fn pool_others(&mut self, own: Range<usize>) -> Result<()> {
        let bags = self.offsets.len() - 1;
        self.pool_bags(0..own.start)?;
        self.pool_bags(own.end..bags)
    }

    /// Pools the bags of `own`, one per sample of this rank's slice in order, straight
    /// into this rank's feature rows `out` (`stride` wide, at `offset`).
    pub(super) fn pool_own_into(
        &mut self,
        own: Range<usize>,
        out: &mut [f32],
        stride: usize,
        offset: usize,
    ) -> Result<()> {
        let offsets = &self.offsets[own.start..=own.end];
        let values = &self.values[offsets[0]..offsets[own.len()]];
        let view = JaggedView::new(offsets, values)?;
        self.bag.forward(view, out, stride, offset)?;
        Ok(())
    }

    /// Pools `bags` into their rows of `pooled` (sized for every bag received).
    fn pool_bags(&mut self, bags: Range<usize>) -> Result<()> {
        let cols = self.columns();
        let total = (self.offsets.len() - 1) * cols;
        // The kernel writes whole rows, and every bag a later stage reads is pooled each
        // step (a store's own bags that `pool_others` skips are never read), so rows kept
        // from the last step need no zeroing: a store's bag count changes every step.
        self.pooled.resize(total, 0.0);
        if bags.is_empty() {
            return Ok(());
        }
        let offsets = &self.offsets[bags.start..=bags.end];
        let values = &self.values[offsets[0]..offsets[bags.len()]];
        let view = JaggedView::new(offsets, values)?;
        let rows = &mut self.pooled[bags.start * cols..bags.end * cols];
        self.bag.forward(view, rows, cols, 0)?;
        Ok(())
    }
}

/// The first table (model order) with a local shard whose gradient rows, those of bags
/// with ids, hold NaN or infinity, with the value.
pub(super) fn non_finite_grad(local: &[LocalShard]) -> Option<(usize, f32)> {
    local
        .iter()
        .filter_map(|l| {
            let has_ids = |b: usize| l.offsets.get(b + 1) > l.offsets.get(b);
            crate::finite::bad_grad_rows(&l.grad, l.columns(), has_ids).map(|x| (l.table, x))
        })
        .min_by_key(|&(t, _)| t)
}

/// Applies each local shard's fused update from its `grad`; a row-partitioned store
/// updates the rows only it holds and returns the summed gradients of the shared ones
/// it read, for the sparse AllReduce.
pub(super) fn update(local: &mut [LocalShard], lr: f32) -> Result<Touched> {
    let mut touched = Vec::new();
    for l in local {
        if l.store.is_some() {
            let (rows, grads) = l.update_split(lr)?;
            touched.push((l.table, rows, grads));
            continue;
        }
        let view = JaggedView::new(&l.offsets, &l.values)?;
        let cols = l.columns();
        l.bag.backward_update(view, &l.grad, cols, 0, lr)?;
    }
    Ok(touched)
}
