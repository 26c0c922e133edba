//! The floating-point scalar that dense layers are generic over.
//!
//! Training runs in f32; gradient checks run the same code in f64 so that central
//! finite differences can be compared at a 1e-6 relative tolerance.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

/// f32 or f64.
pub trait Real:
    num_traits::Float
    + num_traits::FromPrimitive
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + Sum
    + Default
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Converts an f64 constant (a learning rate, an initializer bound) into this type.
    fn of(x: f64) -> Self;
    /// Widens to f64 (for metrics and tests).
    fn f64(self) -> f64;
}

impl Real for f32 {
    #[inline]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    #[inline]
    fn of(x: f64) -> Self {
        x
    }
    #[inline]
    fn f64(self) -> f64 {
        self
    }
}
