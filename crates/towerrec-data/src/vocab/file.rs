//! The vocabulary file: safetensors, one `U64` tensor of keys per feature in row order
//! (`keys.<i>`, row `j + 1` is key `j`) and one of their counts (`counts.<i>`), and one
//! metadata entry, `towerrec_vocab`, holding JSON: the format version, the feature
//! names, how it was built (min_count, max_rows, exact or sketched), the rows read, the
//! source file's fingerprint, per-feature statistics, and the checksum.
//!
//! The checksum (xxh3-64 over the names and the keys in order: what decides the
//! encoding) is checked on load, so a damaged file is named rather than used; it also
//! names the vocabulary in checkpoints and binary headers. The reader checks every
//! structural claim (tensor types and shapes, counts in the vocabulary's order, sizes
//! within max_rows) before anything is built on it.

use super::{FeatureVocab, SketchOptions, VocabOptions};
use crate::encode::{FeatureIds, VocabIds};
use crate::error::{Error, Result};
use crate::fingerprint::FileFingerprint;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;
use xxhash_rust::xxh3::Xxh3;

/// The version of the file format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The one metadata key.
const META_KEY: &str = "towerrec_vocab";

/// How the counts were taken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Counting {
    Exact,
    /// Count-min sketch: counts overestimate by at most `epsilon` × the feature's
    /// occurrences, except with probability `delta`.
    Sketch {
        epsilon: f64,
        delta: f64,
    },
}

/// Per-feature figures, for the summary and for readers of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct: Option<u64>,
    pub occurrences: u64,
}

/// The metadata JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VocabInfo {
    pub format_version: u32,
    pub features: Vec<FeatureStats>,
    pub min_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rows: Option<u64>,
    pub counting: Counting,
    /// Records counted.
    pub rows_read: u64,
    /// The file the keys were counted from, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<FileFingerprint>,
    /// What the keys were counted from, in words (the training part of a file).
    #[serde(default)]
    pub source_part: String,
    pub checksum: String,
}

/// A vocabulary for every sparse feature of a schema.
#[derive(Debug)]
pub struct Vocab {
    pub features: Vec<FeatureVocab>,
    pub info: VocabInfo,
    ids: OnceLock<Vec<FeatureIds>>,
}

impl Clone for Vocab {
    fn clone(&self) -> Self {
        Vocab {
            features: self.features.clone(),
            info: self.info.clone(),
            ids: OnceLock::new(),
        }
    }
}

impl PartialEq for Vocab {
    fn eq(&self, other: &Self) -> bool {
        self.features == other.features && self.info == other.info
    }
}

fn checksum(features: &[FeatureVocab]) -> String {
    let mut h = Xxh3::new();
    h.update(&FORMAT_VERSION.to_le_bytes());
    for f in features {
        h.update(&(f.name.len() as u64).to_le_bytes());
        h.update(f.name.as_bytes());
        h.update(&(f.keys.len() as u64).to_le_bytes());
        for k in &f.keys {
            h.update(&k.to_le_bytes());
        }
    }
    format!("{:016x}", h.digest())
}

impl Vocab {
    pub(super) fn new(features: Vec<FeatureVocab>, opts: &VocabOptions, rows_read: u64) -> Self {
        let info = VocabInfo {
            format_version: FORMAT_VERSION,
            features: features
                .iter()
                .map(|f| FeatureStats {
                    name: f.name.clone(),
                    distinct: f.distinct,
                    occurrences: f.occurrences,
                })
                .collect(),
            min_count: opts.min_count,
            max_rows: opts.max_rows,
            counting: match opts.sketch {
                None => Counting::Exact,
                Some(SketchOptions { epsilon, delta }) => Counting::Sketch { epsilon, delta },
            },
            rows_read,
            source: None,
            source_part: String::new(),
            checksum: checksum(&features),
        };
        Vocab {
            features,
            info,
            ids: OnceLock::new(),
        }
    }

    /// The checksum that names this vocabulary (hex).
    pub fn checksum(&self) -> &str {
        &self.info.checksum
    }

    /// Feature names, in schema order.
    pub fn names(&self) -> Vec<String> {
        self.features.iter().map(|f| f.name.clone()).collect()
    }

    /// Table sizes, in schema order.
    pub fn rows(&self) -> Vec<u64> {
        self.features.iter().map(FeatureVocab::rows).collect()
    }

