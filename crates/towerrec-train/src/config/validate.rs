//! Validation of a run config: every number a run depends on is checked on load, with
//! an error that names the key, so that a typo fails before anything is allocated
//! instead of producing NaN or a silent wrap-around later.

use super::{Config, ModelConfig, ModelKind};
use crate::error::{Error, Result};
use towerrec_core::embedding::SparseOptimizer;
use towerrec_core::optim::DenseOptimizerKind;
use towerrec_data::Schema;

/// Largest training batch: far past any real one, and small enough that the evaluation
/// batch (4 × by default) and per-batch buffers cannot overflow.
pub const MAX_BATCH_SIZE: usize = 1 << 24;
/// Largest evaluation batch.
pub const MAX_EVAL_BATCH_SIZE: usize = 1 << 26;
/// Most chunks SPTT's exchange may be cut into (`cluster.tower_chunks`).
const MAX_TOWER_CHUNKS: usize = 64;

/// Most ranks a config may describe (hosts × ranks_per_host).
pub const MAX_WORLD_SIZE: usize = 4096;

type Check = std::result::Result<(), String>;

/// `key` must be a finite number > 0.
fn positive(key: &str, x: f64) -> Check {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(format!("{key}: must be a finite number > 0, got {x}"))
    }
}

/// `key` must be a finite number ≥ 0.
fn non_negative(key: &str, x: f64) -> Check {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(format!("{key}: must be a finite number ≥ 0, got {x}"))
    }
}

/// `key` must be a moment decay rate: 0 ≤ beta < 1.
fn beta(key: &str, x: f64) -> Check {
    if (0.0..1.0).contains(&x) {
        Ok(())
    } else {
        Err(format!(
            "{key}: must be at least 0 and less than 1, got {x}"
        ))
    }
}

/// `key` must be a count in `1..=max`.
fn count(key: &str, n: usize, max: usize) -> Check {
    if (1..=max).contains(&n) {
        Ok(())
    } else {
        Err(format!("{key}: must be between 1 and {max}, got {n}"))
    }
}

/// The dense optimizer's hyper-parameters (`optimizer.dense`).
fn check_dense_optimizer(kind: &DenseOptimizerKind) -> Check {
    match *kind {
        DenseOptimizerKind::Sgd => Ok(()),
        DenseOptimizerKind::Adagrad {
            eps,
            initial_accumulator,
        } => {
            positive("optimizer.dense.eps", eps.into())?;
            non_negative(
                "optimizer.dense.initial_accumulator",
                initial_accumulator.into(),
            )
        }
        DenseOptimizerKind::Adam {
            beta1,
            beta2,
            eps,
            weight_decay,
        } => {
            beta("optimizer.dense.beta1", beta1.into())?;
            beta("optimizer.dense.beta2", beta2.into())?;
            positive("optimizer.dense.eps", eps.into())?;
            non_negative("optimizer.dense.weight_decay", weight_decay.into())
        }
    }
}

/// The embedding tables' optimizer's hyper-parameters (`optimizer.sparse`).
fn check_sparse_optimizer(kind: &SparseOptimizer) -> Check {
    match *kind {
        SparseOptimizer::Sgd => Ok(()),
        SparseOptimizer::RowWiseAdagrad {
            eps,
            initial_accumulator,
        } => {
            positive("optimizer.sparse.eps", eps.into())?;
            non_negative(
                "optimizer.sparse.initial_accumulator",
                initial_accumulator.into(),
            )
        }
        SparseOptimizer::Adam { beta1, beta2, eps } => {
            beta("optimizer.sparse.beta1", beta1.into())?;
            beta("optimizer.sparse.beta2", beta2.into())?;
            positive("optimizer.sparse.eps", eps.into())
        }
    }
}

impl Config {
    /// Checks that need no data: widths, sizes, learning rates, optimizer settings.
    pub(super) fn validate_static(&self) -> Check {
        self.check_cluster()?;
        self.check_model()?;
        self.check_optimizer()?;
        self.check_train()
    }

