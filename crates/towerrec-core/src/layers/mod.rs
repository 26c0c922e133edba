//! Dense layers with explicit forward and backward.

pub mod activation;
pub mod crossnet;
pub mod interaction;
pub mod linear;
pub mod mlp;
pub mod tower;
