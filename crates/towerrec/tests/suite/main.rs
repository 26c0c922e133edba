//! The `towerrec` binary's end-to-end tests, one module per file, in one test binary: each
//! integration-test binary links the whole workspace, and CI builds them in 30 minutes
//! (`.ci/run`). One file's tests: `cargo test -p towerrec --test suite serve::`. The
//! MPI tests are their own binary (`tests/mpi_train.rs`, feature `mpi`).

mod common;
mod diverging;

mod calibrate;
mod cli;
mod outputs_sweep;
mod partition_cli;
mod plan_cli;
mod profile_cli;
mod reliability_inputs;
mod reliability_memory;
mod reliability_nonfinite;
mod reliability_outputs;
mod reliability_resume;
mod reliability_rundir;
mod reliability_settings;
mod report;
mod serve;
mod simulate_cli;
mod towers_source;
mod vocab;
mod watchdog;
