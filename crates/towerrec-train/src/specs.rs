//! The embedding tables a config asks for: as the model builds them ([`table_descs`])
//! and as the planner and the memory check see them ([`table_specs`]).

use crate::config::{Config, ModelConfig};
use crate::sharded::TableDesc;
use towerrec_core::embedding::SparseOptimizer;
use towerrec_data::Schema;
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
        })
        .collect()
}

/// What the planner and the plan validator need to know about a model's tables.
pub fn table_specs(cfg: &Config, schema: &Schema) -> Vec<TableSpec> {
    table_specs_of(&cfg.model, cfg.optimizer.sparse, schema)
}

/// [`table_specs`] from the model's parts.
pub(crate) fn table_specs_of(
    model: &crate::config::ModelConfig,
    sparse: SparseOptimizer,
    schema: &Schema,
) -> Vec<TableSpec> {
    let dim = model.embedding_dim;
    let state_per_row = match sparse {
        SparseOptimizer::Sgd => 0,
        SparseOptimizer::RowWiseAdagrad { .. } => 4,
        SparseOptimizer::Adam { .. } => 8 * dim,
    };
    table_descs(model, schema)
        .into_iter()
        .map(|d| TableSpec {
            name: d.name,
            rows: d.rows,
            dim,
            bytes_per_row: 4 * dim + state_per_row,
            pooling_factor: 1.0,
        })
        .collect()
}
