//! Checking a plan's DMT towers (paper §3.1, §3.1.3): every table in exactly one tower,
//! each tower on 1 or K hosts (the same K for every tower), towers that share hosts
//! sharing them whole, every host under some tower, and every shard of a tower's table
//! (every partition and replica of a row-partitioned one) on the ranks of the tower's
//! hosts. Data-parallel tables have no place in a tower.

use crate::error::{Error, Result};
use crate::plan::{Plan, ShardingType};
use std::collections::{BTreeSet, HashMap};
use towerrec_comm::Topology;

/// Checks the towers, if any, against the plan's tables and `topology`.
pub(super) fn check_towers(plan: &Plan, topology: Topology) -> Result<()> {
    if plan.towers.is_empty() {
        return Ok(());
    }
    let mut tower_of: HashMap<&str, usize> = HashMap::new();
    for (i, tower) in plan.towers.iter().enumerate() {
        let fail = |reason: String| Error::Plan(format!("tower {i}: {reason}"));
        if tower.features.is_empty() {
            return Err(fail("has no features".into()));
        }
        if tower.hosts.is_empty() {
            return Err(fail("has no hosts".into()));
        }
        let hosts: BTreeSet<usize> = tower.hosts.iter().copied().collect();
        if hosts.len() != tower.hosts.len() {
            return Err(fail(format!("lists a host twice in {:?}", tower.hosts)));
        }
        if let Some(h) = hosts.iter().find(|&&h| h >= topology.hosts) {
            return Err(fail(format!(
                "host {h} is outside the {} hosts",
                topology.hosts
            )));
        }
        for f in &tower.features {
            if let Some(other) = tower_of.insert(f.as_str(), i) {
                return Err(fail(format!("feature '{f}' is also in tower {other}")));
            }
            let Some(entry) = plan.table(f) else {
                return Err(fail(format!(
                    "feature '{f}' has no table entry in the plan"
                )));
            };
            if entry.sharding == ShardingType::DataParallel {
                return Err(fail(format!(
                    "feature '{f}' is data_parallel; a tower's tables live on its hosts"
                )));
            }
            if let Some(s) = entry
                .shards
                .iter()
                .find(|s| !hosts.contains(&topology.host_of(s.rank)))
            {
                return Err(fail(format!(
                    "feature '{f}' has a shard on rank {} (host {}), outside the tower's hosts {:?}",
                    s.rank,
                    topology.host_of(s.rank),
                    tower.hosts
                )));
            }
            let copies = entry.partitions.iter().flat_map(|p| p.holders());
            if let Some(r) = copies
                .into_iter()
                .find(|&r| !hosts.contains(&topology.host_of(r)))
            {
                return Err(fail(format!(
                    "feature '{f}' has rows on rank {r} (host {}), outside the tower's hosts {:?}",
                    topology.host_of(r),
                    tower.hosts
                )));
            }
        }
    }
    if let Some(t) = plan
        .tables
        .iter()
        .find(|t| !tower_of.contains_key(t.table.as_str()))
    {
        return Err(Error::Plan(format!(
            "table '{}' is in no tower; with towers, every table must be in one",
            t.table
        )));
    }
    check_host_groups(plan, topology)
}

/// Host groups must be disjoint, of one size K that divides the hosts, and cover them.
fn check_host_groups(plan: &Plan, topology: Topology) -> Result<()> {
    let groups = plan.host_groups();
    let k = groups[0].len();
    let mut covered = BTreeSet::new();
    for g in &groups {
        if g.len() != k {
            return Err(Error::Plan(format!(
                "towers span {k} and {} hosts; every tower must span the same number",
                g.len()
            )));
        }
        for &h in g {
            if !covered.insert(h) {
                return Err(Error::Plan(format!(
                    "host {h} is in two different host sets of towers; towers that share a \
                     host must share all their hosts"
                )));
            }
        }
    }
    if covered.len() != topology.hosts {
        let missing: Vec<usize> = (0..topology.hosts)
            .filter(|h| !covered.contains(h))
            .collect();
        return Err(Error::Plan(format!(
            "hosts {missing:?} hold no tower; every host must hold part of one"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_towers;
    use crate::{Plan, Shard, ShardingType, TablePlan, TowerPlan};
    use towerrec_comm::Topology;

    /// Tables t0..t3 table-wise on ranks 0..3 of 2 hosts × 2 ranks, towers per host.
    fn plan() -> Plan {
        let whole = |rank| Shard {
            rank,
            rows: (0, 10),
            columns: (0, 4),
        };
        Plan {
            topology: Topology::new(2, 2).unwrap(),
            tables: (0..4)
                .map(|r| TablePlan {
                    hot_rows: Vec::new(),
                    partitions: Vec::new(),
                    table: format!("t{r}"),
                    sharding: ShardingType::TableWise,
                    shards: vec![whole(r)],
                })
                .collect(),
            towers: vec![
                TowerPlan {
                    features: vec!["t0".into(), "t1".into()],
                    hosts: vec![0],
                },
                TowerPlan {
                    features: vec!["t2".into(), "t3".into()],
                    hosts: vec![1],
                },
            ],
        }
    }

    fn refused(plan: &Plan, needle: &str) {
        let err = check_towers(plan, plan.topology)
            .expect_err("refused")
            .to_string();
        assert!(err.contains(needle), "{err}");
    }

    #[test]
    fn a_tower_per_host_passes() {
        let p = plan();
        check_towers(&p, p.topology).unwrap();
        assert_eq!(p.host_groups(), vec![vec![0], vec![1]]);
    }

    #[test]
    fn towers_spanning_both_hosts_pass() {
        let mut p = plan();
        p.towers[0].hosts = vec![1, 0];
        p.towers[1].hosts = vec![0, 1];
        check_towers(&p, p.topology).unwrap();
        assert_eq!(p.host_groups(), vec![vec![0, 1]]);
    }

    #[test]
    fn each_mistake_is_named() {
        let mut p = plan();
        p.towers[1].features.push("t0".into());
        refused(&p, "feature 't0' is also in tower 0");
        let mut p = plan();
        p.towers[1].features.pop();
        refused(&p, "table 't3' is in no tower");
        let mut p = plan();
        p.towers[1].features.push("nope".into());
        refused(&p, "'nope' has no table entry");
        let mut p = plan();
        p.towers[0].hosts = vec![1];
        refused(
            &p,
            "shard on rank 0 (host 0), outside the tower's hosts [1]",
        );
        let mut p = plan();
        p.towers[0].hosts = vec![2];
        refused(&p, "host 2 is outside the 2 hosts");
        let mut p = plan();
        p.towers[0].hosts = vec![0, 0];
        refused(&p, "lists a host twice");
        let mut p = plan();
        p.towers[0].hosts = vec![0, 1];
        refused(&p, "span 2 and 1 hosts");
        let mut p = plan();
        p.tables[0].sharding = ShardingType::DataParallel;
        p.tables[0].shards.clear();
        refused(&p, "'t0' is data_parallel");
        let mut p = plan();
        p.towers.pop();
        p.towers[0].features = (0..4).map(|t| format!("t{t}")).collect();
        p.tables[2].shards[0].rank = 0;
        p.tables[3].shards[0].rank = 1;
        refused(&p, "hosts [1] hold no tower");
    }
}
