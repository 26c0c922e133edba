//! The reader probe of `towerrec calibrate`: what towerrec's synthetic generator costs
//! per sample and per id drawn (Zipf and uniform), building batches as a rank's reader
//! thread does. Three data sets of 13 dense features tell the three apart: 26 Zipf
//! tables, 26 uniform tables, and one uniform table.

use super::*;
use towerrec_data::{next_batch, PoolingFactor, SyntheticConfig, SyntheticStream};

/// Tables of the probe's larger data sets, their rows and the Zipf exponent (the
/// speed benchmarks' skew).
const TABLES: usize = 26;
const ROWS: u64 = 100_000;
const ZIPF: f64 = 1.05;
/// Samples per batch read.
const BATCH: usize = 1024;

/// CPU time of the synthetic reader on one thread, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ReaderNs {
    pub(super) sample: f64,
    pub(super) zipf_id: f64,
    pub(super) uniform_id: f64,
}

impl ReaderNs {
    pub(super) fn scaled(self, f: f64) -> Self {
        ReaderNs {
            sample: self.sample * f,
            zipf_id: self.zipf_id * f,
            uniform_id: self.uniform_id * f,
        }
    }
}

/// Measures the reader on this thread, a third of the budget per data set; `sync`
/// runs before each (MPI: a barrier, so that the ranks of a host read at once, as they
/// do in training).
pub(super) fn reader_ns(s: &Settings, sync: &dyn Fn() -> Result<()>) -> Result<ReaderNs> {
    let budget = s.budget / 3;
    let rate = layer_rate(s);
    let per_sample = |tables: usize, zipf: f64| -> Result<f64> {
        sync()?;
        let cfg = SyntheticConfig {
            train_samples: u64::MAX / 2,
            ..SyntheticConfig::criteo_like(ROWS, tables, PoolingFactor::Fixed(1), zipf)
        };
        let mut stream = SyntheticStream::new(&cfg, cfg.train_range())
            .context("the reader probe's synthetic data")?;
        let mut failed = None;
        let times = probe::timed_reps(budget, probe::MIN_REPS, || {
            if let Err(e) = next_batch(&mut stream, BATCH) {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e).context("the reader probe");
        }
        Ok(rate.secs(&times) * 1e9 / BATCH as f64)
    };
    let zipf = per_sample(TABLES, ZIPF)?;
    let uniform = per_sample(TABLES, 0.0)?;
    let one = per_sample(1, 0.0)?;
    let uniform_id = ((uniform - one) / (TABLES - 1) as f64).max(0.0);
    Ok(ReaderNs {
        sample: sig((one - uniform_id).max(0.0)),
        zipf_id: sig((uniform_id + (zipf - uniform) / TABLES as f64).max(0.0)),
        uniform_id: sig(uniform_id),
    })
}

/// How the probe reads, for the file's comment.
pub(super) fn label() -> String {
    format!(
        "synthetic reader, batches of {BATCH}, 13 dense features and {TABLES} tables of {ROWS} rows (Zipf {ZIPF} and uniform) or one"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ids_cost_more_than_uniform_ones_and_every_figure_is_positive() {
        let args = CalibrateArgs {
            out: "unused.toml".into(),
            hosts: None,
            ranks_per_host: None,
            threads: Some(1),
            seconds: 0.3,
            quick: false,
            backend: Backend::InProcess,
            quiet: true,
        };
        let s = Settings::new(&args).unwrap();
        let ns = reader_ns(&s, &|| Ok(())).unwrap();
        assert!(ns.sample > 0.0 && ns.uniform_id > 0.0, "{ns:?}");
        // A Zipf draw takes three powers and a rejection test; a uniform one a
        // multiplication.
        assert!(ns.zipf_id > ns.uniform_id, "{ns:?}");
    }
}
