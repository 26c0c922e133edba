//! towerrec-core: the single-process building blocks of a recommendation model.
//!
//! - [`batch`]: [`Batch`] and [`KeyedJagged`], the data that flows from readers to the model.
//! - [`layer`]: the [`Layer`] trait every dense layer implements (explicit forward and backward).
//! - [`layers`]: Linear, activations, MLP, the DLRM dot interaction, the DCN-v2 CrossNet,
//!   and DMT's tower modules ([`layers::tower`]).
//! - [`embedding`]: embedding-bag tables whose backward is fused with the optimizer update.
//! - [`fsio`]: atomic output files, and the check that an output is not an input.
//! - [`huge_alloc`]: a global allocator that puts large allocations on 2 MiB pages.
//! - [`probe`]: the machine's limits (copy and random-gather bandwidth, GEMM throughput).
//! - [`loss`], [`optim`], [`metrics`]: BCE with logits, dense optimizers and schedules,
//!   AUC / log loss / normalized entropy.
//!
//! Dense layers are generic over [`Real`] (f32 for training, f64 for gradient checks).

pub mod batch;
pub mod embedding;
pub mod error;
pub mod fsio;
pub mod gradcheck;
pub mod huge_alloc;
pub mod layer;
pub mod layers;
pub mod loss;
pub mod matmul;
pub mod metrics;
pub mod optim;
pub mod probe;
pub mod real;
pub mod simd;

pub use batch::{Batch, KeyedJagged};
pub use error::{Error, Result};
pub use layer::{Layer, ParamMut};
pub use real::Real;
