//! The training loop: batches in, fused forward/backward/update, periodic evaluation,
//! the metrics log, checkpoints and resume; in one process, or as one rank of a cluster
//! (each rank trains on its slice of every global batch; see `cluster.rs`).
//!
//! Outputs in the run directory (written by rank 0): `config.toml` (the resolved config), `metrics.jsonl`
//! (one JSON object per logged step and per evaluation), `checkpoint.safetensors` and,
//! at the end, `summary.json`.

mod checks;
mod drift;
mod evaluation;
mod log;
mod run;

pub use crate::read_check::check_read;
pub use drift::DriftReport;
pub use run::{finished, train_model};

use crate::config::{Config, ModelKind};
use crate::error::Result;
use crate::finite::Fault;
use crate::memory::{MemoryNeed, Placement};
use crate::model::Model;
use crate::ranks::rank_slice;
use crate::report::{ClusterReport, PhaseBytes};
use checks::non_finite_culprit;
use serde::Serialize;
use std::path::PathBuf;
use towerrec_comm::even_split;
use towerrec_core::Batch;
use towerrec_data::schema;

/// How a run is started.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Run directory: metrics, checkpoints and the summary go here.
    pub out_dir: PathBuf,
    /// Continue from the checkpoint in `out_dir`.
    pub resume: bool,
    /// Write a checkpoint and stop after this many steps of this run (counted from the
    /// checkpoint's step when resuming), to test or split a run.
    pub stop_after: Option<u64>,
    /// A new run may replace another run's files in `out_dir`.
    pub overwrite: bool,
    /// A resumed run may read data files whose content changed since the checkpoint.
    pub allow_data_change: bool,
    /// On a cluster: how long a collective may make no progress before the run fails
    /// (in-process; under MPI the session's watchdog, set at `init_mpi_with`, applies).
    pub watchdog: towerrec_comm::Watchdog,
}

/// One logged training step: what the steps since the last report did (run reports
/// plot these lines: docs/REPORT.md).
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: u64,
    /// Mean loss over the steps since the last report.
    pub loss: f64,
    pub samples_per_sec: f64,
    pub lr: f64,
    /// Each phase's wall time per step since the last report, in milliseconds, by rank
    /// (one rank in one process), evaluations left out.
    pub phase_ms_by_rank: Vec<(String, Vec<f64>)>,
    /// On a cluster: bytes sent per step since the last report by all ranks together,
    /// by phase, intra-host and cross-host (evaluations left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_step: Option<Vec<PhaseBytes>>,
}

/// One evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub step: u64,
    pub split: &'static str,
    pub auc: Option<f64>,
    pub logloss: f64,
    pub ne: f64,
    pub samples: usize,
    /// Samples scored per second (reading, the forward on every rank, gathering the
    /// scores): inference throughput.
    pub samples_per_sec: f64,
}

/// What a run ends with (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub auc: Option<f64>,
    pub logloss: f64,
    pub ne: f64,
    pub train_samples_per_sec: f64,
    /// Train samples per second over every step but the first of each pass, whose
    /// time includes the start of the data reader (its first batches), the buffers'
    /// first touch and the collectives' set-up; `None` when no other step ran. Short
    /// benchmark runs compare this one.
    pub steady_train_samples_per_sec: Option<f64>,
    pub steps: u64,
    pub model: ModelKind,
    /// Trainable parameters: `dense_params + embedding_params`.
    pub params: usize,
    /// Dense parameters (MLPs, interaction, Tower Modules).
    pub dense_params: usize,
    /// Embedding parameters (every table's rows × width).
    pub embedding_params: usize,
    /// Forward FLOPs per sample of the dense part ([`crate::Model::forward_flops_per_sample`]).
    pub flops_per_sample: u64,
    pub train_samples: u64,
    pub eval_samples: usize,
    /// The final evaluation's samples per second (inference throughput).
    pub eval_samples_per_sec: f64,
    pub skipped_train_rows: u64,
    pub skipped_eval_rows: u64,
    /// True when the run stopped early at `stop_after` (a checkpoint to resume from was written).
    pub stopped_early: bool,
    /// On a cluster: the topology, and time and bytes per step by phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
}

