//! The run configuration: one TOML file with `[model]`, `[optimizer]`, `[train]` and
//! `[data]` sections, validated on load with errors that name the key.

mod overrides;
mod resume;
mod towers;
mod validate;

pub use overrides::with_overrides;
pub use resume::SAFE_ON_RESUME;
pub use towers::{towers_by_name, BiasInit, TowerModuleName, TowersConfig};
pub(crate) use validate::{feature_mix, nothing_to_shard};
pub use validate::{MAX_BATCH_SIZE, MAX_EVAL_BATCH_SIZE, MAX_WORLD_SIZE};

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use towerrec_comm::WirePrecision;
use towerrec_core::embedding::{Pooling, SparseOptimizer, TablePrecision};
use towerrec_core::matmul::DensePrecision;
use towerrec_core::optim::{DenseOptimizerKind, LrSchedule};
use towerrec_data::{BadRows, DataConfig};

/// The embedded default run (`towerrec train` with no `--config`): a synthetic
/// Criteo-like data set generated on the fly.
pub const QUICKSTART_TOML: &str = include_str!("../../../../examples/quickstart.toml");

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
    /// DLRM: bottom MLP layer widths after the dense input; the last must equal
    /// `embedding_dim` (or the towers' D). `[]` for data without dense features: the
    /// interaction then takes the embeddings alone.
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
    /// DMT: towers of tables, each with a Tower Module (docs/DMT.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub towers: Option<TowersConfig>,
    /// How every table stores its rows: `fp32` (default), `fp16` or `bf16` (updates in
    /// f32, rounded stochastically), or `int8` (row-wise quantized, inference in one
    /// process only; docs/CONFIG.md).
    #[serde(default, skip_serializing_if = "is_fp32")]
    pub table_precision: TablePrecision,
    /// Per-table exceptions to `table_precision`, by table (feature) name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub table_precisions: BTreeMap<String, TablePrecision>,
    /// How the dense layers' matrix products take their operands: `fp32` (default),
    /// `bf16` (rounded operands, f32 sums and master weights), or `auto` (bf16 where
    /// this build and CPU run it on bf16 instructions, else fp32), which reading the
    /// config resolves, so that a checkpoint's config records the choice (docs/CONFIG.md).
    #[serde(default, skip_serializing_if = "is_dense_fp32")]
    pub dense_precision: DensePrecision,
    /// Whether `dense_precision` was `auto` in the text read (for the run's note).
    #[serde(skip)]
    pub dense_precision_auto: bool,
}

fn is_dense_fp32(p: &DensePrecision) -> bool {
    *p == DensePrecision::Fp32
}

fn is_fp32(p: &TablePrecision) -> bool {
    *p == TablePrecision::Fp32
}

impl ModelConfig {
    /// How table `name` stores its rows.
    pub fn precision_of(&self, name: &str) -> TablePrecision {
        self.table_precisions
            .get(name)
            .copied()
            .unwrap_or(self.table_precision)
    }

    /// The first table (a name from `table_precisions`, or `None` for
    /// `table_precision` itself) stored as int8, if any.
    fn first_int8(&self) -> Option<Option<&str>> {
        if self.table_precision == TablePrecision::Int8 {
            return Some(None);
        }
        (self.table_precisions.iter())
            .find(|(_, p)| !p.trainable())
            .map(|(n, _)| Some(n.as_str()))
    }
}

