//! Whole tables from shards and back: what a checkpoint holds (every table whole, as one
//! process would hold it, so a run may resume on another topology) gathered on rank 0,
//! and each rank's blocks taken from it on load.

use super::replicas::Replicas;
use super::spread::Spread;
use super::spread::TableDesc;
use crate::error::{Error, Result};
use towerrec_comm::{Phase, ROUND_BYTES};
use towerrec_core::embedding::SparseOptimizer;
use towerrec_plan::Shard;

/// One table whole: weights and optimizer state, as a checkpoint holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeTable {
    pub name: String,
    pub step: u64,
    /// `rows × dim` values (empty for an int8 table: see `packed`).
    pub weights: Vec<f32>,
    /// `(name, values)`: per-element state is `rows × dim`, per-row state `rows`.
    pub state: Vec<(String, Vec<f32>)>,
    /// An int8 table's stored rows (`EmbeddingBag::packed_rows`); such tables live in
    /// one process only.
    pub packed: Option<Vec<u8>>,
}

/// An optimizer's state tensors: name, and whether it holds one value per row (rather
/// than one per element).
pub(crate) fn state_layout(optimizer: SparseOptimizer) -> Vec<(&'static str, bool)> {
    match optimizer {
        SparseOptimizer::Sgd => vec![],
        SparseOptimizer::RowWiseAdagrad { .. } => vec![("accumulator", true)],
        SparseOptimizer::Adam { .. } => vec![("momentum1", false), ("momentum2", false)],
    }
}

/// A state block's width, the whole tensor's width and the block's first column.
fn state_place(per_row: bool, shard: &Shard, dim: usize) -> (usize, usize, usize) {
    if per_row {
        (1, 1, 0)
    } else {
        (shard.num_columns(), dim, shard.columns.0)
    }
}

/// Where a shard's rows sit in the whole table: a run from its first row, or, for a
/// row-partitioned store, the table row of each of its rows.
enum Rows {
    Run(usize),
    Listed(Vec<usize>),
}

impl Rows {
    fn at(&self, r: usize) -> usize {
        match self {
            Rows::Run(first) => first + r,
            Rows::Listed(rows) => rows[r],
        }
    }
}

/// Copies the block `src` (rows of `width`) into `whole` (rows of `whole_width`) at
/// `rows`, from column `col0`.
fn put_rows(
    whole: &mut [f32],
    whole_width: usize,
    src: &[f32],
    rows: &Rows,
    col0: usize,
    width: usize,
) {
    if width == 0 {
        return;
    }
    for (r, s) in src.chunks_exact(width).enumerate() {
        let at = rows.at(r) * whole_width + col0;
        whole[at..at + width].copy_from_slice(s);
    }
}

/// Copies the rows `rows` of `whole` (from column `col0`) into `dst` (rows of `width`).
fn take_rows(
    whole: &[f32],
    whole_width: usize,
    dst: &mut [f32],
    rows: &Rows,
    col0: usize,
    width: usize,
) {
    if width == 0 {
        return;
    }
    for (r, d) in dst.chunks_exact_mut(width).enumerate() {
        let at = rows.at(r) * whole_width + col0;
        d.copy_from_slice(&whole[at..at + width]);
    }
}

impl Spread {
    /// Where the rows of `shard` of table `t` sit in the whole table.
    fn rows_of(&self, t: usize, shard: &Shard) -> Rows {
        match &self.tables[t].addresses {
            Some(map) => Rows::Listed(map.stored_rows(shard.rank)),
            None => Rows::Run(shard.rows.0),
        }
    }

    /// Per-row state makes no sense split by columns: refuse such a model.
    pub(super) fn check_optimizer(&self, optimizer: SparseOptimizer) -> Result<()> {
        if matches!(optimizer, SparseOptimizer::RowWiseAdagrad { .. }) {
            if let Some(t) = self
                .tables
                .iter()
                .position(|t| t.shards.iter().any(|s| s.num_columns() != t.dim))
            {
                return Err(Error::Plan(format!(
                    "table {t} is split by columns, but row_wise_adagrad keeps one \
                     accumulator per whole row: use row-wise or table-wise sharding for it, \
                     or another sparse optimizer"
                )));
            }
        }
        Ok(())
    }

