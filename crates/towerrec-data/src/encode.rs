//! Categorical values → embedding rows, in two steps every reader shares:
//!
//! 1. the reader turns a raw value into a 64-bit **key**: a Criteo field's hex id as a
//!    number, a CSV (or Parquet) value's trimmed bytes through FNV-1a ([`key_of`]);
//! 2. the feature's [`FeatureIds`] maps the key to a row below the table's size:
//!    hashing (`key % rows`, the default), or a vocabulary ([`crate::vocab`]), which
//!    maps the keys it has seen to rows in order of frequency and every other key to
//!    row 0; or the key itself ([`FeatureIds::Key`]), for the pass that counts keys to
//!    build a vocabulary.
//!
//! Keeping the key separate from the row lets an encoding replace step 2 without
//! touching the parsers (docs/DATA.md).

use crate::hash::{fnv1a64, splitmix64};
use crate::record::Schema;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// The key of a categorical string value (its bytes, already trimmed).
#[inline]
pub fn key_of(value: &[u8]) -> u64 {
    fnv1a64(value)
}

/// How one sparse feature's keys become rows.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureIds {
    /// `key % rows`: any key has a row, and unrelated keys may share one.
    Hash(Modulo),
    /// A vocabulary's rows: its keys, hottest first, from row 1; any other key row 0.
    Vocab(Arc<VocabIds>),
    /// The key itself (rows: `u64::MAX`): the raw keys, for counting them. Not for
    /// training (no table has that many rows).
    Key,
}

/// `key % rows` for one table size, computed by multiplications (exactly the
/// remainder; a divide instruction per id was a fifth of reading a CSV file).
#[derive(Debug, Clone, Copy)]
pub struct Modulo {
    rows: u64,
    reduced: strength_reduce::StrengthReducedU64,
}

impl Modulo {
    /// Remainders by `rows` (at least 1).
    pub fn new(rows: u64) -> Self {
        Self {
            rows,
            reduced: strength_reduce::StrengthReducedU64::new(rows),
        }
    }

    /// The table size.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// `key % rows`.
    #[inline]
    pub fn of(&self, key: u64) -> u64 {
        key % self.reduced
    }
}

impl PartialEq for Modulo {
    fn eq(&self, other: &Self) -> bool {
        self.rows == other.rows
    }
}

/// A hasher for keys that are already well mixed or nearly so (hex ids, FNV hashes):
/// one SplitMix64 round, much cheaper than `std`'s SipHash. Not for untrusted keys
/// where collisions are an attack (these are data values, and the worst case is slow).
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = splitmix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = splitmix64(self.0 ^ n);
    }
}

/// A map keyed by 64-bit keys, hashed with [`KeyHasher`].
pub type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// A vocabulary's key → row map for one feature.
#[derive(Clone, PartialEq)]
pub struct VocabIds {
    rows: u64,
    map: KeyMap<u64>,
}

impl std::fmt::Debug for VocabIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VocabIds")
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl VocabIds {
    /// Rows for `keys` in order (the first gets row 1) and the OOV row 0. Keys are
    /// distinct (the vocabulary file's reader checks it).
    pub fn new(keys: &[u64]) -> Self {
        let mut map = KeyMap::with_capacity_and_hasher(keys.len(), Default::default());
        for (i, &k) in keys.iter().enumerate() {
            map.insert(k, i as u64 + 1);
        }
        VocabIds {
            rows: keys.len() as u64 + 1,
            map,
        }
    }
}

impl FeatureIds {
    /// Rows of the feature's table: every id this returns is below it.
    pub fn rows(&self) -> u64 {
        match self {
            FeatureIds::Hash(m) => m.rows(),
            FeatureIds::Vocab(v) => v.rows,
            FeatureIds::Key => u64::MAX,
        }
    }

    /// The row of `key`.
    #[inline]
    pub fn id(&self, key: u64) -> u64 {
        match self {
            FeatureIds::Hash(m) => m.of(key),
            FeatureIds::Vocab(v) => v.map.get(&key).copied().unwrap_or(0),
            FeatureIds::Key => key,
        }
    }
}

/// Hashing for every sparse feature of `schema`, into its `rows`.
pub fn hashing(schema: &Schema) -> Vec<FeatureIds> {
    schema
        .sparse
        .iter()
        .map(|f| FeatureIds::Hash(Modulo::new(f.rows)))
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

    proptest::proptest! {
        /// The multiply-shift remainder is the divide instruction's, for any key and
        /// any table size (hashed ids must not change with the way they are computed).
        #[test]
        fn modulo_is_the_remainder(key: u64, rows in 1u64.., small in 1u64..70_000) {
            for r in [rows, small, 1, u64::MAX] {
                proptest::prop_assert_eq!(Modulo::new(r).of(key), key % r);
            }
            proptest::prop_assert_eq!(Modulo::new(small).of(u64::MAX - key % 3), (u64::MAX - key % 3) % small);
        }
    }

    #[test]
    fn a_vocabulary_maps_its_keys_from_row_1_and_others_to_row_0() {
        let v = FeatureIds::Vocab(Arc::new(VocabIds::new(&[42, 7, u64::MAX])));
        assert_eq!(v.rows(), 4);
        assert_eq!(v.id(42), 1);
        assert_eq!(v.id(7), 2);
        assert_eq!(v.id(u64::MAX), 3);
        assert_eq!(v.id(8), 0);
        assert_eq!(FeatureIds::Vocab(Arc::new(VocabIds::new(&[]))).rows(), 1);
        assert_eq!(FeatureIds::Key.id(123), 123);
    }
}
