//! Exchanges larger than one MPI call can move. MPI's counts and displacements are C
//! `int`s, so one AlltoAllv moves at most 2 GiB to or from a rank (the MPI backend
//! refuses more). Gathering whole tables on one rank (a checkpoint of a 2 GB model)
//! needs more; these run such an exchange as a series of rounds that each move at most
//! a given number of bytes per rank, and put the pieces where one exchange would have
//! left them. Every round is an ordinary collective, counted in the phase given.

use crate::comm::{Comm, Element};
use crate::error::Result;
use crate::traffic::Phase;
use std::mem::size_of;

/// The most bytes a rank sends or receives in one round of a split exchange: half of
/// what one MPI call can move.
pub const ROUND_BYTES: usize = 1 << 30;

impl Comm {
    /// [`Comm::all_to_all_v`], moved in rounds of at most `round_bytes` sent and at most
    /// `round_bytes` received per rank (or one element a rank pair, where that is more).
    /// Returns the same elements and counts.
    pub fn all_to_all_v_in_rounds<T: Element>(
        &self,
        send: &[T],
        counts: &[usize],
        round_bytes: usize,
        phase: Phase,
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let p = self.size();
        crate::backend::check_counts(counts, p, send.len(), "elements")?;
        let per_pair = (round_bytes / p / size_of::<T>()).max(1);
        // Every rank's counts: what this rank receives, and the largest block, which
        // sets the rounds every rank runs.
        let mine: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
        let (all, _) = self.all_gather(&mine, phase)?;
        let me = self.rank();
        let from: Vec<usize> = (0..p).map(|s| all[s * p + me] as usize).collect();
        let rounds = (all.iter().copied().max().unwrap_or(0) as usize).div_ceil(per_pair);
        let send_at = starts(counts);
        let recv_at = starts(&from);
        let mut recv = vec![T::default(); from.iter().sum()];
        let mut piece = Vec::new();
        for k in 0..rounds {
            piece.clear();
            let mut piece_counts = vec![0; p];
            for d in 0..p {
                let (lo, hi) = slice_of_round(k, per_pair, counts[d]);
                piece.extend_from_slice(&send[send_at[d] + lo..send_at[d] + hi]);
                piece_counts[d] = hi - lo;
            }
            let (got, got_from) = self.all_to_all_v(&piece, &piece_counts, phase)?;
            place_pieces(&mut recv, &recv_at, &got, &got_from, k * per_pair);
        }
        Ok((recv, from))
    }

    /// [`Comm::all_gather`], moved in rounds of at most `round_bytes` received per rank
    /// (or one element a rank, where that is more).
    pub fn all_gather_in_rounds<T: Element>(
        &self,
        send: &[T],
        round_bytes: usize,
        phase: Phase,
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let p = self.size();
        let per_rank = (round_bytes / p / size_of::<T>()).max(1);
        let (lens, _) = self.all_gather(&[send.len() as u64], phase)?;
        let from: Vec<usize> = lens.iter().map(|&c| c as usize).collect();
        let rounds = from.iter().copied().max().unwrap_or(0).div_ceil(per_rank);
        let recv_at = starts(&from);
        let mut recv = vec![T::default(); from.iter().sum()];
        for k in 0..rounds {
            let (lo, hi) = slice_of_round(k, per_rank, send.len());
            let (got, got_from) = self.all_gather(&send[lo..hi], phase)?;
            place_pieces(&mut recv, &recv_at, &got, &got_from, k * per_rank);
        }
        Ok((recv, from))
    }
}

/// Where each block starts in a buffer of blocks of `counts` elements.
fn starts(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let s = *at;
            *at += c;
            Some(s)
        })
        .collect()
}

/// Round `k`'s part of a block of `len` elements, `per_round` elements a round.
fn slice_of_round(k: usize, per_round: usize, len: usize) -> (usize, usize) {
    ((k * per_round).min(len), ((k + 1) * per_round).min(len))
}

/// Copies a round's pieces (`got`, `got_from[s]` from source `s`) into `recv`, where
/// source `s`'s block starts at `recv_at[s]` and the round's piece at `offset` in it.
fn place_pieces<T: Element>(
    recv: &mut [T],
    recv_at: &[usize],
    got: &[T],
    got_from: &[usize],
    offset: usize,
) {
    let mut at = 0;
    // A source whose block ended in an earlier round sends nothing, and its offset may
    // lie past the end of `recv`.
    for (s, &n) in got_from.iter().enumerate().filter(|&(_, &n)| n > 0) {
        let dst = recv_at[s] + offset;
        recv[dst..dst + n].copy_from_slice(&got[at..at + n]);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use crate::{run_in_process, Phase, Topology};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any counts, any round size: the same result as one exchange.
        #[test]
        fn rounds_give_what_one_exchange_gives(
            hosts in 1usize..3,
            ranks_per_host in 1usize..3,
            seed in 0u64..1000,
            round_bytes in 1usize..200,
        ) {
            let topology = Topology::new(hosts, ranks_per_host).expect("a topology");
            let out = run_in_process(topology, move |comm| {
                let (p, me) = (comm.size(), comm.rank());
                let count = |s: usize, d: usize| ((s as u64 * 31 + d as u64 * 17 + seed) % 23) as usize;
                let counts: Vec<usize> = (0..p).map(|d| count(me, d)).collect();
                let send: Vec<u64> = (0..counts.iter().sum::<usize>())
                    .map(|i| seed * 1_000_000 + me as u64 * 1000 + i as u64)
                    .collect();
                let one = comm.all_to_all_v(&send, &counts, Phase::Control)?;
                let split = comm.all_to_all_v_in_rounds(&send, &counts, round_bytes, Phase::Control)?;
                let gathered = comm.all_gather(&send, Phase::Control)?;
                let gathered_split = comm.all_gather_in_rounds(&send, round_bytes, Phase::Control)?;
                Ok::<_, crate::Error>((one == split, gathered == gathered_split))
            })
            .expect("in-process run");
            for (a2a, gather) in out {
                prop_assert!(a2a, "all_to_all_v_in_rounds differs");
                prop_assert!(gather, "all_gather_in_rounds differs");
            }
        }
    }
}