    fn check_cluster(&self) -> Check {
        let c = &self.cluster;
        if !(1..=MAX_TOWER_CHUNKS).contains(&c.tower_chunks) {
            return Err(format!(
                "cluster.tower_chunks: must be from 1 to {MAX_TOWER_CHUNKS}, got {}",
                c.tower_chunks
            ));
        }
        if c.hosts == 0 || c.ranks_per_host == 0 {
            return Err(format!(
                "cluster: hosts ({}) and ranks_per_host ({}) must be at least 1",
                c.hosts, c.ranks_per_host
            ));
        }
        if c.hosts
            .checked_mul(c.ranks_per_host)
            .is_none_or(|w| w > MAX_WORLD_SIZE)
        {
            return Err(format!(
                "cluster: hosts × ranks_per_host must be at most {MAX_WORLD_SIZE}"
            ));
        }
        if let Some(d) = &c.drift {
            if d.check_every == 0 {
                return Err("cluster.drift.check_every: must be at least 1 step".into());
            }
            non_negative("cluster.drift.threshold", d.threshold)?;
            if d.move_rows && self.model.towers.is_some() {
                // Tower plans do take row-partitioned (OPER) tables; what the watch
                // cannot do is re-plan with towers.
                return Err(
                    "cluster.drift.move: a DMT model ([model.towers]) cannot move its rows: \
                     the drift watch re-plans as a flat OPER plan, without the model's towers \
                     (and a run on a plan with towers refuses [cluster.drift] altogether); drop \
                     cluster.drift or [model.towers]"
                        .into(),
                );
            }
            if !(0.0..=1.0).contains(&d.extra_memory) {
                return Err(format!(
                    "cluster.drift.extra_memory: must be a share between 0 and 1, got {}",
                    d.extra_memory
                ));
            }
        }
        Ok(())
    }

