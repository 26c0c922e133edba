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
//! 3. output distribution ([`output`]): [`flat`] (one AlltoAllv back to the sample
//!    owners; on several hosts, table-row-wise tables in two steps, [`trw`], beside
//!    it), or, when the plan has towers, [`sptt`] (DMT's steps c–f); on the flat path a
//!    rank's own bags skip the exchanges, and [`own`] pools most of them straight into
//!    its feature rows;
//! 4. data-parallel replicas ([`replicas`]) pool locally and synchronize their sparse
//!    gradient after the backward;
//! 5. row-partitioned tables (OPER, [`partitioned`]) route ids through the address map
//!    to the nearest copy of each row and run stages 2–3 as row-wise shards do; rows
//!    with copies on several ranks are synchronized by a sparse AllReduce (with towers,
//!    within the tower group that holds every copy).
//!
//! Stages 1 and 2 are [`spread`]'s, on the state every stage is handed ([`Spread`]);
//! the output distributions implement one trait ([`output`]), by which the model's
//! micro-batch schedule runs a step's exchanges in parts of the samples, the dense
//! layers of one part during the next one's exchange. [`whole`] gathers and loads whole tables for checkpoints.

mod flat;
mod flat_grad;
mod lookup;
mod output;
mod own;
mod partitioned;
mod replicas;
mod route;
mod spread;
mod sptt;
mod store;
mod trw;
mod whole;

pub use output::{GradWork, RowsWork, StepPart};
pub use partitioned::add_addressing_bytes;
pub use spread::TableDesc;
pub(crate) use sptt::TowerDomain;
pub(crate) use whole::state_layout;
pub use whole::WholeTable;

use crate::config::{QComms, ReplicaSync};
use crate::error::{Error, Result};
use crate::slots::FeatureSlots;
use crate::towers::ModelTowers;
use flat::Flat;
use output::OutputDist;
use partitioned::SharedSync;
use replicas::Replicas;
use spread::Spread;
use sptt::Sptt;
use towerrec_comm::Comm;
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer};
use towerrec_core::Batch;
use towerrec_plan::{Plan, Shard};

/// A step's output distributions: SPTT over every table, or flat with, on several
/// hosts, table-row-wise tables summed in two steps beside it.
enum Outputs {
    Flat(Flat, Option<Box<trw::HierTrw>>),
    Towers(Box<Sptt>),
}

impl Outputs {
    /// The distributions in the order a step runs them (no allocation: this runs every
    /// step).
    fn each(&mut self) -> impl Iterator<Item = &mut dyn OutputDist> {
        let (first, second): (&mut dyn OutputDist, Option<&mut dyn OutputDist>) = match self {
            Outputs::Flat(flat, trw) => (flat, trw.as_deref_mut().map(|t| t as _)),
            Outputs::Towers(sptt) => (&mut **sptt, None),
        };
        std::iter::once(first).chain(second)
    }

    /// The fewest parts of the distributions'.
    fn max_parts(&self) -> usize {
        match self {
            Outputs::Flat(flat, None) => flat.max_parts(),
            Outputs::Flat(flat, Some(trw)) => flat.max_parts().min(trw.max_parts()),
            Outputs::Towers(sptt) => sptt.max_parts(),
        }
    }

    fn towers(&self) -> Option<&Sptt> {
        match self {
            Outputs::Towers(sptt) => Some(sptt),
            Outputs::Flat(..) => None,
        }
    }

    fn towers_mut(&mut self) -> Option<&mut Sptt> {
        match self {
            Outputs::Towers(sptt) => Some(sptt),
            Outputs::Flat(..) => None,
        }
    }
}

