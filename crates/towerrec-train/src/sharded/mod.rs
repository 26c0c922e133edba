//! Embedding tables spread over ranks by a plan: the sharded embedding collection.
//!
//! Every rank holds a contiguous slice of the global batch (rank `r` the `r`-th slice;
//! slices may differ in size). The forward is a pipeline of stages, each in its own
//! file, and the backward runs them in reverse:
//! 1. routing ([`route`]): one AlltoAllv of each sample's ids to the ranks holding its
//!    table's shards: the whole bag to a table-wise or column-wise shard, the ids that
//!    fall in its rows (renumbered from 0) to a row-wise shard;
//! 2. lookup ([`lookup`]): each shard pools the bags of the whole global batch; its
//!    backward is the fused optimizer update where the rows live;
//! 3. output distribution: [`flat`] (one AlltoAllv back to the sample owners; on
//!    several hosts, table-row-wise tables in two steps, [`trw`]), or, when the plan
//!    has towers, [`sptt`] (DMT's steps c–f); on the flat path a rank's own bags skip
//!    the exchanges, and [`own`] pools most of them straight into its feature rows;
//! 4. data-parallel replicas ([`replicas`]) pool locally and synchronize their sparse
//!    gradient after the backward;
//! 5. row-partitioned tables (OPER, [`partitioned`]) route ids through the address map
//!    to the nearest copy of each row and run stages 2–3 as row-wise shards do; rows
//!    with copies on several ranks are synchronized by a sparse AllReduce (with towers,
//!    within the tower group that holds every copy).
//!
//! A training step may run its output and gradient exchanges in two parts (halves) of
//! the samples, the dense layers of one half during the other's exchange
//! ([`schedule`]). [`whole`] gathers and loads whole tables for checkpoints.

mod flat;
mod flat_grad;
mod lookup;
mod own;
mod partitioned;
mod replicas;
mod route;
mod schedule;
mod sptt;
mod store;
mod trw;
mod whole;

pub(crate) use whole::state_layout;
pub use whole::WholeTable;

use crate::error::{Error, Result};
use crate::init::TableInit;
use crate::slots::FeatureSlots;
use crate::towers::ModelTowers;
use lookup::LocalShard;
pub use partitioned::add_addressing_bytes;
use replicas::Replica;
use route::{Route, Router};
pub(crate) use schedule::{GradWork, RowsWork};
use sptt::Sptt;
pub(crate) use sptt::TowerDomain;
use std::sync::Arc;
use towerrec_comm::{Comm, Phase};
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer};
use towerrec_core::Batch;
use towerrec_plan::partitioned::TableAddresses;
use towerrec_plan::{Plan, Shard, ShardingType};

/// One table as the model sees it.
#[derive(Debug, Clone)]
pub struct TableDesc {
    pub name: String,
    pub rows: usize,
    pub dim: usize,
}

struct TableState {
    dim: usize,
    pooling: Pooling,
    sharding: ShardingType,
    shards: Vec<Shard>,
    /// A row-partitioned table's address map (its shards are the ranks' stores).
    addresses: Option<Arc<TableAddresses>>,
}

impl TableState {
    /// Whether shards pool partial sums of a bag (the owner adds them).
    fn row_split(&self) -> bool {
        matches!(
            self.sharding,
            ShardingType::RowWise | ShardingType::TableRowWise | ShardingType::RowPartitioned
        )
    }
}

/// Which samples of each rank's slice an output exchange carries, both ways: all of
/// them, or the first or second half (a slice of `n` samples splits at `n / 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Whole,
    First,
    Second,
}

impl Part {
    /// The samples of a slice of `n` that the part holds.
    pub(crate) fn range(self, n: usize) -> std::ops::Range<usize> {
        match self {
            Part::Whole => 0..n,
            Part::First => 0..n / 2,
            Part::Second => n / 2..n,
        }
    }

