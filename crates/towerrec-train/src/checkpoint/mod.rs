//! Checkpoints: the whole model, its optimizer state and the position in the data, in
//! one safetensors file written atomically (temporary file, then rename).
//!
//! A checkpoint holds everything a resumed run needs to continue bitwise identically:
//! every parameter, every optimizer moment or accumulator, every step counter, and
//! where in which epoch the data stream stood. The run's config travels in the file's
//! metadata, so `towerrec eval` needs nothing else.
//!
//! The metadata also carries a checksum of every tensor and of itself, verified when the
//! file is read, and fingerprints of the data files; no tensor holding NaN or infinity
//! is written or loaded ([`integrity`]).

mod integrity;

pub use integrity::{data_files, DataFile};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::sharded::WholeTable;
use integrity::{checksum, meta_checksum, META_CHECKSUM, TENSOR_CHECKSUMS};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use towerrec_core::embedding::TablePrecision;

/// File name of the checkpoint inside a run directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
/// v2 added the checksums and data fingerprints; v1 files have neither and are refused.
/// v3 records a DMT model's towers (`towers`); a v2 file's towers are its config's.
const FORMAT: &str = "towerrec-checkpoint-v3";
const FORMAT_V2: &str = "towerrec-checkpoint-v2";
/// Metadata key of the checksum of the vocabulary the run's data was encoded with
/// (absent: hashed; files written before vocabularies existed were all hashed).
const VOCAB: &str = "vocab";
/// Metadata key of the towers a DMT model was trained with, by table name (JSON).
const TOWERS: &str = "towers";

/// Where a run stands: what a resumed run needs besides the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Optimizer steps taken.
    pub step: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Batches of the current epoch already trained on.
    pub batch_in_epoch: u64,
    /// Training samples seen.
    pub samples: u64,
}

/// Why `p` cannot be where a run with global batches of `batch` samples stands, over
/// training data of `rows` rows where known.
fn progress_story(p: Progress, batch: u64, rows: Option<u64>) -> std::result::Result<(), String> {
    let b = p.batch_in_epoch;
    if b > p.step {
        return Err("has more batches in the epoch than steps".into());
    }
    // Each finished epoch took the same number of steps.
    let per_epoch = match p.epoch {
        0 if b != p.step => return Err("has steps before its first epoch's batches".into()),
        0 => None,
        e if !(p.step - b).is_multiple_of(e) || (p.step - b) / e < b.max(1) => {
            return Err("does not divide into epochs of equal length".into())
        }
        e => Some((p.step - b) / e),
    };
    // Every batch is full but the last of an epoch; the epoch under way may have ended.
    let most = p.step.saturating_mul(batch);
    let least = most.saturating_sub((p.epoch + 1).saturating_mul(batch - 1));
    if p.samples > most || p.samples < least.max(p.step) {
        return Err(format!(
            "does not match batches of {batch} samples (between {} and {most} samples)",
            least.max(p.step)
        ));
    }
    let Some(n) = rows else { return Ok(()) };
    let batches = n.div_ceil(batch);
    if per_epoch.is_some_and(|s| s != batches) || b > batches {
        return Err(format!(
            "does not match the training data's {n} rows ({batches} batches an epoch)"
        ));
    }
    if p.samples != p.epoch * n + (b * batch).min(n) {
        return Err(format!(
            "does not match the training data's {n} rows ({} samples expected)",
            p.epoch * n + (b * batch).min(n)
        ));
    }
    Ok(())
}

/// The checkpoint path for a run directory or an explicit file.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(CHECKPOINT_FILE)
    } else {
        path.to_path_buf()
    }
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// One tensor to write: its name, its values' bytes (little-endian), its shape and
/// their type: F32; F16 or BF16 for the weights of an fp16 or bf16 table (exact: they
/// hold such values); U8 for an int8 table's stored rows.
struct Tensor {
    name: String,
    bytes: Vec<u8>,
    shape: Vec<usize>,
    dtype: Dtype,
}

/// `values` (each representable in `precision`: a table's widened weights) as the
/// bytes of `precision`'s tensor type.
fn table_bytes(values: &[f32], precision: TablePrecision) -> (Dtype, Vec<u8>) {
    let halves = |f: fn(f32) -> u16| values.iter().flat_map(|&v| f(v).to_le_bytes()).collect();
    match precision {
        TablePrecision::Fp16 => (Dtype::F16, halves(|v| half::f16::from_f32(v).to_bits())),
        TablePrecision::Bf16 => (Dtype::BF16, halves(|v| half::bf16::from_f32(v).to_bits())),
        _ => (Dtype::F32, to_bytes(values)),
    }
}

