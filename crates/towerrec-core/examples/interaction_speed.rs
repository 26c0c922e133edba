//! Times DLRM's dot interaction, forward and backward, on one thread: 27 vectors of
//! dim 64 (the bottom MLP's output and 26 tables, as in `bench/oper/speed.toml`),
//! batches of 1,024 rows (one rank's share of a 4,096-sample step on 2 × 2 ranks).
//! Run in release:
//!
//! ```text
//! cargo run --release -p towerrec-core --example interaction_speed [VECTORS DIM BATCH REPS]
//! ```
//!
//! Prints medians and a hash of the outputs, which must not change when the kernels are
//! only made faster.

use rand::{Rng, SeedableRng};
use std::time::Instant;
use towerrec_core::layers::interaction::DotInteraction;
use towerrec_core::Layer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(27), |a| a.parse())?;
    let d: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let batch: usize = args.next().map_or(Ok(1024), |a| a.parse())?;
    let reps: usize = args.next().map_or(Ok(50), |a| a.parse())?;
    let mut layer = DotInteraction::<f32>::new(n, d, false);
    let (ni, no) = (layer.in_dim(), layer.out_dim());
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let x: Vec<f32> = (0..batch * ni)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let dy: Vec<f32> = (0..batch * no)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let (mut y, mut dx) = (vec![0.0f32; batch * no], vec![0.0f32; batch * ni]);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    pool.install(|| {
        for _ in 0..reps.max(1) {
            let start = Instant::now();
            layer.forward(&x, &mut y, batch);
            fwd.push(start.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            layer.backward(&x, &y, &dy, Some(&mut dx), batch);
            bwd.push(start.elapsed().as_secs_f64() * 1e3);
        }
    });
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let pairs = no - d;
    let gflops = |ms: f64, per_row: usize| (batch * per_row * 2 * d) as f64 / ms / 1e6;
    let (f, b) = (median(&mut fwd), median(&mut bwd));
    println!(
        "{n} vectors × {d}, batch {batch}: forward {f:.3} ms ({:.1} GFLOP/s), backward {b:.3} \
         ms ({:.1} GFLOP/s); hash {:016x}",
        gflops(f, pairs),
        gflops(b, n * n),
        hash(y.iter().chain(&dx))
    );
    Ok(())
}

/// FNV-1a over the values' bits: a fingerprint, not a secure hash.
fn hash<'a>(values: impl Iterator<Item = &'a f32>) -> u64 {
    values.fold(0xcbf2_9ce4_8422_2325, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x0100_0000_01b3)
    })
}
