//! The embedding tables a config asks for: as the model builds them ([`table_descs`])
//! and as the planner, the plan validator and the memory check see them
//! ([`table_specs`]). `train`'s default planner and `towerrec plan` both take their
//! specs from here, so the two plan the same config the same way.

use crate::config::{Config, ModelConfig};
use crate::sharded::TableDesc;
use towerrec_core::embedding::{SparseOptimizer, TablePrecision};
use towerrec_data::{DataConfig, PoolingFactor, Schema};
use towerrec_plan::TableSpec;

/// The tables a model of `cfg` needs for data of `schema`.
pub fn table_descs(cfg: &ModelConfig, schema: &Schema) -> Vec<TableDesc> {
    schema
        .sparse
        .iter()
        .map(|f| TableDesc {
            name: f.name.clone(),
            rows: f.rows as usize,
            dim: cfg.embedding_dim,
            precision: cfg.precision_of(&f.name),
        })
        .collect()
}

/// What the planner and the plan validator need to know about a model's tables: rows
/// from the data, dim from the model, bytes per row from the sparse optimizer's state,
/// mean ids per sample from a synthetic config (other data count 1).
pub fn table_specs(cfg: &Config, schema: &Schema) -> Vec<TableSpec> {
    let pooling = pooling_factors(&cfg.data, schema.sparse.len());
    specs_with(&cfg.model, cfg.optimizer.sparse, schema, &pooling)
}

/// [`table_specs`] from the model's parts, for what depends only on them (bytes): every
/// pooling factor is 1.
pub(crate) fn table_specs_of(
    model: &ModelConfig,
    sparse: SparseOptimizer,
    schema: &Schema,
) -> Vec<TableSpec> {
    specs_with(model, sparse, schema, &[])
}

/// Bytes of weights (in `precision`) and optimizer state (f32) per row of a
/// `dim`-wide table; an int8 table (read-only) keeps no state.
pub fn bytes_per_row(dim: usize, sparse: SparseOptimizer, precision: TablePrecision) -> usize {
    let state = match sparse {
        _ if !precision.trainable() => 0,
        SparseOptimizer::Sgd => 0,
        SparseOptimizer::RowWiseAdagrad { .. } => 4,
        SparseOptimizer::Adam { .. } => dim.saturating_mul(8),
    };
    precision.row_bytes(dim).saturating_add(state)
}

/// The specs, with `pooling[t]` ids per sample for table `t` (1 where missing).
fn specs_with(
    model: &ModelConfig,
    sparse: SparseOptimizer,
    schema: &Schema,
    pooling: &[f64],
) -> Vec<TableSpec> {
    let dim = model.embedding_dim;
    table_descs(model, schema)
        .into_iter()
        .enumerate()
        .map(|(t, d)| TableSpec {
            name: d.name,
            rows: d.rows,
            dim,
            bytes_per_row: bytes_per_row(dim, sparse, d.precision),
            pooling_factor: pooling.get(t).copied().unwrap_or(1.0),
        })
        .collect()
}

/// Mean ids per sample of each of `n` tables: a synthetic config says; other data
/// (and a synthetic config whose table count differs from `n`) count 1.
fn pooling_factors(data: &DataConfig, n: usize) -> Vec<f64> {
    if let DataConfig::Synthetic(s) = data {
        let means: Vec<f64> = s
            .tables
            .iter()
            .flat_map(|t| {
                let mean = match t.pooling {
                    PoolingFactor::Fixed(k) => f64::from(k),
                    PoolingFactor::Mean { mean } => mean,
                };
                std::iter::repeat_n(mean, t.count)
            })
            .collect();
        if means.len() == n {
            return means;
        }
    }
    vec![1.0; n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_pooling_reaches_the_specs_train_plans_with() {
        let tables = "data.tables=[{ count = 4, rows = 100, pooling = 3 }]";
        let cfg = Config::quickstart(&[tables.into()]).expect("quickstart config");
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).expect("schema");
        let specs = table_specs(&cfg, &schema);
        let expected = pooling_factors(&cfg.data, schema.sparse.len());
        assert_eq!(specs.len(), schema.sparse.len());
        for (s, p) in specs.iter().zip(&expected) {
            assert_eq!(s.pooling_factor, *p);
        }
        assert_eq!(expected, vec![3.0; 4]);
    }
}
