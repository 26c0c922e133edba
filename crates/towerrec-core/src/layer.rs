//! The contract every dense layer keeps: explicit forward and backward on row-major
//! batches, parameters exposed with their gradients for the optimizers and checkpoints.

use crate::real::Real;

/// A parameter tensor and its gradient, flat, with a name relative to its layer
/// (`"weight"`, `"bias"`, `"0.weight"` inside an MLP).
pub struct ParamMut<'a, T> {
    pub name: String,
    pub value: &'a mut [T],
    pub grad: &'a mut [T],
}

/// A dense layer with a hand-written backward.
///
/// Shapes are the caller's responsibility (models check them when they are built), so a
/// mismatch is a programmer's bug and panics.
pub trait Layer<T: Real>: Send {
    /// Features per input row.
    fn in_dim(&self) -> usize;
    /// Features per output row.
    fn out_dim(&self) -> usize;
    /// `y = f(x)` for `batch` rows: `x` is `batch × in_dim`, `y` is `batch × out_dim`.
    /// A layer may keep what its backward needs in its own scratch buffers.
    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize);
    /// Given the `x` and `y` of the last forward and `dy = dL/dy`, overwrites every
    /// parameter gradient with `dL/dθ` and, when `dx` is given, writes `dL/dx` into it.
    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize);
    /// Parameters with their gradients, always in the same order.
    fn params(&mut self) -> Vec<ParamMut<'_, T>>;
    /// How its matrix products take their operands from now on
    /// ([`crate::matmul::DensePrecision`]); a layer without them (the dot interaction,
    /// an identity) ignores it.
    fn set_dense_precision(&mut self, _precision: crate::matmul::DensePrecision) {}
}
