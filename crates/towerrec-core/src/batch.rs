//! The batch that flows from the readers to the model.
//!
//! Sparse features are a keyed jagged structure (TorchRec's `KeyedJaggedTensor`): for
//! each feature, a length per sample and a flat value array. Values are stored
//! feature-major: all of feature 0's ids for samples 0..B, then feature 1's, and so on,
//! which is the layout the embedding AlltoAll of later issues sends per feature.

use crate::error::{Error, Result};

/// Sparse ids of a batch, per feature, per sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyedJagged {
    keys: Vec<String>,
    batch_size: usize,
    /// `keys.len() * batch_size + 1` absolute offsets into `values`, feature-major.
    offsets: Vec<usize>,
    values: Vec<u64>,
}

/// One feature's ids for a batch: sample `b` has `values[offsets[b] - base .. offsets[b+1] - base]`
/// where `base = offsets[0]`; use [`JaggedView::ids`] rather than indexing by hand.
#[derive(Debug, Clone, Copy)]
pub struct JaggedView<'a> {
    /// `batch_size + 1` offsets into `values`, starting at 0.
    pub offsets: &'a [usize],
    /// The ids of every sample of this feature, concatenated.
    pub values: &'a [u64],
    base: usize,
}

impl<'a> JaggedView<'a> {
    /// A view of `values` cut by `offsets` (`batch_size + 1` non-decreasing offsets,
    /// the first of which is where `values` begins).
    pub fn new(offsets: &'a [usize], values: &'a [u64]) -> Result<Self> {
        let (first, last) = match (offsets.first(), offsets.last()) {
            (Some(&f), Some(&l)) => (f, l),
            _ => return Err(Error::shape("JaggedView offsets", "at least 1", 0)),
        };
        if offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::Config("JaggedView offsets must not decrease".into()));
        }
        if last - first != values.len() {
            return Err(Error::shape(
                "JaggedView values",
                last - first,
                values.len(),
            ));
        }
        Ok(Self {
            offsets,
            values,
            base: first,
        })
    }

    /// Number of samples.
    pub fn batch_size(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Ids of sample `b`.
    pub fn ids(&self, b: usize) -> &'a [u64] {
        &self.values[self.offsets[b] - self.base..self.offsets[b + 1] - self.base]
    }
    /// Offset of sample `b`'s first id within [`JaggedView::values`].
    #[inline]
    pub fn start(&self, b: usize) -> usize {
        self.offsets[b] - self.base
    }
}

impl KeyedJagged {
    /// Builds from per-feature, per-sample lengths (feature-major, `keys.len() * batch_size`
    /// entries) and the concatenated values.
    pub fn from_lengths(
        keys: Vec<String>,
        batch_size: usize,
        lengths: &[u32],
        values: Vec<u64>,
    ) -> Result<Self> {
        if lengths.len() != keys.len() * batch_size {
            return Err(Error::shape(
                "KeyedJagged lengths",
                keys.len() * batch_size,
                lengths.len(),
            ));
        }
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        let mut acc = 0usize;
        offsets.push(0);
        for &l in lengths {
            acc += l as usize;
            offsets.push(acc);
        }
        if acc != values.len() {
            return Err(Error::shape("KeyedJagged values", acc, values.len()));
        }
        Ok(Self {
            keys,
            batch_size,
            offsets,
            values,
        })
    }

