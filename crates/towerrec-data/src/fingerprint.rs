//! Fingerprints of data files, so that a resumed run can tell whether its data changed
//! since the checkpoint: the size, the modification time and a hash of the content
//! (xxh3), whole for files up to a limit the run sets (`train.fingerprint_whole_mib`,
//! default [`DEFAULT_WHOLE_LIMIT`]) and of sampled blocks beyond.
//!
//! The size and the hash decide; a changed modification time alone (a copy, a `touch`)
//! is not a change. Sampling keeps a fingerprint of a terabyte file to a few
//! milliseconds, at the price of missing an edit that keeps the size and falls between
//! the blocks; a file hashed whole is checked whole again ([`FileFingerprint::again`]).
//! The cost of hashing whole is measured in docs/RELIABILITY.md ("Resume checks").

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;
use xxhash_rust::xxh3::Xxh3;

/// Files up to this size are hashed whole unless the run sets another limit: 1 GiB.
pub const DEFAULT_WHOLE_LIMIT: u64 = 1 << 30;
/// Larger files: this many blocks, evenly spaced from the first to the last byte.
const SAMPLED_BLOCKS: u64 = 64;
const BLOCK: u64 = 64 << 10;

/// What identifies a data file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFingerprint {
    /// The path as the run named it.
    pub path: PathBuf,
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch, where the system has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ns: Option<u64>,
    /// xxh3-64 of the content (or of the sampled blocks), hexadecimal.
    pub hash: String,
    /// Whether `hash` covers sampled blocks only.
    pub sampled: bool,
}

impl FileFingerprint {
    /// Fingerprints the file at `path`: its content hashed whole if it has at most
    /// `whole_limit` bytes, else sampled.
    pub fn of(path: &Path, whole_limit: u64) -> Result<Self> {
        Self::taken(path, |size| size > whole_limit)
    }

    /// The fingerprint of the file at `path` now, taken as this one was (whole or
    /// sampled), to compare with it.
    pub fn again(&self, path: &Path) -> Result<Self> {
        let sampled = self.sampled;
        Self::taken(path, |_| sampled)
    }

    fn taken(path: &Path, sample: impl FnOnce(u64) -> bool) -> Result<Self> {
        let io = |e| Error::io(path, e);
        let mut file = crate::datafile::open(path)?;
        let meta = file.metadata().map_err(io)?;
        let size = meta.len();
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .and_then(|d| u64::try_from(d.as_nanos()).ok());
        let mut hasher = Xxh3::new();
        hasher.update(&size.to_le_bytes());
        // Too small to sample: whole.
        let sampled = size >= SAMPLED_BLOCKS * BLOCK && sample(size);
        let mut buf = vec![0u8; BLOCK as usize];
        if sampled {
            let last = size - BLOCK;
            for i in 0..SAMPLED_BLOCKS {
                let at = (u128::from(last) * u128::from(i) / u128::from(SAMPLED_BLOCKS - 1)) as u64;
                file.seek(SeekFrom::Start(at)).map_err(io)?;
                file.read_exact(&mut buf).map_err(io)?;
                hasher.update(&buf);
            }
        } else {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = file.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            size,
            modified_ns,
            hash: format!("{:016x}", hasher.digest()),
            sampled,
        })
    }

    /// How `now` differs from this fingerprint in content, or `None` if it does not.
    pub fn change_to(&self, now: &FileFingerprint) -> Option<String> {
        if self.size != now.size {
            return Some(format!(
                "its size went from {} to {} bytes",
                self.size, now.size
            ));
        }
        if self.hash != now.hash || self.sampled != now.sampled {
            return Some("its content changed (same size)".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_decides_not_the_modification_time() {
        let dir = std::env::temp_dir().join(format!("towerrec-fp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.txt");
        std::fs::write(&a, "1\t2\t3\n").unwrap();
        let before = FileFingerprint::of(&a, DEFAULT_WHOLE_LIMIT).unwrap();
        assert!(!before.sampled);
        // Rewritten with the same bytes (a new modification time): the same data.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&a, "1\t2\t3\n").unwrap();
        assert_eq!(
            before.change_to(&FileFingerprint::of(&a, DEFAULT_WHOLE_LIMIT).unwrap()),
            None
        );
        std::fs::write(&a, "1\t2\t4\n").unwrap();
        let edited = before
            .change_to(&FileFingerprint::of(&a, DEFAULT_WHOLE_LIMIT).unwrap())
            .unwrap();
        assert!(edited.contains("content"), "{edited}");
        std::fs::write(&a, "1\t2\t3\n4\n").unwrap();
        let grown = before
            .change_to(&FileFingerprint::of(&a, DEFAULT_WHOLE_LIMIT).unwrap())
            .unwrap();
        assert!(grown.contains("size went from 6 to 8"), "{grown}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn files_past_the_limit_hash_sampled_blocks_and_whole_ones_are_checked_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.bin");
        let mut bytes = vec![7u8; (SAMPLED_BLOCKS * BLOCK + 3 * BLOCK) as usize];
        std::fs::write(&p, &bytes).unwrap();
        let sampled = FileFingerprint::of(&p, 0).unwrap();
        let whole = FileFingerprint::of(&p, DEFAULT_WHOLE_LIMIT).unwrap();
        assert!(sampled.sampled && !whole.sampled);
        // One byte between two sampled blocks: only the whole hash sees it, and a
        // fingerprint taken whole is taken whole again whatever the limit now.
        let n = bytes.len();
        let last = n as u64 - BLOCK;
        let starts: Vec<u64> = (0..SAMPLED_BLOCKS)
            .map(|i| last * i / (SAMPLED_BLOCKS - 1))
            .collect();
        let between = (n as u64 / 2..)
            .find(|&p| starts.iter().all(|&s| p < s || p >= s + BLOCK))
            .unwrap();
        bytes[between as usize] = 8;
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(sampled.change_to(&sampled.again(&p).unwrap()), None);
        assert!(whole.change_to(&whole.again(&p).unwrap()).is_some());
        // The first and last blocks are always sampled.
        bytes[n - 1] = 9;
        std::fs::write(&p, &bytes).unwrap();
        assert!(sampled.change_to(&sampled.again(&p).unwrap()).is_some());
    }
}
