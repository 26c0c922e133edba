//! Data-parallel tables: a replica on every rank, pooled locally. Their gradient is
//! synchronized by an AllGather of every rank's bags and pooled gradients, after which
//! each replica applies the update of the whole batch: the AllReduce of a sparse
//! gradient, touching the same rows as one process would (a dense AllReduce would also
//! move the state of lazy optimizers).

use crate::error::Result;
use crate::slots::FeatureSlots;
use towerrec_comm::{Comm, Phase};
use towerrec_core::batch::JaggedView;
use towerrec_core::embedding::EmbeddingBag;
use towerrec_core::Batch;

/// A data-parallel table's replica.
pub(super) struct Replica {
    pub(super) table: usize,
    pub(super) bag: EmbeddingBag,
}

/// The data-parallel tables' replicas on this rank.
#[derive(Default)]
pub(super) struct Replicas(pub(super) Vec<Replica>);

impl Replicas {
    /// Pools every replica for this rank's samples into its slot of `out`.
    pub(super) fn forward(
        &self,
        batch: &Batch,
        out: &mut [f32],
        slots: &FeatureSlots,
    ) -> Result<()> {
        for r in &self.0 {
            let off = slots.slot(r.table).offset;
            r.bag
                .forward(batch.sparse.feature(r.table), out, slots.width(), off)?;
        }
        Ok(())
    }

    /// Gathers every rank's bags and pooled gradients, then applies the whole batch's
    /// update to each replica. Returns the first table whose gathered gradient rows
    /// (of bags with ids) held NaN or infinity, with the value.
    /// `samples`: each rank's samples of the step, over the ranks of `comm`.
    pub(super) fn sync(
        &mut self,
        comm: &Comm,
        samples: &[usize],
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        lr: f32,
    ) -> Result<Option<(usize, f32)>> {
        let mut ids_send = Vec::new();
        let mut grad_send = Vec::new();
        for r in &self.0 {
            let ids = batch.sparse.feature(r.table);
            ids_send.extend((0..ids.batch_size()).map(|b| ids.ids(b).len() as u64));
            ids_send.extend_from_slice(ids.values);
            let range = slots.slot(r.table).range();
            for row in grad.chunks_exact(slots.width()) {
                grad_send.extend_from_slice(&row[range.clone()]);
            }
        }
        let (ids_all, _) = comm.all_gather(&ids_send, Phase::SparseGradSync)?;
        let (grad_all, _) = comm.all_gather(&grad_send, Phase::SparseGradSync)?;
        let k_max = self.0.len();
        let mut offsets: Vec<Vec<usize>> = vec![vec![0]; k_max];
        let mut values: Vec<Vec<u64>> = vec![Vec::new(); k_max];
        let mut grads: Vec<Vec<f32>> = vec![Vec::new(); k_max];
        let (mut at, mut gat) = (0, 0);
        for &n in samples {
            for (k, r) in self.0.iter().enumerate() {
                let lengths = &ids_all[at..at + n];
                at += n;
                let mut end = *offsets[k].last().expect("offsets start with 0");
                let first = end;
                for &len in lengths {
                    end += len as usize;
                    offsets[k].push(end);
                }
                values[k].extend_from_slice(&ids_all[at..at + end - first]);
                at += end - first;
                let dim = slots.slot(r.table).width;
                grads[k].extend_from_slice(&grad_all[gat..gat + n * dim]);
                gat += n * dim;
            }
        }
        let mut bad: Option<(usize, f32)> = None;
        for (k, r) in self.0.iter_mut().enumerate() {
            let dim = slots.slot(r.table).width;
            let has_ids = |b: usize| offsets[k][b + 1] > offsets[k][b];
            if let Some(x) = crate::finite::bad_grad_rows(&grads[k], dim, has_ids) {
                if bad.is_none_or(|(t, _)| r.table < t) {
                    bad = Some((r.table, x));
                }
            }
            let view = JaggedView::new(&offsets[k], &values[k])?;
            r.bag.backward_update(view, &grads[k], dim, 0, lr)?;
        }
        Ok(bad)
    }
}
