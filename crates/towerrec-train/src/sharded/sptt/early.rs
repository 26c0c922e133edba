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

use super::Sptt;
use crate::sharded::lookup::LocalShard;
use towerrec_core::layers::linear::Linear;
use towerrec_core::Layer;

/// Where each table's compressed columns come from and go, and each local shard's
/// map output and its gradient.
pub(super) struct Early {
    /// Per table: its tower, the offset of its columns in its group's output row, and
    /// their count (its tower's `c·D`).
    of_table: Vec<(usize, usize, usize)>,
    /// Per local shard (in the collection's order): the map's output for its pooled
    /// vectors (all global samples), and the gradient of that output.
    outs: Vec<Vec<f32>>,
    douts: Vec<Vec<f32>>,
    /// The map's weight and bias gradients summed over a tower's local shards.
    sums: Vec<Vec<f32>>,
}

impl Early {
    /// Local shard `li`'s map output (global samples × columns) and its columns.
    pub(super) fn out(&self, li: usize, t: usize) -> (&[f32], usize) {
        (&self.outs[li], self.of_table[t].2)
    }

    /// Where the gradient of local shard `li`'s map output goes (resized to `rows`
    /// rows; every row is written before the backward reads it), and its columns.
    pub(super) fn dout(&mut self, li: usize, t: usize, rows: usize) -> (&mut Vec<f32>, usize) {
        let w = self.of_table[t].2;
        self.douts[li].resize(rows * w, 0.0);
        (&mut self.douts[li], w)
    }
}

impl Sptt {
    /// Runs the adopted modules before step d from now on, if every module is one map
    /// per feature and every table `t` is in a tower and `whole(t, its width)` (one
    /// shard, all its columns, not split by rows); else leaves the modules between steps
    /// e and f.
    pub(in crate::sharded) fn move_maps_to_lookup(
        &mut self,
        tables: usize,
        local: usize,
        whole: impl Fn(usize, usize) -> bool,
    ) {
        let Some(modules) = &self.modules else {
            return;
        };
        let mut of_table = vec![None; tables];
        for (g, list) in self.towers.iter().enumerate() {
            let mut at = 0;
            for &(tower, start, cols) in list {
                let Some(w) = modules.per_feature_width(tower) else {
                    return;
                };
                let mut k = 0;
                for &(t, off) in &self.features[g] {
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
            .map(|(t, e)| e.filter(|_| whole(t, self.dim_of[t])))
            .collect();
        if let Some(of_table) = of_table {
            self.early = Some(Early {
                of_table,
                outs: vec![Vec::new(); local],
                douts: vec![Vec::new(); local],
                sums: Vec::new(),
            });
        }
    }

    /// Columns of this rank's group rows: the modules' outputs when they ran before step
    /// d, else the tables' vectors.
    pub(super) fn row_width(&self) -> usize {
        match (&self.early, &self.modules) {
            (Some(_), Some(m)) => self.out_width(self.my_group, m),
            _ => self.widths[self.my_group],
        }
    }

    /// Table `t`'s `(columns, offset)` in this rank's group rows, for its shard `shard`.
    pub(super) fn columns_of(&self, t: usize, shard: &towerrec_plan::Shard) -> (usize, usize) {
        match &self.early {
            Some(early) => {
                let (_, off, w) = early.of_table[t];
                (w, off)
            }
            None => (shard.num_columns(), self.offset_of[t] + shard.columns.0),
        }
    }

    /// Step b's end: each local shard's pooled vectors (all global samples) through its
    /// tower's map.
    pub(super) fn project_local(&mut self, local: &[LocalShard]) {
        let (Some(early), Some(modules)) = (&mut self.early, &mut self.modules) else {
            return;
        };
        for (li, l) in local.iter().enumerate() {
            let (tower, _, w) = early.of_table[l.table];
            let rows = l.pooled.len() / l.columns().max(1);
            // Every value is written: no zeroing once the buffer has its size.
            early.outs[li].resize(rows * w, 0.0);
            modules
                .per_feature_map(tower)
                .forward(&l.pooled, &mut early.outs[li], rows);
        }
    }

    /// The backward of [`Sptt::project_local`], from the gradients [`Early::dout`] took:
    /// each local shard's vectors' gradient into its `grad`, and every module's
    /// parameter gradient (summed over this rank's shards of its tower; zero for a
    /// tower it holds none of, so that the group's sum is the whole gradient).
    pub(super) fn project_local_backward(&mut self, local: &mut [LocalShard]) {
        let (Some(early), Some(modules)) = (&mut self.early, &mut self.modules) else {
            return;
        };
        modules.zero_grads();
        let towers = early.of_table.iter().map(|e| e.0 + 1).max().unwrap_or(0);
        for tower in 0..towers {
            let mut seen = 0;
            for (li, l) in local.iter_mut().enumerate() {
                if early.of_table[l.table].0 != tower {
                    continue;
                }
                let rows = l.pooled.len() / l.columns().max(1);
                // The map writes every value of the vectors' gradient.
                l.grad.resize(l.pooled.len(), 0.0);
                let map = modules.per_feature_map(tower);
                let (y, dy) = (&early.outs[li], &early.douts[li]);
                map.backward(&l.pooled, y, dy, Some(&mut l.grad), rows);
                // The map writes its parameter gradients: sum them over the shards.
                add_grads(&mut early.sums, map, seen == 0);
                seen += 1;
            }
            if seen > 1 {
                let map = modules.per_feature_map(tower);
                for (p, sum) in map.params().into_iter().zip(&early.sums) {
                    p.grad.copy_from_slice(sum);
                }
            }
        }
    }
}

/// Adds the parameter gradients `map`'s last backward wrote to `sums` (sets them when
/// `first`).
fn add_grads(sums: &mut Vec<Vec<f32>>, map: &mut Linear<f32>, first: bool) {
    let grads = map.params();
    if first {
        sums.resize(grads.len(), Vec::new());
        for (sum, p) in sums.iter_mut().zip(&grads) {
            sum.clear();
            sum.extend_from_slice(p.grad);
        }
    } else {
        for (sum, p) in sums.iter_mut().zip(&grads) {
            sum.iter_mut()
                .zip(p.grad.iter())
                .for_each(|(s, &g)| *s += g);
        }
    }
}
