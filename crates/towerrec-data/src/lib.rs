//! towerrec-data: everything that turns data into [`towerrec_core::Batch`]es.
//!
//! - Sources, all implementing [`RecordStream`]: the Criteo TSV reader ([`criteo`]), a
//!   schema-described CSV/TSV reader ([`csv_schema`]), a Parquet reader with the same
//!   schema ([`mod@parquet`]), a memory-mapped preprocessed binary format ([`binary`])
//!   and a learnable synthetic generator ([`synthetic`]).
//! - [`next_batch`] assembles records into a batch.
//! - [`source`]: the `[data]` section of a run config; [`open`] and [`schema`] are all a
//!   trainer needs.

pub mod batcher;
pub mod binary;
pub mod block;
pub mod chunked;
mod column_split;
pub mod criteo;
pub mod csv_schema;
mod data_config;
pub mod datafile;
pub mod encode;
pub mod error;
pub mod fingerprint;
pub mod hash;
pub mod lines;
pub mod parquet;
pub mod profile;
pub mod record;
pub mod rows;
pub mod shuffle;
pub mod source;
mod stream;
pub mod synthetic;
pub mod text;
pub mod vocab;
mod zipf;

pub use crate::parquet::{ParquetReader, ParquetSchema};
pub use batcher::{next_batch, read_records};
pub use binary::{
    estimated_size, write_binary, write_binary_with, BinaryDataset, BinaryStream, BinaryWriter,
};
pub use block::RecordBlock;
pub use criteo::CriteoReader;
pub use csv_schema::{CsvReader, CsvSchema, DenseColumn, DenseTransform, LabelSpec, SparseColumn};
pub use encode::FeatureIds;
pub use error::{Error, Result};
pub use fingerprint::FileFingerprint;
pub use profile::{AccessProfile, ProfileOptions, RowCounts, TableAccess};
pub use record::{BadRows, Record, Schema, SparseFeature};
pub use rows::{Column, RowEncoder, Value};
pub use shuffle::Shuffle;
pub use source::{open, open_epoch, schema, DataConfig, Part, Split};
pub use stream::RecordStream;
pub use synthetic::{PoolingFactor, SyntheticConfig, SyntheticStream, SyntheticTable};
pub use text::{RowMask, RowSelect};
pub use vocab::{Vocab, VocabOptions};
