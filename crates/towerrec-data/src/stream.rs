//! The [`RecordStream`] trait every source (text readers, binary files, Parquet, the
//! synthetic generator) implements: records one by one, or, where a source can, a
//! whole batch or a flat block of records.

use crate::block::RecordBlock;
use crate::error::Result;
use crate::record::{Record, Schema};
use towerrec_core::Batch;

/// A source of records, read in order.
pub trait RecordStream: Send {
    /// The features of every record this stream yields.
    fn schema(&self) -> &Schema;
    /// Next record; Ok(None) at the end. With `BadRows::Skip`, malformed rows are counted and skipped.
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
    /// those that cannot, which then read nothing. Under [`crate::BadRows::Fail`] the rows
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
