//! What a run will hold in memory, counted from its config before anything is
//! allocated, so that a request too large for the machine is an error naming what and
//! how much instead of an abort (or the kernel's OOM killer) halfway through.
//!
//! The count is an estimate from above of the large buffers: embedding tables and their
//! optimizer state, dense parameters with their gradients, optimizer state and
//! all-reduce buffer, the activations of a training or scoring batch, and the batches
//! read ahead. Sizes are in bytes, in `u128` so that no config can overflow them.

use crate::config::{Config, ModelConfig, ModelKind, OptimizerConfig};
use crate::error::{Error, Result};
use towerrec_core::optim::DenseOptimizerKind;
use towerrec_data::{DataConfig, PoolingFactor, Schema};

const F32: u128 = 4;
/// Batches each rank's reader keeps ready (the trainer's prefetch depth, and the one
/// being trained on).
const BATCHES_IN_FLIGHT: u128 = 5;

/// Dense parameters of a model: (weights, widths of every layer output per sample).
fn dense_shape(cfg: &ModelConfig, schema: &Schema) -> (u128, u128) {
    let dim = cfg.embedding_dim as u128;
    let num_dense = schema.dense.len() as u128;
    let tables = schema.sparse.len() as u128;
    let mlp = |input: u128, widths: &[usize]| -> (u128, u128) {
        let mut fan_in = input;
        let (mut params, mut outputs) = (0u128, 0u128);
        for &w in widths {
            let w = w as u128;
            params = params.saturating_add(fan_in.saturating_mul(w).saturating_add(w));
            outputs = outputs.saturating_add(w);
            fan_in = w;
        }
        (params, outputs)
    };
    let (front_params, front_outputs, top_in) = match cfg.kind {
        ModelKind::Dlrm => {
            let (p, o) = mlp(num_dense, &cfg.bottom_mlp);
            // The dot interaction's output: the bottom MLP's plus one per pair.
            let n = tables + 1;
            let pairs = if cfg.self_interaction {
                n * (n + 1) / 2
            } else {
                n * (n - 1) / 2
            };
            let out = dim.saturating_add(pairs);
            (p, o.saturating_add(out), out)
        }
        ModelKind::Dcn => {
            let width = num_dense.saturating_add(tables.saturating_mul(dim));
            let per_layer = match cfg.cross_rank {
                None => width.saturating_mul(width),
                Some(r) => width.saturating_mul(2 * r as u128),
            }
            .saturating_add(width);
            let layers = cfg.cross_layers as u128;
            (
                per_layer.saturating_mul(layers),
                width.saturating_mul(layers),
                width,
            )
        }
    };
    let (top_params, top_outputs) = mlp(top_in, &cfg.top_mlp);
    let features = tables.saturating_add(1).saturating_mul(dim);
    (
        front_params.saturating_add(top_params),
        front_outputs
            .saturating_add(top_outputs)
            .saturating_add(features)
            .saturating_add(top_in),
    )
}

/// Bytes of the dense layers: weights, gradients, the optimizer's state and the
/// all-reduce buffer.
pub(crate) fn dense_bytes(cfg: &ModelConfig, opt: &OptimizerConfig, schema: &Schema) -> u128 {
    let states = match opt.dense {
        DenseOptimizerKind::Sgd => 0,
        DenseOptimizerKind::Adagrad { .. } => 1,
        DenseOptimizerKind::Adam { .. } => 2,
    };
    dense_shape(cfg, schema)
        .0
        .saturating_mul(F32 * (3 + states))
}

/// Mean ids per sample of each sparse feature, where the config says (else 1).
fn ids_per_sample(data: &DataConfig, schema: &Schema) -> f64 {
    match data {
        DataConfig::Synthetic(s) => s
            .tables
            .iter()
            .map(|t| {
                let mean = match t.pooling {
                    PoolingFactor::Fixed(n) => f64::from(n),
                    PoolingFactor::Mean { mean } => mean,
                };
                mean * t.count as f64
            })
            .sum(),
        _ => schema.sparse.len() as f64,
    }
}

/// What one process of a run needs, by kind, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryNeed {
    /// Embedding tables and their optimizer state (this process's share).
    pub tables: u128,
    /// Dense layers of every rank in the process.
    pub dense: u128,
    /// Activations and their gradients, every rank in the process.
    pub activations: u128,
    /// Batches read ahead, every rank in the process.
    pub data: u128,
}

