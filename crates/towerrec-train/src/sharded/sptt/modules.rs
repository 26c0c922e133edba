//! DMT's Tower Modules inside SPTT (paper §3.2): run on a group's rows between steps e
//! and f, so that step f carries their (compressed) outputs, and their backward; the
//! sync domain of their weights (the tower group's ranks).

use super::Sptt;
use crate::slots::{FeatureSlots, Slot};
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

impl Sptt {
    /// Takes a DMT model's Tower Modules, to run them between steps e and f.
    pub(in crate::sharded) fn adopt(&mut self, modules: ModelTowers) {
        self.modules = Some(modules);
    }

    pub(in crate::sharded) fn modules_mut(&mut self) -> Option<&mut ModelTowers> {
        self.modules.as_mut()
    }

    /// The sync domain of the adopted Tower Modules, if any.
    pub(in crate::sharded) fn domain(&mut self) -> Option<TowerDomain<'_>> {
        let towers = self.towers.iter().map(Vec::len).sum();
        let mut mine = vec![false; towers];
        let mut owner = vec![0; towers];
        for (g, list) in self.towers.iter().enumerate() {
            for &(t, _, _) in list {
                mine[t] = g == self.my_group;
                owner[t] = self.rank_of[g][0];
            }
        }
        let modules = self.modules.as_mut()?;
        Some(TowerDomain {
            group: &self.group,
            mine,
            owner,
            modules,
        })
    }

    /// Columns of group `g`'s towers' outputs.
    pub(super) fn out_width(&self, g: usize, modules: &ModelTowers) -> usize {
        self.towers[g]
            .iter()
            .map(|&(t, _, _)| modules.out_dim(t))
            .sum()
    }

    /// Columns group `g` sends in step f: its towers' outputs, or its group rows.
    pub(super) fn sent_width(&self, g: usize) -> usize {
        match &self.modules {
            Some(m) => self.out_width(g, m),
            None => self.widths[g],
        }
    }

    /// Runs this group's Tower Modules on the `total` group rows into `outs`. The rows
    /// are not needed after (step f sends `outs`): a tower as wide as the row takes
    /// their buffer whole instead of a copy.
    pub(super) fn run_modules(&mut self, total: usize) {
        let Some(mut modules) = self.modules.take() else {
            return;
        };
        let g = self.my_group;
        let (width, out_width) = (self.widths[g], self.out_width(g, &modules));
        self.outs.clear();
        self.outs.resize(total * out_width, 0.0);
        let mut at = 0;
        for &(t, start, cols) in &self.towers[g] {
            if cols == width {
                // `rows` holds exactly `total` rows (step e sized it).
                std::mem::swap(&mut self.x, &mut self.rows);
            } else {
                self.x.clear();
                for row in self.rows.chunks_exact(width.max(1)).take(total) {
                    self.x.extend_from_slice(&row[start..start + cols]);
                }
            }
            let o = modules.out_dim(t);
            let y = modules.forward_tower(t, &mut self.x, total);
            for (dst, src) in self
                .outs
                .chunks_exact_mut(out_width.max(1))
                .zip(y.chunks_exact(o.max(1)))
            {
                dst[at..at + o].copy_from_slice(src);
            }
            at += o;
        }
        self.modules = Some(modules);
    }

    /// The reverse of [`Sptt::run_modules`]: from the gradient of `outs` (in `outs`),
    /// the gradient of the group rows into `rows`.
    pub(super) fn modules_backward(&mut self, total: usize) {
        let Some(mut modules) = self.modules.take() else {
            return;
        };
        modules.zero_grads();
        let g = self.my_group;
        let (width, out_width) = (self.widths[g], self.out_width(g, &modules));
        // The towers tile the row and each writes its whole input gradient: no zeroing.
        self.rows.resize(total * width, 0.0);
        self.rows.truncate(total * width);
        let mut at = 0;
        for &(t, start, cols) in &self.towers[g] {
            let o = modules.out_dim(t);
            self.x.clear();
            for row in self.outs.chunks_exact(out_width.max(1)).take(total) {
                self.x.extend_from_slice(&row[at..at + o]);
            }
            at += o;
            if cols == width {
                modules.backward_tower(t, &self.x, &mut self.rows, total);
                continue;
            }
            self.dx.resize(total * cols, 0.0);
            self.dx.truncate(total * cols);
            modules.backward_tower(t, &self.x, &mut self.dx, total);
            for (row, d) in self
                .rows
                .chunks_exact_mut(width.max(1))
                .zip(self.dx.chunks_exact(cols.max(1)))
            {
                row[start..start + cols].copy_from_slice(d);
            }
        }
        self.modules = Some(modules);
    }

    /// Where group `g`'s step-f columns go in a row laid out by `slots`: `(slot, first
    /// column in the group's block)`, per tower output with modules, else per table.
    pub(super) fn placed(&self, g: usize, slots: &FeatureSlots) -> Vec<(Slot, usize)> {
        match &self.modules {
            Some(m) => {
                let mut at = 0;
                self.towers[g]
                    .iter()
                    .map(|&(t, _, _)| {
                        let o = m.out_dim(t);
                        at += o;
                        (slots.slot(t), at - o)
                    })
                    .collect()
            }
            None => self.features[g]
                .iter()
                .map(|&(t, off)| (slots.slot(t), off))
                .collect(),
        }
    }
}
