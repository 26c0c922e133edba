//! Watching the access profile drift during a run (OPER, beyond the paper; docs/OPER.md,
//! "Drift and re-planning"). OPER places rows by a profile taken before training; when
//! the hot rows move, the plan's copies and balance go stale. Every `check_every` steps
//! each rank has counted the rows its samples read; the counts are summed over the
//! cluster into a profile of the window, the run's plan and a fresh OPER plan are rated
//! by OPER's model (§3.2 Eq. 1–3) under it, and where the run's plan costs more than
//! `1 + threshold` times the fresh one, the fresh plan is written to the run directory
//! (`replan-step-S.json`), and with `move` the rows move to it at once
//! ([`crate::model::Model::move_rows`]; the checkpoints that follow name it as the
//! run's plan). A window ends at a check or at the start of an epoch, so a resumed
//! run recounts the part of its window before the stop from the data and decides as
//! the run never stopped would. Watching alone only reads the batches.

use crate::config::{Config, DriftConfig};
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use towerrec_comm::{Comm, Phase};
use towerrec_core::Batch;
use towerrec_data::{AccessProfile, RowCounts, TableAccess};
use towerrec_plan::oper::{self, Mode, OperModel, OperParams};
use towerrec_plan::{CostModel, CostParams, Plan, TableSpec};

/// One check, as the metrics log records it.
#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub step: u64,
    /// Samples (over the cluster) the window counted.
    pub window_samples: u64,
    /// OPER's model of the run's plan under the window's profile: the slowest rank's
    /// seconds per iteration, and embedding bytes per iteration.
    pub plan_seconds: f64,
    pub plan_bytes: f64,
    /// The same of a fresh OPER plan made from the window.
    pub fresh_seconds: f64,
    pub fresh_bytes: f64,
    /// `plan_seconds / fresh_seconds`.
    pub ratio: f64,
    /// The fresh plan, written where the ratio passed `1 + threshold`.
    pub replan: Option<PathBuf>,
    /// Whether the rows moved to it.
    pub moved: bool,
}

/// The record in the metrics log.
#[derive(Serialize)]
struct DriftLine<'a> {
    step: u64,
    drift: &'a DriftReport,
}

/// Counts reads between checks and makes each check.
pub(super) struct DriftWatch {
    cfg: DriftConfig,
    tables: Vec<TableSpec>,
    /// Per table, this rank's reads of each row since the last check.
    counts: Vec<Vec<u32>>,
    /// Samples of the global batches since the last check.
    samples: u64,
    batch_size: usize,
}

impl DriftWatch {
    /// A watch for `cfg`'s run, if `[cluster.drift]` asks for one.
    pub(super) fn new(cfg: &Config) -> Result<Option<Self>> {
        let Some(d) = &cfg.cluster.drift else {
            return Ok(None);
        };
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
        let tables = crate::specs::table_specs(cfg, &schema);
        let counts = tables.iter().map(|t| vec![0u32; t.rows]).collect();
        Ok(Some(DriftWatch {
            cfg: d.clone(),
            tables,
            counts,
            samples: 0,
            batch_size: cfg.train.batch_size,
        }))
    }

    /// Batches of the current window that a run resumed at `step` (its epoch at batch
    /// `batch_in_epoch`) read before it stopped: since the last check, within the epoch.
    pub(super) fn window_before(&self, step: u64, batch_in_epoch: u64) -> u64 {
        (step % self.cfg.check_every).min(batch_in_epoch)
    }

    /// Starts a new window (at an epoch's start).
    pub(super) fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| c.fill(0));
        self.samples = 0;
    }

    /// Counts the rows `batch` (this rank's part of a global batch of `global`) reads.
    pub(super) fn count(&mut self, batch: &Batch, global: u64) {
        for (t, counts) in self.counts.iter_mut().enumerate() {
            for &id in batch.sparse.feature(t).values {
                if let Some(c) = counts.get_mut(id as usize) {
                    *c = c.saturating_add(1);
                }
            }
        }
        self.samples += global;
    }

    /// At a check's step: the window's profile summed over `comm`, both plans rated,
    /// the fresh plan written under `dir` by rank 0 where it is due. Collective.
    pub(super) fn check(
        &mut self,
        comm: &Comm,
        plan: &Plan,
        step: u64,
        dir: &Path,
    ) -> Result<Option<(DriftReport, Option<Plan>)>> {
        if !step.is_multiple_of(self.cfg.check_every) || self.samples == 0 {
            return Ok(None);
        }
        let profile = self.window_profile(comm)?;
        let params = OperParams {
            cost: CostParams {
                batch_size: self.batch_size,
                ..CostParams::default()
            },
            extra_memory: self.cfg.extra_memory,
            mode: Mode::Training,
            ..OperParams::default()
        };
        let fresh = oper::plan(&self.tables, &profile, plan.topology, &params)?.plan;
        let model = OperModel {
            profile: &profile,
            cost: params.cost,
        };
        let now = model.price(plan, &self.tables)?;
        let new = model.price(&fresh, &self.tables)?;
        let ratio = now.max_seconds() / new.max_seconds().max(f64::MIN_POSITIVE);
        let replan = (ratio > 1.0 + self.cfg.threshold)
            .then(|| dir.join(format!("replan-step-{step}.json")));
        if let Some(path) = &replan {
            // Every rank made the same plan from the same counts; rank 0 writes it.
            if comm.rank() == 0 {
                fresh
                    .save(path)
                    .map_err(|e| Error::Plan(format!("{}: {e}", path.display())))?;
            }
        }
        let report = DriftReport {
            step,
            window_samples: profile.samples,
            plan_seconds: now.max_seconds(),
            plan_bytes: now.total_bytes(),
            fresh_seconds: new.max_seconds(),
            fresh_bytes: new.total_bytes(),
            ratio,
            moved: replan.is_some() && self.cfg.move_rows,
            replan,
        };
        self.reset();
        let fresh = report.replan.is_some().then_some(fresh);
        Ok(Some((report, fresh)))
    }

    /// The window's reads summed over the ranks, as a profile.
    fn window_profile(&self, comm: &Comm) -> Result<AccessProfile> {
        let mut tables = Vec::with_capacity(self.tables.len());
        for (spec, mine) in self.tables.iter().zip(&self.counts) {
            let mut all = mine.clone();
            comm.all_reduce(&mut all, Phase::Control)?;
            tables.push(TableAccess {
                name: spec.name.clone(),
                rows: spec.rows as u64,
                reads: all.iter().map(|&n| u64::from(n)).sum(),
                counts: RowCounts::Exact(all),
            });
        }
        Ok(AccessProfile {
            samples: self.samples,
            source: "the run's last drift window".into(),
            tables,
        })
    }
}

/// Writes `report` to the metrics log as `{"step": S, "drift": {...}}`.
pub(super) fn log_line(report: &DriftReport) -> impl Serialize + '_ {
    DriftLine {
        step: report.step,
        drift: report,
    }
}
