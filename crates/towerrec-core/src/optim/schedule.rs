//! Learning-rate schedules: warm-up then decay, as a factor that multiplies the base
//! learning rates of both the dense and the sparse optimizers.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Warm-up then decay of the learning rate, as a factor of the base rate.
///
/// `factor(step) = warmup(step) · decay(step)`, where `step` counts the steps already
/// taken (0 for the first). With `warmup_steps = W > 0`, `warmup(step) = (step + 1)/W`
/// for `step < W`, so the rate climbs linearly from `1/W` of the base to the full base
/// rate at step `W − 1` (DLRM's warm-up, shifted so the first step does not have a
/// zero rate), and is 1 after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default)]
    pub decay: Decay,
}

/// The decay part of an [`LrSchedule`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "DecayConfig"
)]
pub enum Decay {
    /// Always 1.
    #[default]
    Constant,
    /// 1 up to `start_step`, then linear down (or up) to `end_factor` at `end_step`,
    /// then `end_factor`.
    Linear {
        start_step: u64,
        end_step: u64,
        end_factor: f64,
    },
    /// 1 before `start_step`, then `gamma^⌊(step − start_step)/every⌋`: multiplied by
    /// `gamma` every `every` steps (`every = 0` acts as 1).
    Exponential {
        start_step: u64,
        gamma: f64,
        every: u64,
    },
    /// Half a cosine from 1 at the end of warm-up to `end_factor` at `end_step`, then
    /// `end_factor`.
    Cosine { end_step: u64, end_factor: f64 },
}

/// What [`Decay`] is read from (`Constant` as an empty struct, see
/// [`DenseOptimizerConfig`]).
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum DecayConfig {
    Constant {},
    Linear {
        start_step: u64,
        end_step: u64,
        end_factor: f64,
    },
    Exponential {
        start_step: u64,
        gamma: f64,
        every: u64,
    },
    Cosine {
        end_step: u64,
        end_factor: f64,
    },
}

impl From<DecayConfig> for Decay {
    fn from(c: DecayConfig) -> Self {
        match c {
            DecayConfig::Constant {} => Self::Constant,
            DecayConfig::Linear {
                start_step,
                end_step,
                end_factor,
            } => Self::Linear {
                start_step,
                end_step,
                end_factor,
            },
            DecayConfig::Exponential {
                start_step,
                gamma,
                every,
            } => Self::Exponential {
                start_step,
                gamma,
                every,
            },
            DecayConfig::Cosine {
                end_step,
                end_factor,
            } => Self::Cosine {
                end_step,
                end_factor,
            },
        }
    }
}

impl LrSchedule {
    /// The factor that multiplies the base learning rate at `step` (0-based count of
    /// steps taken). Finite for every step when [`LrSchedule::validate`] passes.
    pub fn factor(&self, step: u64) -> f64 {
        let warmup = if step < self.warmup_steps {
            (step + 1) as f64 / self.warmup_steps as f64
        } else {
            1.0
        };
        let decay = match self.decay {
            Decay::Constant => 1.0,
            Decay::Linear {
                start_step,
                end_step,
                end_factor,
            } => {
                if step >= end_step {
                    end_factor
                } else if step <= start_step {
                    1.0
                } else {
                    // Here start_step < step < end_step, so the span is positive.
                    let frac = (step - start_step) as f64 / (end_step - start_step) as f64;
                    1.0 + (end_factor - 1.0) * frac
                }
            }
            Decay::Exponential {
                start_step,
                gamma,
                every,
            } => {
                if step < start_step {
                    1.0
                } else {
                    gamma.powf(((step - start_step) / every.max(1)) as f64)
                }
            }
            Decay::Cosine {
                end_step,
                end_factor,
            } => {
                let start = self.warmup_steps;
                if step >= end_step {
                    end_factor
                } else if step <= start {
                    1.0
                } else {
                    let frac = (step - start) as f64 / (end_step - start) as f64;
                    end_factor
                        + (1.0 - end_factor) * 0.5 * (1.0 + (std::f64::consts::PI * frac).cos())
                }
            }
        };
        warmup * decay
    }