    fn check_model(&self) -> Check {
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
        if let Some(t) = &m.towers {
            t.check()?;
        }
        match m.kind {
            ModelKind::Dlrm => {
                let width = dlrm_vector_width(m);
                // `[]` is DLRM without dense features, checked against the data
                // (`feature_mix`).
                if !m.bottom_mlp.is_empty() && m.bottom_mlp.last() != Some(&width) {
                    let what = if width == m.embedding_dim {
                        "model.embedding_dim"
                    } else {
                        "model.towers.d"
                    };
                    return Err(format!(
                        "model.bottom_mlp: DLRM needs its last width to equal {what} ({width}), got {:?}",
                        m.bottom_mlp
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
        Ok(())
    }

    fn check_optimizer(&self) -> Check {
        let o = &self.optimizer;
        positive("optimizer.dense_lr", o.dense_lr)?;
        positive("optimizer.sparse_lr", o.sparse_lr)?;
        check_dense_optimizer(&o.dense)?;
        check_sparse_optimizer(&o.sparse)?;
        o.schedule
            .validate()
            .map_err(|e| format!("optimizer.schedule: {e}"))
    }

    fn check_train(&self) -> Check {
        let t = &self.train;
        count("train.batch_size", t.batch_size, MAX_BATCH_SIZE)?;
        if let Some(n) = t.eval_batch_size {
            count("train.eval_batch_size", n, MAX_EVAL_BATCH_SIZE)?;
        }
        if t.epochs == 0 {
            return Err("train.epochs: must be at least 1".into());
        }
        if t.max_steps == Some(0) {
            return Err("train.max_steps: must be at least 1 (or left out)".into());
        }
        if t.log_every == 0 {
            return Err("train.log_every: must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&t.max_bad_fraction) {
            return Err(format!(
                "train.max_bad_fraction: must be between 0 and 1, got {}",
                t.max_bad_fraction
            ));
        }
        match (t.shuffle, t.shuffle_buffer) {
            (_, Some(0)) => {
                return Err(
                    "train.shuffle_buffer: must be at least 1 (1 keeps the file order)".into(),
                )
            }
            (false, Some(_)) => {
                return Err(
                    "train.shuffle_buffer: only means something with train.shuffle = true".into(),
                )
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks that need the data's schema.
    pub fn validate_against(&self, schema: &Schema) -> Result<()> {
        let fail = |message: String| Error::Config {
            file: self.origin.clone(),
            message,
        };
        feature_mix(&self.model, schema).map_err(fail)?;
        if let Some(t) = &self.model.towers {
            let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
            t.assignment(&names).map_err(fail)?;
        }
        if let Some(name) = (self.model.table_precisions.keys())
            .find(|n| !schema.sparse.iter().any(|f| &f.name == *n))
        {
            return Err(fail(format!(
                "model.table_precisions names '{name}', which is not a table of the data"
            )));
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
}

/// The width of DLRM's vectors: the embedding width, or the towers' D.
fn dlrm_vector_width(m: &ModelConfig) -> usize {
    m.towers
        .as_ref()
        .map_or(m.embedding_dim, |t| t.vector_width(m.embedding_dim))
}

/// Whether the model fits the data's mix of dense and sparse features
/// (docs/CONFIG.md, "Any feature mix"):
///
/// - DLRM has a bottom MLP exactly when the data has dense features: without them
///   (`bottom_mlp = []`) its interaction takes the embeddings' vectors alone;
/// - without sparse features there are no tables, so no towers: DLRM is then the bottom
///   MLP and the top MLP, DCN a CrossNet over the dense features (one process only:
///   a cluster has nothing to shard, `nothing_to_shard`);
/// - some feature there must be.
pub(crate) fn feature_mix(m: &ModelConfig, schema: &Schema) -> Check {
    let (dense, sparse) = (schema.dense.len(), schema.sparse.len());
    if dense == 0 && sparse == 0 {
        return Err(
            "data: the data has neither dense nor sparse features: describe at least one column \
             (data.schema.dense or data.schema.sparse; synthetic data: num_dense or tables)"
                .into(),
        );
    }
    if sparse == 0 && m.towers.is_some() {
        return Err(format!(
            "model.towers: the data has no sparse features ({dense} dense ones), so there are \
             no tables to group into towers; drop [model.towers]"
        ));
    }
    if m.kind != ModelKind::Dlrm {
        return Ok(());
    }
    let width = dlrm_vector_width(m);
    match (dense, m.bottom_mlp.is_empty()) {
        (0, false) => Err(format!(
            "model.bottom_mlp: the data has no dense features, so DLRM has nothing for a bottom \
             MLP to read: write bottom_mlp = [] (the interaction then takes the {sparse} \
             embedding vectors alone), got {:?}",
            m.bottom_mlp
        )),
        (n, true) if n > 0 => Err(format!(
            "model.bottom_mlp: the data has {n} dense feature{}, which DLRM's bottom MLP maps to \
             the interaction's first vector: give its layer widths, the last equal to {} \
             ({width}), for example bottom_mlp = [{}, {width}]; bottom_mlp = [] is for data \
             without dense features",
            if n == 1 { "" } else { "s" },
            if m.towers.is_some() && width != m.embedding_dim {
                "model.towers.d"
            } else {
                "model.embedding_dim"
            },
            (4 * width).max(16),
        )),
        // One table and no dense vector: no pair to interact. (With towers, their
        // output vectors are counted when the model is built.)
        (0, true) if sparse == 1 && m.towers.is_none() && !m.self_interaction => Err(
            "model.self_interaction: DLRM without dense features interacts its embedding \
             vectors in pairs, and the data has one table: set model.self_interaction = true (each vector's dot with \
             itself), or use model.kind = \"dcn\""
                .into(),
        ),
        _ => Ok(()),
    }
}

/// The error of a cluster run on data without sparse features: no tables to shard.
pub(crate) fn nothing_to_shard() -> String {
    "the data has no sparse (categorical) features, so there are no embedding tables and \
     nothing to shard over the cluster's ranks: train in one process (cluster.hosts = 1, \
     cluster.ranks_per_host = 1, no --plan)"
        .into()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// The quickstart with `sets` applied: the error message, or "" when it loads.
    fn error_of(sets: &[&str]) -> String {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Config::quickstart(&sets)
            .err()
            .map_or_else(String::new, |e| e.to_string())
    }

    #[test]
    fn out_of_range_numbers_are_refused_naming_the_key() {
        for (sets, key) in [
            (&["optimizer.dense_lr=0"][..], "optimizer.dense_lr"),
            (&["optimizer.sparse_lr=nan"], "optimizer.sparse_lr"),
            (&["optimizer.dense_lr=inf"], "optimizer.dense_lr"),
            (
                &["optimizer.dense={ kind = \"adagrad\", eps = 0 }"],
                "optimizer.dense.eps",
            ),
            (
                &["optimizer.dense={ kind = \"adam\", weight_decay = nan }"],
                "optimizer.dense.weight_decay",
            ),
            (
                &["optimizer.dense={ kind = \"adam\", weight_decay = -1 }"],
                "optimizer.dense.weight_decay",
            ),
            (
                &["optimizer.dense={ kind = \"adam\", beta1 = 1.0 }"],
                "optimizer.dense.beta1",
            ),
            (
                &["optimizer.dense={ kind = \"adam\", beta2 = -0.1 }"],
                "optimizer.dense.beta2",
            ),
            (
                &["optimizer.sparse={ kind = \"row_wise_adagrad\", eps = -1e-8 }"],
                "optimizer.sparse.eps",
            ),
            (
                &["optimizer.sparse={ kind = \"adam\", beta2 = 1.5 }"],
                "optimizer.sparse.beta2",
            ),
            (
                &["optimizer.sparse={ kind = \"row_wise_adagrad\", initial_accumulator = nan }"],
                "optimizer.sparse.initial_accumulator",
            ),
            (&["train.batch_size=0"], "train.batch_size"),
            (
                &["train.batch_size=4611686018427387904"],
                "train.batch_size",
            ),
            (&["train.eval_batch_size=0"], "train.eval_batch_size"),
            (&["train.max_steps=0"], "train.max_steps"),
            (&["train.max_bad_fraction=1.5"], "train.max_bad_fraction"),
            (&["train.max_bad_fraction=nan"], "train.max_bad_fraction"),
            (
                &["train.shuffle=true", "train.shuffle_buffer=0"],
                "train.shuffle_buffer",
            ),
            (&["train.shuffle_buffer=10"], "train.shuffle_buffer"),
            (
                &["cluster.hosts=64", "cluster.ranks_per_host=65"],
                "cluster",
            ),
            (
                &["cluster.drift={ check_every = 0 }"],
                "cluster.drift.check_every",
            ),
            (
                &["cluster.drift={ check_every = 5, threshold = -0.1 }"],
                "cluster.drift.threshold",
            ),
            (
                &["cluster.drift={ check_every = 5, extra_memory = 1.5 }"],
                "cluster.drift.extra_memory",
            ),
            (
                &[
                    "model.towers={ module = \"dlrm\", count = 2, d = 8, c = 1 }",
                    "cluster.drift={ check_every = 5, move = true }",
                ],
                "cluster.drift.move",
            ),
        ] {
            let e = error_of(sets);
            assert!(e.contains(key), "{sets:?}: {e:?}");
        }
    }

    /// The refusal of `cluster.drift.move` for a DMT model says what the watch cannot
    /// do (re-plan with towers), not that tower plans refuse row-partitioned tables:
    /// OPER plans inside towers train.
    #[test]
    fn drift_move_with_towers_is_refused_for_the_right_reason() {
        let e = error_of(&[
            "model.towers={ module = \"dlrm\", count = 2, d = 8, c = 1 }",
            "cluster.drift={ check_every = 5, move = true }",
        ]);
        assert!(
            e.contains("cluster.drift.move") && e.contains("re-plans as a flat OPER plan"),
            "{e}"
        );
        assert!(!e.contains("do not take row-partitioned"), "{e}");
    }

    #[test]
    fn in_range_numbers_load() {
        for sets in [
            &["optimizer.dense={ kind = \"adam\", beta1 = 0.0, weight_decay = 0.01 }"][..],
            &["optimizer.sparse={ kind = \"adam\", beta1 = 0.5, beta2 = 0.99 }"],
            &["train.batch_size=16777216", "train.eval_batch_size=1"],
        ] {
            assert_eq!(error_of(sets), "", "{sets:?}");
        }
    }
}
