//! What a transport must provide. Every collective of [`crate::Comm`] is built from
//! these few byte-level operations, so two backends that move the same bytes give
//! bit-identical results (reductions happen above, in a fixed order).

use crate::error::Result;

/// A group of ranks that can exchange bytes. Implemented by the in-process backend and,
/// with the `mpi` feature, by MPI communicators.
pub trait Backend: Send {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    /// Number of ranks in the group.
    fn size(&self) -> usize;
    /// World rank of the group's rank `r`.
    fn world_rank(&self, r: usize) -> usize;
    /// Sends `send[..counts[0]]` to rank 0, the next `counts[1]` bytes to rank 1, …;
    /// returns what every rank sent to this one, concatenated in rank order, with the
    /// byte count from each. `counts.len() == size()`, `sum(counts) == send.len()`.
    fn all_to_all_v(&self, send: &[u8], counts: &[usize]) -> Result<(Vec<u8>, Vec<usize>)>;
    /// Returns once every rank of the group has called it.
    fn barrier(&self) -> Result<()>;
    /// Splits the group: ranks calling with the same `color` form one new group,
    /// ordered by `(key, current rank)`. Collective over this group.
    fn split(&self, color: usize, key: usize) -> Result<Box<dyn Backend>>;
}
