//! A DMT model's towers (paper §3.2, Figure 8): each tower's tables' pooled vectors go
//! through its Tower Module, and the interaction sees the modules' outputs instead.
//!
//! This stage maps *feature rows* (the base part, then every table's slot) to
//! *interaction rows* (the same base part, then every tower's output slot), and back.
//! In one process, and on a cluster whose plan has no towers, the modules run here,
//! where the sample lives; with a tower plan SPTT runs them between its steps e and f
//! (`sharded/sptt/modules.rs`), so that step f carries their compressed outputs.

use crate::error::{Error, Result};
use crate::slots::FeatureSlots;
use rand::rngs::StdRng;
use rand::SeedableRng;
use towerrec_core::layers::linear::Linear;
use towerrec_core::layers::tower::{TowerModule, TowerModuleKind};
use towerrec_core::{Layer, ParamMut};

/// One tower: its tables, its module, and the last forward's input and output.
struct Tower {
    tables: Vec<usize>,
    module: TowerModule<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
}

/// Every tower of a model, in tower order.
pub(crate) struct ModelTowers {
    towers: Vec<Tower>,
    /// The interaction rows' layout: the base part, then one slot per tower.
    out: FeatureSlots,
    /// Columns of the base part (bottom-MLP output or dense features), copied through.
    base: usize,
    dx: Vec<f32>,
    dy: Vec<f32>,
}

impl ModelTowers {
    /// How every module's matrix products take their operands (`model.dense_precision`).
    pub(crate) fn set_dense_precision(&mut self, p: towerrec_core::matmul::DensePrecision) {
        use towerrec_core::Layer;
        self.towers
            .iter_mut()
            .for_each(|t| t.module.set_dense_precision(p));
    }

