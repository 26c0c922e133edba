//! A row-partitioned table's store on one rank (OPER): which table row each offset
//! holds and which offsets are shared with other ranks; and what the backward hands the
//! sparse AllReduce. The stages (`lookup`, `partitioned`) both use it.

use std::ops::Range;
use towerrec_core::simd::{prefetch, prefetch_for_write, ROWS_APART_AHEAD};

/// What a row-partitioned table's store on this rank needs beyond a shard's.
pub(super) struct Store {
    /// The table row at each offset.
    rows: Vec<usize>,
    /// Per offset, the row's slot among the shared rows ([`NOT_SHARED`] for a row with
    /// no copies elsewhere); slots number the shared offsets in increasing order.
    slots: Vec<u32>,
    /// A bit per offset, set for the shared ones: what the backward asks of every
    /// read, small enough to stay near the core where `slots` is not.
    shared_bits: Vec<u64>,
    /// The offset of each slot.
    slot_offsets: Vec<usize>,
    /// `(table row, offset)` of those rows, by row.
    shared_by_row: Vec<(u64, usize)>,
    /// The slots the last backward read, in first-read order, and their summed
    /// gradients in that order: memory for the rows read, not for every shared row.
    /// `at[slot]` is the slot's place in `hit` ([`NOT_SHARED`] for a slot not read).
    /// All reused from step to step.
    hit: Vec<u32>,
    sums: Vec<f32>,
    at: Vec<u32>,
}

/// [`Store`]'s slot of an offset whose row has no copies elsewhere.
const NOT_SHARED: u32 = u32::MAX;

/// Bytes of a store's bookkeeping beyond its rows, for `stored` rows of which `shared`
/// have copies elsewhere: per row its table row, slot and bit; per shared row its
/// offset, `(row, offset)` pair and place among the rows read (the sums of a step's
/// reads are counted with the activations' gradients, not here).
pub(super) fn bookkeeping_bytes(stored: usize, shared: usize) -> u64 {
    let (stored, shared) = (stored as u64, shared as u64);
    let per_row = size_of::<usize>() as u64 + 4;
    let per_shared = (size_of::<usize>() + size_of::<(u64, usize)>()) as u64 + 4;
    stored
        .saturating_mul(per_row)
        .saturating_add(stored.div_ceil(64) * 8)
        .saturating_add(shared.saturating_mul(per_shared))
}

impl Store {
    /// The store of `rows` (the table row at each offset) whose `shared` offsets (sorted
    /// ranges) have copies on other ranks.
    pub(super) fn new(rows: Vec<usize>, shared: Vec<Range<usize>>) -> Self {
        let mut shared_by_row: Vec<(u64, usize)> = shared
            .iter()
            .flat_map(|r| r.clone())
            .map(|offset| (rows[offset] as u64, offset))
            .collect();
        shared_by_row.sort_unstable();
        let mut slots = vec![NOT_SHARED; rows.len()];
        for r in &shared {
            slots[r.clone()].fill(0);
        }
        let slot_offsets: Vec<usize> = (0..rows.len()).filter(|&o| slots[o] == 0).collect();
        let mut shared_bits = vec![0u64; rows.len().div_ceil(64)];
        for (slot, &offset) in slot_offsets.iter().enumerate() {
            slots[offset] = u32::try_from(slot).expect("fewer than 2^32 - 1 shared rows");
            shared_bits[offset / 64] |= 1 << (offset % 64);
        }
        Store {
            rows,
            slots,
            shared_bits,
            at: vec![NOT_SHARED; slot_offsets.len()],
            slot_offsets,
            shared_by_row,
            sums: Vec::new(),
            hit: Vec::new(),
        }
    }

