//! The exact assignment step of constrained k-means (Bradley, Bennett & Demiriz 2000):
//! each of F points to one of T clusters, every cluster holding between `lo` and `hi`
//! points, at the least total cost.
//!
//! Bradley et al. solve it as a min-cost flow (points → clusters → sink). This solves
//! the same flow by cycle cancelling on a graph of the clusters alone, which is small
//! (T + 1 nodes) however many points there are:
//!
//! - the edge `a → b` moves one point from cluster `a` to cluster `b`; its cost is the
//!   cheapest such move, `min_{g ∈ a} c(g, b) − c(g, a)`;
//! - a node Z closes paths that change sizes: `b → Z` (cost 0) where `b` may grow
//!   (size < hi), `Z → a` (cost 0) where `a` may shrink (size > lo).
//!
//! These are the flow's residual paths with the point nodes contracted, so a negative
//! cycle of the flow's residual graph is a negative cycle here and the other way round
//! (a simple cycle visits each cluster once, so the points it moves are distinct).
//! Starting from a feasible assignment, Bellman–Ford finds a negative cycle and its
//! moves are made, until there is none: then the assignment is optimal (the
//! negative-cycle optimality condition of min-cost flow). Each cycle costs at most
//! `O(F·T + T³)`, usually far less (the cheapest moves are recomputed only for the
//! clusters the last cycle touched, and a cycle shows up after a few rounds). Warm-started from the previous k-means iteration's assignment, few cycles
//! remain. `pathfinding`'s Hungarian method on a point × slot matrix is exact too but
//! `O(F³)` per step (0.25 s for 1,000 points into 64 clusters, against 0.2 s for the
//! whole k-means of about 100 steps here; docs/DMT.md, "Tower Partitioner"); it serves as a check in the
//! tests.

/// Points `0..F` to clusters `0..T` (`cost[g·T + t]`, finite) with every cluster size
/// in `lo..=hi`, at the least total cost. `start`, if feasible, is where the search
/// starts (else a greedy feasible assignment).
///
/// The caller ensures `lo ≤ hi`, `T·lo ≤ F ≤ T·hi` and `cost.len() = F·T`.
pub(crate) fn assign(
    cost: &[f64],
    clusters: usize,
    lo: usize,
    hi: usize,
    start: Option<&[usize]>,
) -> Vec<usize> {
    let t = clusters;
    let f = cost.len() / t;
    debug_assert!(lo <= hi && t * lo <= f && f <= t * hi && cost.len() == f * t);
    let mut asg = match start {
        Some(s) if feasible(s, t, lo, hi) && s.len() == f => s.to_vec(),
        _ => greedy(cost, t, lo, hi),
    };
    let mut sizes = vec![0usize; t];
    for &a in &asg {
        sizes[a] += 1;
    }
    let scale = cost.iter().fold(0.0f64, |m, c| m.max(c.abs()));
    let eps = 1e-12 * (1.0 + scale);
    let mut best = vec![f64::INFINITY; t * t];
    let mut who = vec![usize::MAX; t * t];
    let mut changed: Vec<bool> = vec![true; t];
    loop {
        cheapest_moves(cost, t, &asg, &changed, &mut best, &mut who);
        let Some(cycle) = negative_cycle(t, &best, &sizes, lo, hi, eps) else {
            break;
        };
        // Moves read from `who` before any is made: each tail cluster appears once in
        // the cycle, so its point is still where `who` says.
        let moves: Vec<(usize, usize, usize)> = cycle
            .iter()
            .filter(|&&(a, b)| a < t && b < t)
            .map(|&(a, b)| (who[a * t + b], a, b))
            .collect();
        changed.fill(false);
        for (g, a, b) in moves {
            asg[g] = b;
            sizes[a] -= 1;
            sizes[b] += 1;
            changed[a] = true;
            changed[b] = true;
        }
    }
    asg
}

/// Whether `asg` puts every point in a cluster and every cluster size in `lo..=hi`.
pub(crate) fn feasible(asg: &[usize], t: usize, lo: usize, hi: usize) -> bool {
    let mut sizes = vec![0usize; t];
    for &a in asg {
        match sizes.get_mut(a) {
            Some(s) => *s += 1,
            None => return false,
        }
    }
    sizes.iter().all(|s| (lo..=hi).contains(s))
}

/// Total cost of an assignment.
pub(crate) fn total(cost: &[f64], t: usize, asg: &[usize]) -> f64 {
    asg.iter().enumerate().map(|(g, &a)| cost[g * t + a]).sum()
}

