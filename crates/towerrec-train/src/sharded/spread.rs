//! What every stage of the sharded forward and backward reads and writes, handed to
//! each explicitly: the tables as spread by the plan, this rank's shards, the routes of
//! the ids, and the samples of the step. Its own stages are the first two of the
//! forward: the input distribution (the ids to the shards, the scale-in paper's
//! Appendix; DMT §3.1 step a) and the lookups (step b).

use super::lookup::{self, LocalShard};
use super::partitioned;
use super::replicas::{Replica, Replicas};
use super::route::{Route, Router};
use crate::config::QComms;
use crate::error::{Error, Result};
use crate::init::TableInit;
use crate::slots::FeatureSlots;
use std::ops::Range;
use std::sync::Arc;
use towerrec_comm::{Comm, Phase};
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer, TablePrecision};
use towerrec_core::Batch;
use towerrec_plan::partitioned::TableAddresses;
use towerrec_plan::{Plan, Shard, ShardingType};

/// One table as the model sees it.
#[derive(Debug, Clone)]
pub struct TableDesc {
    pub name: String,
    pub rows: usize,
    pub dim: usize,
    /// How its rows are stored.
    pub precision: TablePrecision,
}

/// One table as spread by the plan.
pub(super) struct TableState {
    pub(super) dim: usize,
    pub(super) pooling: Pooling,
    pub(super) sharding: ShardingType,
    pub(super) shards: Vec<Shard>,
    /// A row-partitioned table's address map (its shards are the ranks' stores).
    pub(super) addresses: Option<Arc<TableAddresses>>,
}

impl TableState {
    /// Whether shards pool partial sums of a bag (the owner adds them).
    pub(super) fn row_split(&self) -> bool {
        matches!(
            self.sharding,
            ShardingType::RowWise | ShardingType::TableRowWise | ShardingType::RowPartitioned
        )
    }
}

/// This rank's part of `tables` spread by `plan`: the spread, the data-parallel
/// replicas, and the rows of row-partitioned tables with copies on several ranks (by
/// table). Every value is initialized as one process would initialize the whole tables
/// from `seed`.
pub(super) type Built = (Spread, Replicas, Vec<(usize, Vec<u64>)>);

impl Spread {
    pub(super) fn build(
        comm: Comm,
        tables: &[TableDesc],
        plan: &Plan,
        (pooling, optimizer): (Pooling, SparseOptimizer),
        seed: u64,
    ) -> Result<Built> {
        let me = comm.world_rank();
        let mut states = Vec::with_capacity(tables.len());
        let mut local = Vec::new();
        let mut replicas = Vec::new();
        let mut shared_rows = Vec::new();
        for (t, desc) in tables.iter().enumerate() {
            let entry = plan.table(&desc.name).ok_or_else(|| {
                Error::Plan(format!("the plan has no entry for table '{}'", desc.name))
            })?;
            let init = TableInit::new(seed, t, desc.rows, desc.dim);
            if entry.sharding == ShardingType::RowPartitioned {
                let (map, shards) = partitioned::stores(entry, desc.rows, desc.dim, plan.topology);
                let rows = partitioned::shared_rows(entry, &map);
                if !rows.is_empty() {
                    shared_rows.push((t, rows));
                }
                if let Some(mine) = shards.iter().find(|s| s.rank == me) {
                    local.push(partitioned::local_store(
                        t,
                        (&desc.name, desc.precision),
                        *mine,
                        &map,
                        &init,
                        optimizer,
                    )?);
                }
                states.push(TableState {
                    dim: desc.dim,
                    pooling,
                    sharding: entry.sharding,
                    shards,
                    addresses: Some(map),
                });
                continue;
            }
            let state = TableState {
                dim: desc.dim,
                pooling,
                sharding: entry.sharding,
                shards: entry.shards.clone(),
                addresses: None,
            };
            if entry.sharding == ShardingType::DataParallel {
                let bag = EmbeddingBag::try_from_fn_in(
                    desc.precision,
                    desc.name.clone(),
                    desc.rows,
                    desc.dim,
                    pooling,
                    optimizer,
                    |r, row| init.fill_row(r, 0, row),
                )?;
                replicas.push(Replica { table: t, bag });
            }
            for (s, shard) in entry.shards.iter().enumerate() {
                if shard.rank != me {
                    continue;
                }
                // Row-wise shards return partial sums; the owner of the sample divides.
                let shard_pooling = if state.row_split() {
                    Pooling::Sum
                } else {
                    pooling
                };
                let (r0, c0) = (shard.rows.0, shard.columns.0);
                let mut bag = EmbeddingBag::try_from_fn_in(
                    desc.precision,
                    format!("{}[{}]", desc.name, s),
                    shard.num_rows(),
                    shard.num_columns(),
                    shard_pooling,
                    optimizer,
                    |r, row| init.fill_row(r0 + r, c0, row),
                )?;
                // Rounded as the whole table's rows and columns are.
                let key = EmbeddingBag::rounding_key(&desc.name);
                bag.set_rounding(key, r0 as u64, c0 as u64);
                local.push(LocalShard::new(t, *shard, bag));
            }
            states.push(state);
        }
        let routes: Vec<Route<'_>> = states
            .iter()
            .map(|s| match &s.addresses {
                Some(map) => Route::Addressed {
                    shards: &s.shards,
                    map: Arc::clone(map),
                    me,
                    topology: plan.topology,
                },
                None if s.row_split() => Route::Rows(&s.shards),
                None => Route::Whole(&s.shards),
            })
            .collect();
        let router = Router::new(&comm, &routes)?;
        let spread = Spread::new(comm, states, router, local);
        Ok((spread, Replicas(replicas), shared_rows))
    }
}

