//! Times the Tower Partitioner on 1,000 features into 64 towers (the stress embedding
//! and the constrained k-means), the size DMT's production models reach. Run in release:
//!
//! ```text
//! cargo run --release -p towerrec-plan --example partition_speed [FEATURES TOWERS [K]]
//! ```
//!
//! The interaction is synthetic: 20 hidden groups of features with noisy affinities.

use std::time::Instant;
use towerrec_plan::partition::{
    affinity, constrained_kmeans, embed, towers_of, KMeansOptions, Matrix, Mode, StressOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let f: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let t: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let k: f64 = args.next().map_or(Ok(1.0), |a| a.parse())?;
    let interaction = synthetic(f, 2);
    let start = Instant::now();
    let d = Mode::Coherent.distance(&interaction);
    let e = embed(&d, &StressOptions::default(), 0)?;
    let embedded = start.elapsed();
    let opts = KMeansOptions {
        max_ratio: k,
        ..KMeansOptions::new(t)
    };
    let c = constrained_kmeans(&e.coords, e.dims, &opts)?;
    let total = start.elapsed();
    let towers = towers_of(&c.assignment, t);
    let sizes: Vec<usize> = towers.iter().map(Vec::len).collect();
    let a = affinity(&interaction, &towers);
    println!(
        "{f} features → {t} towers (K = {k}): embedding {:.2} s ({} Adam steps, stress-1 {:.3}), \
         k-means {:.2} s (8 starts; {} iterations in the best), total {:.2} s; \
         sizes {}..{}; mean I within {:.3}, between {:.3}",
        embedded.as_secs_f64(),
        e.iterations,
        e.normalized_stress,
        (total - embedded).as_secs_f64(),
        c.iterations,
        total.as_secs_f64(),
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0),
        a.within.unwrap_or(f64::NAN),
        a.between.unwrap_or(f64::NAN),
    );
    Ok(())
}

/// Features in 20 hidden groups: 0.6–0.9 within a group, 0–0.4 across, noisy.
fn synthetic(f: usize, seed: u64) -> Matrix {
    let mut state = seed;
    let mut uniform = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let noise: Vec<f64> = (0..f * f).map(|_| uniform()).collect();
    Matrix::from_fn(f, |i, j| {
        let n = 0.5 * (noise[i * f + j] + noise[j * f + i]);
        match (i == j, i % 20 == j % 20) {
            (true, _) => 1.0,
            (false, true) => 0.6 + 0.3 * n,
            (false, false) => 0.4 * n,
        }
    })
}