    /// The bags of `bags` (packed as [`route::bag_of`] reads them, in sample order) whose
    /// samples the part of a slice of `n` holds.
    fn bags_in(self, bags: &[u64], n: usize) -> &[u64] {
        if self == Part::Whole {
            return bags;
        }
        let want = self.range(n);
        let first = bags.partition_point(|&p| route::bag_of(p).0 < want.start);
        let end = bags.partition_point(|&p| route::bag_of(p).0 < want.end);
        &bags[first..end]
    }
}

/// Exchange buffers, kept to reuse their memory from step to step.
#[derive(Default)]
struct Buffers {
    ids_send: Vec<u64>,
    ids_recv: Vec<u64>,
    /// This rank's ids for its own shards, which skip the exchange.
    ids_own: Vec<u64>,
    vec_send: Vec<f32>,
    vec_recv: Vec<f32>,
    /// The first half's gradient rows, when the exchange runs in halves.
    vec_recv_first: Vec<f32>,
    /// Per table, which of this rank's rows hold a partial sum (flat output).
    written: Vec<Vec<bool>>,
    /// Per local shard that pools into the rows, its bags with partial sums elsewhere.
    own_split: Vec<own::OwnSplit>,
}

/// The embedding tables of a model, spread over the ranks of `comm` as a plan says.
pub struct ShardedEmbeddings {
    comm: Comm,
    tables: Vec<TableState>,
    router: Router,
    local: Vec<LocalShard>,
    replicas: Vec<Replica>,
    /// The towers' output distribution, when the plan has towers.
    sptt: Option<Sptt>,
    /// Without towers, on several hosts: table-row-wise tables' two-step exchange.
    trw: Option<trw::HierTrw>,
    /// Samples each rank held in the last forward.
    samples: Vec<usize>,
    bufs: Buffers,
    /// The sync of row-partitioned rows with copies on several ranks, if any (then
    /// every backward ends with it).
    shared: Option<partitioned::SharedSync>,
    /// The plan the tables are spread by.
    plan: Plan,
    /// Every table's pooling, as built.
    pooling: Pooling,
    /// How shared rows sum their gradients (kept for a re-spread).
    replica_sync: crate::config::ReplicaSync,
    /// Per local shard, whether it pools this rank's own bags straight into the
    /// rank's feature rows ([`ShardedEmbeddings::pools_into_rows`]).
    direct: Vec<bool>,
}