/// The tables, this rank's shards and the step's samples.
pub(super) struct Spread {
    /// The world communicator.
    pub(super) comm: Comm,
    pub(super) tables: Vec<TableState>,
    pub(super) router: Router,
    pub(super) local: Vec<LocalShard>,
    /// Samples each rank held in the last forward.
    pub(super) samples: Vec<usize>,
    /// Per local shard, whether it pools this rank's own bags straight into the rank's
    /// feature rows (the flat output distribution's own pass, `super::own`): those
    /// bags are routed whole and pooled there, not here.
    pub(super) direct: Vec<bool>,
    /// The wire precision of the pooled rows and their gradients (`[cluster.qcomms]`).
    pub(super) wire: QComms,
    ids_send: Vec<u64>,
    ids_recv: Vec<u64>,
    /// This rank's ids for its own shards, which skip the exchange.
    ids_own: Vec<u64>,
}

impl Spread {
    fn new(comm: Comm, tables: Vec<TableState>, router: Router, local: Vec<LocalShard>) -> Self {
        Self {
            comm,
            tables,
            router,
            local,
            samples: Vec::new(),
            direct: Vec::new(),
            wire: QComms::default(),
            ids_send: Vec::new(),
            ids_recv: Vec::new(),
            ids_own: Vec::new(),
        }
    }

    /// Routes this rank's ids to the shards (to each rank: this rank's sample count,
    /// then a segment per shard it holds) and unpacks what arrives. The segment for this
    /// rank's own shards stays out of the exchange: it has no link to cross, and the
    /// copies in and out of the exchange's buffers were the larger part of the stage
    /// where most ids are read locally (OPER's copies, data-parallel-like plans).
    pub(super) fn input_dist(&mut self, batch: &Batch) -> Result<()> {
        let (p, me) = (self.comm.size(), self.comm.rank());
        self.router.bucket(|t| batch.sparse.feature(t));
        let mut send = std::mem::take(&mut self.ids_send);
        let mut own = std::mem::take(&mut self.ids_own);
        send.clear();
        own.clear();
        let mut counts = vec![0usize; p];
        for (dest, count) in counts.iter_mut().enumerate() {
            let segment = if dest == me { &mut own } else { &mut send };
            let before = segment.len();
            segment.push(batch.batch_size() as u64);
            for (k, (t, s)) in self.router.held_by(dest).enumerate() {
                let every_bag = dest == me && self.direct[k];
                self.router
                    .pack(t, s, batch.sparse.feature(t), every_bag, segment);
            }
            if dest != me {
                *count = segment.len() - before;
            }
        }
        let mut recv = std::mem::take(&mut self.ids_recv);
        let exchanged = self
            .comm
            .all_to_all_v_into(&send, &counts, &mut recv, Phase::InputDist);
        self.ids_send = send;
        exchanged?;
        self.samples = lookup::unpack(&recv, &own, me, p, &mut self.local);
        self.ids_recv = recv;
        self.ids_own = own;
        Ok(())
    }

    /// Pools every local shard's bags, except this rank's own of the shards that pool
    /// them straight into its feature rows ([`Spread::direct`]): what the output
    /// distributions send.
    pub(super) fn pool(&mut self) -> Result<()> {
        let me = self.comm.rank();
        for (l, &direct) in self.local.iter_mut().zip(&self.direct) {
            if direct {
                let own = l.bags_of_source(me, &self.samples);
                l.pool_others(own)?;
            } else {
                l.pool()?;
            }
        }
        Ok(())
    }

    /// For a mean-pooled row-split table, the factor `1 / bag length` of each sample of
    /// `batch` (1 for empty and single-id bags); `None` for other tables.
    pub(super) fn mean_scales<'a>(
        &self,
        batch: &'a Batch,
        t: usize,
    ) -> Option<impl Fn(usize) -> f32 + 'a> {
        let table = &self.tables[t];
        if !(table.row_split() && table.pooling == Pooling::Mean) {
            return None;
        }
        let ids = batch.sparse.feature(t);
        Some(move |b: usize| mean_scale(ids.ids(b).len()))
    }
}

impl Spread {
    /// Divides the summed slots of the mean-pooled row-split tables that `carried`
    /// selects by each bag's length, for the samples `samples` of this rank's rows
    /// `out`.
    pub(super) fn scale_mean_rows(
        &self,
        batch: &Batch,
        (out, slots): (&mut [f32], &FeatureSlots),
        carried: impl Fn(usize) -> bool,
        samples: Range<usize>,
    ) {
        for t in (0..self.tables.len()).filter(|&t| carried(t)) {
            let Some(scale) = self.mean_scales(batch, t) else {
                continue;
            };
            let range = slots.slot(t).range();
            let rows = out.chunks_exact_mut(slots.width()).enumerate();
            for (b, row) in rows.skip(samples.start).take(samples.len()) {
                let s = scale(b);
                if s != 1.0 {
                    row[range.clone()].iter_mut().for_each(|v| *v *= s);
                }
            }
        }
    }
}

/// The factor that turns the sum of a bag of `len` rows into their mean (1 for empty
/// and single-id bags); the flat and SPTT paths both scale by it, so they agree bit
/// for bit.
pub(super) fn mean_scale(len: usize) -> f32 {
    if len > 1 {
        1.0 / len as f32
    } else {
        1.0
    }
}

/// First global sample of each world rank's slice.
pub(super) fn firsts(samples: &[usize]) -> Vec<usize> {
    samples
        .iter()
        .scan(0, |at, &n| {
            *at += n;
            Some(*at - n)
        })
        .collect()
}