    /// Towers of `assignment` (table indices) over tables `dim` wide, with modules of
    /// `kind` (their linear biases zero when `zero_biases`), after a base part of `base`
    /// columns; module `t` is initialized from `(seed, t)` so that every rank and
    /// topology builds the same one.
    pub(crate) fn new(
        assignment: &[Vec<usize>],
        (kind, zero_biases): (TowerModuleKind, bool),
        dim: usize,
        base: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut towers = Vec::with_capacity(assignment.len());
        for (t, tables) in assignment.iter().enumerate() {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x70_77e7_0000 ^ t as u64);
            let mut module = TowerModule::new(kind, tables.len(), dim, &mut rng)?;
            if zero_biases {
                module.zero_biases();
            }
            towers.push(Tower {
                tables: tables.clone(),
                module,
                x: Vec::new(),
                y: Vec::new(),
            });
        }
        let widths: Vec<usize> = towers.iter().map(|t| t.module.out_dim()).collect();
        let out = FeatureSlots::contiguous(base + widths.iter().sum::<usize>(), base, widths)?;
        Ok(Self {
            towers,
            out,
            base,
            dx: Vec::new(),
            dy: Vec::new(),
        })
    }

    /// Each tower's tables (indices into the model's tables).
    pub(crate) fn tables(&self) -> Vec<Vec<usize>> {
        self.towers.iter().map(|t| t.tables.clone()).collect()
    }

    /// Number of towers.
    pub(crate) fn tower_count(&self) -> usize {
        self.towers.len()
    }

    /// Columns of an interaction row.
    pub(crate) fn out_width(&self) -> usize {
        self.out.width()
    }

    /// Parameters and forward FLOPs per sample of all modules.
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.towers.iter().fold((0, 0), |(p, f), t| {
            (
                p + t.module.param_count(),
                f + t.module.forward_flops_per_sample(),
            )
        })
    }

    /// Interaction rows `out` (resized) of the `b` feature rows `rows` laid out by `slots`.
    pub(crate) fn forward(
        &mut self,
        rows: &[f32],
        slots: &FeatureSlots,
        out: &mut Vec<f32>,
        b: usize,
    ) {
        let (width, out_width, base) = (slots.width(), self.out.width(), self.base);
        out.resize(b * out_width, 0.0);
        for (o, r) in out
            .chunks_exact_mut(out_width)
            .zip(rows.chunks_exact(width))
        {
            o[..base].copy_from_slice(&r[..base]);
        }
        for (t, tower) in self.towers.iter_mut().enumerate() {
            gather(&tower.tables, rows, slots, b, &mut tower.x);
            tower.y.resize(b * tower.module.out_dim(), 0.0);
            tower.module.forward(&tower.x, &mut tower.y, b);
            let slot = self.out.slot(t);
            for (o, y) in out
                .chunks_exact_mut(out_width)
                .zip(tower.y.chunks_exact(slot.width.max(1)))
            {
                o[slot.range()].copy_from_slice(y);
            }
        }
    }

    /// From the gradient `grad` of the last forward's interaction rows, the gradient of
    /// its feature rows into `rows_grad` (at least `b` rows), and every module's parameter
    /// gradient.
    pub(crate) fn backward(
        &mut self,
        grad: &[f32],
        slots: &FeatureSlots,
        rows_grad: &mut [f32],
        b: usize,
    ) {
        let (width, out_width, base) = (slots.width(), self.out.width(), self.base);
        let rows_grad = &mut rows_grad[..b * width];
        for (r, g) in rows_grad
            .chunks_exact_mut(width)
            .zip(grad.chunks_exact(out_width))
        {
            r[..base].copy_from_slice(&g[..base]);
        }
        let (mut dx, mut dy) = (std::mem::take(&mut self.dx), std::mem::take(&mut self.dy));
        for t in 0..self.towers.len() {
            let slot = self.out.slot(t);
            dy.clear();
            for g in grad.chunks_exact(out_width).take(b) {
                dy.extend_from_slice(&g[slot.range()]);
            }
            dx.resize(self.towers[t].x.len(), 0.0);
            self.backward_tower(t, &dy, &mut dx, b);
            scatter(&self.towers[t].tables, &dx, slots, b, rows_grad);
        }
        (self.dx, self.dy) = (dx, dy);
    }

    /// Output columns of tower `t`'s module.
    pub(crate) fn out_dim(&self, t: usize) -> usize {
        self.towers[t].module.out_dim()
    }

    /// Runs tower `t`'s module on `b` rows `x` (its tables' vectors, one after the
    /// other), keeping them for its backward by taking `x`'s buffer (`x` gets the one
    /// the tower held: no copy of the input); returns its output.
    pub(crate) fn forward_tower(&mut self, t: usize, x: &mut Vec<f32>, b: usize) -> &[f32] {
        let tower = &mut self.towers[t];
        std::mem::swap(&mut tower.x, x);
        tower.y.resize(b * tower.module.out_dim(), 0.0);
        tower.module.forward(&tower.x, &mut tower.y, b);
        &tower.y
    }

    /// Backward of tower `t`'s last [`ModelTowers::forward_tower`]: its parameter
    /// gradients, and the gradient of its input into `dx`.
    pub(crate) fn backward_tower(&mut self, t: usize, dy: &[f32], dx: &mut [f32], b: usize) {
        let tower = &mut self.towers[t];
        if b == 0 {
            // No rows: the gradient is zero (a layer may skip an empty product).
            for p in tower.module.params() {
                p.grad.fill(0.0);
            }
            return;
        }
        tower.module.backward(&tower.x, &tower.y, dy, Some(dx), b);
    }

    /// Output columns per feature of tower `t`'s module when it is one map of each
    /// feature's vector on its own ([`TowerModule::per_feature_map`]), else `None`.
    pub(crate) fn per_feature_width(&self, t: usize) -> Option<usize> {
        self.towers[t].module.kind().per_feature_width()
    }

    /// Tower `t`'s per-feature map, to run on any of its features' vectors wherever
    /// they are. Panics unless [`ModelTowers::per_feature_width`] is `Some` (a
    /// programmer's bug).
    pub(crate) fn per_feature_map(&mut self, t: usize) -> &mut Linear<f32> {
        self.towers[t]
            .module
            .per_feature_map()
            .expect("a per-feature module")
    }

    /// Number of parameter tensors of each tower's module, in tower order (the order of
    /// [`ModelTowers::params`]).
    pub(crate) fn tensors_per_tower(&mut self) -> Vec<usize> {
        self.towers
            .iter_mut()
            .map(|t| t.module.params().len())
            .collect()
    }

    /// Zeroes every module's parameter gradients: modules a rank does not run must add
    /// nothing to the sum of gradients over the ranks (the sum is written back into
    /// every rank's gradients).
    pub(crate) fn zero_grads(&mut self) {
        for tower in &mut self.towers {
            tower
                .module
                .params()
                .into_iter()
                .for_each(|p| p.grad.fill(0.0));
        }
    }

    /// The layout of interaction rows: the base part, then one slot per tower.
    pub(crate) fn out_slots(&self) -> &FeatureSlots {
        &self.out
    }

    /// Every module's parameters, named `tower.{t}.{name}`.
    pub(crate) fn params(&mut self) -> Vec<ParamMut<'_, f32>> {
        let mut out = Vec::new();
        for (t, tower) in self.towers.iter_mut().enumerate() {
            out.extend(tower.module.params().into_iter().map(move |mut p| {
                p.name = format!("tower.{t}.{}", p.name);
                p
            }));
        }
        out
    }
}

/// The tower input: each sample's `tables`' slots, one after the other.
fn gather(tables: &[usize], rows: &[f32], slots: &FeatureSlots, b: usize, x: &mut Vec<f32>) {
    x.clear();
    for r in rows.chunks_exact(slots.width()).take(b) {
        for &t in tables {
            x.extend_from_slice(&r[slots.slot(t).range()]);
        }
    }
}

/// The reverse of [`gather`]: writes each sample's part of `dx` into its tables' slots.
fn scatter(tables: &[usize], dx: &[f32], slots: &FeatureSlots, b: usize, rows: &mut [f32]) {
    let per_sample: usize = tables.iter().map(|&t| slots.slot(t).width).sum();
    for (r, d) in rows
        .chunks_exact_mut(slots.width())
        .zip(dx.chunks_exact(per_sample.max(1)))
        .take(b)
    {
        let mut at = 0;
        for &t in tables {
            let s = slots.slot(t);
            r[s.range()].copy_from_slice(&d[at..at + s.width]);
            at += s.width;
        }
    }
}

/// Refuses tables of different widths in one model with towers (modules need one `N`).
pub(crate) fn check_widths(slots: &FeatureSlots) -> Result<usize> {
    let mut widths = slots.iter().map(|s| s.width);
    let first = widths.next().unwrap_or(0);
    if widths.any(|w| w != first) {
        return Err(Error::Model(
            "towers need every table to have the same width".into(),
        ));
    }
    Ok(first)
}
