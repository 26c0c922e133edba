//! Stall injection, for testing how a cluster goes down when a rank hangs
//! (docs/CLUSTER.md, "Failure testing"): `TOWERREC_STALL_RANK=R` makes rank `R` hang
//! right after its step `TOWERREC_STALL_STEP` (default 1), outside any collective, so
//! that the others' next collective waits for it until the watchdog ends the run.

use crate::error::{Error, Result};
use crate::model::Model;

const STALL_RANK_ENV: &str = "TOWERREC_STALL_RANK";
const STALL_STEP_ENV: &str = "TOWERREC_STALL_STEP";

/// The rank and step `TOWERREC_STALL_RANK` / `TOWERREC_STALL_STEP` ask to hang, if set.
pub(crate) fn stall_at() -> Result<Option<(usize, u64)>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let Some(rank) = var(STALL_RANK_ENV) else {
        return Ok(None);
    };
    let bad = |name: &str, v: &str| {
        Error::Cluster(format!("{name}={v}: expected a non-negative integer"))
    };
    let rank = rank
        .trim()
        .parse()
        .map_err(|_| bad(STALL_RANK_ENV, &rank))?;
    let step = match var(STALL_STEP_ENV) {
        Some(s) => s.trim().parse().map_err(|_| bad(STALL_STEP_ENV, &s))?,
        None => 1,
    };
    Ok(Some((rank, step)))
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