/// Each point to its cheapest cluster with room below `hi`, then clusters below `lo`
/// filled by the cheapest moves from clusters above it.
fn greedy(cost: &[f64], t: usize, lo: usize, hi: usize) -> Vec<usize> {
    let f = cost.len() / t;
    let mut sizes = vec![0usize; t];
    let mut asg = Vec::with_capacity(f);
    for g in 0..f {
        let row = &cost[g * t..(g + 1) * t];
        let a = (0..t)
            .filter(|&a| sizes[a] < hi)
            .min_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap_or(0);
        sizes[a] += 1;
        asg.push(a);
    }
    while let Some(b) = (0..t).find(|&b| sizes[b] < lo) {
        let moved = (0..f).filter(|&g| sizes[asg[g]] > lo).min_by(|&g, &h| {
            let dg = cost[g * t + b] - cost[g * t + asg[g]];
            let dh = cost[h * t + b] - cost[h * t + asg[h]];
            dg.total_cmp(&dh)
        });
        let Some(g) = moved else { break };
        sizes[asg[g]] -= 1;
        sizes[b] += 1;
        asg[g] = b;
    }
    asg
}

/// For every cluster pair `a ≠ b` with `changed[a]`: the cheapest move of a point of
/// `a` to `b` (`best[a·T + b]`, infinite where `a` is empty) and that point (`who`).
/// Rows of unchanged clusters are left as they are: they depend on their points only.
fn cheapest_moves(
    cost: &[f64],
    t: usize,
    asg: &[usize],
    changed: &[bool],
    best: &mut [f64],
    who: &mut [usize],
) {
    for (a, row) in best.chunks_exact_mut(t).enumerate() {
        if changed[a] {
            row.fill(f64::INFINITY);
        }
    }
    for (g, &a) in asg.iter().enumerate() {
        if !changed[a] {
            continue;
        }
        let row = &cost[g * t..(g + 1) * t];
        let here = row[a];
        let (best, who) = (&mut best[a * t..(a + 1) * t], &mut who[a * t..(a + 1) * t]);
        for b in 0..t {
            let delta = row[b] - here;
            if b != a && delta < best[b] {
                best[b] = delta;
                who[b] = g;
            }
        }
    }
}

/// A cycle of total cost below `−eps` in the graph of clusters `0..T` and Z (= T), as
/// its edges `(from, to)`; `None` if there is none. Bellman–Ford from a virtual source
/// joined to every node, looking for a cycle among the predecessor links after every
/// round (one appears long before the last round proves it; such a cycle is negative).
fn negative_cycle(
    t: usize,
    best: &[f64],
    sizes: &[usize],
    lo: usize,
    hi: usize,
    eps: f64,
) -> Option<Vec<(usize, usize)>> {
    let z = t;
    let weight = |a: usize, b: usize| -> f64 {
        match (a == z, b == z) {
            (false, false) => best[a * t + b],
            (false, true) if sizes[a] < hi => 0.0,
            (true, false) if sizes[b] > lo => 0.0,
            _ => f64::INFINITY,
        }
    };
    let nodes = t + 1;
    let mut dist = vec![0.0f64; nodes];
    let mut pred = vec![usize::MAX; nodes];
    for _ in 0..nodes {
        let mut relaxed = false;
        for a in 0..nodes {
            for b in 0..nodes {
                let w = weight(a, b);
                if a != b && w.is_finite() && dist[a] + w < dist[b] - eps {
                    dist[b] = dist[a] + w;
                    pred[b] = a;
                    relaxed = true;
                }
            }
        }
        if !relaxed {
            return None;
        }
        if let Some(cycle) = pred_cycle(&pred) {
            let w: f64 = cycle.iter().map(|&(a, b)| weight(a, b)).sum();
            if w < -eps {
                return Some(cycle);
            }
        }
    }
    None
}

/// A cycle among the links `pred[v] → v` (`usize::MAX`: none), as its edges.
fn pred_cycle(pred: &[usize]) -> Option<Vec<(usize, usize)>> {
    let mut mark = vec![usize::MAX; pred.len()];
    for s in 0..pred.len() {
        let mut v = s;
        while v != usize::MAX && mark[v] == usize::MAX {
            mark[v] = s;
            v = pred[v];
        }
        if v != usize::MAX && mark[v] == s {
            // `v` is on a cycle first reached from `s`.
            let mut cycle = Vec::new();
            let mut u = v;
            loop {
                let p = pred[u];
                cycle.push((p, u));
                u = p;
                if u == v {
                    return Some(cycle);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