/// The values of a float tensor (F32, F16 or BF16) as f32, read from its bytes in
/// place, and how many there are; `None` for another type.
#[allow(clippy::type_complexity)]
fn decode(dtype: Dtype, bytes: &[u8]) -> Option<(usize, Box<dyn Iterator<Item = f32> + '_>)> {
    let pairs = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    Some(match dtype {
        Dtype::F32 => (
            bytes.len() / 4,
            Box::new((bytes.chunks_exact(4)).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        Dtype::F16 => (
            bytes.len() / 2,
            Box::new(pairs.map(|h| half::f16::from_bits(h).to_f32())),
        ),
        Dtype::BF16 => (
            bytes.len() / 2,
            Box::new(pairs.map(|h| half::bf16::from_bits(h).to_f32())),
        ),
        _ => return None,
    })
}

/// The first value of a float tensor that is NaN or infinite, with its index.
fn first_non_finite(dtype: Dtype, bytes: &[u8]) -> Option<(usize, f32)> {
    let (_, mut values) = decode(dtype, bytes)?;
    values.by_ref().enumerate().find(|(_, x)| !x.is_finite())
}

/// Every tensor of the model's state, named, as owned bytes, and the tables' step
/// counts; `None` on the ranks of a sharded model other than 0.
fn collect(model: &mut Model) -> Result<Option<(Vec<Tensor>, Vec<u64>)>> {
    model.refresh_tower_replicas()?;
    let Some(tables) = model.whole_tables()? else {
        return Ok(None);
    };
    let f32s = |name: String, v: &[f32]| Tensor {
        name,
        bytes: to_bytes(v),
        shape: vec![v.len()],
        dtype: Dtype::F32,
    };
    let mut out = Vec::new();
    for p in model.dense_params() {
        out.push(f32s(format!("dense.{}", p.name), p.value));
    }
    for (name, buf) in model.dense_optimizer_mut().state_mut() {
        out.push(f32s(format!("opt.dense.{name}"), buf));
    }
    let steps = tables.iter().map(|t| t.step).collect();
    let descs = model.table_descs();
    for (t, d) in tables.into_iter().zip(descs) {
        let table = &t.name;
        let name = format!("emb.{table}.weight");
        match t.packed {
            // FBGEMM's fused 8-bit row-wise layout: `dim` bytes, scale, bias per row.
            Some(bytes) => out.push(Tensor {
                name,
                shape: vec![d.rows, d.precision.row_bytes(d.dim)],
                bytes,
                dtype: Dtype::U8,
            }),
            None => {
                let (dtype, bytes) = table_bytes(&t.weights, d.precision);
                let shape = vec![t.weights.len()];
                out.push(Tensor {
                    name,
                    bytes,
                    shape,
                    dtype,
                })
            }
        }
        for (name, buf) in &t.state {
            out.push(f32s(format!("emb.{table}.opt.{name}"), buf));
        }
    }
    Ok(Some((out, steps)))
}

/// Refuses to save a tensor holding NaN or infinity: the previous checkpoint stays the
/// last good one.
fn check_finite(tensors: &[Tensor], progress: Progress) -> Result<()> {
    for Tensor {
        name, bytes, dtype, ..
    } in tensors
    {
        if let Some((i, x)) = first_non_finite(*dtype, bytes) {
            return Err(Error::NonFinite {
                what: "parameter".into(),
                place: format!("the checkpoint of step {}", progress.step),
                culprit: format!(
                    "tensor '{name}' holds {x} at element {i} (checkpoint not written)"
                ),
            });
        }
    }
    Ok(())
}

/// Writes `model`, its optimizers, `progress` and the fingerprints of the run's `data`
/// files to `path` atomically. On a sharded model every rank calls it; rank 0 gathers
/// the tables whole and writes the file, so a run can resume on another topology or
/// plan. Refuses (writing nothing) when a tensor holds NaN or infinity.
pub fn save(
    path: &Path,
    model: &mut Model,
    config: &Config,
    progress: Progress,
    data: &[DataFile],
) -> Result<()> {
    let towers = model.tower_tables();
    let Some((tensors, table_steps)) = collect(model)? else {
        return Ok(());
    };
    check_finite(&tensors, progress)?;
    let vocab = towerrec_data::source::vocab_checksum(&config.data, &config.base_dir)?;
    let bad = |message: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            let view = TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
                .map_err(|e| bad(format!("tensor '{}': {e}", t.name)))?;
            Ok((t.name.clone(), view))
        })
        .collect::<Result<_>>()?;
    let sums: BTreeMap<&str, String> = tensors
        .iter()
        .map(|t| (t.name.as_str(), checksum(&t.bytes)))
        .collect();
    let json = |r: serde_json::Result<String>| r.map_err(|e| bad(e.to_string()));
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), FORMAT.to_string());
    meta.insert("config".to_string(), config.to_toml());
    if let Some(towers) = &towers {
        meta.insert(TOWERS.to_string(), json(serde_json::to_string(towers))?);
    }
    if let Some(vocab) = vocab {
        meta.insert(VOCAB.to_string(), vocab);
    }
    meta.insert(
        "base_dir".to_string(),
        config.base_dir.to_string_lossy().into_owned(),
    );
    meta.insert("step".to_string(), progress.step.to_string());
    meta.insert("epoch".to_string(), progress.epoch.to_string());
    meta.insert(
        "batch_in_epoch".to_string(),
        progress.batch_in_epoch.to_string(),
    );
    meta.insert("samples".to_string(), progress.samples.to_string());
    meta.insert(
        "dense_optimizer_step".to_string(),
        model.dense_optimizer_mut().step().to_string(),
    );
    let table_steps: Vec<String> = table_steps.iter().map(u64::to_string).collect();
    meta.insert("table_steps".to_string(), table_steps.join(","));
    meta.insert(
        TENSOR_CHECKSUMS.to_string(),
        json(serde_json::to_string(&sums))?,
    );
    meta.insert(
        integrity::DATA.to_string(),
        json(serde_json::to_string(data))?,
    );
    meta.insert(META_CHECKSUM.to_string(), meta_checksum(&meta));
    let bytes =
        safetensors::tensor::serialize(views, Some(meta)).map_err(|e| bad(e.to_string()))?;
    towerrec_core::fsio::write_atomic(path, &bytes).map_err(|e| Error::io(path, e))
}

