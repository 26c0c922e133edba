//! DMT's Tower Partitioner (TP; Luo et al., MLSys 2024, §3.3; called BFP in the
//! slides): sparse features into T balanced towers of features that belong together.
//!
//! 1. [`InteractionAccumulator`]: the interaction matrix `I(i, j)`, the mean over
//!    samples of `|cos|` between the pooled embeddings of features `i` and `j`.
//! 2. [`Mode::distance`]: `D = 1 − I` (*coherent*: features that interact share a
//!    tower) or `D = I` (*diverse*: they are spread over towers).
//! 3. [`embed`]: coordinates in `n` dimensions (the paper: 2) whose distances follow D,
//!    by minimising the stress with Adam.
//! 4. [`constrained_kmeans`]: T clusters of those points whose largest is at most K
//!    times the smallest (Bradley et al. 2000), with an exact assignment step.
//!
//! [`partition`] runs 2–4; [`naive`] is the strided baseline of §5.2.3 (Table 6);
//! [`TowerPartition`] is the JSON a partition is saved as.

mod assign;
mod interaction;
mod kmeans;
mod rng;
mod stress;

pub use interaction::{InteractionAccumulator, Matrix};
pub use kmeans::{constrained_kmeans, size_bounds, sizes_allowed, Clustering, KMeansOptions};
pub use stress::{embed, Embedding, StressOptions};

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// How the interaction becomes a distance (§3.3, last paragraph).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `D = 1 − I`: features that interact strongly end up in one tower.
    Coherent,
    /// `D = I`: features that interact strongly end up in different towers.
    Diverse,
}

impl Mode {
    /// The distance matrix of interaction `i`: `1 − I` or `I`, with zeros on the
    /// diagonal.
    pub fn distance(self, i: &Matrix) -> Matrix {
        Matrix::from_fn(i.n(), |a, b| match (a == b, self) {
            (true, _) => 0.0,
            (false, Mode::Coherent) => 1.0 - i.get(a, b),
            (false, Mode::Diverse) => i.get(a, b),
        })
    }

    /// `"coherent"` or `"diverse"`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Coherent => "coherent",
            Mode::Diverse => "diverse",
        }
    }
}

/// Everything [`partition`] needs besides the interaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionOptions {
    /// Number of towers, `1 ≤ T ≤ F`.
    pub towers: usize,
    pub mode: Mode,
    /// The embedding (dimensions, Adam's settings).
    pub stress: StressOptions,
    /// K: largest tower ≤ K × smallest (or one more than it); `≥ 1`.
    pub max_ratio: f64,
    /// k-means starts.
    pub restarts: usize,
    /// Seed of the embedding and the k-means starts.
    pub seed: u64,
}

impl PartitionOptions {
    /// `towers` towers in `mode`, as equal in size as integers allow, on the plane, with
    /// the default fit and 8 k-means starts from seed 0.
    pub fn new(towers: usize, mode: Mode) -> Self {
        PartitionOptions {
            towers,
            mode,
            stress: StressOptions::default(),
            max_ratio: 1.0,
            restarts: KMeansOptions::new(towers).restarts,
            seed: 0,
        }
    }
}

/// A partition with what it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Partitioned {
    /// Feature indices of each tower, ascending; towers ordered by their first feature.
    pub towers: Vec<Vec<usize>>,
    /// The features' coordinates.
    pub embedding: Embedding,
    /// k-means' cost (squared distances of the coordinates to their tower's mean).
    pub kmeans_cost: f64,
}

/// The Tower Partitioner: the features of interaction matrix `interaction` into towers.
pub fn partition(interaction: &Matrix, opts: &PartitionOptions) -> Result<Partitioned> {
    let f = interaction.n();
    size_bounds(f, opts.towers, opts.max_ratio)?;
    let d = opts.mode.distance(interaction);
    let embedding = embed(&d, &opts.stress, opts.seed)?;
    let clustering = constrained_kmeans(
        &embedding.coords,
        embedding.dims,
        &KMeansOptions {
            towers: opts.towers,
            max_ratio: opts.max_ratio,
            restarts: opts.restarts,
            max_iters: KMeansOptions::new(opts.towers).max_iters,
            seed: opts.seed,
        },
    )?;
    Ok(Partitioned {
        towers: towers_of(&clustering.assignment, opts.towers),
        embedding,
        kmeans_cost: clustering.cost,
    })
}

/// The towers of an assignment (feature → tower), each ascending, ordered by their
/// first feature; empty towers left out.
pub fn towers_of(assignment: &[usize], towers: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); towers];
    for (g, &t) in assignment.iter().enumerate() {
        if let Some(tower) = out.get_mut(t) {
            tower.push(g);
        }
    }
    out.retain(|t| !t.is_empty());
    out.sort_by_key(|t| t[0]);
    out
}

