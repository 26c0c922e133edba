//! A row-partitioned table's order (OPER §5.1's address encoding): its hot rows first,
//! hottest first, then every other row by increasing id.
//!
//! The plan lists only the hot rows, so the order costs memory per hot row plus a bit
//! per row, not a position per row. The bits say which rows are hot, with a count of
//! the hot rows before every block of them. A row's position then takes two or three
//! memory reads whatever the table's size. A binary search over the hot rows took
//! about twenty, and every lookup of a large table pays for it.

/// Words of bits per block: a block's count of the hot rows before it, and the counts
/// within it before each of its words, packed 9 bits each (Vigna's rank9).
const BLOCK_WORDS: usize = 8;

/// A table's order: `hot` rows first, then every other row by increasing id.
#[derive(Debug, Clone)]
pub struct RowOrder {
    rows: usize,
    hot: Vec<usize>,
    /// Bit `r`: whether row `r` is hot.
    hot_bits: Vec<u64>,
    /// Per block of [`BLOCK_WORDS`] words: the hot rows before it, and the hot rows in
    /// it before its words 1 to 7 (9 bits each, word `w` at bit `9·(w − 1)`).
    block_hot: Vec<(u64, u64)>,
    /// The position of each hot row, the hot rows taken by increasing id.
    hot_positions: Vec<u32>,
}

impl RowOrder {
    /// The order of a table of `rows` rows whose hot rows are `hot`, which must be
    /// distinct, below `rows` and fewer than 2³² (as [`crate::Plan::validate`] checks).
    pub fn new(rows: usize, hot: &[usize]) -> Self {
        let mut hot_bits = vec![0u64; rows.div_ceil(64)];
        for &r in hot {
            hot_bits[r / 64] |= 1 << (r % 64);
        }
        let mut block_hot = Vec::with_capacity(hot_bits.len().div_ceil(BLOCK_WORDS));
        let mut before = 0u64;
        for block in hot_bits.chunks(BLOCK_WORDS) {
            let (mut within, mut packed) = (0u64, 0u64);
            for (w, word) in block.iter().enumerate() {
                if w > 0 {
                    packed |= within << (9 * (w - 1));
                }
                within += u64::from(word.count_ones());
            }
            block_hot.push((before, packed));
            before += within;
        }
        let mut by_row: Vec<(usize, u32)> = hot
            .iter()
            .enumerate()
            .map(|(pos, &r)| (r, u32::try_from(pos).expect("fewer than 2^32 hot rows")))
            .collect();
        by_row.sort_unstable();
        RowOrder {
            rows,
            hot: hot.to_vec(),
            hot_bits,
            block_hot,
            hot_positions: by_row.into_iter().map(|(_, pos)| pos).collect(),
        }
    }

    /// Hot rows with ids below `row` (`row < rows`).
    fn hot_before(&self, row: usize) -> usize {
        let word = row / 64;
        let (before, packed) = self.block_hot[word / BLOCK_WORDS];
        let w = word % BLOCK_WORDS;
        let within = if w == 0 {
            0
        } else {
            packed >> (9 * (w - 1)) & 0x1ff
        };
        let part = (self.hot_bits[word] & ((1u64 << (row % 64)) - 1)).count_ones();
        (before + within) as usize + part as usize
    }

    fn is_hot(&self, row: usize) -> bool {
        self.hot_bits[row / 64] >> (row % 64) & 1 == 1
    }

    /// Position of `row` in the order (`row < rows`).
    pub fn position(&self, row: usize) -> usize {
        let i = self.hot_before(row);
        if self.is_hot(row) {
            self.hot_positions[i] as usize
        } else {
            // The cold rows before `row` follow the hot ones.
            self.hot.len() + row - i
        }
    }

    /// The row at `position` (`position < rows`).
    pub fn row_at(&self, position: usize) -> usize {
        if position < self.hot.len() {
            return self.hot[position];
        }
        // The cold row k by id: the last block with at most k cold rows before it,
        // then its words, then the word's bits.
        let k = position - self.hot.len();
        let cold_before = |b: usize| b * BLOCK_WORDS * 64 - self.block_hot[b].0 as usize;
        let (mut lo, mut hi) = (0, self.block_hot.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cold_before(mid) <= k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // Block 0 has no cold rows before it, so `lo` is at least 1.
        let block = lo - 1;
        let mut left = k - cold_before(block);
        let mut word = block * BLOCK_WORDS;
        loop {
            let cold = 64 - self.hot_bits[word].count_ones() as usize;
            if left < cold {
                break;
            }
            left -= cold;
            word += 1;
        }
        let bits = self.hot_bits[word];
        (0..64)
            .filter(|b| bits >> b & 1 == 0)
            .nth(left)
            .map(|b| word * 64 + b)
            .expect("the word holds the row")
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.hot.capacity() * size_of::<usize>()
            + self.hot_bits.capacity() * size_of::<u64>()
            + self.block_hot.capacity() * size_of::<(u64, u64)>()
            + self.hot_positions.capacity() * size_of::<u32>()
    }
}