impl Config {
    /// Refuses int8 tables for `what` ("training", "a cluster"): they are read-only
    /// and kept in one process (docs/CONFIG.md, `model.table_precision`).
    pub fn refuse_int8(&self, what: &str) -> crate::error::Result<()> {
        let Some(table) = self.model.first_int8() else {
            return Ok(());
        };
        let which = match table {
            Some(name) => format!("model.table_precisions: table '{name}' is int8"),
            None => "model.table_precision is int8".to_string(),
        };
        Err(crate::error::Error::Config {
            file: self.origin.clone(),
            message: format!(
                "{which}, but {what} needs fp32, fp16 or bf16 tables: int8 tables are made \
                 by `towerrec quantize` from a trained checkpoint and are for inference in \
                 one process (`towerrec eval`, `towerrec bench model --mode infer`)"
            ),
        })
    }
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
    /// With `bad_rows = "skip"`: the largest share of a pass's rows that may be
    /// malformed before the run fails.
    #[serde(default = "default_max_bad_fraction")]
    pub max_bad_fraction: f64,
    /// Data files up to this many MiB are hashed whole for the fingerprint a resume
    /// checks; larger ones by 64 sampled blocks of 64 KiB (docs/RELIABILITY.md).
    #[serde(default = "default_fingerprint_whole_mib")]
    pub fingerprint_whole_mib: u64,
    /// Read the training rows in a new random order every epoch (default false: file
    /// order). Keyed by `seed` and the epoch (docs/DATA.md, "Shuffling").
    #[serde(default, skip_serializing_if = "is_false")]
    pub shuffle: bool,
    /// With `shuffle`: records held by the shuffle buffer of a streamed source (text,
    /// Parquet); a binary file is permuted whole and needs none. Default 65536.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_buffer: Option<usize>,
}

impl TrainSettings {
    /// The order of epoch `epoch`'s training rows: `None` for file order.
    pub fn shuffle_of(&self, epoch: u64) -> Option<towerrec_data::Shuffle> {
        self.shuffle.then(|| towerrec_data::Shuffle {
            seed: self.seed,
            epoch,
            buffer: self
                .shuffle_buffer
                .unwrap_or(towerrec_data::shuffle::DEFAULT_BUFFER),
        })
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Default of `train.fingerprint_whole_mib`: 1 GiB.
pub const DEFAULT_FINGERPRINT_WHOLE_MIB: u64 = 1024;

fn default_fingerprint_whole_mib() -> u64 {
    DEFAULT_FINGERPRINT_WHOLE_MIB
}

/// Default of `train.max_bad_fraction`.
pub const DEFAULT_MAX_BAD_FRACTION: f64 = 0.01;

fn default_max_bad_fraction() -> f64 {
    DEFAULT_MAX_BAD_FRACTION
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// How dense gradients are summed over the ranks: `hierarchical` (default; the
    /// cross-host bytes fall by the ranks per host) or `flat`.
    #[serde(default)]
    pub dense_sync: DenseSync,
    /// How rows copied on several ranks (OPER plans) sum their gradients: `sparse`
    /// (default; OPER's local-aggregated sparse AllReduce), `dense` or `all_gather`.
    #[serde(default)]
    pub replica_sync: ReplicaSync,
    /// Watch the access profile drift (`[cluster.drift]`; docs/OPER.md): absent, off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftConfig>,
    /// DMT with per-feature Tower Modules: SPTT exchanges a step's samples in this many
    /// chunks, each chunk's cross-host step under the next chunk's work (docs/DMT.md,
    /// "Chunks and steps in halves"); 1: the whole step at once.
    #[serde(default = "default_tower_chunks")]
    pub tower_chunks: usize,
    /// Run each training step's embedding exchanges in two halves of every rank's
    /// samples, the dense layers of one half during the other half's exchange
    /// (docs/OPER.md, "A step in halves"). Flat plans split, and so do DMT towers whose
    /// per-feature maps run before SPTT's step d (SPTT's chunks cut from the two halves;
    /// docs/DMT.md, "Chunks and steps in halves"); plans with table-row-wise tables
    /// across hosts, and towers whose modules run after step e, run whole steps.
    /// Default on.
    #[serde(default = "default_overlap_halves")]
    pub overlap_halves: bool,
    /// Quantized communication (`[cluster.qcomms]`; docs/DISTRIBUTED.md, "Quantized
    /// communication"): the wire precision of the pooled embeddings and of their
    /// gradients. Absent: fp32 both ways.
    #[serde(default, skip_serializing_if = "QComms::is_fp32")]
    pub qcomms: QComms,
}

/// `[cluster.qcomms]`: how the pooled embeddings travel in the output distribution and
/// SPTT's steps (forward), and their gradients (backward), as TorchRec's quantized
/// communication chooses them; `fp32`, `fp16` or `bf16` each. The DMT paper's strong
/// baseline sends fp16 forward and bf16 backward (DMT §5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QComms {
    /// Pooled embeddings (and, in a DMT model, the Tower Modules' outputs).
    #[serde(default)]
    pub forward: WirePrecision,
    /// Their gradients.
    #[serde(default)]
    pub backward: WirePrecision,
    /// The dense layers' gradients in their all-reduce (and a DMT model's Tower
    /// Modules'): each rank's contribution and each summed chunk rounded once.
    #[serde(default)]
    pub dense: WirePrecision,
}

impl QComms {
    /// fp32 both ways: nothing quantized.
    pub fn is_fp32(&self) -> bool {
        *self == QComms::default()
    }
}

/// The default of `cluster.tower_chunks`, chosen from runs of 1 to 16 chunks on the
/// emulated cluster (docs/DMT.md, "Chunks and steps in halves").
pub const DEFAULT_TOWER_CHUNKS: usize = 4;

fn default_overlap_halves() -> bool {
    true
}

fn default_tower_chunks() -> usize {
    DEFAULT_TOWER_CHUNKS
}

/// `[cluster.drift]`: every `check_every` steps, the rows read since the last check (or
/// the epoch's start) are counted over the cluster, the run's plan and a fresh OPER plan
/// are rated by OPER's model under them, and a fresh plan whose modelled cost is
/// `threshold` below is written to the run directory; with `move`, the rows move to it
/// at once (docs/OPER.md, "Drift"). Watching alone changes nothing in training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftConfig {
    /// Steps between checks (each check's window).
    pub check_every: u64,
    /// How much costlier than a fresh plan the run's may get before a re-plan is
    /// written: 0.10 is 10%.
    #[serde(default = "default_drift_threshold")]
    pub threshold: f64,
    /// The fresh plan's extra memory for copies of hot rows (training copies), as a
    /// share of all tables' bytes (`towerrec plan --extra-memory`).
    #[serde(default = "default_drift_extra_memory")]
    pub extra_memory: f64,
    /// Also move the rows to the fresh plan at once, inside the run (`move = true`).
    #[serde(default, rename = "move")]
    pub move_rows: bool,
}

