//! Dense optimizers: `torch.optim`'s update formulas (SGD without momentum, Adagrad,
//! Adam with L2 weight decay) on the flat parameters of the dense layers, with state
//! allocated once at construction. [`schedule`] gives the learning-rate factor.

use crate::error::{Error, Result};
use crate::layer::ParamMut;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub mod schedule;
pub use schedule::{Decay, LrSchedule};

/// Which dense optimizer, with its hyperparameters (the update formulas of
/// `torch.optim`).
///
/// In configs: `{ kind = "adam" }`, `{ kind = "adagrad", eps = 1e-8 }`; omitted
/// hyperparameters take the defaults shown, unknown keys are errors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "DenseOptimizerConfig"
)]
pub enum DenseOptimizerKind {
    /// `p ← p − lr·g`.
    Sgd,
    /// `s ← s + g²`, `p ← p − lr·g / (√s + eps)`, `s` starting at
    /// `initial_accumulator`. Defaults: `eps = 1e-10`, `initial_accumulator = 0`.
    Adagrad { eps: f32, initial_accumulator: f32 },
    /// Adam with bias correction; `weight_decay` adds `weight_decay·p` to the gradient
    /// (L2, as `torch.optim.Adam`, not AdamW's decoupled decay).
    /// Defaults: `beta1 = 0.9`, `beta2 = 0.999`, `eps = 1e-8`, `weight_decay = 0`.
    Adam {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

/// What [`DenseOptimizerKind`] is read from. serde ignores unknown keys beside the tag
/// of a unit variant even with `deny_unknown_fields`, so `Sgd` is an empty struct here.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum DenseOptimizerConfig {
    Sgd {},
    Adagrad {
        #[serde(default = "default_adagrad_eps")]
        eps: f32,
        #[serde(default)]
        initial_accumulator: f32,
    },
    Adam {
        #[serde(default = "default_beta1")]
        beta1: f32,
        #[serde(default = "default_beta2")]
        beta2: f32,
        #[serde(default = "default_adam_eps")]
        eps: f32,
        #[serde(default)]
        weight_decay: f32,
    },
}

impl From<DenseOptimizerConfig> for DenseOptimizerKind {
    fn from(c: DenseOptimizerConfig) -> Self {
        match c {
            DenseOptimizerConfig::Sgd {} => Self::Sgd,
            DenseOptimizerConfig::Adagrad {
                eps,
                initial_accumulator,
            } => Self::Adagrad {
                eps,
                initial_accumulator,
            },
            DenseOptimizerConfig::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => Self::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            },
        }
    }
}

fn default_adagrad_eps() -> f32 {
    1e-10
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.999
}
fn default_adam_eps() -> f32 {
    1e-8
}

/// A dense optimizer with its per-parameter state.
#[derive(Debug, Clone)]
pub struct DenseOptimizer {
    kind: DenseOptimizerKind,
    sizes: Vec<usize>,
    /// Per parameter, the state buffers named by [`DenseOptimizer::state_names`]
    /// (Adagrad: the sum of squares; Adam: first and second moments).
    state: Vec<Vec<Vec<f32>>>,
    step: u64,
}

/// Parameters smaller than this are updated on the calling thread.
const PAR_MIN: usize = 1 << 15;
/// Elements per rayon task.
const CHUNK: usize = 1 << 12;

impl DenseOptimizer {
    /// An optimizer for parameters of the given sizes, in the order that
    /// [`DenseOptimizer::apply`] will receive them.
    pub fn new(kind: DenseOptimizerKind, param_sizes: &[usize]) -> Self {
        let state = param_sizes
            .iter()
            .map(|&n| match kind {
                DenseOptimizerKind::Sgd => Vec::new(),
                DenseOptimizerKind::Adagrad {
                    initial_accumulator,
                    ..
                } => vec![vec![initial_accumulator; n]],
                DenseOptimizerKind::Adam { .. } => vec![vec![0.0; n], vec![0.0; n]],
            })
            .collect();
        Self {
            kind,
            sizes: param_sizes.to_vec(),
            state,
            step: 0,
        }
    }