    /// Rejects schedules that would give a negative or non-finite factor or whose
    /// decay ends before it starts.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(format!("lr schedule: {msg}")));
        let nonneg = |what: &str, x: f64| {
            if x.is_finite() && x >= 0.0 {
                Ok(())
            } else {
                bad(format!("{what} must be a finite number ≥ 0, got {x}"))
            }
        };
        match self.decay {
            Decay::Constant => Ok(()),
            Decay::Linear {
                start_step,
                end_step,
                end_factor,
            } => {
                if end_step <= start_step {
                    return bad(format!(
                        "linear decay end_step ({end_step}) must be after start_step ({start_step})"
                    ));
                }
                nonneg("end_factor", end_factor)
            }
            Decay::Exponential { gamma, .. } => nonneg("gamma", gamma),
            Decay::Cosine {
                end_step,
                end_factor,
            } => {
                if end_step <= self.warmup_steps {
                    return bad(format!(
                        "cosine decay end_step ({end_step}) must be after warmup_steps ({})",
                        self.warmup_steps
                    ));
                }
                nonneg("end_factor", end_factor)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factors(s: &LrSchedule, steps: impl IntoIterator<Item = u64>) -> Vec<f64> {
        steps.into_iter().map(|t| s.factor(t)).collect()
    }

    fn assert_factors(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn default_schedule_is_constant() {
        let s = LrSchedule::default();
        assert_factors(&factors(&s, [0, 1, 1000, u64::MAX]), &[1.0; 4]);
        assert!(s.validate().is_ok());
    }

    #[test]
    fn warmup_climbs_linearly_from_one_over_w() {
        let s = LrSchedule {
            warmup_steps: 4,
            decay: Decay::Constant,
        };
        assert_factors(&factors(&s, 0..6), &[0.25, 0.5, 0.75, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn linear_decay_shape() {
        let s = LrSchedule {
            warmup_steps: 0,
            decay: Decay::Linear {
                start_step: 10,
                end_step: 20,
                end_factor: 0.1,
            },
        };
        assert_factors(
            &factors(&s, [0, 10, 11, 15, 19, 20, 1000]),
            &[1.0, 1.0, 0.91, 0.55, 0.19, 0.1, 0.1],
        );
        assert!(s.validate().is_ok());
    }

    #[test]
    fn exponential_decay_is_a_staircase() {
        let s = LrSchedule {
            warmup_steps: 2,
            decay: Decay::Exponential {
                start_step: 5,
                gamma: 0.5,
                every: 2,
            },
        };
        assert_factors(
            &factors(&s, [0, 1, 4, 5, 6, 7, 8, 9]),
            &[0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.25],
        );
    }

    #[test]
    fn cosine_decay_follows_warmup() {
        let s = LrSchedule {
            warmup_steps: 10,
            decay: Decay::Cosine {
                end_step: 110,
                end_factor: 0.0,
            },
        };
        let half_cos = 0.5 * (1.0 + (std::f64::consts::PI / 4.0).cos());
        assert_factors(
            &factors(&s, [0, 9, 10, 35, 60, 110, 500]),
            &[0.1, 1.0, 1.0, half_cos, 0.5, 0.0, 0.0],
        );
        let all = factors(&s, 10..=110);
        assert!(
            all.windows(2).all(|w| w[1] <= w[0]),
            "cosine must not increase"
        );
    }

    #[test]
    fn validate_rejects_inverted_or_negative_schedules() {
        let linear = |start_step, end_step, end_factor| LrSchedule {
            warmup_steps: 0,
            decay: Decay::Linear {
                start_step,
                end_step,
                end_factor,
            },
        };
        assert!(linear(10, 10, 0.5).validate().is_err());
        assert!(linear(0, 10, -0.5).validate().is_err());
        assert!(linear(0, 10, f64::NAN).validate().is_err());
        let cosine = LrSchedule {
            warmup_steps: 50,
            decay: Decay::Cosine {
                end_step: 50,
                end_factor: 0.0,
            },
        };
        assert!(cosine.validate().is_err());
        // Even invalid schedules give finite factors.
        assert!(factors(&linear(10, 5, 0.5), 0..20)
            .iter()
            .all(|f| f.is_finite()));
        assert!(factors(&cosine, 0..100).iter().all(|f| f.is_finite()));
    }
}
