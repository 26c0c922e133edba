//! `[model.towers]`: a DMT model (paper §3.2, §4): the tables grouped into towers, each
//! followed by a Tower Module whose outputs, not the tables' pooled vectors, feed the
//! interaction.
//!
//! ```toml
//! [model.towers]
//! module = "dlrm"   # dlrm (Listing 1), dcn (Listing 2) or identity (pass-through)
//! count = 2         # how many towers; which tables each holds is the plan's
//! d = 8             # D: width of the module's output vectors
//! c = 1             # dlrm: c·D outputs per feature
//! p = 0             # dlrm: p·D outputs from the whole tower
//! cross_layers = 1  # dcn: depth of the tower's CrossNet
//! # bias_init = "zero"  # or "normal"; default zero for dlrm, normal (drawn) for dcn
//! ```
//!
//! Which tables each tower holds comes from one place (`crate::run_towers`): the
//! plan, a checkpoint's record, or the default planner (table `i` in tower
//! `i mod count`). An old config's `features` (the towers by name) or `file` (a
//! partition `towerrec partition` wrote) is converted once, on load: `count` becomes the
//! number of towers listed, the listed towers stand in for the default planner's, and
//! the config is written back with `count` alone (docs/DMT.md, "Where the towers come
//! from").

use serde::{Deserialize, Serialize};
use towerrec_core::layers::tower::TowerModuleKind;

/// Which Tower Module follows each tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TowerModuleName {
    Identity,
    Dlrm,
    Dcn,
}

/// How a Tower Module's linear biases start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BiasInit {
    /// Drawn as every linear layer's (the DLRM reference: `N(0, 1/out)`).
    Normal,
    /// Zero.
    Zero,
}

/// `[model.towers]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TowersConfig {
    pub module: TowerModuleName,
    /// Number of towers (after loading, always given: an old config's listed towers set
    /// it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// An old config's towers by table name, read on load and never written back: they
    /// stand in for the default planner's towers (`crate::run_towers`).
    #[serde(default, skip_serializing)]
    pub features: Option<Vec<Vec<String>>>,
    /// An old config's partition file (`towerrec partition`'s JSON), relative to the
    /// config; read into `features` on load and never written back.
    #[serde(default, skip_serializing)]
    pub file: Option<std::path::PathBuf>,
    /// D: width of the output vectors (dlrm, dcn); for DLRM also the bottom MLP's output.
    #[serde(default)]
    pub d: usize,
    #[serde(default)]
    pub c: usize,
    #[serde(default)]
    pub p: usize,
    #[serde(default)]
    pub cross_layers: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_rank: Option<usize>,
    /// How the modules' linear biases start; [`TowersConfig::bias_init`] when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias_init: Option<BiasInit>,
}

impl TowersConfig {
    /// How the modules' linear biases start: as given, else zero for the DLRM module
    /// and drawn for the others. Measured on MovieLens-100k and the Criteo and Avazu
    /// samples (docs/DMT.md, "Model quality: the paper's Tables 4, 5 and 6"): zero biases train DMT-DLRM better
    /// on all three, and DMT-DCN worse on Avazu.
    pub fn bias_init(&self) -> BiasInit {
        self.bias_init.unwrap_or(match self.module {
            TowerModuleName::Dlrm => BiasInit::Zero,
            TowerModuleName::Identity | TowerModuleName::Dcn => BiasInit::Normal,
        })
    }

    /// The module's kind.
    pub fn kind(&self) -> TowerModuleKind {
        match self.module {
            TowerModuleName::Identity => TowerModuleKind::Identity,
            TowerModuleName::Dlrm => TowerModuleKind::Dlrm {
                c: self.c,
                p: self.p,
                d: self.d,
            },
            TowerModuleName::Dcn => TowerModuleKind::Dcn {
                d: self.d,
                layers: self.cross_layers,
                rank: self.cross_rank,
            },
        }
    }

    /// The width of the vectors the interaction sees: D, or the embedding width for
    /// pass-through towers.
    pub fn vector_width(&self, embedding_dim: usize) -> usize {
        match self.module {
            TowerModuleName::Identity => embedding_dim,
            _ => self.d,
        }
    }

    /// The default planner's towers as table indices, given the tables' names in model
    /// order: an old config's listed towers, else table `i` in tower `i mod count` (the
    /// paper's naive split). A run's towers come from `crate::run_towers`, which
    /// prefers a plan's or a checkpoint's.
    pub fn assignment(&self, names: &[String]) -> std::result::Result<Vec<Vec<usize>>, String> {
        match (&self.features, self.count) {
            (Some(towers), _) => {
                towers_by_name(towers, names).map_err(|e| format!("model.towers.features: {e}"))
            }
            (None, None) => Err("model.towers: give count (how many towers)".into()),
            (None, Some(0)) => Err("model.towers.count: must be at least 1".into()),
            (None, Some(t)) if t > names.len() => Err(format!(
                "model.towers.count: {t} towers for {} tables",
                names.len()
            )),
            (None, Some(t)) => Ok(towerrec_plan::planners::strided_towers(names.len(), t)),
        }
    }

    /// Converts an old config's towers once, on load: reads `file` (relative to `base`)
    /// into `features`, and sets `count` to the number of towers listed.
    pub(super) fn convert_listed(
        &mut self,
        base: &std::path::Path,
    ) -> std::result::Result<(), String> {
        if let Some(file) = self.file.take() {
            if self.features.is_some() || self.count.is_some() {
                return Err("model.towers: give one of count, features and file".into());
            }
            let path = base.join(&file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("model.towers.file {}: {e}", path.display()))?;
            let partition = towerrec_plan::partition::TowerPartition::from_json(&text)
                .map_err(|e| format!("model.towers.file {}: {e}", path.display()))?;
            self.features = Some(partition.towers);
        }
        if let Some(listed) = &self.features {
            if self.count.is_some() {
                return Err("model.towers: give count or features, not both".into());
            }
            self.count = Some(listed.len());
        }
        Ok(())
    }

    /// Checks what does not depend on the data.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        if self.module != TowerModuleName::Identity && self.d == 0 {
            return Err("model.towers.d: must be at least 1".into());
        }
        if self.module == TowerModuleName::Dlrm && self.c == 0 && self.p == 0 {
            return Err("model.towers: the dlrm module needs c or p at least 1".into());
        }
        if self.cross_rank == Some(0) {
            return Err("model.towers.cross_rank: must be at least 1".into());
        }
        Ok(())
    }
}

/// `towers` (table names) as indices into `names`: every table in exactly one tower.
pub fn towers_by_name(
    towers: &[Vec<String>],
    names: &[String],
) -> std::result::Result<Vec<Vec<usize>>, String> {
    let mut seen = vec![None; names.len()];
    let mut out = Vec::with_capacity(towers.len());
    for (t, features) in towers.iter().enumerate() {
        if features.is_empty() {
            return Err(format!("tower {t} is empty"));
        }
        let mut ids = Vec::with_capacity(features.len());
        for f in features {
            let i = names
                .iter()
                .position(|n| n == f)
                .ok_or_else(|| format!("tower {t}: no table '{f}'"))?;
            if let Some(other) = seen[i].replace(t) {
                return Err(format!("table '{f}' is in towers {other} and {t}"));
            }
            ids.push(i);
        }
        out.push(ids);
    }
    if let Some(i) = seen.iter().position(Option::is_none) {
        return Err(format!("table '{}' is in no tower", names[i]));
    }
    Ok(out)
}