fn default_drift_threshold() -> f64 {
    0.10
}

fn default_drift_extra_memory() -> f64 {
    0.05
}

/// How the gradients of rows held by several ranks are summed (`[cluster]
/// replica_sync`; docs/OPER.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaSync {
    /// OPER §5.3: each rank sums its reads' gradients per row; the ranks gather which
    /// rows were touched, then all-reduce the sums of those rows only.
    #[default]
    Sparse,
    /// An all-reduce of the gradient of every shared row, touched or not (rows whose
    /// sum is zero are not updated).
    Dense,
    /// Every rank gathers every rank's touched rows and sums (no all-reduce).
    AllGather,
}

/// How the dense gradients are summed over the world (`[cluster] dense_sync`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseSync {
    /// Intra-host reduce-scatter, peer all-reduce, intra-host all-gather: the
    /// cross-host bytes fall by the ranks per host (summed host by host, then over the
    /// hosts in host order: deterministic, and the same bits on both backends).
    #[default]
    Hierarchical,
    /// One reduce-scatter and all-gather over the whole world (summed in rank order).
    Flat,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            hosts: 1,
            ranks_per_host: 1,
            plan: None,
            dense_sync: DenseSync::default(),
            replica_sync: ReplicaSync::default(),
            drift: None,
            tower_chunks: default_tower_chunks(),
            overlap_halves: default_overlap_halves(),
            qcomms: QComms::default(),
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
    /// Where the config came from (a file, the embedded quickstart, a checkpoint), to
    /// name it in errors.
    #[serde(skip)]
    pub origin: String,
}

