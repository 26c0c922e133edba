//! DMT's Tower Modules (Luo et al. 2024, "Disaggregated Multi-Tower: Topology-aware
//! Modeling Technique for Efficient Large Scale Recommendation", §3.2 and §4).
//!
//! A tower module is the dense layer that sits at the end of a tower's embedding
//! exchange (step e of SPTT) and compresses its features' embeddings before they cross
//! hosts, so the cross-host all-to-all carries `O` values per sample instead of `F·N`.
//! Its backward, and so the synchronisation of its weights, stays within the tower's
//! host.
//!
//! Every kind reads, per sample, the embeddings of the tower's `F` features, each `N`
//! wide, flattened feature-major (`x[b, f·N + k]`, the `embs.view(B, -1)` of the paper's
//! listings), and writes rows of width `O`:
//!
//! - [`IdentityTower`]: `O = F·N`, no parameters. SPTT with pass-through towers is the
//!   original model (§5.2.1, Table 3), which is how SPTT is shown to preserve semantics.
//! - [`DlrmTower`] (Listing 1): `O = D·(p + c·F)`.
//! - [`DcnTower`] (Listing 2): `O = F·D`.
//!
//! [`TowerModule`] is the one type a model holds per tower; [`TowerModuleKind`] describes
//! it without its weights, so a model builder or the simulator can size buffers and count
//! costs ([`TowerModuleKind::counts`]) before anything is allocated.
//!
//! # FLOP convention
//!
//! FLOPs are counted as the rest of the repository counts them (`towerrec-sim`'s
//! `Workload` and `Towers`, and the paper's MFlops/sample): a multiply-add is
//! 2 FLOPs, so a `Linear(in → out)` costs `2·in·out` per row and its bias add is not
//! counted; a DCN-v2 cross layer of width `W` costs `2·W²` (or `4·W·r` at rank `r`) plus
//! `3·W` for its element-wise terms. Copies, reshapes and concatenations cost nothing.
//! Only the forward is counted; training roughly triples it.

mod dcn;
mod dlrm;
mod identity;

pub use dcn::DcnTower;
pub use dlrm::DlrmTower;
pub use identity::IdentityTower;

use crate::error::{Error, Result};
use crate::layer::{Layer, ParamMut};
use crate::real::Real;
use rand::Rng;

/// What a tower module is, without its weights: the per-kind hyper-parameters of the
/// paper's listings. The tower's feature count `F` and embedding width `N` are given
/// separately because they come from the partition, not from the module's design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TowerModuleKind {
    /// Pass-through: the tower's embeddings unchanged.
    Identity,
    /// Listing 1: `p·D` outputs from one linear map of the whole flattened row, and
    /// `c·D` outputs per feature from one linear map shared by all features.
    Dlrm { c: usize, p: usize, d: usize },
    /// Listing 2: a `layers`-deep CrossNet of width `F·N` (of the given low `rank`, or
    /// full rank), then a linear map to `F·D`.
    Dcn {
        d: usize,
        layers: usize,
        rank: Option<usize>,
    },
}

/// Sizes and costs of a tower module for one `(F, N)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TowerCounts {
    /// Values per output row (the paper's `O`).
    pub out_dim: usize,
    /// Trainable scalars, biases included.
    pub params: usize,
    /// Forward FLOPs per sample (see the module docs for the convention).
    pub forward_flops_per_sample: usize,
}

impl TowerModuleKind {
    /// Output columns per feature when the module is one map of each feature's vector
    /// on its own (DLRM's with `p = 0`; [`TowerModule::per_feature_map`]), else `None`.
    pub fn per_feature_width(&self) -> Option<usize> {
        match *self {
            TowerModuleKind::Dlrm { c, p: 0, d } => Some(c * d),
            _ => None,
        }
    }

