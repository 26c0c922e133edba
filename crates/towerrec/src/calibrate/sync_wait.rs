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

/// Iterations of the work loop per size: about 0.7 to 50 ms of a rank's share of the
/// cores when four ranks share two (the segments between a step's collectives).
#[cfg(feature = "mpi")]
const WORK: [u64; 4] = [100_000, 400_000, 1_600_000, 6_400_000];
/// Repetitions per size.
#[cfg(feature = "mpi")]
const REPS: usize = 40;

/// A dependent chain of multiply-adds: work the compiler cannot remove or shorten.
fn spin(iterations: u64) -> f32 {
    let mut x = black_box(1.0f32);
    for _ in 0..iterations {
        x = x.mul_add(black_box(0.999_999), 1e-7);
    }
    black_box(x)
}

/// This rank's mean time working and mean round (from leaving one barrier to leaving
/// the next), in seconds, over `reps` rounds of `iterations` of work each.
fn rounds(world: &Comm, iterations: u64, reps: usize) -> Result<(f64, f64)> {
    world.barrier()?;
    let (mut work, mut round) = (0.0, 0.0);
    let mut start = Instant::now();
    for _ in 0..reps {
        spin(iterations);
        let done = Instant::now();
        world.barrier()?;
        let left = Instant::now();
        work += (done - start).as_secs_f64();
        round += (left - start).as_secs_f64();
        start = left;
    }
    Ok((work / reps as f64, round / reps as f64))
}

/// The curve `[work µs, wait µs]` over every rank of `world` (the ranks' means). The
/// work is what the simulator prices a phase at: the iterations at the rate each rank
/// sustains while all work at once (from the largest size). The wait is the rest of a
/// round beyond that work and beyond a round with no work (the barrier's own latency,
/// which the collective sweeps already price). Collective: every rank calls it.
#[cfg(feature = "mpi")]
pub(super) fn measure(world: &Comm) -> Result<Vec<[f64; 2]>> {
    measure_sizes(world, &WORK, REPS)
}

/// [`measure`] over the work sizes `sizes` (iterations, increasing), `reps` rounds each.
fn measure_sizes(world: &Comm, sizes: &[u64], reps: usize) -> Result<Vec<[f64; 2]>> {
    let (_, idle) = rounds(world, 0, 4 * reps)?;
    let mut mine = Vec::with_capacity(2 * sizes.len());
    for &n in sizes {
        let (work, round) = rounds(world, n, reps)?;
        mine.extend([work, round - idle]);
    }
    let (all, _) = world.all_gather(&mine, Phase::Control)?;
    let ranks = world.size() as f64;
    let mean = |k: usize| all.chunks_exact(mine.len()).map(|r| r[k]).sum::<f64>() / ranks;
    let last = sizes.len() - 1;
    let per_iteration = mean(2 * last) / sizes[last].max(1) as f64;
    let mut curve: Vec<[f64; 2]> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let work = n as f64 * per_iteration;
            let wait = (mean(2 * i + 1) - work).max(0.0);
            [super::sig(work * 1e6), super::sig(wait * 1e6)]
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
        assert!(curve.windows(2).all(|p| p[0][0] < p[1][0]), "{curve:?}");
        let mut hw = towerrec_sim::Hardware::preset("reference").unwrap();
        hw.system.sync_wait = curve;
        hw.validate().unwrap();
    }
}
