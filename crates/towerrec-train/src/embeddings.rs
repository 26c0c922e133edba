//! [`Embeddings`]: a model's embedding tables, whole in this process or sharded over
//! the ranks of a cluster, with their pooled forward and fused backward-and-update.

use crate::error::Result;
use crate::sharded::ShardedEmbeddings;
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

    pub(crate) fn backward_update(
        &mut self,
        batch: &Batch,
        grad: &[f32],
        slots: &FeatureSlots,
        lr: f32,
    ) -> Result<()> {
        match self {
            Embeddings::Local(tables) => tables_backward(tables, batch, grad, slots, lr),
            Embeddings::Sharded(s) => s.backward_update(batch, grad, slots, lr),
        }
    }
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