/// Receives progress as a run goes (the CLI draws a progress bar from it).
pub trait Observer {
    /// Called once before the first step. `total_steps` is known for synthetic data or
    /// when `max_steps` is set.
    fn on_start(&mut self, _params: usize, _total_steps: Option<u64>, _resumed_at: u64) {}
    fn on_step(&mut self, _report: &StepReport) {}
    fn on_eval(&mut self, _report: &EvalReport) {}
    /// Called after each `[cluster.drift]` check.
    fn on_drift(&mut self, _report: &DriftReport) {}
    /// Called once before anything is allocated, with what the memory check counted
    /// for `whose` ("the run", "the 4 ranks of this process", "rank 0 of 4").
    fn on_memory(&mut self, _whose: &str, _need: &MemoryNeed) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// Trains as `cfg` says in this process, writing into `opts.out_dir`.
pub fn train(cfg: &Config, opts: &TrainOptions, observer: &mut dyn Observer) -> Result<Summary> {
    cfg.refuse_int8("training")?;
    let data_schema = schema(&cfg.data, &cfg.base_dir)?;
    cfg.validate_against(&data_schema)?;
    let need = MemoryNeed::of_run(cfg, &data_schema, Placement::Single, 0);
    need.check("the run")?;
    observer.on_memory("the run", &need);
    let recorded = resumed_towers(opts)?;
    let seed = cfg.train.seed;
    let model = crate::model::Model::for_run(cfg, &data_schema, seed, recorded.as_deref())?;
    train_model(cfg, opts, model, observer)
}

/// The towers the checkpoint a run of `opts` resumes from was trained with (`None` for
/// a new run, a model without towers, or a checkpoint older than the record): a
/// resumed run builds its model on them (docs/DMT.md, "Where the towers come from").
pub fn resumed_towers(opts: &TrainOptions) -> Result<Option<Vec<Vec<String>>>> {
    if !opts.resume {
        return Ok(None);
    }
    crate::checkpoint::recorded_towers(&opts.out_dir.join(crate::checkpoint::CHECKPOINT_FILE))
}

/// One optimizer step on a global batch: this rank's share of its mean loss (the sum
/// over ranks is the global mean) after forward, backward and update. On a cluster,
/// every rank calls it with the same global batch and trains on its slice.
pub fn train_step(
    model: &mut Model,
    global: &Batch,
    lrs: (f32, f32),
    logits: &mut Vec<f32>,
    grad: &mut Vec<f32>,
) -> Result<f64> {
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    let batch = rank_slice(global, rank, world);
    train_step_on_slice(model, &batch, global.batch_size(), lrs, logits, grad)
}

/// [`train_step`] on this rank's slice `batch` of a global batch of `global_size`
/// samples (the readers of a cluster run hand each rank its slice).
pub fn train_step_on_slice(
    model: &mut Model,
    batch: &Batch,
    global_size: usize,
    (dense_lr, sparse_lr): (f32, f32),
    logits: &mut Vec<f32>,
    grad: &mut Vec<f32>,
) -> Result<f64> {
    let n = global_size.max(1);
    let loss_sum = model.forward_backward(batch, n, logits, grad)?;
    if !loss_sum.is_finite() {
        // Named before the update: the parameters are as the forward saw them.
        let rank = model.comm().map(|c| (c.rank(), c.size()));
        let (r, w) = rank.unwrap_or((0, 1));
        // The slice's first sample in the global batch (readers slice as `rank_slice`).
        let first = even_split(global_size, w)[..r].iter().sum();
        let culprit = non_finite_culprit(model, Some((batch, first)));
        match rank {
            // One process stops now.
            None => return Err(Fault::loss(loss_sum, culprit, None).into_error()),
            // A rank goes on to the step's end, where every rank learns of it in the
            // dense gradients' all-reduce and all stop together (`crate::finite`).
            rank => model.note_fault(Fault::loss(loss_sum, culprit, rank)),
        }
    }
    model.update(batch, dense_lr, sparse_lr)?;
    Ok(loss_sum / n as f64)
}
