//! The shards this rank holds, and their lookup: the second stage of the sharded
//! forward (DMT §3.1 step b). Each shard pools the bags of the whole global batch,
//! in global sample order, that the input distribution brought it, and its backward is
//! the fused optimizer update where the rows live.

use super::store::{Store, Touched};
use crate::error::Result;
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
        let first: usize = self.bags_from[..src].iter().sum();
        (first, &self.bag_samples[first..first + self.bags_from[src]])
    }

    /// The bags of the last forward: offsets and ids.
    pub(super) fn received(&self) -> (&[usize], &[u64]) {
        (&self.offsets, &self.values)
    }

    pub(super) fn columns(&self) -> usize {
        self.shard.num_columns()
    }
}

/// One source's segment of local shard `l` in an input distribution buffer, from
/// `at` (moved past it), for a source of `n` samples: each bag's length and, for a
/// row-partitioned store, its sample (`bag(len, sample)`); returns the ids.
fn read_segment<'a>(
    buf: &'a [u64],
    at: &mut usize,
    n: usize,
    l: &LocalShard,
    mut bag: impl FnMut(usize, Option<u32>),
) -> &'a [u64] {
    let mut ids = 0;
    if l.store.is_some() {
        // Only the bags that read this store: `sample << 32 | length` each.
        let k = buf[*at] as usize;
        for &word in &buf[*at + 1..*at + 1 + k] {
            let len = (word & 0xffff_ffff) as usize;
            ids += len;
            bag(len, Some((word >> 32) as u32));
        }
        *at += 1 + k;
    } else {
        for &len in &buf[*at..*at + n] {
            ids += len as usize;
            bag(len as usize, None);
        }
        *at += n;
    }
    let values = &buf[*at..*at + ids];
    *at += ids;
    values
}

/// Unpacks the input distribution's `recv` (from each source in order: its sample count,
/// then per local shard its lengths and ids; a row-partitioned store's lengths as in
/// [`super::route::Router::pack`]) into `local`; returns each source's sample count.
pub(super) fn unpack(recv: &[u64], sources: usize, local: &mut [LocalShard]) -> Vec<usize> {
    for l in local.iter_mut() {
        l.offsets.clear();
        l.offsets.push(0);
        l.values.clear();
        l.bags_from.clear();
        l.bag_samples.clear();
    }
    let mut samples = Vec::with_capacity(sources);
    let mut at = 0;
    for _ in 0..sources {
        let n = recv[at] as usize;
        at += 1;
        samples.push(n);
        for l in local.iter_mut() {
            let (mut end, mut bags) = (*l.offsets.last().expect("offsets start with 0"), 0);
            let (mut offsets, mut bag_samples) = (
                std::mem::take(&mut l.offsets),
                std::mem::take(&mut l.bag_samples),
            );
            let values = read_segment(recv, &mut at, n, l, |len, sample| {
                end += len;
                offsets.push(end);
                bag_samples.extend(sample);
                bags += 1;
            });
            (l.offsets, l.bag_samples) = (offsets, bag_samples);
            l.values.extend_from_slice(values);
            if l.store.is_some() {
                l.bags_from.push(bags);
            }
        }
    }
    samples
}

/// Pools this rank's own segment of the input distribution (`own`, in the format of
/// [`unpack`]'s sources: the bags it routes to itself) into `out`, one buffer per local
/// shard; calls `progress` after each shard. Runs while the exchange brings the other
/// ranks' bags (OPER §5: the local lookups under the remote fetches).
pub(super) fn pool_own(
    own: &[u64],
    local: &[LocalShard],
    out: &mut Vec<Vec<f32>>,
    progress: &mut dyn FnMut(),
) -> Result<()> {
    out.resize_with(local.len(), Vec::new);
    let n = own[0] as usize;
    let mut at = 1;
    let mut offsets = Vec::new();
    for (l, pooled) in local.iter().zip(out.iter_mut()) {
        offsets.clear();
        offsets.push(0);
        let mut end = 0;
        let values = read_segment(own, &mut at, n, l, |len, _| {
            end += len;
            offsets.push(end);
        });
        let cols = l.columns();
        pooled.clear();
        pooled.resize((offsets.len() - 1) * cols, 0.0);
        l.bag
            .forward(JaggedView::new(&offsets, values)?, pooled, cols, 0)?;
        progress();
    }
    Ok(())
}

/// Pools every bag each local shard received, except this rank's own (source `me`),
/// whose vectors [`pool_own`] left in `own` and are copied into place.
pub(super) fn pool_others(
    local: &mut [LocalShard],
    me: usize,
    samples: &[usize],
    own: &[Vec<f32>],
) -> Result<()> {
    for (l, own) in local.iter_mut().zip(own) {
        let cols = l.columns();
        let from = if l.store.is_some() {
            &l.bags_from[..]
        } else {
            samples
        };
        let first: usize = from[..me].iter().sum();
        let mine = from[me];
        let bags = l.offsets.len() - 1;
        l.pooled.clear();
        l.pooled.resize(bags * cols, 0.0);
        l.pool_bags(0..first)?;
        l.pooled[first * cols..(first + mine) * cols].copy_from_slice(own);
        l.pool_bags(first + mine..bags)?;
    }
    Ok(())
}

impl LocalShard {
    /// Pools bags `range` of the last forward into their rows of `pooled`.
    fn pool_bags(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        let cols = self.columns();
        let offsets = &self.offsets[range.start..=range.end];
        let values = &self.values[offsets[0]..offsets[offsets.len() - 1]];
        let out = &mut self.pooled[range.start * cols..range.end * cols];
        self.bag
            .forward(JaggedView::new(offsets, values)?, out, cols, 0)?;
        Ok(())
    }
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
