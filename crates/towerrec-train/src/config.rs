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
fn is_single(c: &ClusterConfig) -> bool {
    *c == ClusterConfig::default()
}
fn default_log_every() -> u64 {
    50
}

/// Where the model trains (`[cluster]`; omitted: one process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Hosts of the cluster.
    #[serde(default = "one")]
    pub hosts: usize,
    /// Ranks (workers) on each host.
    #[serde(default = "one")]
    pub ranks_per_host: usize,
    /// Sharding plan (JSON, from `towerrec plan`), relative to the config file;
    /// default: the greedy planner's plan for this model and cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            hosts: 1,
            ranks_per_host: 1,
            plan: None,
        }
    }
}

impl ClusterConfig {
    /// Ranks in all.
    pub fn world_size(&self) -> usize {
        self.hosts * self.ranks_per_host
    }
}

/// The whole run configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    pub train: TrainSettings,
    pub data: DataConfig,
    #[serde(default, skip_serializing_if = "is_single")]
    pub cluster: ClusterConfig,
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

    /// Loads a config file, then applies `KEY=VALUE` overrides (see [`with_overrides`]).
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let parent = path.parent().unwrap_or(Path::new("."));
        // Absolute, so that a checkpoint's copy of the config resolves paths from anywhere.
        let base = std::path::absolute(parent).map_err(|e| Error::io(path, e))?;
        let origin = path.display().to_string();
        Self::from_toml(&with_overrides(&text, &origin, overrides)?, &origin, &base)
    }

    /// The embedded quickstart, with `KEY=VALUE` overrides.
    pub fn quickstart(overrides: &[String]) -> Result<Self> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let origin = "examples/quickstart.toml (embedded)";
        Self::from_toml(
            &with_overrides(QUICKSTART_TOML, origin, overrides)?,
            origin,
            &cwd,
        )
    }

    /// The config as TOML, for writing beside a run.
    pub fn to_toml(&self) -> String {
        // Serializing our own plain structs cannot fail; fall back to a comment if it ever does.
        toml::to_string(self).unwrap_or_else(|e| format!("# could not serialize config: {e}\n"))
    }

    /// The plan file named by `[cluster] plan`, resolved against the config's directory.
    pub fn plan_path(&self) -> Option<PathBuf> {
        self.cluster.plan.as_ref().map(|p| self.base_dir.join(p))
    }

    /// Checks that need no data: widths, sizes, learning rates.
    fn validate_static(&self) -> std::result::Result<(), String> {
        let c = &self.cluster;
        if c.hosts == 0 || c.ranks_per_host == 0 {
            return Err(format!(
                "cluster: hosts ({}) and ranks_per_host ({}) must be at least 1",
                c.hosts, c.ranks_per_host
            ));
        }
        if c.hosts
            .checked_mul(c.ranks_per_host)
            .is_none_or(|w| w > 4096)
        {
            return Err("cluster: hosts × ranks_per_host must be at most 4096".into());
        }
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
        o.schedule
            .validate()
            .map_err(|e| format!("optimizer.schedule: {e}"))?;
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
        // A table must fit in this process's address space (and in one Vec).
        let dim = self.model.embedding_dim as u64;
        if let Some(f) = schema.sparse.iter().find(|f| {
            f.rows
                .checked_mul(dim)
                .and_then(|n| n.checked_mul(4))
                .is_none_or(|bytes| bytes > isize::MAX as u64)
        }) {
            return Err(fail(format!(
                "data: feature '{}' has {} rows: {} × embedding_dim {} floats do not fit in memory",
                f.name, f.rows, f.rows, dim
            )));
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

/// Applies `KEY=VALUE` overrides to TOML text: `KEY` is a dotted path
/// (`train.batch_size`, `data.split`), `VALUE` any TOML value (`512`, `"skip"`,
/// `{ kind = "tail", eval_rows = 2000 }`); a value that is not valid TOML is taken as a
/// string. The result is TOML text again, so that errors still point at the key.
pub fn with_overrides(text: &str, origin: &str, overrides: &[String]) -> Result<String> {
    if overrides.is_empty() {
        return Ok(text.to_string());
    }
    let fail = |message: String| Error::Config {
        file: origin.to_string(),
        message,
    };
    let mut root: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| fail(e.to_string()))?;
    for item in overrides {
        let (key, raw) = item
            .split_once('=')
            .ok_or_else(|| fail(format!("override '{item}': expected KEY=VALUE")))?;
        let (key, raw) = (key.trim(), raw.trim());
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        let parts: Vec<&str> = key.split('.').collect();
        let (last, path) = parts
            .split_last()
            .filter(|(last, _)| !last.is_empty())
            .ok_or_else(|| fail(format!("override '{item}': empty key")))?;
        let mut table = &mut root;
        for part in path {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry
                .as_table_mut()
                .ok_or_else(|| fail(format!("override '{item}': '{part}' is not a table")))?;
        }
        table.insert(last.to_string(), value);
    }
    toml::to_string(&root).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_set_nested_keys_and_keep_errors_pointing_at_keys() {
        let sets = vec![
            "train.batch_size=512".to_string(),
            "optimizer.sparse={ kind = \"sgd\" }".to_string(),
            "train.bad_rows=skip".to_string(),
        ];
        let cfg = Config::quickstart(&sets).unwrap();
        assert_eq!(cfg.train.batch_size, 512);
        assert_eq!(cfg.train.bad_rows, BadRows::Skip);
        assert_eq!(cfg.optimizer.sparse, SparseOptimizer::Sgd);
        let err = Config::quickstart(&["model.embedding_dim=\"x\"".to_string()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("embedding_dim"), "{err}");
        assert!(Config::quickstart(&["novalue".to_string()]).is_err());
        assert!(Config::quickstart(&["model.kind.x=1".to_string()]).is_err());
    }
}
