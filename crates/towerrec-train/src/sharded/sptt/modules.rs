//! DMT's Tower Modules inside SPTT (paper §3.2): run on a group's rows between steps e
//! and f, so that step f carries their (compressed) outputs, and their backward; the
//! sync domain of their weights (the tower group's ranks).

#[cfg(doc)]
use super::Sptt;
use crate::towers::ModelTowers;
use towerrec_comm::Comm;

/// Where a DMT model's Tower Modules are synchronized: each tower's gradients are
/// summed over the ranks of its group alone, which run it; other ranks' copies of it
/// are refreshed from `owner[t]` before a checkpoint.
pub(crate) struct TowerDomain<'a> {
    /// This rank's tower group.
    pub(crate) group: &'a Comm,
    /// Per tower, whether this rank's group runs it.
    pub(crate) mine: Vec<bool>,
    /// Per tower, the world rank whose copy is the tower's (its group's first rank).
    pub(crate) owner: Vec<usize>,
    pub(crate) modules: &'a mut ModelTowers,
}

/// A tower group's rows and the buffers its Tower Modules run through (parts of
/// [`Sptt`] handed in apart): the group's towers `(tower, first column, columns)`, the
/// width of its rows, the rows (or their gradient), the modules' outputs (or theirs).
pub(super) struct GroupRows<'a> {
    pub(super) towers: &'a [(usize, usize, usize)],
    pub(super) width: usize,
    pub(super) rows: &'a mut Vec<f32>,
    pub(super) outs: &'a mut Vec<f32>,
    pub(super) x: &'a mut Vec<f32>,
    pub(super) dx: &'a mut Vec<f32>,
}

impl GroupRows<'_> {
    /// Columns of the group's towers' outputs.
    fn out_width(&self, modules: &ModelTowers) -> usize {
        self.towers
            .iter()
            .map(|&(t, _, _)| modules.out_dim(t))
            .sum()
    }

    /// Runs this group's Tower Modules on the `total` group rows into `outs`. The rows
    /// are not needed after (step f sends `outs`): a tower as wide as the row takes
    /// their buffer whole instead of a copy.
    pub(super) fn run(self, modules: &mut ModelTowers, total: usize) {
        let (width, out_width) = (self.width, self.out_width(modules));
        self.outs.clear();
        self.outs.resize(total * out_width, 0.0);
        let mut at = 0;
        for &(t, start, cols) in self.towers {
            if cols == width {
                // `rows` holds exactly `total` rows (step e sized it).
                std::mem::swap(self.x, self.rows);
            } else {
                self.x.clear();
                for row in self.rows.chunks_exact(width.max(1)).take(total) {
                    self.x.extend_from_slice(&row[start..start + cols]);
                }
            }
            let o = modules.out_dim(t);
            let y = modules.forward_tower(t, self.x, total);
            for (dst, src) in self
                .outs
                .chunks_exact_mut(out_width.max(1))
                .zip(y.chunks_exact(o.max(1)))
            {
                dst[at..at + o].copy_from_slice(src);
            }
            at += o;
        }
    }

    /// The reverse of [`GroupRows::run`]: from the gradient of `outs` (in `outs`),
    /// the gradient of the group rows into `rows`.
    pub(super) fn backward(self, modules: &mut ModelTowers, total: usize) {
        modules.zero_grads();
        let (width, out_width) = (self.width, self.out_width(modules));
        // The towers tile the row and each writes its whole input gradient: no zeroing.
        self.rows.resize(total * width, 0.0);
        self.rows.truncate(total * width);
        let mut at = 0;
        for &(t, start, cols) in self.towers {
            let o = modules.out_dim(t);
            self.x.clear();
            for row in self.outs.chunks_exact(out_width.max(1)).take(total) {
                self.x.extend_from_slice(&row[at..at + o]);
            }
            at += o;
            if cols == width {
                modules.backward_tower(t, self.x, self.rows, total);
                continue;
            }
            self.dx.resize(total * cols, 0.0);
            self.dx.truncate(total * cols);
            modules.backward_tower(t, self.x, self.dx, total);
            for (row, d) in self
                .rows
                .chunks_exact_mut(width.max(1))
                .zip(self.dx.chunks_exact(cols.max(1)))
            {
                row[start..start + cols].copy_from_slice(d);
            }
        }
    }
}
