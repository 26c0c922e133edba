//! Times the synthetic reader on one core: batches of 16,384 samples of 26 tables, one
//! id each, 13 dense features (the shape of `bench/oper/speed.toml`). Run in release:
//!
//! ```text
//! cargo run --release -p towerrec-data --example synthetic_speed [ROWS [ZIPF [BATCHES]]]
//! ```
//!
//! Prints the median and fastest batch and a hash of every value read, which must not
//! change when the reader is only made faster.

use std::time::Instant;
use towerrec_data::synthetic::{PoolingFactor, SyntheticConfig, SyntheticGenerator};

const BATCH: u64 = 16_384;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rows: u64 = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let zipf: f64 = args.next().map_or(Ok(1.05), |a| a.parse())?;
    let batches: u64 = args.next().map_or(Ok(16), |a| a.parse())?;
    let mut cfg = SyntheticConfig::criteo_like(rows, 26, PoolingFactor::Fixed(1), zipf);
    cfg.seed = 1;
    let generator = SyntheticGenerator::new(&cfg)?;
    let mut hash = Fnv::default();
    let mut ms = Vec::new();
    for b in 0..batches.max(1) {
        let start = Instant::now();
        let batch = generator.batch(b * BATCH..(b + 1) * BATCH)?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        batch.sparse.values().iter().for_each(|&v| hash.add(v));
        batch
            .dense
            .iter()
            .for_each(|v| hash.add(v.to_bits().into()));
        batch
            .labels
            .iter()
            .for_each(|v| hash.add(v.to_bits().into()));
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "{rows} rows, Zipf {zipf}: median {:.2} ms, fastest {:.2} ms a batch of {BATCH} \
         ({} batches); content hash {:016x}",
        ms[ms.len() / 2],
        ms[0],
        ms.len(),
        hash.0
    );
    Ok(())
}

/// FNV-1a over 64-bit words: a fingerprint of the batches, not a secure hash.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(0x0100_0000_01b3);
    }
}
