//! Failure injection, for testing how a cluster goes down (docs/CLUSTER.md, "Failure
//! testing"): `TOWERREC_FAIL_RANK=R` makes rank `R` return an error right after its
//! step `TOWERREC_FAIL_STEP` (default 1), as a real failure would; `TOWERREC_STALL_RANK=R`
//! makes it hang there instead (`TOWERREC_STALL_STEP`), outside any collective, so that
//! the others' next collective waits for it until the watchdog ends the run.

use crate::error::{Error, Result};
use crate::model::Model;

pub(crate) const FAIL_RANK_ENV: &str = "TOWERREC_FAIL_RANK";
const FAIL_STEP_ENV: &str = "TOWERREC_FAIL_STEP";
const STALL_RANK_ENV: &str = "TOWERREC_STALL_RANK";
const STALL_STEP_ENV: &str = "TOWERREC_STALL_STEP";

/// The rank and step a pair of knobs names (`rank_env` set; `step_env` default 1).
fn knob(rank_env: &str, step_env: &str) -> Result<Option<(usize, u64)>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let Some(rank) = var(rank_env) else {
        return Ok(None);
    };
    let bad = |name: &str, v: &str| {
        Error::Cluster(format!("{name}={v}: expected a non-negative integer"))
    };
    let rank = rank.trim().parse().map_err(|_| bad(rank_env, &rank))?;
    let step = match var(step_env) {
        Some(s) => s.trim().parse().map_err(|_| bad(step_env, &s))?,
        None => 1,
    };
    Ok(Some((rank, step)))
}

/// The rank and step `TOWERREC_FAIL_RANK` / `TOWERREC_FAIL_STEP` ask to fail, if set.
pub(crate) fn failure_at() -> Result<Option<(usize, u64)>> {
    knob(FAIL_RANK_ENV, FAIL_STEP_ENV)
}

/// The rank and step `TOWERREC_STALL_RANK` / `TOWERREC_STALL_STEP` ask to hang, if set.
pub(crate) fn stall_at() -> Result<Option<(usize, u64)>> {
    knob(STALL_RANK_ENV, STALL_STEP_ENV)
}

/// Hangs this rank if `at` names it and `step`, the step it just finished: an MPI
/// process stops itself (SIGSTOP), an in-process rank blocks its thread (see
/// `Comm::hang`); without a cluster, the process sleeps.
pub(crate) fn stall_if_asked(at: Option<(usize, u64)>, model: &Model, step: u64) {
    let Some((rank, at_step)) = at else {
        return;
    };
    if step != at_step || model.comm().map_or(0, |c| c.rank()) != rank {
        return;
    }
    eprintln!("rank {rank}: hanging after step {step} as asked ({STALL_RANK_ENV})");
    match model.comm() {
        Some(comm) => comm.hang(),
        None => std::thread::sleep(std::time::Duration::from_secs(3600)),
    }
}
