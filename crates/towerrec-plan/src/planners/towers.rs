//! Tower plans (DMT §3.1, §3.1.3): each tower's tables placed on the ranks of its hosts
//! by one of the flat planners, run on the sub-cluster of those hosts.
//!
//! Tower `t` goes to host group `t mod G`, where the `G = hosts / K` groups are runs of
//! `K` consecutive hosts; so every host holds part of a tower when there are at least
//! `G` towers. The strided assignment of features to towers (feature `i` to tower
//! `i mod T`) is the naive baseline of the paper's Table 6.

use crate::error::{Error, Result};
use crate::plan::{Plan, ShardingType, TableSpec, TowerPlan};
use towerrec_comm::Topology;

/// The paper's naive assignment: feature `i` in tower `i mod towers`.
pub fn strided_towers(features: usize, towers: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); towers];
    for i in 0..features {
        out[i % towers.max(1)].push(i);
    }
    out
}

/// Hosts each of `towers` towers spans by default on `hosts` hosts: one host group per
/// tower where there are hosts enough (`hosts / towers` hosts each, when that divides),
/// else towers share one-host groups; all hosts where the groups would not divide them.
pub fn default_hosts_per_tower(hosts: usize, towers: usize) -> usize {
    let groups = hosts.min(towers);
    if groups > 0 && hosts.is_multiple_of(groups) {
        hosts / groups
    } else {
        hosts
    }
}

/// A plan with `towers` (feature indices into `tables`, every table in exactly one),
/// each tower on `hosts_per_tower` hosts, its tables placed by `inner` on the
/// sub-cluster of those hosts. An inner OPER plan keeps its replicas on the tower's
/// hosts, so that they synchronise among those hosts alone (OPER beyond the paper:
/// host-local replicas under DMT towers).
pub fn with_towers<E: From<Error>>(
    tables: &[TableSpec],
    topology: Topology,
    towers: &[Vec<usize>],
    hosts_per_tower: usize,
    inner: impl Fn(&[TableSpec], Topology) -> std::result::Result<Plan, E>,
) -> std::result::Result<Plan, E> {
    let k = hosts_per_tower;
    if k == 0 || !topology.hosts.is_multiple_of(k) {
        return Err(Error::Request(format!(
            "towers of {k} hosts on {} hosts: the hosts per tower must divide the hosts",
            topology.hosts
        ))
        .into());
    }
    let groups = topology.hosts / k;
    if towers.len() < groups {
        return Err(Error::Request(format!(
            "{} towers for {groups} host groups of {k}: every host group needs a tower",
            towers.len()
        ))
        .into());
    }
    let l = topology.ranks_per_host;
    let sub = Topology::new(k, l).map_err(|e| Error::Request(e.to_string()))?;
    let mut plan = Plan {
        topology,
        tables: Vec::new(),
        towers: Vec::new(),
    };
    for g in 0..groups {
        let mine: Vec<TableSpec> = towers
            .iter()
            .skip(g)
            .step_by(groups)
            .flatten()
            .map(|&i| {
                tables.get(i).cloned().ok_or_else(|| {
                    Error::Request(format!("tower feature {i} of {} tables", tables.len()))
                })
            })
            .collect::<Result<_>>()?;
        if mine.is_empty() {
            return Err(
                Error::Request(format!("host group {g} got towers with no features")).into(),
            );
        }
        let first_host = g * k;
        for mut entry in inner(&mine, sub)?.tables {
            if entry.sharding == ShardingType::DataParallel {
                return Err(Error::Request(format!(
                    "the planner made table '{}' data-parallel; a tower's tables live on its \
                     hosts: choose another strategy",
                    entry.table
                ))
                .into());
            }
            entry.shift_ranks(first_host * l);
            plan.tables.push(entry);
        }
    }
    for (t, features) in towers.iter().enumerate() {
        let g = t % groups;
        plan.towers.push(TowerPlan {
            features: features.iter().map(|&i| tables[i].name.clone()).collect(),
            hosts: (g * k..(g + 1) * k).collect(),
        });
    }
    plan.validate(tables, topology, None)?;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planners::{row_wise, table_wise};

    fn specs(n: usize) -> Vec<TableSpec> {
        (0..n)
            .map(|i| TableSpec {
                name: format!("C{i}"),
                rows: 10 + i,
                dim: 4,
                bytes_per_row: 16,
                pooling_factor: 1.0,
            })
            .collect()
    }

    #[test]
    fn strided_is_the_papers_naive_assignment() {
        let t = strided_towers(26, 8);
        assert_eq!(t[0], vec![0, 8, 16, 24]);
        assert_eq!(t[1], vec![1, 9, 17, 25]);
        assert_eq!(t[7], vec![7, 15, 23]);
    }

    #[test]
    fn every_tower_stays_on_its_hosts() {
        let topo = Topology::new(4, 2).unwrap();
        let tables = specs(11);
        for k in [1, 2, 4] {
            let towers = strided_towers(11, 4);
            for plan in [
                with_towers(&tables, topo, &towers, k, table_wise).unwrap(),
                with_towers(&tables, topo, &towers, k, row_wise).unwrap(),
            ] {
                assert_eq!(plan.towers.len(), 4);
                assert_eq!(plan.host_groups().len(), 4 / k);
                plan.validate(&tables, topo, None).unwrap();
            }
        }
    }

    #[test]
    fn impossible_requests_are_refused() {
        let topo = Topology::new(4, 2).unwrap();
        let tables = specs(6);
        let err = with_towers(&tables, topo, &strided_towers(6, 3), 3, table_wise).unwrap_err();
        assert!(err.to_string().contains("must divide"), "{err}");
        let err = with_towers(&tables, topo, &strided_towers(6, 2), 1, table_wise).unwrap_err();
        assert!(
            err.to_string().contains("every host group needs a tower"),
            "{err}"
        );
    }
}