/// `e` as the TOML parser says it, and where it blames a whole table for an unknown
/// key (a section read through an enum, such as `[data]`, is parsed whole), also the
/// line inside it that holds the key.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    let said = e.to_string();
    let key = e
        .message()
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    let (Some(key), Some(span)) = (key, e.span()) else {
        return said;
    };
    let first = text[..span.start.min(text.len())].matches('\n').count() + 1;
    let holds_key = |line: &str| {
        line.match_indices(key).any(|(i, _)| {
            let before = line[..i].trim_end();
            let after = line[i + key.len()..].trim_start();
            (before.is_empty() || before.ends_with(['{', ','])) && after.starts_with('=')
        })
    };
    // The table's own lines: from its header to the next header.
    let lines = text.lines().enumerate().skip(first.saturating_sub(1));
    let mut section = lines.take_while({
        let mut header = true;
        move |(_, l)| std::mem::take(&mut header) || !l.trim_start().starts_with('[')
    });
    match section.find(|(_, l)| holds_key(l)) {
        Some((n, line)) if n + 1 != first => {
            format!(
                "{said}(the key `{key}` is on line {}: {})",
                n + 1,
                line.trim()
            )
        }
        _ => said,
    }
}

impl Config {
    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, base_dir: &Path) -> Result<Self> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| Error::Config {
            file: origin.to_string(),
            message: parse_error(text, &e),
        })?;
        cfg.base_dir = base_dir.to_path_buf();
        cfg.origin = origin.to_string();
        if let Some(towers) = &mut cfg.model.towers {
            towers
                .convert_listed(base_dir)
                .map_err(|message| Error::Config {
                    file: origin.to_string(),
                    message,
                })?;
        }
        cfg.validate_static().map_err(|message| Error::Config {
            file: origin.to_string(),
            message,
        })?;
        if cfg.model.dense_precision == DensePrecision::Auto {
            cfg.model.dense_precision = DensePrecision::Auto.resolve();
            cfg.model.dense_precision_auto = true;
        }
        Ok(cfg)
    }

    /// Loads a config file, then applies `KEY=VALUE` overrides (see [`with_overrides`]).
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        // Absolute, so that a checkpoint's copy of the config resolves paths from anywhere;
        // made absolute before taking the parent, which is empty for a bare file name.
        let absolute = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
        let base = absolute.parent().unwrap_or(Path::new("/")).to_path_buf();
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

#[cfg(test)]
mod parse_error_tests {
    use super::*;

    /// An unknown key in an entry of `[data] tables` is named with its own line, not
    /// only the `[data]` header the parser blames; an inline table the parser places
    /// itself is left as it says.
    #[test]
    fn an_unknown_key_in_an_inline_entry_names_its_line() {
        let text = QUICKSTART_TOML.replace(
            "tables = [{ rows = 20_000, zipf_exponent = 1.05, pooling = 1, count = 26 }]",
            "tables = [\n  { rows = 200, count = 4 },\n  { rows = 100, cnt = 4 },\n]",
        );
        let line = text.lines().position(|l| l.contains("cnt = 4")).unwrap() + 1;
        let e = Config::from_toml(&text, "t.toml", Path::new("."))
            .unwrap_err()
            .to_string();
        let want = format!("(the key `cnt` is on line {line}: {{ rows = 100, cnt = 4 }},)");
        assert!(e.contains("[data]") && e.contains(&want), "{e}");

        let text = QUICKSTART_TOML.replace("{ kind = \"adam\" }", "{ kind = \"adam\", lrr = 3 }");
        let e = Config::from_toml(&text, "t.toml", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field `lrr`") && !e.contains("the key"),
            "{e}"
        );
    }
}