    /// Output width, parameter count and forward FLOPs per sample of this kind on `f`
    /// features of width `n`.
    ///
    /// # Errors
    /// [`Error::Config`] if a size is 0 where the module needs it positive (`f`, `n`,
    /// `d`, a low rank, or both `p` and `c`), or if a count overflows `usize`.
    pub fn counts(&self, f: usize, n: usize) -> Result<TowerCounts> {
        if f == 0 || n == 0 {
            return Err(Error::Config(format!(
                "tower module over {f} feature(s) of width {n}: both must be positive"
            )));
        }
        // Every kind reads rows of F·N values; checked once here so that no kind sizes
        // a buffer from a wrapped product.
        checked_sum_of_products("input width F·N", &[&[f, n]])?;
        match *self {
            TowerModuleKind::Identity => identity::counts(f, n),
            TowerModuleKind::Dlrm { c, p, d } => dlrm::counts(f, n, c, p, d),
            TowerModuleKind::Dcn { d, layers, rank } => dcn::counts(f, n, d, layers, rank),
        }
    }
}

/// `Σ terms` of products, or a [`Error::Config`] naming `what` if any step overflows.
/// Tower sizes come from user configs, and a wrapped count would size a buffer wrongly
/// instead of failing.
fn checked_sum_of_products(what: &str, terms: &[&[usize]]) -> Result<usize> {
    terms
        .iter()
        .try_fold(0usize, |acc, factors| {
            let product = factors.iter().try_fold(1usize, |p, &v| p.checked_mul(v))?;
            acc.checked_add(product)
        })
        .ok_or_else(|| Error::Config(format!("tower module: {what} overflows usize")))
}

/// `params` with `prefix.` before each name, so that the parts of a module keep apart in
/// checkpoints.
fn prefixed<'a, T>(prefix: &str, params: Vec<ParamMut<'a, T>>) -> Vec<ParamMut<'a, T>> {
    params
        .into_iter()
        .map(|p| ParamMut {
            name: format!("{prefix}.{}", p.name),
            ..p
        })
        .collect()
}

/// `buf[..len]`, growing `buf` first if needed: scratch buffers grow to the largest batch
/// seen and are then reused, so a warm training loop does not allocate.
fn grow<T: Real>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    if buf.len() < len {
        buf.resize(len, T::zero());
    }
    &mut buf[..len]
}

/// The paper's compression ratio (§4, Table 5) of a set of towers covering
/// `total_features` features of width `n`: embedding values per sample entering the
/// towers over values leaving them, `|F|·N / Σ O_i`.
///
/// §4 prints the formula as `Σ O_i / (|F|·N)`, but every number the paper reports is its
/// reciprocal: Table 5 calls `D = 64` on `N = 128` (`c = 1, p = 0`, so `Σ O_i = |F|·N/2`)
/// a ratio of 2, and 16 for `D = 8`. This follows the reported numbers, as
/// `towerrec-sim`'s `TowerCosts::compression` does, so a larger ratio means fewer
/// bytes across hosts.
///
/// `outputs` are the towers' `O_i`. Returns `+∞` if they sum to 0 (and NaN if
/// `total_features·n` is 0 too).
pub fn compression_ratio(outputs: &[usize], total_features: usize, n: usize) -> f64 {
    // A fold from +0.0, not `sum()`: an empty float sum is −0.0, which would make the
    // ratio of no output −∞.
    let out = outputs.iter().fold(0.0f64, |acc, &o| acc + o as f64);
    total_features as f64 * n as f64 / out
}

/// One tower's module, of any kind.
#[derive(Debug, Clone)]
pub enum TowerModule<T> {
    Identity(IdentityTower<T>),
    Dlrm(DlrmTower<T>),
    Dcn(DcnTower<T>),
}

impl<T: Real> TowerModule<T> {
    /// Sets the module's linear biases to zero, so that at the start every output is a
    /// linear map of the tower's embeddings. Drawn as the DLRM reference draws a bias
    /// (std `1/√out`), the bias dwarfs freshly initialized embedding rows and every
    /// feature of a tower starts as nearly the same vector (docs/DMT.md, Table 4).
    pub fn zero_biases(&mut self) {
        match self {
            TowerModule::Identity(_) => {}
            TowerModule::Dlrm(m) => m.zero_biases(),
            TowerModule::Dcn(m) => m.zero_biases(),
        }
    }