    /// The place among this step's sums of the shared row at `offset`, if it is one; a
    /// row's first read of the step gives it the next place. [`Store::add_reads`] then
    /// adds the reads' gradients.
    pub(super) fn sum_place(&mut self, offset: usize) -> Option<u32> {
        if self.shared_bits[offset / 64] >> (offset % 64) & 1 == 0 {
            return None;
        }
        let slot = self.slots[offset] as usize;
        if self.at[slot] == NOT_SHARED {
            self.at[slot] = self.hit.len() as u32;
            self.hit.push(slot as u32);
        }
        Some(self.at[slot])
    }

    /// Adds to the sums the gradients of `reads`, `(row of grad, place)` pairs from
    /// [`Store::sum_place`], in order: each sum starts from zero and takes its reads in
    /// the order given. Apart from the choice of places, done first, every read is
    /// independent of the next, so the rows a few reads ahead are fetched while one is
    /// added (a sum's place and a read's gradient row are both far from the last).
    pub(super) fn add_reads(&mut self, reads: &[(u32, u32)], grad: &[f32], cols: usize) {
        self.sums.clear();
        self.sums.resize(self.hit.len() * cols, 0.0);
        for (i, &(row, at)) in reads.iter().enumerate() {
            if let Some(&(row, at)) = reads.get(i + ROWS_APART_AHEAD) {
                prefetch(grad, row as usize * cols, cols);
                prefetch_for_write(&self.sums, at as usize * cols, cols);
            }
            let (row, at) = (row as usize, at as usize);
            let g = &grad[row * cols..(row + 1) * cols];
            let sum = &mut self.sums[at * cols..(at + 1) * cols];
            sum.iter_mut().zip(g).for_each(|(s, &x)| *s += x);
        }
    }

    /// The shared rows read since the last call, in offset order, as `(table rows,
    /// summed gradients)` (`cols` wide); clears them for the next backward.
    pub(super) fn take_shared_sums(&mut self, cols: usize) -> (Vec<u64>, Vec<f32>) {
        let mut order = std::mem::take(&mut self.hit);
        // Slots number the offsets in order: sorted slots are sorted offsets.
        order.sort_unstable();
        let mut rows = Vec::with_capacity(order.len());
        let mut sums = Vec::with_capacity(order.len() * cols);
        for &slot in &order {
            let at = std::mem::replace(&mut self.at[slot as usize], NOT_SHARED) as usize;
            rows.push(self.rows[self.slot_offsets[slot as usize]] as u64);
            sums.extend_from_slice(&self.sums[at * cols..(at + 1) * cols]);
        }
        order.clear();
        self.hit = order;
        self.sums.clear();
        (rows, sums)
    }

    /// `(table row, offset)` of the shared rows, by row.
    pub(super) fn shared_by_row(&self) -> &[(u64, usize)] {
        &self.shared_by_row
    }
}

/// Per table, the rows of shared copies this rank's reads touched and their summed
/// gradients: `(table, rows, grads)`.
pub(super) type Touched = Vec<(usize, Vec<u64>, Vec<f32>)>;

#[cfg(test)]
mod tests {
    use super::Store;

    /// 60 offsets holding table rows 100 + 3·offset; offsets 2..5 and 9..59 shared.
    fn store() -> Store {
        Store::new((0..60).map(|o| 100 + 3 * o).collect(), vec![2..5, 9..59])
    }

    /// Sums one step's `reads` (`(offset, gradient)`, each gradient its own row of the
    /// step's gradient) as the backward does; whether each read was of a shared row.
    fn sum_reads<const N: usize>(s: &mut Store, reads: &[(usize, [f32; N])]) -> Vec<bool> {
        let grad: Vec<f32> = reads.iter().flat_map(|(_, g)| *g).collect();
        let mut places = Vec::new();
        let shared = reads
            .iter()
            .enumerate()
            .map(|(i, &(offset, _))| {
                let at = s.sum_place(offset);
                places.extend(at.map(|at| (i as u32, at)));
                at.is_some()
            })
            .collect();
        s.add_reads(&places, &grad, N);
        shared
    }

