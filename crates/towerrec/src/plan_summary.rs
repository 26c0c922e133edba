//! What `towerrec plan` planned, in a few lines for a person: the topology and where it
//! came from, the towers, each table's sharding and ranks, the predicted cost, and where
//! the plan went. The per-rank tables on stderr stay the detailed figures.

use std::fmt::Write as _;
use towerrec_plan::{estimate, CostParams, Plan, ShardingType, TableSpec};

/// What the summary says besides the plan itself.
pub struct Summary<'a> {
    /// The strategy, or the rated plan's path.
    pub label: &'a str,
    /// Whether the plan was rated (`--rate`) rather than made.
    pub rated: bool,
    /// Where the topology came from (the flags, or the config's `[cluster]`).
    pub topology_from: &'a str,
    /// OPER's model's slowest rank (seconds) and embedding traffic (bytes) per
    /// iteration, with `--profile`.
    pub oper: Option<(f64, f64)>,
    /// Where the plan went: a file, stdout, or nowhere (`--rate`).
    pub written: &'a str,
}

/// The summary's text, one line each: the plan, its towers, its tables, the cost, the
/// output.
pub fn text(plan: &Plan, tables: &[TableSpec], cost: &CostParams, s: &Summary) -> String {
    let topo = plan.topology;
    let mut out = String::new();
    let verb = if s.rated { "rated" } else { "planned" };
    let _ = writeln!(
        out,
        "{verb} {}: {} tables on {} host(s) × {} rank(s) per host ({}), global batch {}",
        s.label,
        plan.tables.len(),
        topo.hosts,
        topo.ranks_per_host,
        s.topology_from,
        cost.batch_size
    );
    if plan.towers.is_empty() {
        let _ = writeln!(out, "towers: none (a flat plan)");
    } else {
        let _ = writeln!(out, "towers: {}", plan.towers.len());
        for (i, t) in plan.towers.iter().enumerate() {
            let _ = writeln!(
                out,
                "  tower {i}: host(s) {}; {} table(s): {}",
                ranges(&t.hosts),
                t.features.len(),
                t.features.join(", ")
            );
        }
    }
    let width = plan.tables.iter().map(|e| e.table.len()).max().unwrap_or(0);
    for e in &plan.tables {
        let _ = writeln!(
            out,
            "  {:width$}  {:15}  {}",
            e.table,
            e.sharding.name(),
            placement(e)
        );
    }
    let partitioned = plan
        .tables
        .iter()
        .any(|e| e.sharding == ShardingType::RowPartitioned);
    let flat_note = if plan.towers.is_empty() {
        ""
    } else {
        " (the exchange priced as the flat path runs it; `towerrec simulate --compare dmt` prices SPTT)"
    };
    if partitioned {
        // The planner's model knows no access counts: it would price every partition
        // as a block that every sample reads.
        if s.oper.is_none() {
            let _ = writeln!(
                out,
                "predicted cost: none; row-partitioned tables are priced by OPER's model, which \
                 needs the access profile (--profile)"
            );
        }
    } else {
        let secs = estimate(plan, tables, cost);
        if let Some((rank, worst)) = slowest(&secs) {
            let mean = secs.iter().sum::<f64>() / secs.len() as f64;
            let _ = writeln!(
                out,
                "predicted embedding time per step (the planner's cost model, docs/PLANS.md): \
                 {:.4} ms on the slowest rank ({rank}), {:.4} ms on the mean rank{flat_note}",
                worst * 1e3,
                mean * 1e3
            );
        }
    }
    if let Some((worst, bytes)) = s.oper {
        let _ = writeln!(
            out,
            "predicted by OPER's model (--profile): {:.4} ms on the slowest rank, {:.3} MB of \
             embedding traffic per iteration{flat_note}",
            worst * 1e3,
            bytes / 1e6
        );
    }
    let _ = writeln!(out, "{}", s.written);
    out
}

/// The first of the slowest ranks, and its time.
fn slowest(secs: &[f64]) -> Option<(usize, f64)> {
    secs.iter()
        .copied()
        .enumerate()
        .fold(None, |best, (r, x)| match best {
            Some((_, b)) if b >= x => best,
            _ => Some((r, x)),
        })
}

/// Where a table's rows live, in words.
fn placement(e: &towerrec_plan::TablePlan) -> String {
    let mut ranks: Vec<usize> = e.shards.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    match e.sharding {
        ShardingType::DataParallel => "a copy on every rank".into(),
        ShardingType::TableWise => format!("rank {}", ranges(&ranks)),
        ShardingType::RowPartitioned => {
            let mut on: Vec<usize> = e.partitions.iter().flat_map(|p| p.holders()).collect();
            on.sort_unstable();
            on.dedup();
            let copies: usize = e.partitions.iter().map(|p| p.replicas.len()).sum();
            format!(
                "{} partition(s) on ranks {}, {} hot row(s) first, {copies} cop{} of partitions",
                e.partitions.len(),
                ranges(&on),
                e.hot_rows.len(),
                if copies == 1 { "y" } else { "ies" }
            )
        }
        _ => format!("{} shard(s) on ranks {}", e.shards.len(), ranges(&ranks)),
    }
}

/// Sorted numbers as runs: `[0, 1, 2, 5]` → "0-2, 5".
fn ranges(sorted: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_join_consecutive_numbers() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
    }
}
