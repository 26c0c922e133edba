//! What reading a step's samples costs a chip: towerrec's synthetic generator, priced by
//! the ids it draws. Neither paper models the data reader (the scale-in paper assumes
//! samples arrive for free); on a CPU the reader's thread takes its CPU time from the
//! rank's cores, so where the model knows how the data is made and the hardware file
//! says what that costs here (`towerrec calibrate` measures it), the step pays it.

use crate::error::{check_non_negative, non_negative, Ceiling, Error, Result};
use serde::{Deserialize, Serialize};

/// How many ids of each kind one generated sample draws (the workload's side).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticIds {
    /// Ids drawn Zipf-distributed (tables with an exponent above 0), per sample.
    pub zipf: f64,
    /// Ids drawn uniformly, per sample.
    pub uniform: f64,
}

/// What towerrec's synthetic reader costs one chip, in wall time with the chip's share
/// of the cores busy (the hardware's side; `towerrec calibrate` measures it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderCosts {
    /// Per sample beyond its ids (dense values, label, the batch it goes into), ns.
    pub sample_ns: f64,
    /// Per Zipf-distributed id, ns.
    pub zipf_id_ns: f64,
    /// Per uniformly drawn id, ns.
    pub uniform_id_ns: f64,
}

impl ReaderCosts {
    /// Seconds to read `samples` samples of `ids`.
    pub fn seconds(&self, ids: &SyntheticIds, samples: f64) -> f64 {
        let per_sample =
            self.sample_ns + ids.zipf * self.zipf_id_ns + ids.uniform * self.uniform_id_ns;
        samples * per_sample * 1e-9
    }

    pub(crate) fn validate(&self) -> Result<()> {
        for (what, x) in [
            ("sample_ns", self.sample_ns),
            ("zipf_id_ns", self.zipf_id_ns),
            ("uniform_id_ns", self.uniform_id_ns),
        ] {
            check_non_negative(
                &format!("system.synthetic_reader.{what}"),
                x,
                Ceiling::Nanos,
            )?;
        }
        Ok(())
    }
}

impl SyntheticIds {
    pub(crate) fn validate(&self) -> Result<()> {
        if !(non_negative(self.zipf) && non_negative(self.uniform)) {
            return Err(Error::invalid(
                "synthetic",
                format!("{self:?}: ids per sample must be finite numbers ≥ 0"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_costs_each_sample_and_each_id_of_its_kind() {
        let costs = ReaderCosts {
            sample_ns: 100.0,
            zipf_id_ns: 50.0,
            uniform_id_ns: 10.0,
        };
        let ids = SyntheticIds {
            zipf: 2.0,
            uniform: 3.0,
        };
        // 1000 samples × (100 + 2·50 + 3·10) ns.
        let s = costs.seconds(&ids, 1000.0);
        assert!((s - 230e-6).abs() < 1e-12, "{s}");
        let bad = ReaderCosts {
            zipf_id_ns: -1.0,
            ..costs
        };
        assert!(bad.validate().is_err());
        assert!(SyntheticIds {
            zipf: f64::NAN,
            uniform: 0.0
        }
        .validate()
        .is_err());
    }
}