/// The embedding tables of a model, spread over the ranks of `comm` as a plan says.
pub struct ShardedEmbeddings {
    spread: Spread,
    outputs: Outputs,
    replicas: Replicas,
    /// The sync of row-partitioned rows with copies on several ranks, if any (then
    /// every backward ends with it).
    shared: Option<SharedSync>,
    /// The plan the tables are spread by.
    plan: Plan,
    /// Every table's pooling, as built.
    pooling: Pooling,
    /// How shared rows sum their gradients (kept for a re-spread).
    replica_sync: ReplicaSync,
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
        let (mut spread, replicas, mut shared_rows) =
            Spread::build(comm, tables, plan, (pooling, optimizer), seed)?;
        let states = &spread.tables;
        let outputs = if plan.towers.is_empty() {
            let world = spread.comm.size() == plan.topology.world_size();
            let trw = match world {
                true => trw::HierTrw::new(&spread.comm, states)?.map(Box::new),
                false => None,
            };
            let carries = (0..states.len())
                .map(|t| trw.as_ref().is_none_or(|h| !h.mine[t]))
                .collect::<Vec<_>>();
            // A local shard pools this rank's own bags straight into its feature rows
            // if flat carries its table and it is table-wise or column-wise or a
            // row-partitioned store.
            spread.direct = spread
                .local
                .iter()
                .map(|l| {
                    let table = &states[l.table];
                    carries[l.table] && (!table.row_split() || table.addresses.is_some())
                })
                .collect();
            Outputs::Flat(Flat::new(carries), trw)
        } else {
            let dims: Vec<usize> = tables.iter().map(|d| d.dim).collect();
            let index = |name: &str| tables.iter().position(|d| d.name == name);
            let mean_split = (0..states.len())
                .filter(|&t| states[t].row_split() && states[t].pooling == Pooling::Mean)
                .collect();
            let addressed: Vec<usize> = (0..states.len())
                .filter(|&t| states[t].addresses.is_some())
                .collect();
            let sp = Sptt::new(&spread.comm, plan, &dims, index)?;
            let sp = sp.with_mean_split(mean_split).with_addressed(&addressed);
            // A tower's rows have all their copies on its hosts (the plan is validated):
            // its group alone sums their gradients.
            shared_rows.retain(|(t, _)| sp.in_my_group(*t));
            spread.direct = vec![false; spread.local.len()];
            Outputs::Towers(Box::new(sp))
        };
        Ok(Self {
            spread,
            outputs,
            replicas,
            shared: (!shared_rows.is_empty()).then(|| SharedSync::new(shared_rows)),
            plan: plan.clone(),
            pooling,
            replica_sync: ReplicaSync::default(),
        })
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
        if self.outputs.towers().is_some() {
            return Err(Error::Plan(
                "a DMT model's tables cannot move to another plan inside a run".into(),
            ));
        }
        let whole = self
            .spread
            .gather_whole(&self.replicas, descs, optimizer, true)?;
        let (pooling, mode, wire) = (self.pooling, self.replica_sync, self.spread.wire);
        let comm = self.spread.comm;
        let mut moved = ShardedEmbeddings::new(comm, descs, plan, pooling, optimizer, 0)?;
        moved.set_replica_sync(mode);
        moved.set_qcomms(wire);
        moved.load_whole(&whole.unwrap_or_default(), optimizer)?;
        Ok(moved)
    }

    /// The plan the tables are spread by.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The world communicator (dense gradients, evaluation and checkpoints use it too).
    pub fn comm(&self) -> &Comm {
        &self.spread.comm
    }

    /// The shards on this rank: `(table, shard, weights-and-state)`.
    pub fn local_shards(&self) -> impl Iterator<Item = (usize, &Shard, &EmbeddingBag)> {
        self.spread
            .local
            .iter()
            .map(|l| (l.table, &l.shard, &l.bag))
    }

    /// The shards on this rank, mutably (checkpoint loading).
    pub fn local_shards_mut(&mut self) -> impl Iterator<Item = (usize, &Shard, &mut EmbeddingBag)> {
        let local = self.spread.local.iter_mut();
        local.map(|l| (l.table, &l.shard, &mut l.bag))
    }

    /// The data-parallel replicas on this rank: `(table, replica)`.
    pub fn replicas_mut(&mut self) -> impl Iterator<Item = (usize, &mut EmbeddingBag)> {
        self.replicas.0.iter_mut().map(|r| (r.table, &mut r.bag))
    }

    /// The data-parallel replicas on this rank.
    pub fn replicas(&self) -> impl Iterator<Item = (usize, &EmbeddingBag)> {
        self.replicas.0.iter().map(|r| (r.table, &r.bag))
    }

    /// Every table's shards (empty for data-parallel tables).
    pub fn shards_of(&self, table: usize) -> &[Shard] {
        &self.spread.tables[table].shards
    }

    /// Per-row state makes no sense split by columns: refuse such a model.
    pub fn check_optimizer(&self, optimizer: SparseOptimizer) -> Result<()> {
        self.spread.check_optimizer(optimizer)
    }

    /// Gathers every table whole on rank 0 (`Some` there, `None` elsewhere). Collective.
    pub fn gather_whole(
        &self,
        descs: &[TableDesc],
        optimizer: SparseOptimizer,
    ) -> Result<Option<Vec<WholeTable>>> {
        self.spread
            .gather_whole(&self.replicas, descs, optimizer, false)
    }

    /// Loads this rank's shards and replicas from the whole tables (in model order).
    pub fn load_whole(&mut self, whole: &[WholeTable], optimizer: SparseOptimizer) -> Result<()> {
        self.spread.load_whole(&mut self.replicas, whole, optimizer)
    }

    /// Takes a DMT model's Tower Modules to run them inside SPTT, between its steps e
    /// and f, so that step f carries their outputs; the caller then lays out the forward's
    /// rows by the modules' output slots. Without towers in the plan, gives them back.
    pub(crate) fn adopt_towers(&mut self, towers: ModelTowers) -> Option<ModelTowers> {
        let Some(sp) = self.outputs.towers_mut() else {
            return Some(towers);
        };
        sp.adopt(towers);
        let tables = &self.spread.tables;
        let whole = |t: usize, dim: usize| {
            let s = &tables[t];
            let all_columns = |one: &Shard| one.columns.0 == 0 && one.num_columns() == dim;
            s.addresses.is_none()
                && !s.row_split()
                && matches!(&s.shards[..], [one] if all_columns(one))
        };
        sp.move_maps_to_lookup(tables.len(), self.spread.local.len(), whole);
        None
    }

    /// The Tower Modules taken by [`ShardedEmbeddings::adopt_towers`].
    pub(crate) fn towers_mut(&mut self) -> Option<&mut ModelTowers> {
        self.outputs.towers_mut().and_then(Sptt::modules_mut)
    }

    /// The world communicator, and the sync domain of the Tower Modules taken by
    /// [`ShardedEmbeddings::adopt_towers`].
    pub(crate) fn domains(&mut self) -> (&Comm, Option<TowerDomain<'_>>) {
        let domain = self.outputs.towers_mut().and_then(Sptt::domain);
        (&self.spread.comm, domain)
    }

    /// How rows copied on several ranks sum their gradients (every rank the same,
    /// before the first step).
    pub fn set_replica_sync(&mut self, mode: ReplicaSync) {
        self.replica_sync = mode;
        if let Some(s) = &mut self.shared {
            s.mode = mode;
        }
    }

    /// The wire precision of the pooled rows and their gradients in every output
    /// distribution (every rank the same, before the first step).
    pub fn set_qcomms(&mut self, wire: QComms) {
        self.spread.wire = wire;
        if let Some(sp) = self.outputs.towers_mut() {
            sp.set_wire(wire);
        }
    }

    /// Chunks of a step's samples in SPTT's exchange with the modules before step d.
    pub fn set_tower_chunks(&mut self, chunks: usize) {
        if let Some(sp) = self.outputs.towers_mut() {
            sp.set_chunks(chunks);
        }
    }

    /// Pools every table for this rank's samples (`batch`, the rank's slice of the global
    /// batch: rank `r` holds the `r`-th slice) into their slots of the feature rows `out`
    /// (`B × slots.width()`): a whole step's forward.
    pub fn forward(&mut self, batch: &Batch, out: &mut [f32], slots: &FeatureSlots) -> Result<()> {
        self.forward_part(StepPart::whole(batch, slots), out, None)
    }

    /// Parts a step's exchanges can run in: the fewest of its output distributions'
    /// (two where the plan allows: the flat output path without table-row-wise tables
    /// summed in two steps across hosts, or towers whose maps run before SPTT's step
    /// d), else one (whole steps).
    pub fn max_parts(&self) -> usize {
        self.outputs.max_parts()
    }

    /// The forward of `step`'s part (of at most [`ShardedEmbeddings::max_parts`]): the
    /// first part routes the ids and pools the rows, and every part's feature rows are
    /// in `out` when it returns. `work` runs during part `k`'s exchange on part
    /// `k - 1`'s finished rows (`None` for the first part).
    pub fn forward_part(
        &mut self,
        step: StepPart<'_>,
        out: &mut [f32],
        mut work: Option<RowsWork<'_>>,
    ) -> Result<()> {
        let sp = &mut self.spread;
        if step.k == 0 {
            sp.input_dist(step.batch)?;
            sp.pool()?;
        }
        for dist in self.outputs.each() {
            dist.forward_part(sp, step, out, work.take())?;
        }
        if step.k == 0 {
            // Replicas fill their own slots, which the distributions leave alone.
            self.replicas.forward(step.batch, out, step.slots)?;
        }
        Ok(())
    }

    /// The gradient exchange of `step`'s part, of the last forward, but the last part:
    /// `grad`'s rows of parts up to `step.k` are final, and `work` writes the next
    /// part's during it.
    pub fn backward_part(
        &mut self,
        step: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()> {
        let sp = &mut self.spread;
        let mut each = self.outputs.each();
        match (each.next(), each.next()) {
            (Some(one), None) => one.backward_part(sp, step, grad, work),
            _ => unreachable!("a step of several parts has one output distribution"),
        }
    }

    /// The gradient exchange of `step`'s last part, of the last forward (a whole
    /// step's only one), from the final gradient `grad` of this rank's feature rows:
    /// every local shard then holds the gradient of the whole global batch; the tables
    /// are not updated yet ([`ShardedEmbeddings::update_after_exchange`]).
    pub fn backward_last(&mut self, step: StepPart<'_>, grad: &[f32]) -> Result<()> {
        debug_assert_eq!(step.k + 1, step.parts, "the step's last part");
        let sp = &mut self.spread;
        for dist in self.outputs.each() {
            dist.backward_last(sp, step, grad)?;
        }
        Ok(())
    }

    /// Updates every shard and replica from the gradient the exchange left (`grad`: this
    /// rank's feature-row gradient, which data-parallel replicas read) and syncs the
    /// rows with copies on several ranks. Returns the first table (model order) whose
    /// gradient rows, as they arrived here, held NaN or infinity, with the value (the
    /// update goes on regardless: the trainer stops at the step's end, every rank
    /// together).
    pub fn update_after_exchange(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        lr: f32,
    ) -> Result<Option<(usize, f32)>> {
        let sp = &mut self.spread;
        let mut bad = lookup::non_finite_grad(&sp.local);
        let touched = lookup::update(&mut sp.local, lr)?;
        if let Some(sync) = &mut self.shared {
            // Over the world, or with towers over this rank's tower group, which holds
            // every copy of its tables' rows (intra-host for one-host towers).
            let dims: Vec<usize> = sp.tables.iter().map(|t| t.dim).collect();
            let comm = self.outputs.towers().map_or(&sp.comm, Sptt::group);
            let local = &mut sp.local;
            sync.sum(comm, &touched, &dims, |t, rows, grads| {
                match local.iter_mut().find(|l| l.table == t) {
                    Some(l) => l.apply_shared(rows, grads, lr),
                    None => Ok(()),
                }
            })?;
        }
        if !self.replicas.0.is_empty() {
            let (comm, samples) = (&sp.comm, &sp.samples);
            let replica = self.replicas.sync(comm, samples, batch, grad, slots, lr)?;
            bad = match (bad, replica) {
                (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
                (a, b) => a.or(b),
            };
        }
        Ok(bad)
    }
}

#[cfg(test)]
mod tests;
