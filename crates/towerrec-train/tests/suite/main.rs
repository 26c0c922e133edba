//! towerrec-train's integration tests, one module per file, in one test binary: each
//! integration-test binary links the whole workspace, and CI builds them in 30 minutes
//! (`.ci/run`). One file's tests: `cargo test -p towerrec-train --test suite sptt::`. The
//! fuzz tests are their own binary (`tests/fuzz.rs`).

mod common;

mod dense_precision;
mod distributed;
mod dmt;
mod feature_mix;
mod int8_tables;
mod nonfinite;
mod pipelined;
mod qcomms;
mod shuffle;
mod sptt;
mod table_precision;
mod traffic;
mod train;
