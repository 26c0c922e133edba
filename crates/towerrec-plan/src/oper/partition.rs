//! Access- and memory-aware partitioning (OPER §4.1): a table's rows, hottest first,
//! cut into partitions bounded by a threshold on both their share of all reads and
//! their share of all bytes.
//!
//! A row whose share of the reads exceeds its share of the bytes (`count / R >
//! row_bytes / M`) is *hot*: walked by count, its partitions fill their read bound
//! first (access-bounded). The other rows follow by increasing id (not by count, as
//! in the paper, which keeps the order a plan can state compactly, docs/PLANS.md);
//! their partitions fill the byte bound first (memory-bounded), and their reads are
//! still counted exactly.

use crate::plan::TableSpec;

/// A partition of one table: positions `order` of the table's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    pub table: usize,
    pub order: (usize, usize),
    /// Reads of its rows in the profile.
    pub reads: u64,
    /// Bytes of weights and optimizer state.
    pub bytes: u64,
    /// Bytes its reads gather (reads · 4 · dim): its lookup work, Eq. 2.
    pub lookup: u64,
    /// Cut by the read bound (hot rows): placed to balance lookups; else by bytes.
    pub access_bound: bool,
}

impl Part {
    pub fn rows(&self) -> usize {
        self.order.1 - self.order.0
    }
}

/// Every table's hot rows (its order's head) and all partitions, table by table.
pub(crate) struct Partitioned {
    pub hot: Vec<Vec<usize>>,
    pub parts: Vec<Part>,
}

/// Grows a partition until a bound is reached.
struct Cutter {
    table: usize,
    row_bytes: u64,
    read_bytes: u64,
    read_cap: f64,
    byte_cap: f64,
    start: usize,
    at: usize,
    reads: u64,
    out: Vec<Part>,
}

impl Cutter {
    fn push(&mut self, count: u64) {
        self.at += 1;
        self.reads += count;
        let bytes = (self.at - self.start) as u64 * self.row_bytes;
        if self.reads as f64 >= self.read_cap || bytes as f64 >= self.byte_cap {
            self.close();
        }
    }

    fn close(&mut self) {
        if self.at > self.start {
            self.out.push(Part {
                table: self.table,
                order: (self.start, self.at),
                reads: self.reads,
                bytes: (self.at - self.start) as u64 * self.row_bytes,
                lookup: self.reads * self.read_bytes,
                access_bound: self.reads as f64 >= self.read_cap,
            });
        }
        (self.start, self.reads) = (self.at, 0);
    }
}

/// Partitions every table at `threshold` (a share, e.g. 0.001 for 0.1%) of the total
/// reads and bytes. `counts[t]` holds every row's reads of table `t`.
pub(crate) fn partition(tables: &[TableSpec], counts: &[&[u32]], threshold: f64) -> Partitioned {
    let total_reads: u64 = counts
        .iter()
        .flat_map(|c| c.iter())
        .map(|&n| u64::from(n))
        .sum();
    let total_bytes: u64 = tables.iter().map(TableSpec::bytes).sum();
    let mut hot_rows = Vec::with_capacity(tables.len());
    let mut parts = Vec::new();
    for (t, (spec, c)) in tables.iter().zip(counts).enumerate() {
        let row_bytes = spec.bytes_per_row as u64;
        // Hot: count / R > row_bytes / M.
        let is_hot = |n: u32| {
            u128::from(n) * u128::from(total_bytes)
                > u128::from(row_bytes) * u128::from(total_reads)
        };
        let mut hot: Vec<usize> = (0..c.len()).filter(|&r| is_hot(c[r])).collect();
        hot.sort_by(|&a, &b| c[b].cmp(&c[a]).then(a.cmp(&b)));
        let mut cut = Cutter {
            table: t,
            row_bytes,
            read_bytes: 4 * spec.dim as u64,
            read_cap: (threshold * total_reads as f64).max(1.0),
            byte_cap: (threshold * total_bytes as f64).max(row_bytes as f64),
            start: 0,
            at: 0,
            reads: 0,
            out: Vec::new(),
        };
        for &r in &hot {
            cut.push(u64::from(c[r]));
        }
        cut.close();
        for &n in c.iter().filter(|&&n| !is_hot(n)) {
            cut.push(u64::from(n));
        }
        cut.close();
        parts.append(&mut cut.out);
        hot_rows.push(hot);
    }
    Partitioned {
        hot: hot_rows,
        parts,
    }
}

/// Reads of each range of `bounds` (consecutive ranges of a table's order, from 0)
/// over a table whose order is `hot` then the other rows by id.
pub(crate) fn order_reads(counts: &[u32], hot: &[usize], bounds: &[(usize, usize)]) -> Vec<u64> {
    order_sums(counts, hot, bounds, u64::from)
}

/// Per range of the table's order (`bounds`), the sum of `f` over its rows' counts.
pub(crate) fn order_sums<T: std::iter::Sum<T>>(
    counts: &[u32],
    hot: &[usize],
    bounds: &[(usize, usize)],
    f: impl Fn(u32) -> T,
) -> Vec<T> {
    let mut sorted_hot = hot.to_vec();
    sorted_hot.sort_unstable();
    let mut next_hot = sorted_hot.iter().peekable();
    let cold = (0..counts.len()).filter(move |&r| {
        if next_hot.peek() == Some(&&r) {
            next_hot.next();
            false
        } else {
            true
        }
    });
    let mut rows = hot.iter().copied().chain(cold);
    bounds
        .iter()
        .map(|&(a, b)| rows.by_ref().take(b - a).map(|r| f(counts[r])).sum())
        .collect()
}
