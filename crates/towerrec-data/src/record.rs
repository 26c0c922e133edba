//! One sample ([`Record`]) and the description of a data set's features ([`Schema`]);
//! the sources that yield them implement [`crate::stream::RecordStream`].

use serde::{Deserialize, Serialize};

/// One sample, already transformed into model inputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// 0.0 or 1.0.
    pub label: f32,
    /// One value per dense feature of the schema, after the reader's transform.
    pub dense: Vec<f32>,
    /// `sparse[f]`: the ids of sparse feature `f`, each already reduced below that
    /// feature's `rows`. Zero, one or many ids (multi-hot).
    pub sparse: Vec<Vec<u64>>,
}

/// One sparse (categorical) feature: a name and the number of embedding rows its ids
/// are hashed into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparseFeature {
    pub name: String,
    pub rows: u64,
}

/// The features of a data set, in the order [`Record`]s store them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// Dense feature names.
    pub dense: Vec<String>,
    /// Sparse features.
    pub sparse: Vec<SparseFeature>,
}

impl Schema {
    /// Number of dense features.
    pub fn num_dense(&self) -> usize {
        self.dense.len()
    }

    /// Number of sparse features.
    pub fn num_sparse(&self) -> usize {
        self.sparse.len()
    }

    /// Sparse feature names, the keys of a batch's `KeyedJagged`.
    pub fn sparse_names(&self) -> Vec<String> {
        self.sparse.iter().map(|f| f.name.clone()).collect()
    }

    /// Whether `record` has the number of dense and sparse features this schema says.
    pub fn fits(&self, record: &Record) -> bool {
        record.dense.len() == self.dense.len() && record.sparse.len() == self.sparse.len()
    }
}

/// What a reader does with a malformed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRows {
    /// Stop with an error naming the file, line and field.
    #[default]
    Fail,
    /// Skip the row and count it (see [`crate::stream::RecordStream::skipped`]).
    Skip,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rows_is_snake_case_and_defaults_to_fail() {
        #[derive(Deserialize)]
        struct T {
            #[serde(default)]
            b: BadRows,
        }
        let t: T = serde_json::from_str(r#"{"b":"skip"}"#).unwrap();
        assert_eq!(t.b, BadRows::Skip);
        let t: T = serde_json::from_str("{}").unwrap();
        assert_eq!(t.b, BadRows::Fail);
    }

    #[test]
    fn schema_fits_checks_counts() {
        let s = Schema {
            dense: vec!["a".into()],
            sparse: vec![SparseFeature {
                name: "c".into(),
                rows: 10,
            }],
        };
        assert_eq!(s.sparse_names(), vec!["c".to_string()]);
        assert!(s.fits(&Record {
            label: 1.0,
            dense: vec![0.5],
            sparse: vec![vec![]],
        }));
        assert!(!s.fits(&Record::default()));
    }
}