/// The paper's naive baseline (§5.2.3): tower `t` gets features `t, t + T, t + 2T, …`.
pub fn naive(features: usize, towers: usize) -> Result<Vec<Vec<usize>>> {
    size_bounds(features, towers, 1.0)?;
    Ok((0..towers)
        .map(|t| (t..features).step_by(towers).collect())
        .collect())
}

/// Mean interaction of feature pairs in one tower and in different towers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Affinity {
    /// Mean `I(i, j)` over pairs `i ≠ j` in one tower (`None`: every tower has one feature).
    pub within: Option<f64>,
    /// Mean `I(i, j)` over pairs in different towers (`None`: one tower).
    pub between: Option<f64>,
}

/// The [`Affinity`] of `towers` (feature indices of `interaction`).
pub fn affinity(interaction: &Matrix, towers: &[Vec<usize>]) -> Affinity {
    let f = interaction.n();
    let mut tower_of = vec![usize::MAX; f];
    for (t, tower) in towers.iter().enumerate() {
        for &g in tower {
            if g < f {
                tower_of[g] = t;
            }
        }
    }
    let (mut within, mut between) = ((0.0, 0usize), (0.0, 0usize));
    for i in 0..f {
        for j in i + 1..f {
            if tower_of[i] == usize::MAX || tower_of[j] == usize::MAX {
                continue;
            }
            let s = if tower_of[i] == tower_of[j] {
                &mut within
            } else {
                &mut between
            };
            s.0 += interaction.get(i, j);
            s.1 += 1;
        }
    }
    let mean = |(s, n): (f64, usize)| (n > 0).then(|| s / n as f64);
    Affinity {
        within: mean(within),
        between: mean(between),
    }
}

/// How a saved partition was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// TP with `D = 1 − I`.
    Coherent,
    /// TP with `D = I`.
    Diverse,
    /// The strided baseline ([`naive`]).
    Naive,
}

impl From<Mode> for Method {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Coherent => Method::Coherent,
            Mode::Diverse => Method::Diverse,
        }
    }
}

/// A tower partition as saved: JSON such as
/// `{"mode":"coherent","towers":[["C1","C7"],["C2","C3"]],…}`, readable and
/// hand-editable. Only `mode` and `towers` are required; the rest records how it was
/// made and how good it looked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TowerPartition {
    pub mode: Method,
    /// Feature names of each tower.
    pub towers: Vec<Vec<String>>,
    /// K of the size rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Dimensions of the embedding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims: Option<usize>,
    /// Samples the interaction matrix was averaged over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Kruskal stress-1 of the embedding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stress: Option<f64>,
    /// Mean interaction within and between towers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

impl TowerPartition {
    /// The partition `towers` (indices into `names`) made by `mode`, with no record of
    /// how; an error unless every feature is in exactly one tower.
    pub fn new(mode: Method, towers: &[Vec<usize>], names: &[String]) -> Result<Self> {
        check_cover(towers, names.len(), |g| g.to_string())?;
        Ok(TowerPartition {
            mode,
            towers: towers
                .iter()
                .map(|t| t.iter().map(|&g| names[g].clone()).collect())
                .collect(),
            max_ratio: None,
            seed: None,
            dims: None,
            samples: None,
            stress: None,
            affinity: None,
        })
    }

    /// The towers as indices into `names`: an error unless every tower is non-empty and
    /// every name is in exactly one tower.
    pub fn indices(&self, names: &[String]) -> Result<Vec<Vec<usize>>> {
        let towers = self
            .towers
            .iter()
            .map(|t| {
                t.iter()
                    .map(|n| {
                        names.iter().position(|m| m == n).ok_or_else(|| {
                            Error::Partition(format!("feature '{n}' is not one of the model's"))
                        })
                    })
                    .collect::<Result<Vec<usize>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        check_cover(&towers, names.len(), |g| format!("'{}'", names[g]))?;
        Ok(towers)
    }

    /// Pretty JSON with a final newline.
    pub fn to_json_pretty(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Parses a partition (not yet checked against a model: see [`Self::indices`]).
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Partition(format!("partition JSON: {e}")))
    }
}

/// Every tower non-empty and every feature `0..features` in exactly one tower.
fn check_cover(
    towers: &[Vec<usize>],
    features: usize,
    name: impl Fn(usize) -> String,
) -> Result<()> {
    let mut seen = vec![false; features];
    for (t, tower) in towers.iter().enumerate() {
        if tower.is_empty() {
            return Err(Error::Partition(format!("tower {t} is empty")));
        }
        for &g in tower {
            match seen.get_mut(g) {
                None => {
                    return Err(Error::Partition(format!(
                        "tower {t} holds feature {g}, but there are only {features}"
                    )))
                }
                Some(true) => {
                    return Err(Error::Partition(format!(
                        "feature {} is in more than one tower",
                        name(g)
                    )))
                }
                Some(s) => *s = true,
            }
        }
    }
    if let Some(g) = seen.iter().position(|s| !s) {
        return Err(Error::Partition(format!(
            "feature {} is in no tower",
            name(g)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