/// A checkpoint file's bytes with every checksum made to match what they hold, as if
/// written so (`None` where safetensors cannot parse them). For fuzzing: it reaches the
/// checks after the checksums with arbitrary contents.
#[doc(hidden)]
pub fn reseal(bytes: &[u8]) -> Option<Vec<u8>> {
    let (_, header) = SafeTensors::read_metadata(bytes).ok()?;
    let mut meta = header.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(bytes).ok()?;
    let tensors: Vec<(String, TensorView<'_>)> = st.tensors();
    let sums: BTreeMap<&str, String> = tensors
        .iter()
        .map(|(name, t)| (name.as_str(), checksum(t.data())))
        .collect();
    meta.insert(TENSOR_CHECKSUMS.into(), serde_json::to_string(&sums).ok()?);
    meta.insert(META_CHECKSUM.into(), meta_checksum(&meta));
    safetensors::tensor::serialize(tensors, Some(meta)).ok()
}

/// The towers recorded in the checkpoint at `path` ([`Checkpoint::towers`]), read from
/// its header alone: a resumed run builds its model on them before it reads the whole
/// file, which then checks them against its checksums and the model
/// ([`Checkpoint::check_towers`]).
pub fn recorded_towers(path: &Path) -> Result<Option<Vec<Vec<String>>>> {
    use std::io::Read;
    let path = resolve(path);
    let bad = |message: String| Error::Checkpoint {
        path: path.clone(),
        message,
    };
    let mut file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let len = u64::from_le_bytes(len);
    // safetensors caps its header at 100 MB.
    if len > 100_000_000 {
        return Err(bad(format!(
            "not a safetensors file: a header of {len} bytes"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    match header.get("__metadata__").and_then(|m| m.get(TOWERS)) {
        None => Ok(None),
        Some(serde_json::Value::String(text)) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| bad(format!("metadata '{TOWERS}' malformed: {e}"))),
        Some(_) => Err(bad(format!("metadata '{TOWERS}' malformed"))),
    }
}

/// A checkpoint read from disk, not yet applied to a model.
pub struct Checkpoint {
    path: PathBuf,
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl Checkpoint {
    /// Reads a checkpoint file and verifies it: its format, the checksum of its
    /// metadata and of every tensor (a corrupted tensor is named).
    pub fn read(path: &Path) -> Result<Self> {
        let path = resolve(path);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        Self::from_bytes(path, bytes)
    }

    /// [`Checkpoint::read`] of a file's bytes, already in memory; `path` names it in
    /// errors.
    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<Self> {
        let bad = |message: String| Error::Checkpoint {
            path: path.clone(),
            message,
        };
        let (_, metadata) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let meta = metadata.metadata().clone().unwrap_or_default();
        match meta.get("format").map(String::as_str) {
            Some(FORMAT | FORMAT_V2) => {}
            Some("towerrec-checkpoint-v1") => {
                return Err(bad(format!(
                    "written by an older towerrec (format v1, without checksums); this one reads {FORMAT}"
                )))
            }
            _ => {
                return Err(bad(format!(
                    "not a towerrec checkpoint (expected format {FORMAT})"
                )))
            }
        }
        if meta.get(META_CHECKSUM) != Some(&meta_checksum(&meta)) {
            return Err(bad(
                "its metadata (config, progress, checksums) does not match its checksum: the file is corrupt".into(),
            ));
        }
        let ckpt = Self { path, bytes, meta };
        ckpt.verify_tensors()?;
        Ok(ckpt)
    }

    /// Checks every tensor against the checksum written with it.
    fn verify_tensors(&self) -> Result<()> {
        let bad = |message: String| Error::Checkpoint {
            path: self.path.clone(),
            message,
        };
        let sums: BTreeMap<String, String> = self
            .meta
            .get(TENSOR_CHECKSUMS)
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| {
                bad(format!(
                    "metadata '{TENSOR_CHECKSUMS}' missing or malformed"
                ))
            })?;
        let st = SafeTensors::deserialize(&self.bytes).map_err(|e| bad(e.to_string()))?;
        if st.len() != sums.len() {
            return Err(bad(format!(
                "holds {} tensors but checksums for {}: the file is corrupt",
                st.len(),
                sums.len()
            )));
        }
        for (name, sum) in &sums {
            let t = st
                .tensor(name)
                .map_err(|_| bad(format!("tensor '{name}' missing: the file is corrupt")))?;
            if checksum(t.data()) != *sum {
                return Err(bad(format!(
                    "tensor '{name}' does not match its checksum: the file is corrupt"
                )));
            }
        }
        Ok(())
    }

    /// Refuses data files whose content differs from what the run that wrote the
    /// checkpoint read (by size and content hash; see [`towerrec_data::fingerprint`]).
    pub fn check_data(&self, cfg: &Config) -> Result<()> {
        let then = self.data_files()?;
        integrity::check_same_data(
            &self.path,
            &then,
            cfg,
            "use the data the run trained on, or pass --allow-data-change",
        )
    }

    /// The fingerprints of the data files the run that wrote it read.
    pub fn data_files(&self) -> Result<Vec<DataFile>> {
        self.meta
            .get(integrity::DATA)
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| Error::Checkpoint {
                path: self.path.clone(),
                message: format!("metadata '{}' missing or malformed", integrity::DATA),
            })
    }

    fn meta_u64(&self, key: &str) -> Result<u64> {
        self.meta
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::Checkpoint {
                path: self.path.clone(),
                message: format!("metadata '{key}' missing or not a number"),
            })
    }

    /// The config of the run that wrote it, with relative data paths resolved as that run did.
    pub fn config(&self) -> Result<Config> {
        let base_dir = PathBuf::from(self.meta.get("base_dir").map_or(".", String::as_str));
        let text = self.meta.get("config").ok_or_else(|| Error::Checkpoint {
            path: self.path.clone(),
            message: "metadata 'config' missing".into(),
        })?;
        Config::from_toml(
            text,
            &format!("{} (embedded config)", self.path.display()),
            &base_dir,
        )
    }

    /// The towers a DMT model was trained with, by table name (docs/DMT.md, "Where the
    /// towers come from"); `None` for a model without towers and for a file older than
    /// the record (v2), whose towers are its config's.
    pub fn towers(&self) -> Result<Option<Vec<Vec<String>>>> {
        let Some(text) = self.meta.get(TOWERS) else {
            return Ok(None);
        };
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| Error::Checkpoint {
                path: self.path.clone(),
                message: format!("metadata '{TOWERS}' malformed: {e}"),
            })
    }

    /// The checksum of the vocabulary the run's data was encoded with; `None`: hashed.
    pub fn vocab(&self) -> Option<&str> {
        self.meta.get(VOCAB).map(String::as_str)
    }

    /// Refuses a config whose data is encoded otherwise than the run's was (another
    /// vocabulary, or hashing against a vocabulary): its rows would mean other values.
    pub fn check_vocab(&self, cfg: &Config) -> Result<()> {
        let now = towerrec_data::source::vocab_checksum(&cfg.data, &cfg.base_dir)?;
        if now.as_deref() == self.vocab() {
            return Ok(());
        }
        let what = |sum: Option<&str>| match sum {
            Some(s) => format!("the vocabulary {s}"),
            None => "hashing".to_string(),
        };
        let file = match towerrec_data::vocab::config::vocab_path(&cfg.data, &cfg.base_dir) {
            Some(p) => format!("data.vocab {}", p.display()),
            None => format!(
                "the data {}",
                cfg.data.describe(towerrec_data::Part::Train, &cfg.base_dir)
            ),
        };
        Err(Error::Checkpoint {
            path: self.path.clone(),
            message: format!(
                "the run encoded its data with {}, but {file} encodes with {}; use the \
                 vocabulary the run was trained with",
                what(self.vocab()),
                what(now.as_deref())
            ),
        })
    }

    /// Refuses a model whose towers are not those recorded (a resumed run's model is
    /// built on [`recorded_towers`], read before the file was checked).
    pub fn check_towers(&self, model: &mut Model) -> Result<()> {
        let recorded = self.towers()?;
        let built = model.tower_tables();
        if recorded.is_some() && recorded != built {
            return Err(Error::Checkpoint {
                path: self.path.clone(),
                message: format!(
                    "it records the towers {recorded:?}, the model was built with {built:?}"
                ),
            });
        }
        Ok(())
    }

    /// The model it holds, for data of `schema` (its run's, or one of the same
    /// features): built on the towers it records (a v2 file: its config's, `cfg`, the
    /// checkpoint's config), then every parameter and optimizer state loaded.
    pub fn restore(&self, cfg: &Config, schema: &towerrec_data::Schema) -> Result<Model> {
        self.check_vocab(cfg)?;
        let recorded = self.towers()?;
        let seed = cfg.train.seed;
        let mut model = crate::model::Model::for_run(cfg, schema, seed, recorded.as_deref())?;
        self.apply(&mut model)?;
        Ok(model)
    }

    /// Where the run stood.
    pub fn progress(&self) -> Result<Progress> {
        Ok(Progress {
            step: self.meta_u64("step")?,
            epoch: self.meta_u64("epoch")?,
            batch_in_epoch: self.meta_u64("batch_in_epoch")?,
            samples: self.meta_u64("samples")?,
        })
    }

    /// The progress, checked against the run's config and data: steps, epochs, the
    /// batch within the epoch and the samples must tell one story (each epoch the same
    /// number of batches of `train.batch_size`, the last perhaps short), and where the
    /// data says how many rows it has without a pass (binary and synthetic data), the
    /// same number of batches and samples it gives. A text file's rows are checked as
    /// the resumed pass passes over the batches already trained on.
    pub fn checked_progress(&self, cfg: &Config) -> Result<Progress> {
        let p = self.progress()?;
        let rows = towerrec_data::open(
            &cfg.data,
            towerrec_data::Part::Train,
            cfg.train.bad_rows,
            &cfg.base_dir,
        )?
        .remaining();
        progress_story(p, cfg.train.batch_size as u64, rows).map_err(|why| Error::Checkpoint {
            path: self.path.clone(),
            message: format!(
                "its progress (step {}, epoch {}, batch {} of the epoch, {} samples) {why}: \
                     the file was edited, or is not of this data",
                p.step,
                p.epoch + 1,
                p.batch_in_epoch,
                p.samples
            ),
        })?;
        Ok(p)
    }

    /// Overwrites every parameter and optimizer state of `model` from the checkpoint.
    pub fn apply(&self, model: &mut Model) -> Result<()> {
        let st = SafeTensors::deserialize(&self.bytes).map_err(|e| Error::Checkpoint {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let path = &self.path;
        let load = |name: &str, dst: &mut [f32]| -> Result<()> {
            let t = st.tensor(name).map_err(|_| Error::Checkpoint {
                path: path.clone(),
                message: format!("tensor '{name}' missing: the checkpoint is of another model"),
            })?;
            // Float tables may be stored as F16 or BF16 (exactly what they held).
            let Some((len, values)) = decode(t.dtype(), t.data()) else {
                return Err(Error::Checkpoint {
                    path: path.clone(),
                    message: format!("tensor '{name}' is {:?}, expected F32", t.dtype()),
                });
            };
            if let Some((i, x)) = first_non_finite(t.dtype(), t.data()) {
                return Err(Error::Checkpoint {
                    path: path.clone(),
                    message: format!(
                        "tensor '{name}' holds {x} at element {i}: the run that wrote it diverged"
                    ),
                });
            }
            if len != dst.len() {
                return Err(Error::Checkpoint {
                    path: path.clone(),
                    message: format!(
                        "tensor '{name}' has {len} values, the model needs {}",
                        dst.len()
                    ),
                });
            }
            dst.iter_mut().zip(values).for_each(|(d, v)| *d = v);
            Ok(())
        };
        for p in model.dense_params() {
            load(&format!("dense.{}", p.name), p.value)?;
        }
        for (name, buf) in model.dense_optimizer_mut().state_mut() {
            load(&format!("opt.dense.{name}"), buf)?;
        }
        let dense_step = self.meta_u64("dense_optimizer_step")?;
        model.dense_optimizer_mut().set_step(dense_step);
        let steps: Vec<u64> = self
            .meta
            .get("table_steps")
            .map(|s| s.split(',').filter_map(|v| v.parse().ok()).collect())
            .unwrap_or_default();
        let descs = model.table_descs();
        if steps.len() != descs.len() {
            return Err(Error::Checkpoint {
                path: path.clone(),
                message: format!(
                    "checkpoint has {} tables, the model {}",
                    steps.len(),
                    descs.len()
                ),
            });
        }
        // The state tensors the model's sparse optimizer keeps, and their sizes.
        let mut whole = Vec::with_capacity(descs.len());
        for (d, step) in descs.iter().zip(steps) {
            let table = &d.name;
            let name = format!("emb.{table}.weight");
            if !d.precision.trainable() {
                whole.push(WholeTable {
                    name: table.clone(),
                    step,
                    weights: Vec::new(),
                    state: Vec::new(),
                    packed: Some(self.int8_rows(&st, &name, d.rows, d.dim)?),
                });
                continue;
            }
            let mut weights = vec![0.0; d.rows * d.dim];
            load(&name, &mut weights)?;
            let mut state = Vec::new();
            for (name, per_row) in model.sparse_state_layout() {
                let mut buf = vec![0.0; if per_row { d.rows } else { d.rows * d.dim }];
                load(&format!("emb.{table}.opt.{name}"), &mut buf)?;
                state.push((name.to_string(), buf));
            }
            whole.push(WholeTable {
                name: table.clone(),
                step,
                weights,
                state,
                packed: None,
            });
        }
        model.load_whole_tables(&whole)
    }

    /// The stored rows of the int8 table tensor `name` (`rows × (dim + 8)` bytes).
    fn int8_rows(
        &self,
        st: &SafeTensors<'_>,
        name: &str,
        rows: usize,
        dim: usize,
    ) -> Result<Vec<u8>> {
        let bad = |message: String| Error::Checkpoint {
            path: self.path.clone(),
            message,
        };
        let t = st.tensor(name).map_err(|_| {
            bad(format!(
                "tensor '{name}' missing: the checkpoint is of another model"
            ))
        })?;
        let width = towerrec_core::embedding::TablePrecision::Int8.row_bytes(dim);
        if t.dtype() != Dtype::U8 {
            return Err(bad(format!(
                "tensor '{name}' is {:?}, but the config says the table is int8 (U8 rows of \
                 {width} bytes): make int8 checkpoints with `towerrec quantize`",
                t.dtype()
            )));
        }
        if t.shape() != [rows, width] {
            return Err(bad(format!(
                "tensor '{name}' has shape {:?}, the model needs [{rows}, {width}]",
                t.shape()
            )));
        }
        Ok(t.data().to_vec())
    }
}

#[cfg(test)]
mod tests;
