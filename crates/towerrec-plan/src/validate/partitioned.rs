//! Checking a row-partitioned (OPER) table entry: partitions that tile the table's
//! order, hot rows distinct and inside the table, owners and replicas on ranks of the
//! topology, no rank holding a partition twice.

use crate::plan::{Partition, TablePlan};

/// Checks a row-partitioned entry of a table of `rows` rows on `world` ranks.
pub(super) fn check_entry(entry: &TablePlan, rows: usize, world: usize) -> Result<(), String> {
    if !entry.shards.is_empty() {
        return Err(format!(
            "row_partitioned tables have partitions, not shards; found {} shards",
            entry.shards.len()
        ));
    }
    if entry.partitions.is_empty() {
        return Err("row_partitioned needs at least one partition, found none".into());
    }
    check_hot_rows(&entry.hot_rows, rows)?;
    super::tile(
        entry.partitions.iter().map(|p| p.order),
        rows,
        "position",
        "partition",
    )?;
    for (i, p) in entry.partitions.iter().enumerate() {
        check_partition(i, p, world)?;
    }
    Ok(())
}

fn check_partition(i: usize, p: &Partition, world: usize) -> Result<(), String> {
    let missing = |what: &str, r: usize| {
        format!("partition {i}: {what} rank {r} does not exist; the topology has ranks 0..{world}")
    };
    if p.rank >= world {
        return Err(missing("owner", p.rank));
    }
    let mut seen = vec![p.rank];
    for &r in &p.replicas {
        if r >= world {
            return Err(missing("replica", r));
        }
        if seen.contains(&r) {
            return Err(format!(
                "partition {i}: rank {r} holds it twice (owner {}, replicas {:?}); a rank holds a partition at most once",
                p.rank, p.replicas
            ));
        }
        seen.push(r);
    }
    Ok(())
}

/// The hot rows of an order: distinct, each below `rows`.
fn check_hot_rows(hot: &[usize], rows: usize) -> Result<(), String> {
    let mut sorted = hot.to_vec();
    sorted.sort_unstable();
    if let Some(&r) = sorted.last().filter(|&&r| r >= rows) {
        return Err(format!("hot row {r} is outside the table's {rows} rows"));
    }
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("hot row {} is listed twice", w[0]));
    }
    if u32::try_from(hot.len()).is_err() {
        return Err(format!(
            "{} hot rows: at most {} (the address map numbers them in 32 bits)",
            hot.len(),
            u32::MAX
        ));
    }
    Ok(())
}
