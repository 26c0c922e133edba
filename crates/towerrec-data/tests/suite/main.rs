//! towerrec-data's integration tests, one module per file, in one test binary: each
//! integration-test binary links the whole workspace, and CI builds them in 30 minutes
//! (`.ci/run`). One file's tests: `cargo test -p towerrec-data --test suite vocab::`. The
//! fuzz tests are their own binary (`tests/fuzz/`).

mod common;

mod binary;
mod criteo;
mod csv;
mod hardening;
mod parallel;
mod parquet_reader;
mod properties;
mod shuffle;
mod source;
mod synthetic;
mod vocab;
