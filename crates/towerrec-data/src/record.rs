//! One sample ([`Record`]), the description of a data set's features ([`Schema`]) and
//! the [`RecordStream`] trait every source (text readers, binary files, the synthetic
//! generator) implements.

use crate::block::RecordBlock;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use towerrec_core::Batch;

/// One sample, already transformed into model inputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// 0.0 or 1.0.
    pub label: f32,
    /// One value per dense feature of the schema, after the reader's transform.
    pub dense: Vec<f32>,
    /// `sparse[f]`: the ids of sparse feature `f`, each already reduced below that
    /// feature's `rows`. Zero, one or many ids (multi-hot).
    pub sparse: Vec<Vec<u64>>,
}

/// One sparse (categorical) feature: a name and the number of embedding rows its ids
/// are hashed into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparseFeature {
    pub name: String,
    pub rows: u64,
}

/// The features of a data set, in the order [`Record`]s store them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// Dense feature names.
    pub dense: Vec<String>,
    /// Sparse features.
    pub sparse: Vec<SparseFeature>,
}

impl Schema {
    /// Number of dense features.
    pub fn num_dense(&self) -> usize {
        self.dense.len()
    }

    /// Number of sparse features.
    pub fn num_sparse(&self) -> usize {
        self.sparse.len()
    }

    /// Sparse feature names, the keys of a batch's `KeyedJagged`.
    pub fn sparse_names(&self) -> Vec<String> {
        self.sparse.iter().map(|f| f.name.clone()).collect()
    }

    /// Whether `record` has the number of dense and sparse features this schema says.
    pub fn fits(&self, record: &Record) -> bool {
        record.dense.len() == self.dense.len() && record.sparse.len() == self.sparse.len()
    }
}

/// What a reader does with a malformed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRows {
    /// Stop with an error naming the file, line and field.
    #[default]
    Fail,
    /// Skip the row and count it (see [`RecordStream::skipped`]).
    Skip,
}

/// A source of records, read in order.
pub trait RecordStream: Send {
    /// The features of every record this stream yields.
    fn schema(&self) -> &Schema;
    /// Next record; Ok(None) at the end. With BadRows::Skip, malformed rows are counted and skipped.
    fn next_record(&mut self) -> Result<Option<Record>>;
    /// Rows skipped so far as malformed.
    fn skipped(&self) -> u64;
    /// How many records are left, where the stream knows it without reading them.
    fn remaining(&self) -> Option<u64> {
        None
    }
    /// Passes over the next `n` records (fewer at the end) and returns how many it passed
    /// over. Streams that can jump ahead without building the records override it: a
    /// cluster rank reads its own slice of every global batch and passes over the rest.
    fn skip_records(&mut self, n: u64) -> Result<u64> {
        let mut passed = 0;
        while passed < n && self.next_record()?.is_some() {
            passed += 1;
        }
        Ok(passed)
    }
    /// The next `n` records (fewer at the end) as one batch, built without a [`Record`]
    /// each, by streams that can (the synthetic generator); `None` from those that
    /// cannot, which then read nothing: the caller reads records one by one.
    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        let _ = n;
        Ok(None)
    }
    /// Appends up to `max` records to `out` (flat, no allocation per record) and returns
    /// how many (0 at the end), by streams that can (the text readers); `None` from
    /// those that cannot, which then read nothing. Under [`BadRows::Fail`] the rows
    /// before a malformed one come first and its error on the next call.
    fn read_block(&mut self, max: usize, out: &mut RecordBlock) -> Result<Option<usize>> {
        let _ = (max, out);
        Ok(None)
    }
}

impl<S: RecordStream + ?Sized> RecordStream for Box<S> {
    fn schema(&self) -> &Schema {
        (**self).schema()
    }
    fn next_record(&mut self) -> Result<Option<Record>> {
        (**self).next_record()
    }
    fn skipped(&self) -> u64 {
        (**self).skipped()
    }
    fn remaining(&self) -> Option<u64> {
        (**self).remaining()
    }
    fn skip_records(&mut self, n: u64) -> Result<u64> {
        (**self).skip_records(n)
    }
    fn read_batch(&mut self, n: usize) -> Result<Option<Batch>> {
        (**self).read_batch(n)
    }
    fn read_block(&mut self, max: usize, out: &mut RecordBlock) -> Result<Option<usize>> {
        (**self).read_block(max, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rows_is_snake_case_and_defaults_to_fail() {
        #[derive(Deserialize)]
        struct T {
            #[serde(default)]
            b: BadRows,
        }
        let t: T = serde_json::from_str(r#"{"b":"skip"}"#).unwrap();
        assert_eq!(t.b, BadRows::Skip);
        let t: T = serde_json::from_str("{}").unwrap();
        assert_eq!(t.b, BadRows::Fail);
    }

    #[test]
    fn schema_fits_checks_counts() {
        let s = Schema {
            dense: vec!["a".into()],
            sparse: vec![SparseFeature {
                name: "c".into(),
                rows: 10,
            }],
        };
        assert_eq!(s.sparse_names(), vec!["c".to_string()]);
        assert!(s.fits(&Record {
            label: 1.0,
            dense: vec![0.5],
            sparse: vec![vec![]],
        }));
        assert!(!s.fits(&Record::default()));
    }
}
