//! The wait at a collective that follows computation (`[system] sync_wait` of the
//! hardware file): every rank computes the same work, then all meet at a barrier. Ranks
//! that share cores finish the same work at different times (the scheduler runs some
//! while others wait their turn), and the first collective after the work absorbs the
//! difference. Measured over a range of work sizes, since the difference grows with the
//! work; the simulator reads it at each collective of a step for the work since the
//! collective before (`towerrec_sim` `SystemTraits::sync_wait`). On chips of their own
//! the ranks finish together and the curve is about zero.

use anyhow::Result;
use std::hint::black_box;
use std::time::Instant;
use towerrec_comm::{Comm, Phase};

/// Iterations of the work loop per size: from about 0.2 ms to 40 ms of one core.
#[cfg(feature = "mpi")]
const WORK: [u64; 5] = [100_000, 400_000, 1_600_000, 6_400_000, 25_600_000];
/// Repetitions per size.
#[cfg(feature = "mpi")]
const REPS: usize = 15;

/// A dependent chain of multiply-adds: work the compiler cannot remove or shorten.
fn spin(iterations: u64) -> f32 {
    let mut x = black_box(1.0f32);
    for _ in 0..iterations {
        x = x.mul_add(black_box(0.999_999), 1e-7);
    }
    black_box(x)
}

/// This rank's mean work and mean wait (seconds) over `reps` rounds of `iterations` of
/// work, each followed by a barrier.
fn rounds(world: &Comm, iterations: u64, reps: usize) -> Result<(f64, f64)> {
    world.barrier()?;
    let (mut work, mut wait) = (0.0, 0.0);
    for _ in 0..reps {
        let t0 = Instant::now();
        spin(iterations);
        let t1 = Instant::now();
        world.barrier()?;
        work += (t1 - t0).as_secs_f64();
        wait += t1.elapsed().as_secs_f64();
    }
    Ok((work / reps as f64, wait / reps as f64))
}

/// The curve `[work µs, wait µs]` over every rank of `world` (each point the ranks'
/// mean), less the wait of a barrier after no work (the collective's own latency,
/// which the collective sweeps already price). Collective: every rank calls it.
#[cfg(feature = "mpi")]
pub(super) fn measure(world: &Comm) -> Result<Vec<[f64; 2]>> {
    measure_sizes(world, &WORK, REPS)
}

/// [`measure`] over the work sizes `sizes` (iterations), `reps` rounds each.
fn measure_sizes(world: &Comm, sizes: &[u64], reps: usize) -> Result<Vec<[f64; 2]>> {
    let (_, idle) = rounds(world, 0, 4 * reps)?;
    let mut mine = Vec::with_capacity(2 * sizes.len());
    for &n in sizes {
        let (work, wait) = rounds(world, n, reps)?;
        mine.extend([work, (wait - idle).max(0.0)]);
    }
    let (all, _) = world.all_gather(&mine, Phase::Control)?;
    let ranks = world.size() as f64;
    let mut curve: Vec<[f64; 2]> = (0..sizes.len())
        .map(|i| {
            let mean = |k: usize| {
                all.chunks_exact(mine.len())
                    .map(|r| r[2 * i + k])
                    .sum::<f64>()
                    / ranks
            };
            [super::sig(mean(0) * 1e6), super::sig(mean(1) * 1e6)]
        })
        .collect();
    // Points by strictly increasing work, as the hardware file requires.
    curve.dedup_by(|b, a| b[0] <= a[0]);
    Ok(curve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_comm::{run_in_process, Topology};

    /// Every rank gets the same curve, with a point per size by increasing work, waits
    /// ≥ 0, and the hardware file takes it.
    #[test]
    fn the_curve_is_the_same_on_every_rank_and_loads() {
        let topology = Topology::new(1, 3).unwrap();
        let curves = run_in_process(topology, |comm| {
            measure_sizes(&comm, &[1_000, 20_000, 400_000], 3).map_err(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let curve = curves[0].clone();
        assert!(curves.iter().all(|c| c == &curve));
        assert!(!curve.is_empty() && curve.len() <= 3, "{curve:?}");
        assert!(curve.iter().all(|&[w, t]| w > 0.0 && t >= 0.0), "{curve:?}");
        let mut hw = towerrec_sim::Hardware::preset("reference").unwrap();
        hw.system.sync_wait = curve;
        hw.validate().unwrap();
    }
}