    /// The optimizer and its hyperparameters.
    pub fn kind(&self) -> DenseOptimizerKind {
        self.kind
    }
    /// Parameter sizes given at construction.
    pub fn param_sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// Number of [`DenseOptimizer::apply`] calls so far.
    pub fn step(&self) -> u64 {
        self.step
    }
    /// Restores the step count (checkpoint loading).
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// The state buffers of parameter `i` (none for SGD or an index out of range).
    pub fn param_state_mut(&mut self, i: usize) -> impl Iterator<Item = &mut [f32]> {
        self.state
            .get_mut(i)
            .into_iter()
            .flat_map(|bufs| bufs.iter_mut().map(Vec::as_mut_slice))
    }

    fn state_names(&self) -> &'static [&'static str] {
        match self.kind {
            DenseOptimizerKind::Sgd => &[],
            DenseOptimizerKind::Adagrad { .. } => &["sum"],
            DenseOptimizerKind::Adam { .. } => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// State buffers named `p{index}.{buffer}` (`sum` for Adagrad, `exp_avg` and
    /// `exp_avg_sq` for Adam, as in `torch.optim` state dicts), for checkpoints;
    /// writing through the slices restores a saved state.
    pub fn state_mut(&mut self) -> Vec<(String, &mut [f32])> {
        let names = self.state_names();
        self.state
            .iter_mut()
            .enumerate()
            .flat_map(|(i, bufs)| {
                bufs.iter_mut()
                    .zip(names)
                    .map(move |(buf, name)| (format!("p{i}.{name}"), buf.as_mut_slice()))
            })
            .collect()
    }

    /// Applies one step with learning rate `lr` to `params` (same order and sizes as at
    /// construction, else [`Error::Shape`] before anything changes) and counts it.
    pub fn apply(&mut self, params: &mut [ParamMut<'_, f32>], lr: f32) -> Result<()> {
        if params.len() != self.sizes.len() {
            return Err(Error::shape(
                "dense optimizer: number of parameters",
                self.sizes.len(),
                params.len(),
            ));
        }
        for (i, (p, &n)) in params.iter().zip(&self.sizes).enumerate() {
            for (what, len) in [("value", p.value.len()), ("grad", p.grad.len())] {
                if len != n {
                    return Err(Error::shape(
                        format!("dense optimizer: parameter {i} ('{}') {what}", p.name),
                        n,
                        len,
                    ));
                }
            }
        }
        self.step += 1;
        match self.kind {
            DenseOptimizerKind::Sgd => {
                for p in params.iter_mut() {
                    let f = |(w, g): (&mut [f32], &[f32])| {
                        for (w, &g) in w.iter_mut().zip(g) {
                            *w -= lr * g;
                        }
                    };
                    if p.value.len() >= PAR_MIN {
                        p.value
                            .par_chunks_mut(CHUNK)
                            .zip(p.grad.par_chunks(CHUNK))
                            .for_each(f);
                    } else {
                        f((p.value, p.grad));
                    }
                }
            }
            DenseOptimizerKind::Adagrad { eps, .. } => {
                for (p, state) in params.iter_mut().zip(&mut self.state) {
                    let [sum] = &mut state[..] else { continue };
                    let f = |((w, g), s): ((&mut [f32], &[f32]), &mut [f32])| {
                        for ((w, &g), s) in w.iter_mut().zip(g).zip(s) {
                            *s += g * g;
                            *w -= lr * g / (s.sqrt() + eps);
                        }
                    };
                    if p.value.len() >= PAR_MIN {
                        p.value
                            .par_chunks_mut(CHUNK)
                            .zip(p.grad.par_chunks(CHUNK))
                            .zip(sum.par_chunks_mut(CHUNK))
                            .for_each(f);
                    } else {
                        f(((p.value, p.grad), sum));
                    }
                }
            }
            DenseOptimizerKind::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                // As torch: bias corrections in f64 (the step is a Python int there),
                // folded into the step size and the denominator.
                let t = self.step as f64;
                let bc1 = 1.0 - (beta1 as f64).powf(t);
                let bc2 = 1.0 - (beta2 as f64).powf(t);
                let step_size = (lr as f64 / bc1) as f32;
                let bc2_sqrt = bc2.sqrt() as f32;
                for (p, state) in params.iter_mut().zip(&mut self.state) {
                    let [m, v] = &mut state[..] else { continue };
                    let f = |w: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]| {
                        for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m).zip(v) {
                            let g = g + weight_decay * *w;
                            *m = beta1 * *m + (1.0 - beta1) * g;
                            *v = beta2 * *v + (1.0 - beta2) * g * g;
                            *w -= step_size * *m / (v.sqrt() / bc2_sqrt + eps);
                        }
                    };
                    if p.value.len() >= PAR_MIN {
                        p.value
                            .par_chunks_mut(CHUNK)
                            .zip(p.grad.par_chunks(CHUNK))
                            .zip(m.par_chunks_mut(CHUNK))
                            .zip(v.par_chunks_mut(CHUNK))
                            .for_each(|(((w, g), m), v)| f(w, g, m, v));
                    } else {
                        f(p.value, p.grad, m, v);
                    }
                }
            }
        }
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `kind` over fixed gradients (independent of the parameter) and returns the
    /// parameter after each step.
    fn run(kind: DenseOptimizerKind, init: &[f32], grads: &[[f32; 2]], lr: f32) -> Vec<Vec<f32>> {
        let mut value = init.to_vec();
        let mut opt = DenseOptimizer::new(kind, &[init.len()]);
        let mut out = Vec::new();
        for g in grads {
            let mut grad = g.to_vec();
            let mut params = [ParamMut {
                name: "w".into(),
                value: &mut value,
                grad: &mut grad,
            }];
            opt.apply(&mut params, lr).unwrap();
            out.push(value.clone());
        }
        assert_eq!(opt.step(), grads.len() as u64);
        out
    }

    fn assert_close(got: &[f32], want: &[f64], tol: f64) {
        for (&g, &w) in got.iter().zip(want) {
            assert!(
                (g as f64 - w).abs() <= tol * w.abs().max(1.0),
                "got {got:?}, want {want:?}"
            );
        }
    }

    const GRADS: [[f32; 2]; 3] = [[0.5, -2.0], [-0.25, 0.0], [1.0, 3.0]];

    fn adam(weight_decay: f32) -> DenseOptimizerKind {
        DenseOptimizerKind::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        }
    }

    // Expected values below come from torch.optim's formulas evaluated by hand in f64.

    #[test]
    fn sgd_matches_torch() {
        let steps = run(DenseOptimizerKind::Sgd, &[1.0, -0.5], &GRADS, 0.1);
        assert_close(&steps[0], &[0.95, -0.3], 1e-7);
        assert_close(&steps[1], &[0.975, -0.3], 1e-7);
        assert_close(&steps[2], &[0.875, -0.6], 1e-7);
    }

    #[test]
    fn adagrad_matches_torch() {
        let kind = DenseOptimizerKind::Adagrad {
            eps: 1e-10,
            initial_accumulator: 0.1,
        };
        let steps = run(kind, &[1.0, -0.5], &GRADS, 0.1);
        assert_close(&steps[0], &[0.9154845745414341, -0.40122704033991907], 1e-6);
        assert_close(&steps[1], &[0.9544095217434496, -0.40122704033991907], 1e-6);
        assert_close(&steps[2], &[0.870268889368195, -0.48411388493695967], 1e-6);
    }

    #[test]
    fn adam_matches_torch() {
        let steps = run(adam(0.0), &[1.0, -0.5], &GRADS, 0.1);
        assert_close(&steps[0], &[0.900000002, -0.4000000005], 1e-6);
        assert_close(&steps[1], &[0.8733662987078463, -0.33299417556026745], 1e-6);
        assert_close(&steps[2], &[0.8075551396770898, -0.35745185027214854], 1e-6);
    }

    #[test]
    fn adam_weight_decay_is_l2_on_the_gradient() {
        let steps = run(adam(0.01), &[1.0, -0.5], &GRADS, 0.1);
        assert_close(&steps[0], &[0.9000000019607843, -0.40000000049875306], 1e-6);
        assert_close(&steps[1], &[0.8712293476231743, -0.3328457788237691], 1e-6);
        assert_close(&steps[2], &[0.8046143342173858, -0.3571088442960884], 1e-6);
    }

    #[test]
    fn large_parameters_update_like_small_ones() {
        // Above PAR_MIN the update runs in parallel chunks; each element must still get
        // exactly the sequential result.
        let n = 100_003;
        let pattern = |i: usize| ((i % 7) as f32 - 3.0) * 0.37;
        for kind in [
            DenseOptimizerKind::Sgd,
            DenseOptimizerKind::Adagrad {
                eps: 1e-10,
                initial_accumulator: 0.0,
            },
            adam(0.01),
        ] {
            let mut big: Vec<f32> = (0..n).map(pattern).collect();
            let mut big_grad: Vec<f32> = (0..n).map(|i| pattern(i + 3)).collect();
            let mut small: Vec<f32> = (0..7).map(pattern).collect();
            let mut small_grad: Vec<f32> = (0..7).map(|i| pattern(i + 3)).collect();
            let mut big_opt = DenseOptimizer::new(kind, &[n]);
            let mut small_opt = DenseOptimizer::new(kind, &[7]);
            for _ in 0..3 {
                big_opt
                    .apply(
                        &mut [ParamMut {
                            name: "big".into(),
                            value: &mut big,
                            grad: &mut big_grad,
                        }],
                        0.05,
                    )
                    .unwrap();
                small_opt
                    .apply(
                        &mut [ParamMut {
                            name: "small".into(),
                            value: &mut small,
                            grad: &mut small_grad,
                        }],
                        0.05,
                    )
                    .unwrap();
            }
            for (i, &x) in big.iter().enumerate() {
                assert_eq!(x.to_bits(), small[i % 7].to_bits(), "{kind:?} element {i}");
            }
        }
    }

    #[test]
    fn mismatched_params_are_shape_errors_and_change_nothing() {
        let mut opt = DenseOptimizer::new(adam(0.0), &[2, 3]);
        let (mut a, mut ga) = (vec![1.0f32; 2], vec![1.0f32; 2]);
        let (mut b, mut gb) = (vec![1.0f32; 4], vec![1.0f32; 4]);
        let mut params = vec![ParamMut {
            name: "a".into(),
            value: &mut a,
            grad: &mut ga,
        }];
        assert!(matches!(
            opt.apply(&mut params, 0.1),
            Err(Error::Shape { .. })
        ));
        params.push(ParamMut {
            name: "b".into(),
            value: &mut b,
            grad: &mut gb,
        });
        assert!(matches!(
            opt.apply(&mut params, 0.1),
            Err(Error::Shape { .. })
        ));
        assert_eq!(opt.step(), 0);
        assert_eq!(a, vec![1.0; 2]);
        assert!(opt
            .state_mut()
            .iter()
            .all(|(_, s)| s.iter().all(|&x| x == 0.0)));
    }

    #[test]
    fn state_names_follow_torch() {
        let names = |kind| {
            DenseOptimizer::new(kind, &[2, 5])
                .state_mut()
                .into_iter()
                .map(|(n, s)| (n, s.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(DenseOptimizerKind::Sgd), vec![]);
        assert_eq!(
            names(DenseOptimizerKind::Adagrad {
                eps: 1e-10,
                initial_accumulator: 0.5
            }),
            vec![("p0.sum".to_string(), 2), ("p1.sum".to_string(), 5)]
        );
        assert_eq!(
            names(adam(0.0)),
            vec![
                ("p0.exp_avg".to_string(), 2),
                ("p0.exp_avg_sq".to_string(), 2),
                ("p1.exp_avg".to_string(), 5),
                ("p1.exp_avg_sq".to_string(), 5),
            ]
        );
        let mut opt = DenseOptimizer::new(adam(0.0), &[2]);
        opt.set_step(7);
        assert_eq!(opt.step(), 7);
    }

    #[test]
    fn config_defaults_and_unknown_keys() {
        use serde::de::value::{Error as DeError, MapDeserializer};
        fn parse<T: serde::de::DeserializeOwned>(
            pairs: &[(&'static str, &'static str)],
        ) -> std::result::Result<T, DeError> {
            T::deserialize(MapDeserializer::<_, DeError>::new(pairs.iter().copied()))
        }
        assert_eq!(
            parse::<DenseOptimizerKind>(&[("kind", "adam")]).unwrap(),
            adam(0.0)
        );
        assert_eq!(
            parse::<DenseOptimizerKind>(&[("kind", "adagrad")]).unwrap(),
            DenseOptimizerKind::Adagrad {
                eps: 1e-10,
                initial_accumulator: 0.0
            }
        );
        assert_eq!(
            parse::<DenseOptimizerKind>(&[("kind", "sgd")]).unwrap(),
            DenseOptimizerKind::Sgd
        );
        assert!(parse::<DenseOptimizerKind>(&[("kind", "sgd"), ("momentum", "x")]).is_err());
        assert!(parse::<DenseOptimizerKind>(&[("kind", "adam"), ("lr", "x")]).is_err());
        assert_eq!(
            parse::<Decay>(&[("kind", "constant")]).unwrap(),
            Decay::Constant
        );
        assert!(parse::<Decay>(&[("kind", "constant"), ("gamma", "x")]).is_err());
    }
}
