//! [`Embeddings`]: a model's embedding tables, whole in this process or sharded over
//! the ranks of a cluster, with their pooled forward and fused backward-and-update.

use crate::error::Result;
use crate::sharded::{GradWork, RowsWork, ShardedEmbeddings, StepPart};
use crate::slots::FeatureSlots;
use towerrec_comm::Comm;
use towerrec_core::embedding::EmbeddingBag;
use towerrec_core::Batch;

/// Where the embedding tables live.
pub enum Embeddings {
    /// All tables whole, in this process.
    Local(Vec<EmbeddingBag>),
    /// Spread over the ranks of a cluster by a plan; dense layers are replicated and
    /// their gradients summed over the ranks.
    Sharded(Box<ShardedEmbeddings>),
}

impl Embeddings {
    /// The cluster communicator, if the tables are sharded.
    pub fn comm(&self) -> Option<&Comm> {
        match self {
            Embeddings::Local(_) => None,
            Embeddings::Sharded(s) => Some(s.comm()),
        }
    }

    /// Pools every table of each of `batches` into `outs[i]`, table by table over the
    /// batches where the tables are local, so that each table's rows are reused from
    /// cache across the batches.
    pub(crate) fn forward_group(
        &mut self,
        batches: &[&Batch],
        outs: &mut [Vec<f32>],
        slots: &FeatureSlots,
    ) -> Result<()> {
        match self {
            Embeddings::Local(tables) => {
                for (t, table) in tables.iter().enumerate() {
                    for (batch, out) in batches.iter().zip(outs.iter_mut()) {
                        let offset = slots.slot(t).offset;
                        table.forward(batch.sparse.feature(t), out, slots.width(), offset)?;
                    }
                }
                Ok(())
            }
            Embeddings::Sharded(s) => {
                for (batch, out) in batches.iter().zip(outs.iter_mut()) {
                    s.forward(batch, out, slots)?;
                }
                Ok(())
            }
        }
    }

    /// The forward of `step`'s part ([`crate::model`]'s schedule): the first part looks
    /// every table up, and each part's feature rows are in `out` when it returns;
    /// `work` runs during part `k`'s exchange on part `k - 1`'s finished rows. Tables
    /// in this process run in one part.
    pub(crate) fn forward_part(
        &mut self,
        step: StepPart<'_>,
        out: &mut [f32],
        work: Option<RowsWork<'_>>,
    ) -> Result<()> {
        match self {
            Embeddings::Local(tables) => {
                debug_assert_eq!((step.k, step.parts), (0, 1), "one part in one process");
                let StepPart { batch, slots, .. } = step;
                for (t, table) in tables.iter().enumerate() {
                    let offset = slots.slot(t).offset;
                    table.forward(batch.sparse.feature(t), out, slots.width(), offset)?;
                }
                Ok(())
            }
            Embeddings::Sharded(s) => s.forward_part(step, out, work),
        }
    }

    /// The gradient exchange of `step`'s part, but the last: `work` writes the next
    /// part's gradient rows during it. Only on a cluster.
    pub(crate) fn backward_part(
        &mut self,
        step: StepPart<'_>,
        grad: &mut [f32],
        work: GradWork<'_>,
    ) -> Result<()> {
        match self {
            Embeddings::Local(_) => unreachable!("tables in this process run in one part"),
            Embeddings::Sharded(s) => s.backward_part(step, grad, work),
        }
    }

    /// The gradient exchange of `step`'s last part (nothing to exchange in this
    /// process).
    pub(crate) fn backward_last(&mut self, step: StepPart<'_>, grad: &[f32]) -> Result<()> {
        match self {
            Embeddings::Local(_) => Ok(()),
            Embeddings::Sharded(s) => s.backward_last(step, grad),
        }
    }

    /// Every table's fused update from the gradient `grad` of the feature rows, after
    /// the step's gradient exchange. Returns the first table (model order) whose
    /// gradient rows held NaN or infinity, with the value: on a cluster, among the
    /// tables this rank updates.
    pub(crate) fn update(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        lr: f32,
    ) -> Result<Option<(usize, f32)>> {
        match self {
            Embeddings::Local(tables) => {
                let bad = non_finite_slot(batch, grad, slots, tables.len());
                tables_backward(tables, batch, grad, slots, lr)?;
                Ok(bad)
            }
            Embeddings::Sharded(s) => s.update_after_exchange(batch, grad, slots, lr),
        }
    }
}

/// The first of `tables` tables whose slot of the feature-row gradient `grad` holds NaN
/// or infinity in a sample whose bag has ids (an empty bag updates nothing), with the
/// value.
fn non_finite_slot(
    batch: &Batch,
    grad: &[f32],
    slots: &FeatureSlots,
    tables: usize,
) -> Option<(usize, f32)> {
    let rows = &grad[..(batch.batch_size() * slots.width()).min(grad.len())];
    if crate::finite::all_finite(rows) {
        return None;
    }
    (0..tables).find_map(|t| {
        let ids = batch.sparse.feature(t);
        let range = slots.slot(t).range();
        rows.chunks_exact(slots.width())
            .enumerate()
            .filter(|(b, _)| !ids.ids(*b).is_empty())
            .find_map(|(_, row)| row[range.clone()].iter().copied().find(|x| !x.is_finite()))
            .map(|x| (t, x))
    })
}

/// Every table's fused backward and update from its slot of the feature gradients.
fn tables_backward(
    tables: &mut [EmbeddingBag],
    batch: &Batch,
    grad: &[f32],
    slots: &FeatureSlots,
    lr: f32,
) -> Result<()> {
    for (t, table) in tables.iter_mut().enumerate() {
        let offset = slots.slot(t).offset;
        table.backward_update(batch.sparse.feature(t), grad, slots.width(), offset, lr)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_core::batch::KeyedJagged;

    #[test]
    fn a_non_finite_slot_is_named_only_where_its_bag_has_ids() {
        // Two samples, two tables of width 2 after a base column: rows of 5.
        let slots = FeatureSlots::contiguous(5, 1, [2, 2]).unwrap();
        // Table 0: sample 0 has an id, sample 1 none; table 1: both have one.
        let keys = vec!["C1".to_string(), "C2".to_string()];
        let sparse = KeyedJagged::from_offsets(keys, 2, vec![0, 1, 1, 2, 3], vec![4, 5, 6]);
        let batch = Batch {
            dense: vec![0.0; 2],
            num_dense: 1,
            sparse: sparse.unwrap(),
            labels: vec![0.0, 1.0],
        };
        let mut grad = vec![0.5f32; 10];
        assert_eq!(non_finite_slot(&batch, &grad, &slots, 2), None);
        // The base column and an empty bag's slot update no table.
        grad[0] = f32::NAN;
        grad[5 + 1] = f32::INFINITY;
        assert_eq!(non_finite_slot(&batch, &grad, &slots, 2), None);
        grad[5 + 4] = f32::NEG_INFINITY;
        assert_eq!(
            non_finite_slot(&batch, &grad, &slots, 2),
            Some((1, f32::NEG_INFINITY))
        );
        grad[2] = f32::INFINITY;
        assert_eq!(
            non_finite_slot(&batch, &grad, &slots, 2),
            Some((0, f32::INFINITY))
        );
    }
}