impl ShardedEmbeddings {
    /// This rank's part of `tables` under `plan` (validated by the caller), initialized as
    /// one process would initialize the whole tables from `seed`. The plan's ranks are
    /// world ranks, each of which must be a member of `comm`.
    pub fn new(
        comm: Comm,
        tables: &[TableDesc],
        plan: &Plan,
        pooling: Pooling,
        optimizer: SparseOptimizer,
        seed: u64,
    ) -> Result<Self> {
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
                        t, &desc.name, *mine, &map, &init, optimizer,
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
                let bag = EmbeddingBag::try_from_fn(
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
                let bag = EmbeddingBag::try_from_fn(
                    format!("{}[{}]", desc.name, s),
                    shard.num_rows(),
                    shard.num_columns(),
                    shard_pooling,
                    optimizer,
                    |r, row| init.fill_row(r0 + r, c0, row),
                )?;
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
        let sptt = if plan.towers.is_empty() {
            None
        } else {
            let dims: Vec<usize> = tables.iter().map(|d| d.dim).collect();
            let index = |name: &str| tables.iter().position(|d| d.name == name);
            let mean_split = states
                .iter()
                .enumerate()
                .filter(|(_, s)| s.row_split() && s.pooling == Pooling::Mean)
                .map(|(t, _)| t)
                .collect();
            let addressed: Vec<usize> = (0..states.len())
                .filter(|&t| states[t].addresses.is_some())
                .collect();
            let sp = Sptt::new(&comm, plan, &dims, index)?;
            Some(sp.with_mean_split(mean_split).with_addressed(&addressed))
        };
        let trw = match &sptt {
            None if comm.size() == plan.topology.world_size() => trw::HierTrw::new(&comm, &states)?,
            _ => None,
        };
        if let Some(sp) = &sptt {
            // A tower's rows have all their copies on its hosts (the plan is validated):
            // its group alone sums their gradients.
            shared_rows.retain(|(t, _)| sp.in_my_group(*t));
        }
        let mut built = Self {
            comm,
            tables: states,
            router,
            local,
            replicas,
            sptt,
            trw,
            samples: Vec::new(),
            bufs: Buffers::default(),
            shared: (!shared_rows.is_empty()).then(|| partitioned::SharedSync::new(shared_rows)),
            plan: plan.clone(),
            pooling,
            replica_sync: crate::config::ReplicaSync::default(),
            direct: Vec::new(),
        };
        built.direct = (0..built.local.len())
            .map(|k| built.pools_into_rows(k))
            .collect();
        Ok(built)
    }

    /// The same tables, values and optimizer state spread by `plan` instead (OPER's
    /// rows moved to a fresh plan): every table gathered whole on every rank, then each
    /// rank's part taken, as a checkpoint and a resume with `plan` would. Collective;
    /// every rank holds every table whole for a moment.
    pub fn respread(
        self,
        descs: &[TableDesc],
        plan: &Plan,
        optimizer: SparseOptimizer,
    ) -> Result<Self> {
        if self.sptt.is_some() {
            return Err(Error::Plan(
                "a DMT model's tables cannot move to another plan inside a run".into(),
            ));
        }
        let whole = self.gather_whole_to(descs, optimizer, true)?;
        let (pooling, mode) = (self.pooling, self.replica_sync);
        let mut moved = ShardedEmbeddings::new(self.comm, descs, plan, pooling, optimizer, 0)?;
        moved.set_replica_sync(mode);
        moved.load_whole(&whole.unwrap_or_default(), optimizer)?;
        Ok(moved)
    }

    /// The plan the tables are spread by.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The world communicator (dense gradients, evaluation and checkpoints use it too).
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The shards on this rank: `(table, shard, weights-and-state)`.
    pub fn local_shards(&self) -> impl Iterator<Item = (usize, &Shard, &EmbeddingBag)> {
        self.local.iter().map(|l| (l.table, &l.shard, &l.bag))
    }

    /// The shards on this rank, mutably (checkpoint loading).
    pub fn local_shards_mut(&mut self) -> impl Iterator<Item = (usize, &Shard, &mut EmbeddingBag)> {
        self.local
            .iter_mut()
            .map(|l| (l.table, &l.shard, &mut l.bag))
    }

    /// The data-parallel replicas on this rank: `(table, replica)`.
    pub fn replicas_mut(&mut self) -> impl Iterator<Item = (usize, &mut EmbeddingBag)> {
        self.replicas.iter_mut().map(|r| (r.table, &mut r.bag))
    }

    /// The data-parallel replicas on this rank.
    pub fn replicas(&self) -> impl Iterator<Item = (usize, &EmbeddingBag)> {
        self.replicas.iter().map(|r| (r.table, &r.bag))
    }

    /// Takes a DMT model's Tower Modules to run them inside SPTT, between its steps e
    /// and f, so that step f carries their outputs; the caller then lays out the forward's
    /// rows by the modules' output slots. Without towers in the plan, gives them back.
    pub(crate) fn adopt_towers(&mut self, towers: ModelTowers) -> Option<ModelTowers> {
        match &mut self.sptt {
            Some(sp) => {
                sp.adopt(towers);
                let tables = &self.tables;
                let whole = |t: usize, dim: usize| {
                    let s = &tables[t];
                    let all_columns = |one: &Shard| one.columns.0 == 0 && one.num_columns() == dim;
                    s.addresses.is_none()
                        && !s.row_split()
                        && matches!(&s.shards[..], [one] if all_columns(one))
                };
                sp.move_maps_to_lookup(tables.len(), self.local.len(), whole);
                None
            }
            None => Some(towers),
        }
    }

    /// The Tower Modules taken by [`ShardedEmbeddings::adopt_towers`].
    pub(crate) fn towers_mut(&mut self) -> Option<&mut ModelTowers> {
        self.sptt.as_mut().and_then(Sptt::modules_mut)
    }

    /// The world communicator, and the sync domain of the Tower Modules taken by
    /// [`ShardedEmbeddings::adopt_towers`].
    pub(crate) fn domains(&mut self) -> (&Comm, Option<TowerDomain<'_>>) {
        (&self.comm, self.sptt.as_mut().and_then(Sptt::domain))
    }

    /// Every table's shards (empty for data-parallel tables).
    pub fn shards_of(&self, table: usize) -> &[Shard] {
        &self.tables[table].shards
    }

    /// Pools every table for this rank's samples (`batch`, the rank's slice of the global
    /// batch: rank `r` holds the `r`-th slice) into their slots of the feature rows `out`
    /// (`B × slots.width()`).
    pub fn forward(&mut self, batch: &Batch, out: &mut [f32], slots: &FeatureSlots) -> Result<()> {
        self.input_dist(batch)?;
        if self.sptt.is_some() {
            lookup::pool(&mut self.local)?;
            self.sptt_output_dist(batch, out, slots)?;
        } else {
            self.pool_flat()?;
            self.flat_output_dist(batch, out, slots)?;
        }
        self.replicas_forward(batch, out, slots)
    }

    /// Routes this rank's ids to the shards (to each rank: this rank's sample count,
    /// then a segment per shard it holds) and unpacks what arrives. The segment for this
    /// rank's own shards stays out of the exchange: it has no link to cross, and the
    /// copies in and out of the exchange's buffers were the larger part of the stage
    /// where most ids are read locally (OPER's copies, data-parallel-like plans).
    fn input_dist(&mut self, batch: &Batch) -> Result<()> {
        let (p, me) = (self.comm.size(), self.comm.rank());
        self.router.bucket(|t| batch.sparse.feature(t));
        let mut send = std::mem::take(&mut self.bufs.ids_send);
        let mut own = std::mem::take(&mut self.bufs.ids_own);
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
        let mut recv = std::mem::take(&mut self.bufs.ids_recv);
        let exchanged = self
            .comm
            .all_to_all_v_into(&send, &counts, &mut recv, Phase::InputDist);
        self.bufs.ids_send = send;
        exchanged?;
        self.samples = lookup::unpack(&recv, &own, me, p, &mut self.local);
        self.bufs.ids_recv = recv;
        self.bufs.ids_own = own;
        Ok(())
    }
}

impl ShardedEmbeddings {
    /// How rows copied on several ranks sum their gradients (every rank the same,
    /// before the first step).
    pub fn set_replica_sync(&mut self, mode: crate::config::ReplicaSync) {
        self.replica_sync = mode;
        if let Some(s) = &mut self.shared {
            s.mode = mode;
        }
    }

    /// Chunks of a step's samples in SPTT's exchange with the modules before step d.
    pub fn set_tower_chunks(&mut self, chunks: usize) {
        if let Some(sp) = &mut self.sptt {
            sp.set_chunks(chunks);
        }
    }

    /// Sums the gradients of shared rows over the ranks that read them and applies the
    /// sums to every copy: over the world, or with towers over this rank's tower group,
    /// which holds every copy of its tables' rows (intra-host for one-host towers).
    fn sync_shared_rows(&mut self, touched: &store::Touched, lr: f32) -> Result<()> {
        let dims: Vec<usize> = self.tables.iter().map(|t| t.dim).collect();
        let sync = self.shared.as_mut().expect("called with shared rows");
        let comm = self.sptt.as_ref().map_or(&self.comm, Sptt::group);
        let local = &mut self.local;
        sync.sum(comm, touched, &dims, |t, rows, grads| {
            match local.iter_mut().find(|l| l.table == t) {
                Some(l) => l.apply_shared(rows, grads, lr),
                None => Ok(()),
            }
        })
    }
}

#[cfg(test)]
mod tests;