    /// A module of `kind` over `f` features of width `n`, its weights drawn from `rng`
    /// as [`Linear`](super::linear::Linear) and [`CrossNet`](super::crossnet::CrossNet)
    /// draw theirs.
    ///
    /// # Errors
    /// As [`TowerModuleKind::counts`].
    pub fn new(kind: TowerModuleKind, f: usize, n: usize, rng: &mut impl Rng) -> Result<Self> {
        Ok(match kind {
            TowerModuleKind::Identity => TowerModule::Identity(IdentityTower::new(f, n)?),
            TowerModuleKind::Dlrm { c, p, d } => {
                TowerModule::Dlrm(DlrmTower::new(f, n, c, p, d, rng)?)
            }
            TowerModuleKind::Dcn { d, layers, rank } => {
                TowerModule::Dcn(DcnTower::new(f, n, d, layers, rank, rng)?)
            }
        })
    }

    /// The one map the module applies to every feature's vector on its own, when that
    /// is all it does (DLRM's `o2` with `p = 0`): the module's output for a row is then
    /// that map of each feature in turn, so the map may run on the features' vectors
    /// wherever they are, in any grouping of rows.
    pub fn per_feature_map(&mut self) -> Option<&mut super::linear::Linear<T>> {
        match self {
            TowerModule::Dlrm(m) => m.per_feature_map(),
            TowerModule::Identity(_) | TowerModule::Dcn(_) => None,
        }
    }

    pub fn kind(&self) -> TowerModuleKind {
        match self {
            TowerModule::Identity(_) => TowerModuleKind::Identity,
            TowerModule::Dlrm(m) => m.kind(),
            TowerModule::Dcn(m) => m.kind(),
        }
    }

    /// `F`, the tower's feature count.
    pub fn num_features(&self) -> usize {
        self.counts_and_shape().1
    }

    /// `N`, the width of each feature's embedding.
    pub fn feature_dim(&self) -> usize {
        self.counts_and_shape().2
    }

    /// Trainable scalars, biases included.
    pub fn param_count(&self) -> usize {
        self.counts_and_shape().0.params
    }

    /// Forward FLOPs per sample (multiply-add = 2; see the module docs).
    pub fn forward_flops_per_sample(&self) -> usize {
        self.counts_and_shape().0.forward_flops_per_sample
    }

    fn counts_and_shape(&self) -> (TowerCounts, usize, usize) {
        match self {
            TowerModule::Identity(m) => (m.counts(), m.num_features(), m.feature_dim()),
            TowerModule::Dlrm(m) => (m.counts(), m.num_features(), m.feature_dim()),
            TowerModule::Dcn(m) => (m.counts(), m.num_features(), m.feature_dim()),
        }
    }

    fn layer(&self) -> &dyn Layer<T> {
        match self {
            TowerModule::Identity(m) => m,
            TowerModule::Dlrm(m) => m,
            TowerModule::Dcn(m) => m,
        }
    }

    fn layer_mut(&mut self) -> &mut dyn Layer<T> {
        match self {
            TowerModule::Identity(m) => m,
            TowerModule::Dlrm(m) => m,
            TowerModule::Dcn(m) => m,
        }
    }
}

impl<T: Real> Layer<T> for TowerModule<T> {
    fn in_dim(&self) -> usize {
        self.layer().in_dim()
    }

    fn out_dim(&self) -> usize {
        self.layer().out_dim()
    }

    fn forward(&mut self, x: &[T], y: &mut [T], batch: usize) {
        self.layer_mut().forward(x, y, batch);
    }

    fn backward(&mut self, x: &[T], y: &[T], dy: &[T], dx: Option<&mut [T]>, batch: usize) {
        self.layer_mut().backward(x, y, dy, dx, batch);
    }

