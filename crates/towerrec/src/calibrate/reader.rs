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

/// Measures the reader on this thread over the budget; `sync` runs first (MPI: a
/// barrier, so that the ranks of a host read at once, as they do in training). Each
/// repetition reads one batch of every data set in turn: the per-id figures are
/// differences of a few per cent between the data sets, which a machine's drift
/// between three sequential runs would swamp.
pub(super) fn reader_ns(s: &Settings, sync: &dyn Fn() -> Result<()>) -> Result<ReaderNs> {
    let rate = layer_rate(s);
    let stream = |tables: usize, zipf: f64| -> Result<SyntheticStream> {
        let cfg = SyntheticConfig {
            train_samples: u64::MAX / 2,
            ..SyntheticConfig::criteo_like(ROWS, tables, PoolingFactor::Fixed(1), zipf)
        };
        SyntheticStream::new(&cfg, cfg.train_range()).context("the reader probe's synthetic data")
    };
    let mut streams = [stream(TABLES, ZIPF)?, stream(TABLES, 0.0)?, stream(1, 0.0)?];
    let mut times: [Vec<Duration>; 3] = Default::default();
    let mut failed = None;
    sync()?;
    probe::timed_reps(s.budget, probe::MIN_REPS, || {
        for (stream, times) in streams.iter_mut().zip(&mut times) {
            let t = Instant::now();
            if let Err(e) = next_batch(stream, BATCH) {
                failed.get_or_insert(e);
            }
            times.push(t.elapsed());
        }
    });
    if let Some(e) = failed {
        return Err(e).context("the reader probe");
    }
    let [zipf, uniform, one] = &times;
    let per_sample = |secs: f64| secs * 1e9 / BATCH as f64;
    let uniform_id = (per_sample(paired_secs(rate, uniform, one)) / (TABLES - 1) as f64).max(0.0);
    let zipf_extra = per_sample(paired_secs(rate, zipf, uniform)) / TABLES as f64;
    Ok(ReaderNs {
        sample: sig((per_sample(rate.secs(one)) - uniform_id).max(0.0)),
        zipf_id: sig((uniform_id + zipf_extra).max(0.0)),
        uniform_id: sig(uniform_id),
    })
}

/// Seconds by which repetitions `a` exceed `b`, pair by pair: the mean difference when
/// sustained, else the median one, which a pause that hit either of a pair leaves out.
fn paired_secs(rate: Rate, a: &[Duration], b: &[Duration]) -> f64 {
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| a.as_secs_f64() - b.as_secs_f64())
        .collect();
    if rate == Rate::Sustained {
        return d.iter().sum::<f64>() / d.len().max(1) as f64;
    }
    d.sort_by(f64::total_cmp);
    d.get(d.len() / 2).copied().unwrap_or(0.0)
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
