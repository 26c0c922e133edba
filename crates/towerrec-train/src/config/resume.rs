//! What a resumed run may change: the checkpoint's config defines the model, the
//! optimizer and the data, so `--set` on a resume may only change how long the run goes
//! and how it is run and reported ([`SAFE_ON_RESUME`]); any other key is refused by name
//! rather than silently dropped.

use super::{with_overrides, Config};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// Keys (and tables of keys) that `--set` may change when resuming.
pub const SAFE_ON_RESUME: &[&str] = &[
    "train.max_steps",
    "train.epochs",
    "train.threads",
    "train.log_every",
    "train.eval_every",
    "train.checkpoint_every",
    "train.eval_batch_size",
    "train.max_bad_fraction",
    "train.fingerprint_whole_mib",
    "cluster",
];

fn is_safe(key: &str) -> bool {
    SAFE_ON_RESUME
        .iter()
        .any(|s| key == *s || key.strip_prefix(s).is_some_and(|r| r.starts_with('.')))
}

/// Every leaf of a TOML table by dotted key.
fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => {
                out.insert(key, other.clone());
            }
        }
    }
}

/// The dotted keys whose values differ between two configs' TOML.
fn changed_keys(before: &str, after: &str) -> Vec<String> {
    let leaves = |text: &str| {
        let mut out = BTreeMap::new();
        if let Ok(t) = text.parse::<toml::Table>() {
            flatten("", &t, &mut out);
        }
        out
    };
    let (a, b) = (leaves(before), leaves(after));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

impl Config {
    /// This (a checkpoint's) config with `overrides` applied, where they change only
    /// keys that are safe to change on a resume; the others are refused by name.
    pub fn with_resume_overrides(&self, overrides: &[String]) -> Result<Config> {
        if overrides.is_empty() {
            return Ok(self.clone());
        }
        let before = self.to_toml();
        let text = with_overrides(&before, &self.origin, overrides)?;
        let after = Config::from_toml(&text, &self.origin, &self.base_dir)?;
        let refused: Vec<String> = changed_keys(&before, &after.to_toml())
            .into_iter()
            .filter(|k| !is_safe(k))
            .collect();
        if !refused.is_empty() {
            return Err(Error::Config {
                file: self.origin.clone(),
                message: format!(
                    "cannot change {} when resuming (asked by --set or a flag): the checkpoint's model, optimizer \
                     and data define the run (start a new run to change them); a resume may \
                     change {}",
                    refused.join(", "),
                    SAFE_ON_RESUME.join(", ")
                ),
            });
        }
        Ok(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn safe_keys_change_and_others_are_refused_by_name() {
        let cfg = Config::quickstart(&[]).unwrap();
        let r = cfg
            .with_resume_overrides(&sets(&["train.max_steps=5", "cluster.hosts=1"]))
            .unwrap();
        assert_eq!((r.train.max_steps, r.cluster.hosts), (Some(5), 1));
        let e = cfg
            .with_resume_overrides(&sets(&[
                "train.batch_size=8",
                "optimizer.dense_lr=0.5",
                "train.epochs=3",
            ]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot change optimizer.dense_lr, train.batch_size when resuming"),
            "{e}"
        );
        // Setting a key to the value it has is no change.
        assert!(cfg
            .with_resume_overrides(&sets(&["train.batch_size=256"]))
            .is_ok());
        assert!(is_safe("cluster.plan") && !is_safe("clusterx") && !is_safe("train.seed"));
    }
}
