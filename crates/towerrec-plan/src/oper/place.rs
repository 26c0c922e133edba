//! Balanced model parallelism (OPER §4.2): partitions to ranks, greedily. The
//! access-bounded partitions go first, most lookup bytes first, each to the rank serving the
//! fewest lookup bytes (Eq. 2); then the memory-bounded ones, biggest first, each to the rank holding
//! the fewest bytes. A rank whose bytes would pass the memory budget is skipped. The
//! baselines place every partition by one of the two rules. Ties go to the lowest rank.

use super::partition::Part;
use crate::error::{Error, Result};

/// Which greedy rule places which partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// OPER: access-bounded partitions by reads, memory-bounded ones by bytes.
    Oper,
    /// Every partition to the rank holding the fewest bytes (OPER's Memory-Greedy).
    MemoryGreedy,
    /// Every partition to the rank serving the fewest lookup bytes (OPER's Access-Greedy).
    AccessGreedy,
}

/// The owner of every partition, on `world` ranks, each holding at most `budget` bytes.
pub(crate) fn place(
    parts: &[Part],
    world: usize,
    rule: Placement,
    budget: Option<u64>,
) -> Result<Vec<usize>> {
    let by_reads = |set: &mut Vec<usize>| {
        set.sort_by(|&a, &b| parts[b].lookup.cmp(&parts[a].lookup).then(a.cmp(&b)))
    };
    let by_bytes = |set: &mut Vec<usize>| {
        set.sort_by(|&a, &b| parts[b].bytes.cmp(&parts[a].bytes).then(a.cmp(&b)))
    };
    let (mut first, mut second): (Vec<usize>, Vec<usize>) = match rule {
        Placement::Oper => (0..parts.len()).partition(|&i| parts[i].access_bound),
        Placement::AccessGreedy => ((0..parts.len()).collect(), Vec::new()),
        Placement::MemoryGreedy => (Vec::new(), (0..parts.len()).collect()),
    };
    by_reads(&mut first);
    by_bytes(&mut second);
    let mut lookup = vec![0u64; world];
    let mut bytes = vec![0u64; world];
    let mut owner = vec![usize::MAX; parts.len()];
    for (set, balance_lookup) in [(first, true), (second, false)] {
        for i in set {
            let p = &parts[i];
            let fits = |r: &usize| budget.is_none_or(|b| bytes[*r].saturating_add(p.bytes) <= b);
            let key = |r: &usize| {
                if balance_lookup {
                    lookup[*r]
                } else {
                    bytes[*r]
                }
            };
            let r = (0..world)
                .filter(fits)
                .min_by_key(|r| (key(r), *r))
                .ok_or_else(|| {
                    Error::Request(format!(
                        "a partition of {} bytes fits no rank under the memory budget of {} bytes",
                        p.bytes,
                        budget.unwrap_or(0)
                    ))
                })?;
            owner[i] = r;
            lookup[r] += p.lookup;
            bytes[r] += p.bytes;
        }
    }
    Ok(owner)
}

/// Bytes each rank owns under `owner`.
pub(crate) fn held_bytes(parts: &[Part], owner: &[usize], world: usize) -> Vec<u64> {
    let mut bytes = vec![0u64; world];
    for (p, &r) in parts.iter().zip(owner) {
        bytes[r] += p.bytes;
    }
    bytes
}
