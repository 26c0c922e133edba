//! What a cluster run adds to its summary: bytes per step by phase, intra-host and
//! cross-host, from every rank, and every rank's time per phase (a rank that waits at a
//! collective for a slower one shows it there), and every rank's time inside the
//! collectives of each traffic phase; and the same figures over the steps between two
//! lines of the metrics log ([`gather_bytes`], [`gather_phase_ms`]), which run reports
//! plot (docs/REPORT.md).

use crate::error::{Error, Result};
use crate::model::Model;
use crate::times::PhaseTimes;
use serde::Serialize;
use towerrec_comm::{ClusterTraffic, Comm, Phase, RankTraffic};

/// Bytes one phase moved per step, summed over all ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseBytes {
    pub phase: &'static str,
    pub intra_host: f64,
    pub cross_host: f64,
}

/// What a cluster run adds to its summary.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub hosts: usize,
    pub ranks_per_host: usize,
    /// Bytes sent per training step by all ranks together, by phase (evaluations left
    /// out; checkpoints and loss reports are in `control`).
    pub bytes_per_step: Vec<PhaseBytes>,
    /// Rank 0's wall time per step in each phase of the model, in milliseconds.
    pub phase_ms_per_step: Vec<(String, f64)>,
    /// Every rank's wall time per step in each phase, in milliseconds, by rank.
    pub phase_ms_per_step_by_rank: Vec<(String, Vec<f64>)>,
    /// Every rank's wall time per step inside the collectives of each traffic phase
    /// (moving data and waiting for the other ranks), in milliseconds, by rank. What
    /// a model phase took beyond its collectives is computation and copies.
    pub collective_ms_per_step_by_rank: Vec<(&'static str, Vec<f64>)>,
}

impl ClusterReport {
    /// Gathers every rank's traffic since `start` less `excluded` (evaluations) and
    /// phase times (collective).
    pub fn gather(
        model: &Model,
        start: &RankTraffic,
        excluded: Option<&RankTraffic>,
        steps: u64,
    ) -> Result<Self> {
        let comm = model.comm().ok_or_else(|| {
            Error::Plan("a cluster report needs a model on a cluster".to_string())
        })?;
        let mut mine = comm.traffic().since(start);
        if let Some(x) = excluded {
            mine = mine.since(x);
        }
        let (traffic, bytes_per_step) = gather_bytes(comm, &mine, steps)?;
        let topology = comm.topology();
        let per = steps.max(1) as f64;
        let by_rank = gather_phase_ms(model, model.phase_times(), steps)?;
        Ok(Self {
            hosts: topology.hosts,
            ranks_per_host: topology.ranks_per_host,
            bytes_per_step,
            phase_ms_per_step: by_rank
                .iter()
                .map(|(name, ranks)| (name.clone(), ranks[0]))
                .collect(),
            phase_ms_per_step_by_rank: by_rank,
            collective_ms_per_step_by_rank: Phase::ALL
                .iter()
                .map(|&p| {
                    let ms = traffic
                        .ranks
                        .iter()
                        .map(|r| r.collective_seconds(p) * 1e3 / per);
                    (p.name(), ms.collect())
                })
                .collect(),
        })
    }
}

/// Every rank's `mine` (bytes sent over `steps` steps), gathered (a collective: every
/// rank calls it): the cluster's traffic, and its bytes per step by phase.
pub(crate) fn gather_bytes(
    comm: &Comm,
    mine: &RankTraffic,
    steps: u64,
) -> Result<(ClusterTraffic, Vec<PhaseBytes>)> {
    let (all, _) = comm.all_gather(&mine.to_flat(), Phase::Control)?;
    let traffic = ClusterTraffic::from_flat(comm.topology(), &all);
    let per = steps.max(1) as f64;
    let bytes = Phase::ALL
        .iter()
        .map(|&p| {
            let b = traffic.phase(p);
            PhaseBytes {
                phase: p.name(),
                intra_host: b.intra_host as f64 / per,
                cross_host: b.cross_host as f64 / per,
            }
        })
        .collect();
    Ok((traffic, bytes))
}

/// Each phase's wall time per step over `steps` steps of `times`, in milliseconds, by
/// rank: gathered from every rank on a cluster (a collective), one rank in one process.
pub(crate) fn gather_phase_ms(
    model: &Model,
    times: &PhaseTimes,
    steps: u64,
) -> Result<Vec<(String, Vec<f64>)>> {
    let per = steps.max(1) as f64;
    let phases = times.entries();
    // To the nanosecond: the log's lines stay short.
    let ms: Vec<f64> = phases
        .iter()
        .map(|(_, secs)| (secs * 1e9 / per).round() / 1e6)
        .collect();
    let every = match model.comm() {
        Some(comm) => comm.all_gather(&ms, Phase::Control)?.0,
        None => ms.clone(),
    };
    Ok(phases
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let ranks = every.chunks_exact(ms.len()).map(|r| r[i]).collect();
            (name.to_string(), ranks)
        })
        .collect())
}