    /// Builds from offsets (`keys.len() * batch_size + 1`, starting at 0, non-decreasing).
    pub fn from_offsets(
        keys: Vec<String>,
        batch_size: usize,
        offsets: Vec<usize>,
        values: Vec<u64>,
    ) -> Result<Self> {
        if offsets.len() != keys.len() * batch_size + 1 {
            return Err(Error::shape(
                "KeyedJagged offsets",
                keys.len() * batch_size + 1,
                offsets.len(),
            ));
        }
        if offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::Config(
                "KeyedJagged offsets must start at 0 and not decrease".into(),
            ));
        }
        if *offsets.last().unwrap_or(&0) != values.len() {
            return Err(Error::shape(
                "KeyedJagged values",
                offsets.last().copied().unwrap_or(0),
                values.len(),
            ));
        }
        Ok(Self {
            keys,
            batch_size,
            offsets,
            values,
        })
    }

    /// Feature names.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
    /// Number of samples.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
    /// Number of features.
    pub fn num_keys(&self) -> usize {
        self.keys.len()
    }
    /// All values, feature-major.
    pub fn values(&self) -> &[u64] {
        &self.values
    }
    /// All offsets (`num_keys * batch_size + 1`).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }
    /// Length of sample `b` of feature `f`.
    pub fn length(&self, f: usize, b: usize) -> usize {
        let i = f * self.batch_size + b;
        self.offsets[i + 1] - self.offsets[i]
    }
    /// Feature `f`'s ids for the whole batch.
    pub fn feature(&self, f: usize) -> JaggedView<'_> {
        let o = &self.offsets[f * self.batch_size..=(f + 1) * self.batch_size];
        JaggedView {
            offsets: o,
            values: &self.values[o[0]..o[self.batch_size]],
            base: o[0],
        }
    }
}

/// A batch of samples: dense features, sparse features and labels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// `batch_size × num_dense`, row-major.
    pub dense: Vec<f32>,
    /// Number of dense features per sample.
    pub num_dense: usize,
    /// Sparse features.
    pub sparse: KeyedJagged,
    /// One label per sample, 0.0 or 1.0.
    pub labels: Vec<f32>,
}

impl Batch {
    /// Checks that the parts agree on the batch size.
    pub fn new(
        dense: Vec<f32>,
        num_dense: usize,
        sparse: KeyedJagged,
        labels: Vec<f32>,
    ) -> Result<Self> {
        let b = labels.len();
        if dense.len() != b * num_dense {
            return Err(Error::shape("Batch dense", b * num_dense, dense.len()));
        }
        if sparse.batch_size() != b {
            return Err(Error::shape(
                "Batch sparse batch size",
                b,
                sparse.batch_size(),
            ));
        }
        Ok(Self {
            dense,
            num_dense,
            sparse,
            labels,
        })
    }
    /// Number of samples.
    pub fn batch_size(&self) -> usize {
        self.labels.len()
    }

    /// Samples `start..start + len` as a batch of their own (a worker's part of a
    /// global batch).
    ///
    /// # Panics
    /// If the range is beyond the batch.
    pub fn slice(&self, start: usize, len: usize) -> Batch {
        let end = start + len;
        assert!(
            end <= self.batch_size(),
            "slice {start}..{end} of {}",
            self.batch_size()
        );
        let nd = self.num_dense;
        let sparse = &self.sparse;
        let mut offsets = Vec::with_capacity(sparse.num_keys() * len + 1);
        let mut values = Vec::new();
        offsets.push(0);
        for f in 0..sparse.num_keys() {
            let view = sparse.feature(f);
            for b in start..end {
                values.extend_from_slice(view.ids(b));
                offsets.push(values.len());
            }
        }
        Batch {
            dense: self.dense[start * nd..end * nd].to_vec(),
            num_dense: nd,
            sparse: KeyedJagged {
                keys: sparse.keys.clone(),
                batch_size: len,
                offsets,
                values,
            },
            labels: self.labels[start..end].to_vec(),
        }
    }

