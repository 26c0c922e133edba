//! A row-partitioned table's store on one rank (OPER): which table row each offset
//! holds and which offsets are shared with other ranks; and what the backward hands the
//! sparse AllReduce. The stages (`lookup`, `partitioned`) both use it.

use std::ops::Range;

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

    /// Adds `grad` (one read's gradient) to the sum of the shared row at `offset` if it
    /// is one (then `true`). A row's first read of the step starts its sum from zero, as
    /// adding to a zeroed sum does, bit for bit.
    pub(super) fn add_if_shared(&mut self, offset: usize, grad: &[f32]) -> bool {
        if self.shared_bits[offset / 64] >> (offset % 64) & 1 == 0 {
            return false;
        }
        let slot = self.slots[offset];
        let cols = grad.len();
        let mut at = self.at[slot as usize] as usize;
        if at == NOT_SHARED as usize {
            at = self.hit.len();
            self.at[slot as usize] = at as u32;
            self.hit.push(slot);
            self.sums.resize((at + 1) * cols, 0.0);
        }
        let sum = &mut self.sums[at * cols..(at + 1) * cols];
        sum.iter_mut().zip(grad).for_each(|(s, &x)| *s += x);
        true
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
        let shared: Vec<bool> = reads.iter().map(|(o, g)| s.add_if_shared(*o, g)).collect();
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
        assert!(s.add_if_shared(4, &[-0.0]));
        let (_, sums) = s.take_shared_sums(1);
        assert_eq!(sums[0].to_bits(), (0.0f32 + -0.0f32).to_bits());
    }

    #[test]
    fn each_take_returns_only_the_reads_since_the_last() {
        let mut s = store();
        for o in [18, 2, 9, 12, 16, 4, 3, 11] {
            assert!(s.add_if_shared(o, &[o as f32]));
        }
        let (rows, sums) = s.take_shared_sums(1);
        let offsets = [2, 3, 4, 9, 11, 12, 16, 18];
        assert_eq!(rows, offsets.map(|o| 100 + 3 * o as u64));
        assert_eq!(sums, offsets.map(|o| o as f32));
        s.add_if_shared(15, &[1.0]);
        s.add_if_shared(2, &[2.0]);
        s.add_if_shared(15, &[1.0]);
        let (rows, sums) = s.take_shared_sums(1);
        assert_eq!(rows, [106, 145]);
        assert_eq!(sums, [2.0, 2.0]);
        assert_eq!(s.take_shared_sums(1), (vec![], vec![]));
    }
}
