//! Reproducible per-epoch shuffling of the training rows (`train.shuffle`, docs/DATA.md).
//!
//! - A preprocessed binary file is read in a full random order: row `p` of the epoch is
//!   row `π(p)` of the file, where `π` is a keyed permutation of `0..n` (a 4-round
//!   Feistel network with cycle walking, [`Permutation`]). It needs no memory per row
//!   and can start at any position, so a resumed run or a cluster rank that passes over
//!   the rows other ranks read does so without building them.
//! - A streamed source (text, Parquet) goes through a bounded shuffle buffer
//!   ([`ShuffleBuffer`]): it holds up to `buffer` records and hands out a random one
//!   each time it takes the next from the file. The order is a function of the file and
//!   the seed alone, so every cluster rank sees the same global order and a resume
//!   passes over the same records again.
//!
//! Both are keyed by [`Shuffle::key`], a mix of the seed and the epoch: every epoch has
//! its own order, and the same seed gives the same orders on every run and platform.

use crate::binary::BinaryDataset;
use crate::error::Result;
use crate::hash::mix2;
use crate::record::{Record, Schema};
use crate::stream::RecordStream;
use crate::text::RowSelect;
use std::sync::Arc;
use towerrec_core::Batch;

/// Default of `train.shuffle_buffer`: records held by the buffer of a streamed source.
pub const DEFAULT_BUFFER: usize = 1 << 16;

/// How one epoch's training rows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shuffle {
    /// The run's shuffle seed.
    pub seed: u64,
    /// The epoch (0-based): each has its own order.
    pub epoch: u64,
    /// Records held by the buffer of a streamed source (at least 1).
    pub buffer: usize,
}

impl Shuffle {
    /// The key of this epoch's order.
    pub fn key(&self) -> u64 {
        mix2(mix2(self.seed, 0x5348_5546_464c_4531), self.epoch)
    }
}

/// A keyed bijection of `0..n`: a balanced Feistel network on the smallest even number
/// of bits that covers `n`, walked until it lands inside `0..n` (at most 4 tries on
/// average, since the domain is under 4·n).
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// The permutation of `0..n` under `key`.
    pub fn new(n: u64, key: u64) -> Self {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let half = bits.div_ceil(2);
        let mut keys = [0; 4];
        for (r, k) in keys.iter_mut().enumerate() {
            *k = mix2(key, r as u64);
        }
        Self { n, half, keys }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half) - 1;
        let (mut l, mut r) = (x >> self.half, x & mask);
        for k in self.keys {
            let f = mix2(k, r) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half) | r
    }

    /// The image of `i` (`i < n`).
    pub fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.round(i);
        while x >= self.n {
            x = self.round(x);
        }
        x
    }
}

/// The rows a [`RowSelect`] picks from a binary file, in a keyed random order.
pub struct ShuffledBinary {
    data: Arc<BinaryDataset>,
    select: RowSelect,
    /// The rows permuted: `first..first + perm.n`.
    first: u64,
    perm: Permutation,
    pos: u64,
}

impl ShuffledBinary {
    /// The rows of `data` that `select` picks, in the order `key` gives.
    pub fn new(data: Arc<BinaryDataset>, select: RowSelect, key: u64) -> Self {
        let end = select.end().min(data.len());
        let first = match &select {
            RowSelect::Range(r) => r.start.min(end),
            _ => 0,
        };
        Self {
            perm: Permutation::new(end - first, key),
            data,
            select,
            first,
            pos: 0,
        }
    }

    /// The next selected row of the file, advancing the position.
    fn next_row(&mut self) -> Option<u64> {
        while self.pos < self.perm.n {
            let i = self.first + self.perm.at(self.pos);
            self.pos += 1;
            if self.select.contains(i) {
                return Some(i);
            }
        }
        None
    }
}

impl RecordStream for ShuffledBinary {
    fn schema(&self) -> &Schema {
        self.data.schema()
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        self.next_row().map(|i| self.data.record(i)).transpose()
    }

    fn skipped(&self) -> u64 {
        0
    }

    fn remaining(&self) -> Option<u64> {
        match self.select {
            RowSelect::Range(_) | RowSelect::All => Some(self.perm.n - self.pos),
            RowSelect::Hashed { .. } | RowSelect::Mask { .. } => None,
        }
    }

    fn skip_records(&mut self, n: u64) -> Result<u64> {
        let mut passed = 0;
        while passed < n && self.next_row().is_some() {
            passed += 1;
        }
        Ok(passed)
    }

    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        let rows: Vec<u64> = std::iter::from_fn(|| self.next_row()).take(n).collect();
        self.data.batch(&rows).map(Some)
    }
}