    /// Gathers every table whole (with `replicas`) on rank 0, or on every rank with
    /// `everyone` (`Some` there, `None` elsewhere). Collective.
    pub(super) fn gather_whole(
        &self,
        replicas: &Replicas,
        descs: &[TableDesc],
        optimizer: SparseOptimizer,
        everyone: bool,
    ) -> Result<Option<Vec<WholeTable>>> {
        let p = self.comm.size();
        let mut send = Vec::new();
        let mut steps = Vec::new();
        for l in &self.local {
            send.extend_from_slice(&l.bag.weights());
            for (_, buf) in l.bag.optimizer_state() {
                send.extend_from_slice(buf);
            }
            steps.push(l.bag.step());
        }
        // Whole tables may exceed what one MPI call moves: rounds of ROUND_BYTES.
        let (recv, recv_steps) = if everyone {
            let (recv, _) = self
                .comm
                .all_gather_in_rounds(&send, ROUND_BYTES, Phase::Control)?;
            let (recv_steps, _) = self.comm.all_gather(&steps, Phase::Control)?;
            (recv, recv_steps)
        } else {
            let mut counts = vec![0; p];
            counts[0] = send.len();
            let (recv, _) =
                self.comm
                    .all_to_all_v_in_rounds(&send, &counts, ROUND_BYTES, Phase::Control)?;
            counts[0] = steps.len();
            let (recv_steps, _) = self.comm.all_to_all_v(&steps, &counts, Phase::Control)?;
            if self.comm.rank() != 0 {
                return Ok(None);
            }
            (recv, recv_steps)
        };
        let mut whole: Vec<WholeTable> = descs
            .iter()
            .enumerate()
            .map(|(t, d)| WholeTable {
                name: d.name.clone(),
                step: 0,
                weights: vec![0.0; d.rows * d.dim],
                packed: None,
                state: state_layout(optimizer)
                    .into_iter()
                    .map(|(n, per_row)| {
                        let width = if per_row { 1 } else { self.tables[t].dim };
                        (n.to_string(), vec![0.0; d.rows * width])
                    })
                    .collect(),
            })
            .collect();
        for r in &replicas.0 {
            let w = &mut whole[r.table];
            w.step = r.bag.step();
            w.weights.copy_from_slice(&r.bag.weights());
            for ((_, dst), (_, src)) in w.state.iter_mut().zip(r.bag.optimizer_state()) {
                dst.copy_from_slice(src);
            }
        }
        let (mut at, mut step_at) = (0, 0);
        for src in 0..p {
            for (t, s) in self.router.held_by(src) {
                let shard = self.tables[t].shards[s];
                let (rows, cols, dim) = (shard.num_rows(), shard.num_columns(), descs[t].dim);
                let w = &mut whole[t];
                w.step = recv_steps[step_at];
                step_at += 1;
                let block = &recv[at..at + rows * cols];
                at += rows * cols;
                let place = self.rows_of(t, &shard);
                put_rows(&mut w.weights, dim, block, &place, shard.columns.0, cols);
                for ((_, dst), (_, per_row)) in w.state.iter_mut().zip(state_layout(optimizer)) {
                    let (width, whole_width, col0) = state_place(per_row, &shard, dim);
                    let block = &recv[at..at + rows * width];
                    at += rows * width;
                    put_rows(dst, whole_width, block, &place, col0, width);
                }
            }
        }
        Ok(Some(whole))
    }

    /// Loads this rank's shards and `replicas` from the whole tables (in model order).
    pub(super) fn load_whole(
        &mut self,
        replicas: &mut Replicas,
        whole: &[WholeTable],
        optimizer: SparseOptimizer,
    ) -> Result<()> {
        let places: Vec<Rows> = self
            .local
            .iter()
            .map(|l| self.rows_of(l.table, &l.shard))
            .collect();
        for (l, place) in self.local.iter_mut().zip(places) {
            let w = &whole[l.table];
            let dim = self.tables[l.table].dim;
            let (col0, cols) = (l.shard.columns.0, l.shard.num_columns());
            let mut mine = l.bag.weights().into_owned();
            take_rows(&w.weights, dim, &mut mine, &place, col0, cols);
            l.bag.set_weights(&mine)?;
            let layout = state_layout(optimizer);
            for (((_, dst), (_, src)), (_, per_row)) in l
                .bag
                .optimizer_state_mut()
                .into_iter()
                .zip(&w.state)
                .zip(layout)
            {
                let (width, whole_width, c0) = state_place(per_row, &l.shard, dim);
                take_rows(src, whole_width, dst, &place, c0, width);
            }
            l.bag.set_step(w.step);
        }
        for r in &mut replicas.0 {
            let w = &whole[r.table];
            r.bag.set_weights(&w.weights)?;
            for ((_, dst), (_, src)) in r.bag.optimizer_state_mut().into_iter().zip(&w.state) {
                dst.copy_from_slice(src);
            }
            r.bag.set_step(w.step);
        }
        Ok(())
    }
}
