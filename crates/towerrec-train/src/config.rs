//! The run configuration: one TOML file with `[model]`, `[optimizer]`, `[train]` and
//! `[data]` sections, validated on load with errors that name the key.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use towerrec_core::embedding::{Pooling, SparseOptimizer};
use towerrec_core::optim::{DenseOptimizerKind, LrSchedule};
use towerrec_data::{BadRows, DataConfig, Schema};

/// The embedded default run (`towerrec train` with no `--config`): a synthetic
/// Criteo-like data set generated on the fly.
pub const QUICKSTART_TOML: &str = include_str!("../../../examples/quickstart.toml");

/// Which model to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Bottom MLP → dot interaction → top MLP (Naumov et al. 2019).
    Dlrm,
    /// Dense features and embeddings → CrossNet → MLP (DCN-v2, Wang et al. 2021).
    Dcn,
}

/// `[model]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub kind: ModelKind,
    /// Width of every embedding table.
    pub embedding_dim: usize,
    #[serde(default = "default_pooling")]
    pub pooling: Pooling,
    /// DLRM: bottom MLP layer widths after the dense input; the last must equal `embedding_dim`.
    #[serde(default)]
    pub bottom_mlp: Vec<usize>,
    /// Top MLP (DLRM) or deep network after the CrossNet (DCN) widths; the last must be 1.
    pub top_mlp: Vec<usize>,
    /// DLRM: include each vector's dot with itself in the interaction.
    #[serde(default)]
    pub self_interaction: bool,
    /// DCN: number of cross layers.
    #[serde(default)]
    pub cross_layers: usize,
    /// DCN: rank of the low-rank cross weights; absent means full rank.
    #[serde(default)]
    pub cross_rank: Option<usize>,
}

fn default_pooling() -> Pooling {
    Pooling::Sum
}

/// `[optimizer]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Optimizer of the dense layers.
    pub dense: DenseOptimizerKind,
    pub dense_lr: f64,
    /// Optimizer of the embedding tables, fused into their backward.
    pub sparse: SparseOptimizer,
    pub sparse_lr: f64,
    /// Warm-up and decay, applied to both learning rates.
    #[serde(default)]
    pub schedule: LrSchedule,
}

/// `[train]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSettings {
    pub batch_size: usize,
    #[serde(default = "one")]
    pub epochs: usize,
    /// Stop after this many steps even if epochs remain.
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Seed of the parameter initialization.
    #[serde(default)]
    pub seed: u64,
    /// Log a metrics line every this many steps.
    #[serde(default = "default_log_every")]
    pub log_every: u64,
    /// Evaluate every this many steps (0: only at the end).
    #[serde(default)]
    pub eval_every: u64,
    /// Write a checkpoint every this many steps (0: only at the end).
    #[serde(default)]
    pub checkpoint_every: u64,
    /// Evaluation batch size (default: 4 × batch_size).
    #[serde(default)]
    pub eval_batch_size: Option<usize>,
    /// Whether a malformed data row stops the run or is skipped and counted.
    #[serde(default)]
    pub bad_rows: BadRows,
    /// Worker threads (0: one per core).
    #[serde(default)]
    pub threads: usize,
}

fn one() -> usize {
    1
}
fn default_log_every() -> u64 {
    50
}

