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
//! summed over rows (docs/DMT.md, "Speed on the emulated cluster").

use super::Sptt;
use crate::sharded::lookup::LocalShard;
use crate::towers::ModelTowers;

/// Where each table's compressed columns come from and go.
pub(super) struct Early {
    /// Per table: its tower, the offset of its columns in its group's output row, and
    /// their count (its tower's `c·D`).
    of_table: Vec<(usize, usize, usize)>,
    /// Per local shard (in the collection's order): the first of its vectors' rows in
    /// its tower's last projection on this rank.
    first_row: Vec<usize>,
    /// Per tower: the rows it projected on this rank in the last forward.
    rows: Vec<usize>,
}

impl Early {
    /// Table `t`'s `(tower, offset in the group's output row, columns)`.
    pub(super) fn of_table(&self, t: usize) -> (usize, usize, usize) {
        self.of_table[t]
    }

    /// `(tower, columns, first row)` of local shard `li` of table `t`'s projection.
    pub(super) fn rows_of(&self, li: usize, t: usize) -> (usize, usize, usize) {
        let (tower, _, w) = self.of_table[t];
        (tower, w, self.first_row[li])
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
        let towers: usize = self.towers.iter().map(Vec::len).sum();
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
                first_row: vec![0; local],
                rows: vec![0; towers],
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
                let (_, off, w) = early.of_table(t);
                (w, off)
            }
            None => (shard.num_columns(), self.offset_of[t] + shard.columns.0),
        }
    }

    /// Step b's end: each tower's map over the pooled vectors of this rank's tables in
    /// that tower (all global samples, table after table).
    pub(super) fn project_local(&mut self, local: &[LocalShard]) {
        let (Some(early), Some(modules)) = (&mut self.early, &mut self.modules) else {
            return;
        };
        for tower in 0..early.rows.len() {
            self.x.clear();
            let mut rows = 0;
            for (li, l) in local.iter().enumerate() {
                if early.of_table[l.table].0 == tower {
                    early.first_row[li] = rows;
                    self.x.extend_from_slice(&l.pooled);
                    rows += l.pooled.len() / l.columns().max(1);
                }
            }
            early.rows[tower] = rows;
            if rows > 0 {
                modules.project(tower, &mut self.x, rows);
            }
        }
    }

    /// The backward of [`Sptt::project_local`]: from the gradient of the projections in
    /// `dy` (each tower's rows one after the other, in tower order, as
    /// [`Sptt::projection_starts`] lays them out), every module's parameter gradient and
    /// each local shard's vectors' gradient into its `grad`.
    pub(super) fn project_local_backward(&mut self, dy: &[f32], local: &mut [LocalShard]) {
        let (Some(early), Some(modules)) = (&self.early, &mut self.modules) else {
            return;
        };
        modules.zero_grads();
        let starts = projection_starts(early, modules);
        let mut dx = std::mem::take(&mut self.x);
        for (tower, &rows) in early.rows.iter().enumerate() {
            if rows == 0 {
                continue;
            }
            let n = local
                .iter()
                .find(|l| early.of_table[l.table].0 == tower)
                .map_or(0, LocalShard::columns);
            dx.clear();
            dx.resize(rows * n, 0.0);
            let dy = &dy[starts[tower]..starts[tower + 1]];
            modules.project_backward(tower, dy, &mut dx, rows);
            for (li, l) in local.iter_mut().enumerate() {
                if early.of_table[l.table].0 == tower {
                    let first = early.first_row[li] * n;
                    l.grad.clear();
                    l.grad.extend_from_slice(&dx[first..first + l.pooled.len()]);
                }
            }
        }
        self.x = dx;
    }

    /// Where each tower's projected rows start in the gradient buffer of
    /// [`Sptt::project_local_backward`], and (last) its length.
    pub(super) fn projection_starts(&self) -> Vec<usize> {
        match (&self.early, &self.modules) {
            (Some(early), Some(modules)) => projection_starts(early, modules),
            _ => vec![0],
        }
    }
}

fn projection_starts(early: &Early, modules: &ModelTowers) -> Vec<usize> {
    let mut starts = vec![0];
    for (tower, &rows) in early.rows.iter().enumerate() {
        let w = modules.per_feature_width(tower).unwrap_or(0);
        starts.push(starts[tower] + rows * w);
    }
    starts
}
