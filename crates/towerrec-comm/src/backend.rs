//! What a transport must provide. Every collective of [`crate::Comm`] is built from
//! these few byte-level operations, so two backends that move the same bytes give
//! bit-identical results (reductions happen above, in a fixed order).

use crate::error::{Error, Result};

/// Checks an all-to-all's `counts` (one per member of a group of `group`) against the
/// `len` send elements they split (`unit` names them in the message).
pub(crate) fn check_counts(counts: &[usize], group: usize, len: usize, unit: &str) -> Result<()> {
    if counts.len() != group {
        return Err(Error::usage(
            "all_to_all_v",
            format!("{} counts for a group of {group}", counts.len()),
        ));
    }
    let total: usize = counts.iter().sum();
    if total != len {
        return Err(Error::usage(
            "all_to_all_v",
            format!("counts add up to {total} but {len} {unit} given"),
        ));
    }
    Ok(())
}

/// Where a backend writes what it receives: asked once per exchange for a buffer of the
/// total size, so that bytes land in the caller's typed storage without another copy.
pub trait RecvBuf {
    /// A buffer of exactly `bytes` bytes (its previous contents are overwritten).
    fn bytes(&mut self, bytes: usize) -> &mut [u8];
}

impl RecvBuf for Vec<u8> {
    fn bytes(&mut self, bytes: usize) -> &mut [u8] {
        self.resize(bytes, 0);
        &mut self[..]
    }
}

/// Work run during an exchange ([`Backend::all_to_all_v_during`]), given a function
/// that moves the exchange along.
pub type DuringWork<'a> = &'a mut dyn FnMut(&mut dyn FnMut());

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
    /// writes what every rank sent to this one, concatenated in rank order, into `recv`
    /// and returns the byte count from each. `counts.len() == size()`,
    /// `sum(counts) == send.len()`.
    fn all_to_all_v(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
    ) -> Result<Vec<usize>>;
    /// [`Backend::all_to_all_v`] while `work` runs on this thread, so that the two
    /// overlap. `work` may run collectives of other groups, never of this one; it gets
    /// a function to call now and then, which moves the exchange along where the
    /// backend needs this thread for that (MPI). By default the exchange runs first,
    /// then the work.
    fn all_to_all_v_during(
        &self,
        send: &[u8],
        counts: &[usize],
        recv: &mut dyn RecvBuf,
        work: DuringWork<'_>,
    ) -> Result<Vec<usize>> {
        let from = self.all_to_all_v(send, counts, recv)?;
        work(&mut || {});
        Ok(from)
    }
    /// Sends all of `send` to every rank (this one included); writes every rank's
    /// bytes, in rank order, into `recv` and returns the byte count from each.
    fn all_gather_v(&self, send: &[u8], recv: &mut dyn RecvBuf) -> Result<Vec<usize>> {
        let p = self.size();
        let mut buf = Vec::with_capacity(send.len() * p);
        for _ in 0..p {
            buf.extend_from_slice(send);
        }
        self.all_to_all_v(&buf, &vec![send.len(); p], recv)
    }
    /// Returns once every rank of the group has called it.
    fn barrier(&self) -> Result<()>;
    /// Splits the group: ranks calling with the same `color` form one new group,
    /// ordered by `(key, current rank)`. Collective over this group.
    fn split(&self, color: usize, key: usize) -> Result<Box<dyn Backend>>;
    /// Failure injection: hang as a stuck rank would (see [`crate::Comm::hang`]). By
    /// default the calling thread sleeps for an hour.
    fn hang(&self) {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
