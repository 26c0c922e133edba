//! A model's ranks: the slice of every global batch a rank trains on, and sums over
//! the ranks (the cluster's data-parallel arithmetic; see `cluster.rs`).

use crate::error::Result;
use crate::model::Model;
use std::borrow::Cow;
use towerrec_comm::{even_split, Phase};
use towerrec_core::Batch;

/// Rank `rank`'s slice of a global batch (the whole batch on a single rank).
pub fn rank_slice(batch: &Batch, rank: usize, world: usize) -> Cow<'_, Batch> {
    if world == 1 {
        return Cow::Borrowed(batch);
    }
    let counts = even_split(batch.batch_size(), world);
    let start: usize = counts[..rank].iter().sum();
    Cow::Owned(batch.slice(start, counts[rank]))
}

/// Sums `x` over the ranks of a sharded model (`x` itself otherwise).
pub fn global_sum(model: &Model, x: f64) -> Result<f64> {
    match model.comm() {
        None => Ok(x),
        Some(comm) => {
            let mut v = [x];
            comm.all_reduce(&mut v, Phase::Control)?;
            Ok(v[0])
        }
    }
}
