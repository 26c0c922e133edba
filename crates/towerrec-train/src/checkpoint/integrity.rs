//! What makes a checkpoint trustworthy: a checksum (xxh3-64) of every tensor and of the
//! metadata, verified on load so that a flipped byte is named instead of loaded; a
//! check that no tensor holds NaN or infinity, on save and on load; and fingerprints of
//! the data files the run read, so that a resumed run can refuse changed data.

use crate::config::Config;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use towerrec_data::FileFingerprint;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Metadata key of the tensors' checksums (a JSON object, tensor name to hex digest).
pub(super) const TENSOR_CHECKSUMS: &str = "tensor_checksums";
/// Metadata key of the checksum of every other metadata entry.
pub(super) const META_CHECKSUM: &str = "metadata_checksum";
/// Metadata key of the data fingerprints (JSON).
pub(super) const DATA: &str = "data_files";

/// The hex digest of some bytes.
pub(super) fn checksum(bytes: &[u8]) -> String {
    format!("{:016x}", xxh3_64(bytes))
}

/// The digest of every metadata entry but [`META_CHECKSUM`], in key order.
pub(super) fn meta_checksum(meta: &HashMap<String, String>) -> String {
    let sorted: BTreeMap<&String, &String> = meta
        .iter()
        .filter(|(k, _)| k.as_str() != META_CHECKSUM)
        .collect();
    let mut h = Xxh3::new();
    for (k, v) in sorted {
        // Lengths first, so that entries cannot run into each other.
        h.update(&(k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update(&(v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
    format!("{:016x}", h.digest())
}

/// A data file the run read, by its role (`train`, `eval`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    pub role: String,
    #[serde(flatten)]
    pub fingerprint: FileFingerprint,
}

/// Fingerprints of every data file `cfg` reads, hashed whole up to
/// `train.fingerprint_whole_mib`.
pub fn data_files(cfg: &Config) -> Result<Vec<DataFile>> {
    let limit = cfg.train.fingerprint_whole_mib.saturating_mul(1 << 20);
    cfg.data
        .input_files(&cfg.base_dir)
        .into_iter()
        .map(|(role, path)| {
            Ok(DataFile {
                role: role.to_string(),
                fingerprint: FileFingerprint::of(&path, limit)?,
            })
        })
        .collect()
}

/// Refuses the data files `cfg` reads now where one has other content than the file of
/// its role in `then` (fingerprinted as that one was: whole or sampled), or has no
/// file of its role there; the message names the files, how they differ and the way
/// out (`way_out`).
pub(crate) fn check_same_data(
    path: &std::path::Path,
    then: &[DataFile],
    cfg: &Config,
    way_out: &str,
) -> Result<()> {
    let refuse = |message: String| Error::Checkpoint {
        path: path.to_path_buf(),
        message: format!("{message}; {way_out}"),
    };
    for (role, now) in cfg.data.input_files(&cfg.base_dir) {
        let Some(old) = then.iter().find(|o| o.role == role) else {
            return Err(refuse(format!(
                "the run read no {role} data file, and {} would be one",
                now.display()
            )));
        };
        let new = old.fingerprint.again(&now)?;
        if let Some(change) = old.fingerprint.change_to(&new) {
            return Err(refuse(format!(
                "the {role} data {} is not what the run trained on ({}: {change})",
                now.display(),
                old.fingerprint.path.display()
            )));
        }
    }
    Ok(())
}