    /// The samples of `parts`, in order, as one batch ([`Batch::slice`]'s inverse: a
    /// server's micro-batch of requests). The parts must have the same features.
    pub fn concat(parts: &[Batch]) -> Result<Batch> {
        let Some(first) = parts.first() else {
            return Ok(Batch::default());
        };
        let (nd, keys) = (first.num_dense, first.sparse.keys());
        if let Some(p) = parts
            .iter()
            .find(|p| p.num_dense != nd || p.sparse.keys() != keys)
        {
            return Err(Error::shape(
                "Batch::concat features",
                format!("{nd} dense, sparse {keys:?}"),
                format!("{} dense, sparse {:?}", p.num_dense, p.sparse.keys()),
            ));
        }
        let b: usize = parts.iter().map(Batch::batch_size).sum();
        let mut offsets = Vec::with_capacity(keys.len() * b + 1);
        let mut values = Vec::with_capacity(parts.iter().map(|p| p.sparse.values.len()).sum());
        offsets.push(0);
        for f in 0..keys.len() {
            for p in parts {
                let view = p.sparse.feature(f);
                let base = values.len();
                values.extend_from_slice(view.values);
                offsets.extend(
                    view.offsets[1..]
                        .iter()
                        .map(|&o| base + o - view.offsets[0]),
                );
            }
        }
        Ok(Batch {
            dense: parts.iter().flat_map(|p| p.dense.iter().copied()).collect(),
            num_dense: nd,
            sparse: KeyedJagged {
                keys: keys.to_vec(),
                batch_size: b,
                offsets,
                values,
            },
            labels: parts
                .iter()
                .flat_map(|p| p.labels.iter().copied())
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_undoes_slice() {
        let kj = KeyedJagged::from_lengths(
            vec!["a".into(), "b".into()],
            4,
            &[1, 2, 0, 1, 3, 0, 2, 1],
            (0..10).collect(),
        )
        .unwrap();
        let batch = Batch::new(
            (0..8).map(|x| x as f32).collect(),
            2,
            kj,
            vec![0., 1., 1., 0.],
        )
        .unwrap();
        let parts = [batch.slice(0, 1), batch.slice(1, 0), batch.slice(1, 3)];
        assert_eq!(Batch::concat(&parts).unwrap(), batch);
        assert_eq!(Batch::concat(&[]).unwrap().batch_size(), 0);
        let mut other = batch.slice(0, 2);
        other.num_dense = 1;
        other.dense.truncate(2);
        assert!(Batch::concat(&[batch.clone(), other]).is_err());
    }

    #[test]
    fn feature_views_slice_values_per_sample() {
        let kj = KeyedJagged::from_lengths(
            vec!["a".into(), "b".into()],
            2,
            &[1, 2, 0, 3],
            vec![10, 11, 12, 20, 21, 22],
        )
        .unwrap();
        let a = kj.feature(0);
        assert_eq!(a.ids(0), &[10]);
        assert_eq!(a.ids(1), &[11, 12]);
        let b = kj.feature(1);
        assert_eq!(b.ids(0), &[] as &[u64]);
        assert_eq!(b.ids(1), &[20, 21, 22]);
        assert_eq!(b.values, &[20, 21, 22]);
        assert_eq!(kj.length(1, 1), 3);
    }

    #[test]
    fn slices_keep_each_samples_ids() {
        let kj = KeyedJagged::from_lengths(
            vec!["a".into(), "b".into()],
            3,
            &[1, 2, 0, 0, 3, 1],
            vec![10, 11, 12, 20, 21, 22, 23],
        )
        .unwrap();
        let batch = Batch::new(vec![1.0, 2.0, 3.0], 1, kj, vec![0.0, 1.0, 0.0]).unwrap();
        let s = batch.slice(1, 2);
        assert_eq!(s.batch_size(), 2);
        assert_eq!(s.dense, vec![2.0, 3.0]);
        assert_eq!(s.labels, vec![1.0, 0.0]);
        assert_eq!(s.sparse.feature(0).ids(0), &[11, 12]);
        assert_eq!(s.sparse.feature(0).ids(1), &[] as &[u64]);
        assert_eq!(s.sparse.feature(1).ids(0), &[20, 21, 22]);
        assert_eq!(s.sparse.feature(1).ids(1), &[23]);
        assert_eq!(batch.slice(3, 0).batch_size(), 0);
    }

    #[test]
    fn rejects_inconsistent_lengths() {
        assert!(KeyedJagged::from_lengths(vec!["a".into()], 2, &[1], vec![1]).is_err());
        assert!(KeyedJagged::from_lengths(vec!["a".into()], 1, &[2], vec![1]).is_err());
        assert!(KeyedJagged::from_offsets(vec!["a".into()], 1, vec![1, 1], vec![1]).is_err());
    }
}
