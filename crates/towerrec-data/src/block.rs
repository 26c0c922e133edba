//! [`RecordBlock`]: many records stored flat (labels, row-major dense values, and every
//! row's ids of every feature in one array), so that a reader can hand out thousands
//! of rows without one allocation per row and feature. The text readers parse into
//! blocks, the binary writer consumes them ([`crate::RecordStream::read_block`]).

use crate::error::Result;
use crate::record::{Record, Schema};
use towerrec_core::{Batch, KeyedJagged};

/// Records stored flat. Row `r`'s ids of feature `f` are
/// `ids[end(r·F + f - 1)..ends[r·F + f]]` with `F` sparse features (the start of the
/// very first is 0).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordBlock {
    /// Dense features per row.
    pub num_dense: usize,
    /// Sparse features per row.
    pub num_sparse: usize,
    /// One label per row.
    pub labels: Vec<f32>,
    /// `num_dense` values per row, row-major.
    pub dense: Vec<f32>,
    /// Per row and feature (row-major), the end of its ids in `ids`.
    pub ends: Vec<usize>,
    /// Every id, row by row, feature by feature.
    pub ids: Vec<u64>,
}

impl RecordBlock {
    /// An empty block for rows of `num_dense` dense and `num_sparse` sparse features.
    pub fn new(num_dense: usize, num_sparse: usize) -> Self {
        Self {
            num_dense,
            num_sparse,
            ..Self::default()
        }
    }

    /// [`RecordBlock::new`] with room for `rows` rows of one id per feature (more ids
    /// grow it): growing from empty copies and faults in every doubling.
    pub fn with_capacity(num_dense: usize, num_sparse: usize, rows: usize) -> Self {
        Self {
            num_dense,
            num_sparse,
            labels: Vec::with_capacity(rows),
            dense: Vec::with_capacity(rows * num_dense),
            ends: Vec::with_capacity(rows * num_sparse),
            ids: Vec::with_capacity(rows * num_sparse),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the block holds no row.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Removes every row (keeping the allocations).
    pub fn clear(&mut self) {
        self.labels.clear();
        self.dense.clear();
        self.ends.clear();
        self.ids.clear();
    }

    /// Ends the current feature of the row being built: its ids are those pushed since.
    #[inline]
    pub fn end_feature(&mut self) {
        self.ends.push(self.ids.len());
    }

    /// A mark to roll back to with [`RecordBlock::truncate`] (a row that failed to parse
    /// halfway).
    pub fn mark(&self) -> (usize, usize, usize, usize) {
        (
            self.labels.len(),
            self.dense.len(),
            self.ends.len(),
            self.ids.len(),
        )
    }

    /// Rolls back to `mark`.
    pub fn truncate(&mut self, mark: (usize, usize, usize, usize)) {
        self.labels.truncate(mark.0);
        self.dense.truncate(mark.1);
        self.ends.truncate(mark.2);
        self.ids.truncate(mark.3);
    }

    /// The ids of row `r`, feature `f`.
    #[inline]
    pub fn ids_of(&self, r: usize, f: usize) -> &[u64] {
        let k = r * self.num_sparse + f;
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.ids[start..self.ends[k]]
    }

    /// The dense values of row `r`.
    #[inline]
    pub fn dense_of(&self, r: usize) -> &[f32] {
        &self.dense[r * self.num_dense..(r + 1) * self.num_dense]
    }

    /// Row `r` as a [`Record`].
    pub fn record(&self, r: usize) -> Record {
        Record {
            label: self.labels[r],
            dense: self.dense_of(r).to_vec(),
            sparse: (0..self.num_sparse)
                .map(|f| self.ids_of(r, f).to_vec())
                .collect(),
        }
    }

    /// The rows as a [`Batch`] of `schema`'s features (the same batch
    /// [`crate::next_batch`] assembles from the rows as records).
    pub fn to_batch(&self, schema: &Schema) -> Result<Batch> {
        let (b, f) = (self.len(), self.num_sparse);
        if (self.num_dense, f) != (schema.num_dense(), schema.num_sparse()) {
            return Err(towerrec_core::Error::shape(
                "block (dense, sparse) features",
                format!("({}, {})", schema.num_dense(), schema.num_sparse()),
                format!("({}, {f})", self.num_dense),
            )
            .into());
        }
        // Feature-major: all samples of feature 0, then feature 1, ...
        let mut offsets = Vec::with_capacity(f * b + 1);
        offsets.push(0usize);
        let mut values = Vec::with_capacity(self.ids.len());
        for k in 0..f {
            for r in 0..b {
                values.extend_from_slice(self.ids_of(r, k));
                offsets.push(values.len());
            }
        }
        let sparse = KeyedJagged::from_offsets(schema.sparse_names(), b, offsets, values)?;
        Ok(Batch::new(
            self.dense.clone(),
            self.num_dense,
            sparse,
            self.labels.clone(),
        )?)
    }

    /// Appends `record` (which must have this block's feature counts).
    pub fn push_record(&mut self, record: &Record) {
        self.labels.push(record.label);
        self.dense.extend_from_slice(&record.dense);
        for ids in &record.sparse {
            self.ids.extend_from_slice(ids);
            self.end_feature();
        }
    }

    /// Appends rows `rows` of `other` (same feature counts).
    pub fn extend_from(&mut self, other: &RecordBlock, rows: std::ops::Range<usize>) {
        let f = self.num_sparse;
        self.labels.extend_from_slice(&other.labels[rows.clone()]);
        self.dense.extend_from_slice(
            &other.dense[rows.start * self.num_dense..rows.end * self.num_dense],
        );
        if rows.is_empty() || f == 0 {
            self.ends
                .extend(std::iter::repeat_n(self.ids.len(), rows.len() * f));
            return;
        }
        let k0 = rows.start * f;
        let k1 = rows.end * f;
        let start = if k0 == 0 { 0 } else { other.ends[k0 - 1] };
        let end = other.ends[k1 - 1];
        let base = self.ids.len();
        self.ids.extend_from_slice(&other.ids[start..end]);
        self.ends
            .extend(other.ends[k0..k1].iter().map(|&e| e - start + base));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_ranges_copy() {
        let recs = [
            Record {
                label: 1.0,
                dense: vec![0.5],
                sparse: vec![vec![1, 2], vec![]],
            },
            Record {
                label: 0.0,
                dense: vec![2.0],
                sparse: vec![vec![3], vec![4, 5, 6]],
            },
            Record {
                label: 1.0,
                dense: vec![-1.0],
                sparse: vec![vec![], vec![7]],
            },
        ];
        let mut b = RecordBlock::new(1, 2);
        for r in &recs {
            b.push_record(r);
        }
        assert_eq!(b.len(), 3);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(&b.record(i), r);
        }
        let mut c = RecordBlock::new(1, 2);
        c.push_record(&recs[0]);
        c.extend_from(&b, 1..3);
        c.extend_from(&b, 0..0);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(&c.record(i), r);
        }
        let m = c.mark();
        c.labels.push(1.0);
        c.ids.push(9);
        c.truncate(m);
        assert_eq!(c.len(), 3);
        assert_eq!(c.ids.len(), 7);
    }
}
