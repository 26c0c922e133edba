//! EMT data parallelism (OPER §4.3): copies of hot partitions under a per-rank budget
//! of extra bytes.
//!
//! - Training (Eq. 4–5): a copy of a row on every rank saves its all-to-all traffic,
//!   `2·f·B·(M−1)/M·S / BW_P2P`, and costs the all-reduce of its gradient,
//!   `2·(M−1)/M·S / BW_AR`; so a partition is copied to every rank when its rows are
//!   read more than `BW_P2P / BW_AR` times per iteration on average, the most read per
//!   row first, while every rank has room.
//! - Inference (Algorithm 1): each rank in turn takes a copy of a partition it fetches
//!   over its costliest link, if it has room, and every other rank that is nearer to
//!   the new copy than to its current source reads from it from then on; a rank stops
//!   when nothing on its costliest link fits.

use super::partition::Part;
use towerrec_comm::Topology;

/// Partitions by reads per row, most first (ties by index).
fn by_density(parts: &[Part]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..parts.len()).collect();
    // reads_a / rows_a > reads_b / rows_b, compared exactly.
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&parts[a], &parts[b]);
        (u128::from(pb.reads) * pa.rows() as u128)
            .cmp(&(u128::from(pa.reads) * pb.rows() as u128))
            .then(a.cmp(&b))
    });
    order
}

/// Eq. 4–5: replicas (every rank but the owner) of the partitions worth copying.
/// `reads_per_iteration` turns a profile count into reads per iteration over the
/// cluster; `p2p_over_allreduce` is `BW_P2P / BW_AR`.
pub(crate) fn for_training(
    parts: &[Part],
    owner: &[usize],
    world: usize,
    budget: u64,
    reads_per_iteration: f64,
    p2p_over_allreduce: f64,
) -> Vec<Vec<usize>> {
    let mut replicas = vec![Vec::new(); parts.len()];
    let mut extra = vec![0u64; world];
    for i in by_density(parts) {
        let p = &parts[i];
        let per_row = p.reads as f64 * reads_per_iteration / p.rows() as f64;
        if per_row <= p2p_over_allreduce {
            break;
        }
        let others = (0..world).filter(|&r| r != owner[i]);
        if others.clone().all(|r| extra[r] + p.bytes <= budget) {
            for r in others {
                extra[r] += p.bytes;
                replicas[i].push(r);
            }
        }
    }
    replicas
}

/// Algorithm 1: replicas of the partitions each rank fetches over its costliest link.
/// `seconds_per_byte(i, j)` is the link cost `L[i][j]`; a partition's fetch is its
/// lookup bytes times `reads_per_iteration / W`.
pub(crate) fn for_inference(
    parts: &[Part],
    owner: &[usize],
    topology: Topology,
    budget: u64,
    reads_per_iteration: f64,
    seconds_per_byte: impl Fn(usize, usize) -> f64,
) -> Vec<Vec<usize>> {
    let w = topology.world_size();
    let fetch: Vec<f64> = parts
        .iter()
        .map(|p| p.lookup as f64 * reads_per_iteration / w as f64)
        .collect();
    // path[i][p]: where rank i reads partition p; cl[i][j]: seconds i spends on j.
    let mut path: Vec<Vec<usize>> = (0..w).map(|_| owner.to_vec()).collect();
    let mut cl = vec![vec![0.0; w]; w];
    for (i, row) in cl.iter_mut().enumerate() {
        for (p, &o) in owner.iter().enumerate() {
            if o != i {
                row[o] += fetch[p] * seconds_per_byte(i, o);
            }
        }
    }
    let order = by_density(parts);
    let mut room = vec![budget; w];
    let mut replicas = vec![Vec::new(); parts.len()];
    let mut stopped = vec![false; w];
    while stopped.iter().any(|s| !s) {
        for gid in 0..w {
            if stopped[gid] {
                continue;
            }
            let tid = (0..w)
                .filter(|&j| j != gid && cl[gid][j] > 0.0)
                .max_by(|&a, &b| cl[gid][a].total_cmp(&cl[gid][b]).then(b.cmp(&a)));
            let Some(tid) = tid else {
                stopped[gid] = true;
                continue;
            };
            let found = order
                .iter()
                .copied()
                .find(|&p| path[gid][p] == tid && parts[p].bytes <= room[gid]);
            let Some(p) = found else {
                stopped[gid] = true;
                continue;
            };
            replicas[p].push(gid);
            room[gid] -= parts[p].bytes;
            cl[gid][tid] -= fetch[p] * seconds_per_byte(gid, tid);
            path[gid][p] = gid;
            for i in (0..w).filter(|&i| i != gid) {
                let oid = path[i][p];
                if oid != i && seconds_per_byte(i, gid) < seconds_per_byte(i, oid) {
                    path[i][p] = gid;
                    cl[i][oid] -= fetch[p] * seconds_per_byte(i, oid);
                    cl[i][gid] += fetch[p] * seconds_per_byte(i, gid);
                }
            }
        }
    }
    for r in &mut replicas {
        r.sort_unstable();
    }
    replicas
}
