//! The collective sweeps of `towerrec calibrate` and the latency–bandwidth fit.

use super::*;

/// The collectives measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    AllToAll,
    AllReduce,
}

impl Op {
    pub(super) fn name(self) -> &'static str {
        match self {
            Op::AllToAll => "all_to_all_v",
            Op::AllReduce => "all_reduce",
        }
    }

    pub(super) fn collective(self) -> Collective {
        match self {
            Op::AllToAll => Collective::AllToAll,
            Op::AllReduce => Collective::AllReduce,
        }
    }
}

/// One collective over one group: median seconds by per-rank buffer bytes, and the fit.
#[derive(Debug, Clone)]
pub(super) struct Sweep {
    pub(super) op: Op,
    pub(super) ranks: usize,
    pub(super) points: Vec<(usize, f64)>,
    pub(super) fit: AlphaBeta,
}

impl Sweep {
    pub(super) fn new(op: Op, ranks: usize, points: Vec<(usize, f64)>) -> Self {
        let factor = op.collective().volume_factor(ranks);
        let moved: Vec<(f64, f64)> = points
            .iter()
            .map(|&(b, t)| (b as f64 * factor, t))
            .collect();
        let mut fit = fit_alpha_beta(&moved);
        // The simulator reads times between these points off them, not off the line.
        fit.measured = moved.iter().map(|&(m, t)| [m, sig(t * 1e6)]).collect();
        fit.measured.dedup_by(|b, a| b[0] <= a[0]);
        Sweep {
            op,
            ranks,
            points,
            fit,
        }
    }

    pub(super) fn comment(&self, over: &str) -> String {
        let pts: Vec<String> = self
            .points
            .iter()
            .map(|(b, t)| format!("{} {}", human_bytes(*b), sig(t * 1e6)))
            .collect();
        format!(
            "# {} over {over}, median µs by per-rank bytes: {};\n#   fit α = {} µs, β = {} GB/s.\n",
            self.op.name(),
            pts.join(", "),
            sig(self.fit.latency_us),
            sig(self.fit.bandwidth_gbs)
        )
    }
}

/// Both collectives over one group.
#[derive(Debug, Clone)]
pub(super) struct Sweeps {
    pub(super) all_to_all: Sweep,
    pub(super) all_reduce: Sweep,
}

impl Sweeps {
    pub(super) fn level(&self) -> Level {
        Level {
            all_to_all: self.all_to_all.fit.clone(),
            all_reduce: Some(self.all_reduce.fit.clone()),
            all_gather: None,
            reduce_scatter: None,
        }
    }

    pub(super) fn comment(&self, over: &str) -> String {
        self.all_to_all.comment(over) + &self.all_reduce.comment(over)
    }
}

/// Sweeps both collectives over `comm` (every rank of the world calls this, each in its
/// group `comm`); `progress` is shown by one rank.
pub(super) fn sweep_both(
    comm: &Comm,
    world: &Comm,
    sizes: &[usize],
    s: &Settings,
    progress: Option<&Progress>,
) -> Result<Sweeps> {
    let a2a = sweep(comm, world, Op::AllToAll, sizes, s, progress)?;
    let ar = sweep(comm, world, Op::AllReduce, sizes, s, progress)?;
    Ok(Sweeps {
        all_to_all: Sweep::new(Op::AllToAll, comm.size(), a2a),
        all_reduce: Sweep::new(Op::AllReduce, comm.size(), ar),
    })
}