impl MemoryNeed {
    /// The whole.
    pub fn total(&self) -> u128 {
        self.tables
            .saturating_add(self.dense)
            .saturating_add(self.activations)
            .saturating_add(self.data)
    }

    /// The need of a run of `cfg` on `world` ranks of which this process runs
    /// `ranks_here`, holding `table_bytes` of tables; its scorer runs groups of
    /// `score_group` samples, two at a time.
    pub fn of_run(
        cfg: &Config,
        schema: &Schema,
        (world, ranks_here): (usize, usize),
        table_bytes: u64,
        score_group: usize,
    ) -> Self {
        let here = ranks_here.max(1) as u128;
        let world = world.max(1) as u128;
        let (_, widths) = dense_shape(&cfg.model, schema);
        let train = (cfg.train.batch_size as u128).div_ceil(world);
        // Scoring runs two groups of batches at a time (see `forward`).
        let eval_batch = cfg.eval_batch_size().max(score_group) as u128;
        let score = (2 * eval_batch).div_ceil(world);
        // Values, gradients and the pre-activation copy of every layer output.
        let activations = widths
            .saturating_mul(train.max(score))
            .saturating_mul(3 * F32);
        let sample_bytes = (1 + schema.dense.len() as u128) * F32
            + schema.sparse.len() as u128 * 8
            + (ids_per_sample(&cfg.data, schema).ceil() as u128) * 8;
        // Every rank reads the whole global batch and takes its slice.
        let batch = (cfg.train.batch_size as u128).max(cfg.eval_batch_size() as u128);
        let data = sample_bytes
            .saturating_mul(batch)
            .saturating_mul(BATCHES_IN_FLIGHT);
        Self {
            tables: table_bytes as u128,
            dense: dense_bytes(&cfg.model, &cfg.optimizer, schema).saturating_mul(here),
            activations: activations.saturating_mul(here),
            data: data.saturating_mul(here),
        }
    }

    /// Refuses the run where it needs more than the machine has available now. Passes
    /// where the available memory is unknown.
    pub fn check(&self, whose: &str) -> Result<()> {
        check_fits(self.total(), || {
            let g = |b: u128| format!("{:.2}", b as f64 / GIB);
            format!(
                "{whose} (embedding tables {} GiB, dense layers {} GiB, activations {} GiB, \
                 data buffers {} GiB)",
                g(self.tables),
                g(self.dense),
                g(self.activations),
                g(self.data)
            )
        })
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Refuses `need` bytes (`what()` names them) where they exceed the memory the machine
/// has available now. Passes where the available memory is unknown.
pub(crate) fn check_fits(need: u128, what: impl FnOnce() -> String) -> Result<()> {
    match towerrec_core::probe::available_memory_bytes() {
        Some(available) if need > available as u128 => Err(Error::Memory {
            what: what(),
            need,
            available,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quickstart(sets: &[&str]) -> (Config, Schema) {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::quickstart(&sets).unwrap();
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
        (cfg, schema)
    }

    #[test]
    fn dense_count_matches_the_built_model() {
        for sets in [
            &[][..],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=2",
                "model.bottom_mlp=[]",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=3",
                "model.cross_rank=4",
                "model.bottom_mlp=[]",
            ],
        ] {
            let (cfg, schema) = quickstart(sets);
            let mut model = crate::Model::build(&cfg.model, &cfg.optimizer, &schema, 0).unwrap();
            let dense: usize = model.dense_params().iter().map(|p| p.value.len()).sum();
            assert_eq!(
                dense_shape(&cfg.model, &schema).0,
                dense as u128,
                "{sets:?}"
            );
        }
    }

    #[test]
    fn huge_layers_count_without_overflow() {
        let (cfg, schema) = quickstart(&["model.bottom_mlp=[2147483648, 16]"]);
        let need = MemoryNeed::of_run(&cfg, &schema, (4, 4), 0, 8192);
        // 13 × 2^31 weights of the first layer alone, with Adam's two moments.
        assert!(need.dense >= 13 * (1u128 << 31) * 4 * 5, "{need:?}");
        let (cfg, schema) = quickstart(&["model.top_mlp=[9223372036854775807, 1]"]);
        assert!(MemoryNeed::of_run(&cfg, &schema, (1, 1), 0, 8192).total() > i64::MAX as u128);
    }
}
