//! Fuzzing the data readers: Criteo TSV, schema-described CSV/TSV, Parquet, the binary
//! format and the vocabulary file, each on arbitrary bytes and on valid files mutated
//! (see `towerrec-fuzz`). Whatever the input, a reader yields records that fit its
//! schema (labels 0 or 1, finite dense
//! values, ids inside their tables) or an error; it never panics, hangs or allocates
//! beyond the guard's limits. Run long with
//! `PROPTEST_CASES=1000000 cargo test --release -p towerrec-data --test fuzz`.

#[path = "../suite/common/mod.rs"]
mod common;

mod binary;
mod parquet;
mod text;
mod vocab;

use towerrec_data::{Error, Record, RecordStream, Schema};
use towerrec_fuzz::AllocGuard;

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

/// Reads `s` to its end or first error, checking every record. `max_calls` bounds the
/// calls a terminating reader can need (one per line, plus the end).
fn drain(s: &mut dyn RecordStream, max_calls: usize) -> std::result::Result<usize, Error> {
    let schema = s.schema().clone();
    for n in 0..max_calls {
        match s.next_record()? {
            Some(r) => check(&schema, &r),
            None => return Ok(n),
        }
    }
    panic!("the stream did not end after {max_calls} calls");
}

/// What every reader promises of a record.
fn check(schema: &Schema, r: &Record) {
    assert!(schema.fits(r), "{r:?} does not fit {schema:?}");
    assert!(r.label == 0.0 || r.label == 1.0, "label {}", r.label);
    assert!(r.dense.iter().all(|x| x.is_finite()), "dense {:?}", r.dense);
    for (f, ids) in r.sparse.iter().enumerate() {
        let rows = schema.sparse[f].rows;
        assert!(ids.iter().all(|&id| id < rows), "ids {ids:?} of {rows}");
    }
}