/// Median seconds of `op` over `comm` for each per-rank buffer size: each repetition
/// counts as the slowest rank's time; repetitions run back to back after one barrier,
/// as a training step's collectives do. Every group of the `world` measures at once,
/// the same number of repetitions from one barrier on, so that groups sharing a link
/// (the peer groups of a host) share it while measured, as in training.
pub(super) fn sweep(
    comm: &Comm,
    world: &Comm,
    op: Op,
    sizes: &[usize],
    s: &Settings,
    progress: Option<&Progress>,
) -> Result<Vec<(usize, f64)>> {
    let p = comm.size();
    let mut recv: Vec<f32> = Vec::new();
    let mut scratch = (Vec::new(), Vec::new());
    let mut points = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        if let Some(pr) = progress {
            pr.start(format!(
                "{} of {} per rank over {p} ranks",
                op.name(),
                human_bytes(bytes)
            ));
        }
        let elems = (bytes / 4).max(1);
        // Zeros: all-reduce sums stay zero however often they repeat.
        let mut buf = vec![0.0f32; elems];
        let counts = towerrec_comm::even_split(elems, p);
        let mut once = |buf: &mut Vec<f32>| -> Result<Duration> {
            let t = Instant::now();
            match op {
                Op::AllToAll => {
                    comm.all_to_all_v_into(buf, &counts, &mut recv, Phase::Control)?;
                }
                Op::AllReduce => comm.all_reduce_with(buf, &mut scratch, Phase::Control)?,
            }
            Ok(t.elapsed())
        };
        // Warm-up (allocations, first touches), then rank 0 sizes the repetitions.
        world.barrier()?;
        for _ in 0..2 {
            once(&mut buf)?;
        }
        let warm: Duration = (0..3).map(|_| once(&mut buf)).sum::<Result<Duration>>()? / 3;
        let mut reps = vec![
            (s.point_budget.as_secs_f64() / warm.as_secs_f64().max(1e-7))
                .clamp(s.min_reps as f64, MAX_REPS as f64) as u64,
        ];
        world.broadcast(&mut reps, 0, Phase::Control)?;
        let reps = reps.first().copied().unwrap_or(s.min_reps as u64) as usize;
        world.barrier()?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            times.push(once(&mut buf)?.as_secs_f64());
        }
        let (all, from) = comm.all_gather(&times, Phase::Control)?;
        if from.iter().any(|&n| n != reps) {
            bail!("{}: ranks disagree on repetitions: {from:?}", op.name());
        }
        let slowest: Vec<f64> = (0..reps)
            .map(|i| (0..p).map(|r| all[r * reps + i]).fold(0.0, f64::max))
            .collect();
        points.push((elems * 4, median(slowest).max(1e-9)));
        if let Some(pr) = progress {
            pr.done();
        }
    }
    Ok(points)
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Smallest latency and bounds of the bandwidth written (sane positive values).
pub(super) const MIN_LATENCY_US: f64 = 0.01;
pub(super) const BANDWIDTH_GBS: (f64, f64) = (1e-3, 1e6);

/// Latency (µs) and bandwidth (GB/s) of `time = α + moved / β` fitted to
/// `(moved bytes, seconds)` points by least squares on relative error (weights
/// `1/time²`), clamped to `α ≥ 0.01 µs` and `β` in `[0.001, 10⁶]` GB/s.
pub(super) fn fit_alpha_beta(points: &[(f64, f64)]) -> AlphaBeta {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(m, t)| m.is_finite() && m >= 0.0 && t.is_finite() && t > 0.0)
        .collect();
    let clamp = |alpha_s: f64, beta_bps: f64| {
        AlphaBeta::fitted(
            sig((alpha_s * 1e6).max(MIN_LATENCY_US)),
            sig(if beta_bps.is_finite() && beta_bps > 0.0 {
                (beta_bps / 1e9).clamp(BANDWIDTH_GBS.0, BANDWIDTH_GBS.1)
            } else {
                BANDWIDTH_GBS.1
            }),
        )
    };
    if pts.is_empty() {
        return clamp(1e-6, f64::INFINITY);
    }
    let (mut sw, mut sm, mut smm, mut st, mut smt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(m, t) in &pts {
        let w = 1.0 / (t * t);
        sw += w;
        sm += w * m;
        smm += w * m * m;
        st += w * t;
        smt += w * m * t;
    }
    let det = sw * smm - sm * sm;
    let (mut a, mut b) = if det > 1e-12 * sw * smm && det.is_finite() {
        ((smm * st - sm * smt) / det, (sw * smt - sm * st) / det)
    } else {
        (f64::NAN, f64::NAN)
    };
    if !(b.is_finite() && b > 0.0) {
        // No growth with size (or one size): the largest point's rate, the rest latency.
        let &(m, t) = pts
            .iter()
            .max_by(|x, y| x.0.total_cmp(&y.0))
            .expect("points are not empty");
        b = if m > 0.0 { t / m } else { 0.0 };
        a = pts
            .iter()
            .map(|&(m, t)| t - m * b)
            .fold(f64::INFINITY, f64::min);
    }
    if !(a.is_finite() && a > 0.0) {
        // A negative intercept: refit the slope through the origin.
        a = 0.0;
        if smm > 0.0 {
            b = smt / smm;
        }
    }
    clamp(a, if b > 0.0 { 1.0 / b } else { f64::INFINITY })
}