    /// The encodings for the readers (built once, shared).
    pub fn ids(&self) -> Vec<FeatureIds> {
        self.ids
            .get_or_init(|| {
                self.features
                    .iter()
                    .map(|f| FeatureIds::Vocab(Arc::new(VocabIds::new(&f.keys))))
                    .collect()
            })
            .clone()
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let bytes: Vec<(String, Vec<u8>, usize)> = self
            .features
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                [
                    (format!("keys.{i}"), le_bytes(&f.keys), f.keys.len()),
                    (format!("counts.{i}"), le_bytes(&f.counts), f.counts.len()),
                ]
            })
            .collect();
        let views = bytes
            .iter()
            .map(|(name, b, n)| {
                TensorView::new(Dtype::U64, vec![*n], b)
                    .map(|v| (name.clone(), v))
                    .map_err(|e| Error::Config(format!("vocab: tensor {name}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let json = serde_json::to_string(&self.info)
            .map_err(|e| Error::Config(format!("vocab: metadata: {e}")))?;
        let meta = HashMap::from([(META_KEY.to_string(), json)]);
        safetensors::tensor::serialize(views, Some(meta))
            .map_err(|e| Error::Config(format!("vocab: serializing: {e}")))
    }

    /// Writes the file atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let bytes = self.to_bytes()?;
        towerrec_core::fsio::write_atomic(path, &bytes).map_err(|e| Error::io(path, e))
    }

    /// Refuses a vocabulary whose features are not `names` (the schema's sparse
    /// features, in order); `path` names the vocabulary file.
    pub fn check_names(&self, names: &[String], path: &Path) -> Result<()> {
        let mine = self.names();
        if mine != names {
            return Err(Error::Config(format!(
                "data.vocab: {} has the features [{}], the data's sparse features are [{}]; \
                 rebuild it with `towerrec vocab` for this config",
                path.display(),
                mine.join(", "),
                names.join(", ")
            )));
        }
        Ok(())
    }
}

fn le_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Parses a vocabulary file's bytes, checking everything; `name` names it in errors.
pub fn read_bytes(bytes: &[u8], name: &Path) -> Result<Vocab> {
    let bad = |m: String| Error::format(name, format!("not a valid vocabulary file: {m}"));
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(META_KEY))
        .ok_or_else(|| {
            bad(format!(
                "no '{META_KEY}' metadata (write one with `towerrec vocab`)"
            ))
        })?;
    let info: VocabInfo =
        serde_json::from_str(json).map_err(|e| bad(format!("bad metadata: {e}")))?;
    if info.format_version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {} (this build reads {FORMAT_VERSION}); rebuild it with `towerrec vocab`",
            info.format_version
        )));
    }
    if st.len() != 2 * info.features.len() {
        return Err(bad(format!(
            "{} tensors for {} features (expected keys and counts for each)",
            st.len(),
            info.features.len()
        )));
    }
    let mut names = HashSet::new();
    let mut features = Vec::with_capacity(info.features.len());
    for (i, stats) in info.features.iter().enumerate() {
        if !names.insert(stats.name.as_str()) {
            return Err(bad(format!("feature '{}' appears twice", stats.name)));
        }
        let tensor = |t: &str| -> Result<Vec<u64>> {
            let t = format!("{t}.{i}");
            let v = st
                .tensor(&t)
                .map_err(|_| bad(format!("tensor '{t}' missing")))?;
            if v.dtype() != Dtype::U64 || v.shape().len() != 1 {
                return Err(bad(format!(
                    "tensor '{t}' is {:?} {:?}, expected a U64 vector",
                    v.dtype(),
                    v.shape()
                )));
            }
            Ok(v.data()
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect())
        };
        let (keys, counts) = (tensor("keys")?, tensor("counts")?);
        let f = &stats.name;
        if keys.len() != counts.len() {
            return Err(bad(format!(
                "feature '{f}': {} keys but {} counts",
                keys.len(),
                counts.len()
            )));
        }
        if info.max_rows.is_some_and(|m| keys.len() as u64 + 1 > m) {
            return Err(bad(format!(
                "feature '{f}': {} rows, above max_rows {}",
                keys.len() + 1,
                info.max_rows.unwrap_or(0)
            )));
        }
        // Hottest first, ties by key: strictly ordered, so keys are distinct.
        let pairs: Vec<(u64, u64)> = keys.iter().copied().zip(counts.iter().copied()).collect();
        if let Some(j) = pairs
            .windows(2)
            .position(|w| !(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)))
        {
            return Err(bad(format!(
                "feature '{f}': keys {} and {} are not in the vocabulary's order \
                 (count descending, then key ascending)",
                j,
                j + 1
            )));
        }
        if let Some(j) = counts.iter().position(|&c| c < info.min_count) {
            return Err(bad(format!(
                "feature '{f}': key {j} was seen {} times, below min_count {}",
                counts[j], info.min_count
            )));
        }
        features.push(FeatureVocab {
            name: stats.name.clone(),
            keys,
            counts,
            distinct: stats.distinct,
            occurrences: stats.occurrences,
        });
    }
    let sum = checksum(&features);
    if sum != info.checksum {
        return Err(bad(format!(
            "its checksum is {sum}, its metadata says {}: the file is damaged",
            info.checksum
        )));
    }
    Ok(Vocab {
        features,
        info,
        ids: OnceLock::new(),
    })
}

/// Reads the vocabulary file at `path`, once per content: later calls for an unchanged
/// file (same size and modification time) share it, with its built maps.
pub fn load(path: &Path) -> Result<Arc<Vocab>> {
    type Key = (PathBuf, u64, Option<SystemTime>);
    static CACHE: Mutex<Option<HashMap<Key, Arc<Vocab>>>> = Mutex::new(None);
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let key = (path.to_path_buf(), meta.len(), meta.modified().ok());
    if let Ok(guard) = CACHE.lock() {
        if let Some(v) = guard.as_ref().and_then(|m| m.get(&key)) {
            return Ok(Arc::clone(v));
        }
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let vocab = Arc::new(read_bytes(&bytes, path)?);
    if let Ok(mut guard) = CACHE.lock() {
        // One entry per path: an edited file replaces its old entry.
        let map = guard.get_or_insert_with(HashMap::new);
        map.retain(|k, _| k.0 != key.0);
        map.insert(key, Arc::clone(&vocab));
    }
    Ok(vocab)
}
