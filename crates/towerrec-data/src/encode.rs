//! Categorical values → embedding rows, in two steps every reader shares:
//!
//! 1. the reader turns a raw value into a 64-bit **key**: a Criteo field's hex id as a
//!    number, a CSV (or Parquet) value's trimmed bytes through FNV-1a ([`key_of`]);
//! 2. the feature's [`FeatureIds`] maps the key to a row below the table's size:
//!    hashing (`key % rows`, the default).
//!
//! Keeping the key separate from the row lets a later encoding (a vocabulary, which
//! maps the keys it has seen to rows in order of frequency) replace step 2 without
//! touching the parsers (docs/DATA.md).

use crate::hash::fnv1a64;
use crate::record::Schema;

/// The key of a categorical string value (its bytes, already trimmed).
#[inline]
pub fn key_of(value: &[u8]) -> u64 {
    fnv1a64(value)
}

/// How one sparse feature's keys become rows.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureIds {
    /// `key % rows`: any key has a row, and unrelated keys may share one.
    Hash { rows: u64 },
}

impl FeatureIds {
    /// Rows of the feature's table: every id this returns is below it.
    pub fn rows(&self) -> u64 {
        match self {
            FeatureIds::Hash { rows } => *rows,
        }
    }

    /// The row of `key`.
    #[inline]
    pub fn id(&self, key: u64) -> u64 {
        match self {
            FeatureIds::Hash { rows } => key % rows,
        }
    }
}

/// Hashing for every sparse feature of `schema`, into its `rows`.
pub fn hashing(schema: &Schema) -> Vec<FeatureIds> {
    schema
        .sparse
        .iter()
        .map(|f| FeatureIds::Hash { rows: f.rows })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SparseFeature;

    #[test]
    fn hashing_reduces_keys_below_each_tables_rows() {
        let schema = Schema {
            dense: vec![],
            sparse: vec![
                SparseFeature {
                    name: "a".into(),
                    rows: 7,
                },
                SparseFeature {
                    name: "b".into(),
                    rows: 1,
                },
            ],
        };
        let ids = hashing(&schema);
        assert_eq!(ids.iter().map(FeatureIds::rows).collect::<Vec<_>>(), [7, 1]);
        assert_eq!(ids[0].id(23), 2);
        assert_eq!(ids[1].id(23), 0);
        assert_eq!(key_of(b"x"), fnv1a64(b"x"));
    }
}