/// A streamed source read through a bounded shuffle buffer.
pub struct ShuffleBuffer {
    inner: Box<dyn RecordStream>,
    held: Vec<Record>,
    capacity: usize,
    key: u64,
    draws: u64,
    drained: bool,
}

impl ShuffleBuffer {
    /// `inner` shuffled through a buffer of `shuffle.buffer` records.
    pub fn new(inner: Box<dyn RecordStream>, shuffle: Shuffle) -> Self {
        let capacity = shuffle.buffer.max(1);
        Self {
            inner,
            held: Vec::with_capacity(capacity.min(1 << 20)),
            capacity,
            key: shuffle.key(),
            draws: 0,
            drained: false,
        }
    }
}

impl RecordStream for ShuffleBuffer {
    fn schema(&self) -> &Schema {
        self.inner.schema()
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        while !self.drained && self.held.len() < self.capacity {
            match self.inner.next_record()? {
                Some(r) => self.held.push(r),
                None => self.drained = true,
            }
        }
        if self.held.is_empty() {
            return Ok(None);
        }
        let j = mix2(self.key, self.draws) % self.held.len() as u64;
        self.draws += 1;
        Ok(Some(self.held.swap_remove(j as usize)))
    }

    fn skipped(&self) -> u64 {
        self.inner.skipped()
    }

    fn remaining(&self) -> Option<u64> {
        self.inner.remaining().map(|r| r + self.held.len() as u64)
    }
}

/// `stream` (a streamed source's `part`) in `shuffle`'s order; a binary file's rows are
/// shuffled whole by [`ShuffledBinary`] instead (see [`crate::source::open_epoch`]).
pub fn buffered(stream: Box<dyn RecordStream>, shuffle: Shuffle) -> Box<dyn RecordStream> {
    Box::new(ShuffleBuffer::new(stream, shuffle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_bijections_for_every_small_size() {
        for n in 0..300u64 {
            for key in [0, 1, 0xdead_beef] {
                let p = Permutation::new(n, key);
                let mut seen = vec![false; n as usize];
                for i in 0..n {
                    let j = p.at(i);
                    assert!(j < n, "n={n}: {i} -> {j}");
                    assert!(!seen[j as usize], "n={n}: {j} twice");
                    seen[j as usize] = true;
                }
            }
        }
    }

    #[test]
    fn keys_give_different_orders_and_the_same_key_the_same() {
        let order = |key| {
            let p = Permutation::new(1000, key);
            (0..1000).map(|i| p.at(i)).collect::<Vec<_>>()
        };
        assert_eq!(order(7), order(7));
        assert_ne!(order(7), order(8));
        // Not the identity, nor close to it: few fixed points (about 1 expected).
        let fixed = order(7)
            .iter()
            .enumerate()
            .filter(|(i, &j)| *i as u64 == j)
            .count();
        assert!(fixed < 10, "{fixed}");
        let s = |epoch| Shuffle {
            seed: 1,
            epoch,
            buffer: 4,
        };
        assert_ne!(s(0).key(), s(1).key());
    }

    struct Counting {
        schema: Schema,
        next: u64,
        end: u64,
    }

    impl RecordStream for Counting {
        fn schema(&self) -> &Schema {
            &self.schema
        }
        fn next_record(&mut self) -> Result<Option<Record>> {
            if self.next == self.end {
                return Ok(None);
            }
            self.next += 1;
            Ok(Some(Record {
                label: 0.0,
                dense: vec![self.next as f32 - 1.0],
                sparse: vec![],
            }))
        }
        fn skipped(&self) -> u64 {
            0
        }
    }

    fn shuffled(end: u64, buffer: usize, epoch: u64) -> Vec<u64> {
        let inner = Box::new(Counting {
            schema: Schema {
                dense: vec!["x".into()],
                sparse: vec![],
            },
            next: 0,
            end,
        });
        let mut s = ShuffleBuffer::new(
            inner,
            Shuffle {
                seed: 3,
                epoch,
                buffer,
            },
        );
        std::iter::from_fn(|| s.next_record().unwrap())
            .map(|r| r.dense[0] as u64)
            .collect()
    }

    #[test]
    fn the_buffer_yields_every_record_once_within_its_reach() {
        let order = shuffled(1000, 16, 0);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(order, sorted);
        // A record leaves the buffer no earlier than 15 places before it entered the
        // file order: the buffer holds 16.
        for (p, &r) in order.iter().enumerate() {
            assert!(r as usize <= p + 15, "record {r} at {p}");
        }
        assert_eq!(order, shuffled(1000, 16, 0));
        assert_ne!(order, shuffled(1000, 16, 1));
        // A buffer of one keeps the file order.
        assert_eq!(shuffled(50, 1, 0), (0..50).collect::<Vec<_>>());
    }
}