    #[test]
    fn sums_each_shared_row_in_read_order_from_zero() {
        let mut s = store();
        let reads: [(usize, [f32; 2]); 6] = [
            (10, [1e8, -0.0]),
            (59, [5.0, 5.0]),
            (3, [2.5, 1.0]),
            (10, [1.0, -0.0]),
            (3, [-1.0, 0.25]),
            (10, [-1e8, 3.0]),
        ];
        let shared = sum_reads(&mut s, &reads);
        assert_eq!(shared, [true, false, true, true, true, true]);
        let (rows, sums) = s.take_shared_sums(2);
        // Offset order (3 before 10), as table rows.
        assert_eq!(rows, [109, 130]);
        let sum = |gs: &[[f32; 2]]| {
            let mut acc = [0.0f32; 2];
            for g in gs {
                acc[0] += g[0];
                acc[1] += g[1];
            }
            acc
        };
        let want3 = sum(&[[2.5, 1.0], [-1.0, 0.25]]);
        let want10 = sum(&[[1e8, -0.0], [1.0, -0.0], [-1e8, 3.0]]);
        let want: Vec<u32> = [want3, want10]
            .iter()
            .flatten()
            .map(|x| x.to_bits())
            .collect();
        let got: Vec<u32> = sums.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, want);
        // Summed in read order, 1e8 + 1 - 1e8 is 0 in f32: the order shows.
        assert_eq!(sums[2], 0.0);
    }

    #[test]
    fn a_read_of_negative_zero_sums_as_added_to_zero() {
        let mut s = store();
        assert_eq!(sum_reads(&mut s, &[(4, [-0.0])]), [true]);
        let (_, sums) = s.take_shared_sums(1);
        assert_eq!(sums[0].to_bits(), (0.0f32 + -0.0f32).to_bits());
    }

    #[test]
    fn each_take_returns_only_the_reads_since_the_last() {
        let mut s = store();
        let reads = [18, 2, 9, 12, 16, 4, 3, 11].map(|o| (o, [o as f32]));
        assert_eq!(sum_reads(&mut s, &reads), [true; 8]);
        let (rows, sums) = s.take_shared_sums(1);
        let offsets = [2, 3, 4, 9, 11, 12, 16, 18];
        assert_eq!(rows, offsets.map(|o| 100 + 3 * o as u64));
        assert_eq!(sums, offsets.map(|o| o as f32));
        sum_reads(&mut s, &[(15, [1.0]), (2, [2.0]), (15, [1.0])]);
        let (rows, sums) = s.take_shared_sums(1);
        assert_eq!(rows, [106, 145]);
        assert_eq!(sums, [2.0, 2.0]);
        assert_eq!(s.take_shared_sums(1), (vec![], vec![]));
    }

    #[test]
    fn many_reads_sum_as_one_pass_in_read_order() {
        // Enough reads for the gradient rows and sums fetched ahead to matter.
        let mut s = store();
        let reads: Vec<(usize, [f32; 3])> = (0..500u32)
            .map(|i| {
                let offset = (i * 37 + i * i) % 60;
                let x = (i as f32).sin() * 10f32.powi(i as i32 % 9 - 4);
                (offset as usize, [x, -x * 0.5, 1.0 / (1.0 + i as f32)])
            })
            .collect();
        let shared = sum_reads(&mut s, &reads);
        let mut want: std::collections::BTreeMap<usize, [f32; 3]> = Default::default();
        for ((offset, g), is_shared) in reads.iter().zip(&shared) {
            assert_eq!(
                *is_shared,
                (2..5).contains(offset) || (9..59).contains(offset)
            );
            if *is_shared {
                let sum = want.entry(*offset).or_insert([0.0; 3]);
                sum.iter_mut().zip(g).for_each(|(s, &x)| *s += x);
            }
        }
        let (rows, sums) = s.take_shared_sums(3);
        assert_eq!(
            rows,
            want.keys().map(|&o| 100 + 3 * o as u64).collect::<Vec<_>>()
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&sums),
            bits(&want.values().flatten().copied().collect::<Vec<_>>())
        );
    }
}
