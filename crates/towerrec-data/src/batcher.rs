//! Assembles records from a stream into [`Batch`]es.

use crate::error::Result;
use crate::record::Record;
use crate::stream::RecordStream;
use towerrec_core::{Batch, KeyedJagged};

/// Reads up to `batch_size` records from `stream` and assembles a batch (sparse keys are
/// the schema's feature names). The last batch may be short; `None` when nothing is left.
/// A record that does not match the stream's schema is an error, not a panic, since
/// streams may be implemented outside this crate.
pub fn next_batch(stream: &mut dyn RecordStream, batch_size: usize) -> Result<Option<Batch>> {
    if let Some(batch) = stream.read_batch(batch_size)? {
        return Ok((batch.batch_size() > 0).then_some(batch));
    }
    let mut records = Vec::with_capacity(batch_size.min(1 << 16));
    while records.len() < batch_size {
        match stream.next_record()? {
            Some(r) => records.push(r),
            None => break,
        }
    }
    if records.is_empty() {
        return Ok(None);
    }
    assemble(stream, &records).map(Some)
}

/// The next `n` records (fewer at the end of the stream) as one batch, empty when the
/// stream has none left or `n` is 0: a cluster rank's slice of a global batch.
pub fn read_records(stream: &mut dyn RecordStream, n: usize) -> Result<Batch> {
    if let Some(batch) = stream.read_batch(n)? {
        return Ok(batch);
    }
    let mut records = Vec::with_capacity(n.min(1 << 16));
    while records.len() < n {
        match stream.next_record()? {
            Some(r) => records.push(r),
            None => break,
        }
    }
    assemble(stream, &records)
}

fn assemble(stream: &dyn RecordStream, records: &[Record]) -> Result<Batch> {
    let schema = stream.schema();
    let (b, d, f) = (records.len(), schema.num_dense(), schema.num_sparse());
    let mut dense = Vec::with_capacity(b * d);
    let mut labels = Vec::with_capacity(b);
    for r in records {
        if !schema.fits(r) {
            return Err(towerrec_core::Error::shape(
                "record (dense, sparse) features",
                format!("({d}, {f})"),
                format!("({}, {})", r.dense.len(), r.sparse.len()),
            )
            .into());
        }
        dense.extend_from_slice(&r.dense);
        labels.push(r.label);
    }
    // Feature-major: all samples of feature 0, then feature 1, ...
    let mut offsets = Vec::with_capacity(f * b + 1);
    offsets.push(0usize);
    let mut values = Vec::new();
    for k in 0..f {
        for r in records {
            values.extend_from_slice(&r.sparse[k]);
            offsets.push(values.len());
        }
    }
    let sparse = KeyedJagged::from_offsets(schema.sparse_names(), b, offsets, values)?;
    Ok(Batch::new(dense, d, sparse, labels)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Schema, SparseFeature};

    struct Vec2 {
        schema: Schema,
        records: std::vec::IntoIter<Record>,
    }

    impl RecordStream for Vec2 {
        fn schema(&self) -> &Schema {
            &self.schema
        }
        fn next_record(&mut self) -> Result<Option<Record>> {
            Ok(self.records.next())
        }
        fn skipped(&self) -> u64 {
            0
        }
    }

    fn stream(records: Vec<Record>) -> Vec2 {
        Vec2 {
            schema: Schema {
                dense: vec!["d".into()],
                sparse: vec![
                    SparseFeature {
                        name: "a".into(),
                        rows: 10,
                    },
                    SparseFeature {
                        name: "b".into(),
                        rows: 10,
                    },
                ],
            },
            records: records.into_iter(),
        }
    }

    fn rec(label: f32, d: f32, a: Vec<u64>, b: Vec<u64>) -> Record {
        Record {
            label,
            dense: vec![d],
            sparse: vec![a, b],
        }
    }

    #[test]
    fn batches_are_feature_major_and_the_last_is_short() {
        let mut s = stream(vec![
            rec(1.0, 0.1, vec![1], vec![]),
            rec(0.0, 0.2, vec![2, 3], vec![4]),
            rec(1.0, 0.3, vec![5], vec![6, 7]),
        ]);
        let b = next_batch(&mut s, 2).unwrap().unwrap();
        assert_eq!(b.labels, vec![1.0, 0.0]);
        assert_eq!(b.dense, vec![0.1, 0.2]);
        assert_eq!(b.sparse.keys(), &["a".to_string(), "b".to_string()]);
        assert_eq!(b.sparse.values(), &[1, 2, 3, 4]);
        assert_eq!(b.sparse.feature(0).ids(1), &[2, 3]);
        assert_eq!(b.sparse.feature(1).ids(0), &[] as &[u64]);
        let last = next_batch(&mut s, 2).unwrap().unwrap();
        assert_eq!(last.batch_size(), 1);
        assert_eq!(last.sparse.feature(1).ids(0), &[6, 7]);
        assert!(next_batch(&mut s, 2).unwrap().is_none());
    }

    #[test]
    fn mismatched_records_are_errors() {
        let mut s = stream(vec![Record {
            label: 1.0,
            dense: vec![],
            sparse: vec![],
        }]);
        assert!(next_batch(&mut s, 4).is_err());
    }
}