/// The whole run configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    pub train: TrainSettings,
    pub data: DataConfig,
    /// Directory that relative data paths are resolved against (the config file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Config {
    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, base_dir: &Path) -> Result<Self> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| Error::Config {
            file: origin.to_string(),
            message: e.to_string(),
        })?;
        cfg.base_dir = base_dir.to_path_buf();
        cfg.validate_static().map_err(|message| Error::Config {
            file: origin.to_string(),
            message,
        })?;
        Ok(cfg)
    }

    /// Loads a config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let parent = path.parent().unwrap_or(Path::new("."));
        // Absolute, so that a checkpoint's copy of the config resolves paths from anywhere.
        let base = std::path::absolute(parent).map_err(|e| Error::io(path, e))?;
        Self::from_toml(&text, &path.display().to_string(), &base)
    }

    /// The embedded quickstart.
    pub fn quickstart() -> Result<Self> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Self::from_toml(QUICKSTART_TOML, "examples/quickstart.toml (embedded)", &cwd)
    }

    /// The config as TOML, for writing beside a run.
    pub fn to_toml(&self) -> String {
        // Serializing our own plain structs cannot fail; fall back to a comment if it ever does.
        toml::to_string(self).unwrap_or_else(|e| format!("# could not serialize config: {e}\n"))
    }

    /// Checks that need no data: widths, sizes, learning rates.
    fn validate_static(&self) -> std::result::Result<(), String> {
        let m = &self.model;
        if m.embedding_dim == 0 {
            return Err("model.embedding_dim: must be at least 1".into());
        }
        if m.top_mlp.last() != Some(&1) {
            return Err(format!(
                "model.top_mlp: must end in 1 (one logit per sample), got {:?}",
                m.top_mlp
            ));
        }
        if m.top_mlp.contains(&0) || m.bottom_mlp.contains(&0) {
            return Err("model.top_mlp / model.bottom_mlp: layer widths must be at least 1".into());
        }
        match m.kind {
            ModelKind::Dlrm => {
                if m.bottom_mlp.last() != Some(&m.embedding_dim) {
                    return Err(format!(
                        "model.bottom_mlp: DLRM needs its last width to equal model.embedding_dim ({}), got {:?}",
                        m.embedding_dim, m.bottom_mlp
                    ));
                }
            }
            ModelKind::Dcn => {
                if m.cross_layers == 0 {
                    return Err("model.cross_layers: DCN needs at least one cross layer".into());
                }
                if m.cross_rank == Some(0) {
                    return Err("model.cross_rank: must be at least 1".into());
                }
            }
        }
        let o = &self.optimizer;
        for (key, lr) in [
            ("optimizer.dense_lr", o.dense_lr),
            ("optimizer.sparse_lr", o.sparse_lr),
        ] {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(format!("{key}: must be a positive number, got {lr}"));
            }
        }
        let t = &self.train;
        if t.batch_size == 0 {
            return Err("train.batch_size: must be at least 1".into());
        }
        if t.epochs == 0 {
            return Err("train.epochs: must be at least 1".into());
        }
        if t.log_every == 0 {
            return Err("train.log_every: must be at least 1".into());
        }
        Ok(())
    }

    /// Checks that need the data's schema.
    pub fn validate_against(&self, schema: &Schema) -> Result<()> {
        let fail = |message: String| Error::Config {
            file: "config".into(),
            message,
        };
        if self.model.kind == ModelKind::Dlrm
            && schema.dense.is_empty()
            && !self.model.bottom_mlp.is_empty()
        {
            return Err(fail(
                "model.bottom_mlp: the data has no dense features; DLRM needs at least one".into(),
            ));
        }
        if schema.sparse.is_empty() {
            return Err(fail(
                "data: the data has no sparse (categorical) features".into(),
            ));
        }
        if let Some(f) = schema.sparse.iter().find(|f| f.rows == 0) {
            return Err(fail(format!("data: feature '{}' has 0 rows", f.name)));
        }
        Ok(())
    }

    /// Applies the CLI's `--data` / `--eval-data` overrides.
    pub fn override_data(&mut self, data: Option<PathBuf>, eval_data: Option<PathBuf>) {
        if data.is_none() && eval_data.is_none() {
            return;
        }
        self.data = self.data.clone().with_paths(data, eval_data);
    }

    /// Evaluation batch size.
    pub fn eval_batch_size(&self) -> usize {
        self.train
            .eval_batch_size
            .unwrap_or(self.train.batch_size * 4)
    }
}