    fn params(&mut self) -> Vec<ParamMut<'_, T>> {
        self.layer_mut().params()
    }

    fn set_dense_precision(&mut self, precision: crate::matmul::DensePrecision) {
        self.layer_mut().set_dense_precision(precision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::check_layer;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const KINDS: [TowerModuleKind; 4] = [
        TowerModuleKind::Identity,
        TowerModuleKind::Dlrm { c: 1, p: 2, d: 2 },
        TowerModuleKind::Dcn {
            d: 2,
            layers: 2,
            rank: None,
        },
        TowerModuleKind::Dcn {
            d: 1,
            layers: 1,
            rank: Some(2),
        },
    ];

    #[test]
    fn enum_reports_what_its_kind_predicts() {
        let (f, n) = (3, 4);
        for kind in KINDS {
            let want = kind.counts(f, n).unwrap();
            let mut module =
                TowerModule::<f32>::new(kind, f, n, &mut StdRng::seed_from_u64(0)).unwrap();
            assert_eq!(module.kind(), kind);
            assert_eq!((module.num_features(), module.feature_dim()), (f, n));
            assert_eq!((module.in_dim(), module.out_dim()), (f * n, want.out_dim));
            assert_eq!(module.param_count(), want.params);
            assert_eq!(
                module.forward_flops_per_sample(),
                want.forward_flops_per_sample
            );
            let actual: usize = module.params().iter().map(|p| p.value.len()).sum();
            assert_eq!(actual, want.params, "{kind:?}");
        }
    }

    #[test]
    fn gradcheck_through_enum_f64() {
        for kind in KINDS {
            let mut module =
                TowerModule::<f64>::new(kind, 2, 3, &mut StdRng::seed_from_u64(1)).unwrap();
            let err = check_layer(&mut module, 3, 1e-5, 1e-6, 4);
            eprintln!("gradcheck tower module f64 {kind:?}: {err:?}");
            assert!(err.max() < 1e-6, "{kind:?}: {err:?}");
        }
    }

    #[test]
    fn out_dims_follow_the_paper() {
        let (f, n) = (5, 8);
        let dim = |kind: TowerModuleKind| kind.counts(f, n).unwrap().out_dim;
        assert_eq!(dim(TowerModuleKind::Identity), f * n);
        // O = D·(c·|F| + p)
        assert_eq!(
            dim(TowerModuleKind::Dlrm { c: 2, p: 3, d: 4 }),
            4 * (2 * f + 3)
        );
        assert_eq!(dim(TowerModuleKind::Dlrm { c: 0, p: 1, d: 4 }), 4);
        // O = |F|·D
        let dcn = TowerModuleKind::Dcn {
            d: 6,
            layers: 3,
            rank: Some(2),
        };
        assert_eq!(dim(dcn), f * 6);
    }

    #[test]
    fn bad_parameters_are_errors_through_the_enum() {
        let mut rng = StdRng::seed_from_u64(0);
        let bad = [
            (TowerModuleKind::Identity, 0, 4),
            (TowerModuleKind::Identity, usize::MAX, 2),
            (TowerModuleKind::Dlrm { c: 0, p: 0, d: 4 }, 2, 4),
            (TowerModuleKind::Dlrm { c: 1, p: 0, d: 0 }, 2, 4),
            (TowerModuleKind::Dlrm { c: 1, p: 1, d: 2 }, 2, 0),
            (
                TowerModuleKind::Dcn {
                    d: 0,
                    layers: 1,
                    rank: None,
                },
                2,
                4,
            ),
            (
                TowerModuleKind::Dcn {
                    d: 2,
                    layers: 1,
                    rank: Some(0),
                },
                2,
                4,
            ),
        ];
        for (kind, f, n) in bad {
            assert!(
                matches!(kind.counts(f, n), Err(Error::Config(_))),
                "{kind:?}"
            );
            let got = TowerModule::<f32>::new(kind, f, n, &mut rng);
            assert!(matches!(got, Err(Error::Config(_))), "{kind:?}");
        }
    }

    #[test]
    fn compression_ratio_reproduces_table_5() {
        // DMT 8T-DLRM on Criteo: 26 features of N = 128 in 8 towers, c = 1, p = 0.
        let towers = [4, 4, 3, 3, 3, 3, 3, 3];
        assert_eq!(towers.iter().sum::<usize>(), 26);
        for (d, want) in [(64, 2.0), (32, 4.0), (16, 8.0), (8, 16.0)] {
            let outputs: Vec<usize> = towers
                .iter()
                .map(|&f| {
                    let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d };
                    kind.counts(f, 128).unwrap().out_dim
                })
                .collect();
            assert_eq!(compression_ratio(&outputs, 26, 128), want, "D = {d}");
        }
        // Pass-through towers compress nothing.
        assert_eq!(compression_ratio(&[2 * 16, 3 * 16], 5, 16), 1.0);
        assert_eq!(compression_ratio(&[], 5, 16), f64::INFINITY);
    }
}
