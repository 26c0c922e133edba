//! Per-feature Tower Modules run where the tables are looked up (beyond the paper).
//!
//! The paper runs a Tower Module between steps e and f (§3.2), where a rank holds every
//! feature of its towers for its peers' samples, because a module in general mixes the
//! features (DLRM's `o1`, DCN's CrossNet). When every tower's module is one map of each
//! feature's vector on its own (DLRM's `o2` alone, `p = 0`: Listing 1 with no flat
//! part) and every tower table is whole on one rank, the map commutes with steps c–e:
//! the rank that pools a table runs the map on its pooled vectors right after step b,
//! so that step d, the intra-host AlltoAll, carries the compressed `c·D` columns as step
//! f does, and step e lays out the modules' outputs themselves. The backward runs the
//! map's backward where the forward ran it; the tower group sums the map's weight
//! gradient as before (a rank with none of a tower's tables adds zero).
//!
//! The outputs are the paper's, up to the order in which the map's weight gradient is
//! summed over rows (docs/DMT.md, "Where a module runs").

#[cfg(doc)]
use super::Sptt;
use crate::towers::ModelTowers;

/// Where each table's compressed columns come from and go, and each local shard's
/// map output and its gradient (the exchange is [`super::pipeline`]'s).
pub(super) struct Early {
    /// Per table: its tower, the offset of its columns in its group's output row, and
    /// their count (its tower's `c·D`).
    pub(super) of_table: Vec<(usize, usize, usize)>,
    /// Per local shard (in the collection's order): the map's output for its pooled
    /// vectors (all global samples), and the gradient of that output.
    pub(super) outs: Vec<Vec<f32>>,
    pub(super) douts: Vec<Vec<f32>>,
}

impl Early {
    /// Where each table's compressed columns go, if every module of `modules` is one
    /// map per feature and every table `t` is in a tower and `whole(t)` (one shard, all
    /// its columns, not split by rows); else `None` (the modules stay between steps e
    /// and f). `towers` and `features` are [`Sptt`]'s, per group; `local` counts the
    /// local shards.
    pub(super) fn plan(
        modules: &ModelTowers,
        towers: &[Vec<(usize, usize, usize)>],
        features: &[Vec<(usize, usize)>],
        (tables, local): (usize, usize),
        whole: impl Fn(usize) -> bool,
    ) -> Option<Self> {
        let mut of_table = vec![None; tables];
        for (g, list) in towers.iter().enumerate() {
            let mut at = 0;
            for &(tower, start, cols) in list {
                let w = modules.per_feature_width(tower)?;
                let mut k = 0;
                for &(t, off) in &features[g] {
                    if (start..start + cols).contains(&off) {
                        of_table[t] = Some((tower, at + k * w, w));
                        k += 1;
                    }
                }
                at += modules.out_dim(tower);
            }
        }
        let of_table: Option<Vec<_>> = of_table
            .into_iter()
            .enumerate()
            .map(|(t, e)| e.filter(|_| whole(t)))
            .collect();
        Some(Early {
            of_table: of_table?,
            outs: vec![Vec::new(); local],
            douts: vec![Vec::new(); local],
        })
    }
}
