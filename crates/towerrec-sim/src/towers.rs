//! DMT's towers as built (Luo et al. 2024, "Disaggregated Multi-Tower"): which tables
//! each tower holds, on how many hosts (§3.1.3), which Tower Module follows it (§3.2,
//! §4, Listings 1 and 2), and from these what a rank of SPTT moves, computes and
//! synchronizes (§3.1, Figure 7) and what the over-arch computes on the modules'
//! outputs (§3.2, Figure 8).
//!
//! The modules' output widths, parameters and FLOPs are towerrec's own
//! ([`TowerModuleKind::counts`]), and the layout is its runtime's
//! (`crates/towerrec-train/src/sharded/sptt/`, docs/DMT.md "SPTT"): tower `t` on host
//! group `t mod G`, the `G = hosts / K` groups being runs of `K` consecutive hosts, each
//! group's tables spread evenly over its `S = K·R` ranks (`R` per host). For a rank of
//! group `g` holding `b` samples, with `W_g` the columns of the group's tables, `O_g` of
//! its modules' outputs, `Φ_g` their FLOPs and `L_g` their lookups per sample:
//!
//! - lookups (step b): its share of the group's tables for the global batch, `L_g·G·b`
//!   rows;
//! - step d, an all-to-all over the group's `S` ranks (crossing hosts when `K > 1`):
//!   it sends its tables' pooled rows for the samples of all `G·S·b / S` peers, `G·b·W_g`
//!   values in all (`G·b·O_g` where towerrec runs a per-feature module before step d:
//!   [`Towers::maps_at_lookup`]);
//! - the modules run on the `G·b` group rows it then holds: `G·b·Φ_g` FLOPs;
//! - step f, an all-to-all among its `G` peers (one rank per group): `G·b·O_g` values
//!   (`O_g = W_g` for pass-through towers: SPTT alone);
//! - the modules' gradients are summed over the group's ranks only (`P_g` parameters).
//!
//! Every phase waits for its busiest group, so each figure is the maximum over groups.
//! Balanced towers (`W_g = ΣW/G`) give `b·ΣW` for step d, the flat exchange's volume.

use crate::error::{Error, Result};
use crate::workload::{DenseCounts, Interaction, InteractionInput, Workload};
use towerrec_core::layers::tower::{TowerCounts, TowerModuleKind};

/// A DMT model's towers: its tables grouped, the module after each group, and the hosts
/// of each tower.
#[derive(Debug, Clone, PartialEq)]
pub struct Towers {
    /// The module of every tower (towerrec's `[model.towers]` has one kind for all).
    pub kind: TowerModuleKind,
    /// Per tower, its tables: indices into the workload's tables, groups expanded.
    pub tables: Vec<Vec<usize>>,
    /// `K`, hosts per tower group; `None`: what towerrec does without a plan (as many
    /// groups as towers or hosts, whichever is fewer, when that divides the hosts; else
    /// one group of all hosts).
    pub hosts_per_tower: Option<usize>,
    /// Whether a module that is one map per feature (DLRM's with `p = 0`) runs where
    /// the tables are looked up, before step d, so that step d carries its outputs:
    /// towerrec's runtime does (docs/DMT.md); the paper runs every module after step e.
    pub maps_at_lookup: bool,
    /// With the maps run at lookup: chunks of samples the exchange is cut into, each
    /// chunk's step f under the next chunk's maps and step d (towerrec's
    /// `cluster.tower_chunks`); 1: none.
    pub chunks: usize,
}

/// What a rank of the busiest tower group does per sample it owns (see the module docs):
/// each figure is the largest over the groups.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupLoad {
    /// `G·W_g`: values sent in step d.
    pub intra_values: f64,
    /// `G·O_g`: values sent in step f.
    pub peer_values: f64,
    /// `G·Φ_g`: the modules' forward FLOPs.
    pub module_flops: f64,
    /// `P_g`: the modules' parameters, summed over the group.
    pub module_params: f64,
    /// `G·L_g`: rows looked up.
    pub lookups: f64,
}

/// The towers on one cluster size: their layout, the busiest group's load, and the
/// over-arch that reads their outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TowerCosts {
    pub towers: usize,
    /// `G` host groups of `K` hosts each.
    pub groups: usize,
    pub hosts_per_group: usize,
    /// Pooled values into the modules over values out (the paper's CR, Table 5's sense).
    pub compression: f64,
    /// The dense layers outside the towers (synced over the world).
    pub dense: DenseCounts,
    /// Forward FLOPs per sample and parameters of all modules (the model's counts).
    pub module_flops: f64,
    pub module_params: f64,
    pub busiest: GroupLoad,
    /// Chunks of the pipelined exchange (1 unless the maps run at lookup in chunks).
    pub chunks: usize,
    /// Whether the modules are per-feature maps run before step d
    /// ([`Towers::maps_at_lookup`]): then a step's exchange can run in parts
    /// (`simulate_parts`), as the runtime's can.
    pub early_maps: bool,
}

impl TowerCosts {
    /// Whether the modules compute anything (not pass-through: SPTT alone).
    pub fn has_modules(&self) -> bool {
        self.module_flops > 0.0 || self.module_params > 0.0
    }
}

impl Towers {
    /// `count` towers of `kind`, table `i` in tower `i mod count` (the paper's naive
    /// assignment, and towerrec's `[model.towers] count`).
    pub fn strided(kind: TowerModuleKind, num_tables: usize, count: usize) -> Result<Self> {
        if count == 0 || count > num_tables {
            return Err(Error::invalid(
                "towers",
                format!("{count} towers for {num_tables} tables: need 1 to {num_tables}"),
            ));
        }
        let mut tables = vec![Vec::new(); count];
        for i in 0..num_tables {
            tables[i % count].push(i);
        }
        Ok(Towers {
            kind,
            tables,
            hosts_per_tower: None,
            maps_at_lookup: false,
            chunks: 1,
        })
    }

    /// The module that compresses `workload`'s embeddings by about `compression`: the
    /// DMT paper's DLRM tower (§5.2.2: `c = 1, p = 0, D = N / CR`) for the dot
    /// interaction, its DCN tower (one full-rank cross layer, `D = N / CR`) for the
    /// cross network. `D` is rounded to a whole number (at least 1).
    pub fn module_for(workload: &Workload, compression: f64) -> Result<TowerModuleKind> {
        if !(compression.is_finite() && compression >= 1.0) {
            return Err(Error::invalid(
                "compression",
                format!("must be a finite number ≥ 1, got {compression}"),
            ));
        }
        let d = ((workload.embedding_dim as f64 / compression).round() as usize).max(1);
        Ok(match workload.interaction {
            Interaction::Dot { .. } => TowerModuleKind::Dlrm { c: 1, p: 0, d },
            Interaction::Cross { .. } => TowerModuleKind::Dcn {
                d,
                layers: 1,
                rank: None,
            },
        })
    }

    /// The DMT paper's setting on `hosts` hosts (§5.3.1: "the number of towers matches
    /// the number of hosts"): one tower per host while there are tables for them;
    /// beyond, the most towers that divide the hosts (26 tables on 64 hosts: 16 towers
    /// of 4 hosts each), tables strided.
    pub fn per_host(workload: &Workload, kind: TowerModuleKind, hosts: usize) -> Result<Self> {
        let most = hosts.min(workload.num_tables()).max(1);
        let count = (1..=most)
            .rev()
            .find(|t| hosts.is_multiple_of(*t))
            .unwrap_or(1);
        let mut towers = Self::strided(kind, workload.num_tables(), count)?;
        towers.hosts_per_tower = Some(hosts / count);
        Ok(towers)
    }

    /// The same towers without modules: SPTT alone (§5.2.1, pass-through towers).
    pub fn pass_through(&self) -> Self {
        Towers {
            kind: TowerModuleKind::Identity,
            ..self.clone()
        }
    }

    /// `K` on `hosts` hosts.
    pub fn hosts_per_group(&self, hosts: usize) -> Result<usize> {
        let k = match self.hosts_per_tower {
            Some(k) => k,
            None => {
                let groups = hosts.min(self.tables.len());
                if groups > 0 && hosts.is_multiple_of(groups) {
                    hosts / groups
                } else {
                    hosts
                }
            }
        };
        if k == 0 || !hosts.is_multiple_of(k) {
            return Err(Error::invalid(
                "towers",
                format!("towers of {k} hosts on {hosts} hosts: the hosts per tower must divide the hosts"),
            ));
        }
        let groups = hosts / k;
        if self.tables.len() < groups {
            return Err(Error::invalid(
                "towers",
                format!(
                    "{} towers for {groups} host groups of {k}: every host group needs a tower",
                    self.tables.len()
                ),
            ));
        }
        Ok(k)
    }

    /// Each tower's module counts over embeddings `n` wide.
    pub fn module_counts(&self, n: usize) -> Result<Vec<TowerCounts>> {
        self.tables
            .iter()
            .map(|t| {
                self.kind
                    .counts(t.len(), n)
                    .map_err(|e| Error::invalid("towers", e.to_string()))
            })
            .collect()
    }

    /// Checks that every table of `workload` is in exactly one tower.
    fn check(&self, workload: &Workload) -> Result<()> {
        let n = workload.num_tables();
        let mut seen = vec![false; n];
        for (t, tables) in self.tables.iter().enumerate() {
            if tables.is_empty() {
                return Err(Error::invalid("towers", format!("tower {t} has no tables")));
            }
            for &i in tables {
                match seen.get_mut(i) {
                    None => {
                        return Err(Error::invalid(
                            "towers",
                            format!("tower {t}: table {i} of {n}"),
                        ))
                    }
                    Some(true) => {
                        return Err(Error::invalid(
                            "towers",
                            format!("table {i} is in two towers"),
                        ))
                    }
                    Some(s) => *s = true,
                }
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(Error::invalid(
                "towers",
                format!("table {i} is in no tower"),
            ));
        }
        Ok(())
    }

    /// The dense layers outside the towers: the interaction reads the base part and the
    /// modules' outputs (DLRM: `1 + ΣO/D` vectors of `D`, the bottom MLP ending in `D`,
    /// or `ΣO/D` without dense features;
    /// DCN: a cross net over `base + ΣO` columns), as towerrec builds a DMT model.
    pub fn over_arch(&self, workload: &Workload) -> Result<DenseCounts> {
        self.check(workload)?;
        let n = workload.embedding_dim;
        let out: usize = self.module_counts(n)?.iter().map(|c| c.out_dim).sum();
        let input = match workload.interaction {
            Interaction::Dot { .. } => {
                let width = match self.kind {
                    TowerModuleKind::Identity => n,
                    TowerModuleKind::Dlrm { d, .. } | TowerModuleKind::Dcn { d, .. } => d,
                };
                if !out.is_multiple_of(width) {
                    return Err(Error::invalid(
                        "towers",
                        format!(
                            "the towers' outputs ({out} columns) are not whole vectors of {width}"
                        ),
                    ));
                }
                InteractionInput::Dot {
                    vectors: workload.dense_vectors() + out / width,
                    width,
                }
            }
            Interaction::Cross { .. } => InteractionInput::Cross {
                width: workload.dense_width() + out,
            },
        };
        Ok(workload.dense_counts_of(input))
    }

    /// The towers of `workload` on a cluster of `hosts` hosts.
    pub fn costs(&self, workload: &Workload, hosts: usize) -> Result<TowerCosts> {
        let dense = self.over_arch(workload)?;
        let k = self.hosts_per_group(hosts)?;
        let groups = hosts / k;
        let n = workload.embedding_dim;
        let counts = self.module_counts(n)?;
        let lookups = workload.table_lookups();
        let g = groups as f64;
        let mut per_group = vec![[0.0f64; 5]; groups];
        let per_feature = self.maps_at_lookup && self.kind.per_feature_width().is_some();
        for (t, (tables, c)) in self.tables.iter().zip(&counts).enumerate() {
            let load = &mut per_group[t % groups];
            let step_d = if per_feature {
                c.out_dim
            } else {
                tables.len() * n
            };
            load[0] += g * step_d as f64;
            load[1] += g * c.out_dim as f64;
            load[2] += g * c.forward_flops_per_sample as f64;
            load[3] += c.params as f64;
            load[4] += g * tables.iter().map(|&i| lookups[i]).sum::<f64>();
        }
        let max = |i: usize| per_group.iter().map(|l| l[i]).fold(0.0, f64::max);
        let out: usize = counts.iter().map(|c| c.out_dim).sum();
        Ok(TowerCosts {
            towers: self.tables.len(),
            groups,
            hosts_per_group: k,
            compression: (workload.num_tables() * n) as f64 / out as f64,
            dense,
            module_flops: counts
                .iter()
                .map(|c| c.forward_flops_per_sample as f64)
                .sum(),
            module_params: counts.iter().map(|c| c.params as f64).sum(),
            busiest: GroupLoad {
                intra_values: max(0),
                peer_values: max(1),
                module_flops: max(2),
                module_params: max(3),
                lookups: max(4),
            },
            chunks: if per_feature { self.chunks.max(1) } else { 1 },
            early_maps: per_feature,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_through_towers_are_the_flat_model() {
        for w in [Workload::dmt_dlrm(), Workload::rm2(false)] {
            let towers = Towers::strided(TowerModuleKind::Identity, w.num_tables(), 4).unwrap();
            assert_eq!(towers.over_arch(&w).unwrap(), w.dense_counts());
            let c = towers.costs(&w, 4).unwrap();
            assert_eq!(c.compression, 1.0);
            assert!(!c.has_modules());
        }
    }

    #[test]
    fn balanced_towers_move_the_flat_volume_and_compress_step_f() {
        // 26 tables of 128 in 2 towers of 13 on 2 hosts: step d carries every pooled
        // value once (b·26·128), step f half of it at D = 64.
        let w = Workload::dmt_dlrm();
        let kind = Towers::module_for(&w, 2.0).unwrap();
        assert_eq!(kind, TowerModuleKind::Dlrm { c: 1, p: 0, d: 64 });
        let c = Towers::strided(kind, 26, 2).unwrap().costs(&w, 2).unwrap();
        assert_eq!((c.groups, c.hosts_per_group), (2, 1));
        assert_eq!(c.busiest.intra_values, 26.0 * 128.0);
        assert_eq!(c.busiest.peer_values, 13.0 * 128.0);
        assert_eq!(c.compression, 2.0);
        assert_eq!(c.module_flops, 2.0 * 128.0 * 64.0 * 26.0);
        assert_eq!(c.busiest.module_flops, c.module_flops);
        assert_eq!(c.busiest.lookups, 26.0);
    }

    #[test]
    fn uneven_towers_load_their_busiest_group() {
        // 26 tables in 16 towers (10 of 2, 6 of 1), one per host: a group holds 2 of the
        // 26 tables, so its ranks do 16·2/26 of the balanced share.
        let w = Workload::dmt_dlrm();
        let towers = Towers::per_host(&w, TowerModuleKind::Identity, 16).unwrap();
        assert_eq!(towers.tables.len(), 16);
        let c = towers.costs(&w, 16).unwrap();
        assert_eq!(c.busiest.lookups, 32.0);
        assert_eq!(c.busiest.intra_values, 16.0 * 2.0 * 128.0);
        // 64 hosts, 26 tables: 16 towers of 4 hosts.
        let towers = Towers::per_host(&w, TowerModuleKind::Identity, 64).unwrap();
        let c = towers.costs(&w, 64).unwrap();
        assert_eq!((c.towers, c.groups, c.hosts_per_group), (16, 16, 4));
    }

    #[test]
    fn per_feature_maps_at_lookup_compress_step_d() {
        // towerrec runs DLRM's module with p = 0 before step d: step d then carries its
        // outputs as step f does; a module with a flat part still runs after step e.
        let w = Workload::dmt_dlrm();
        let per_feature = TowerModuleKind::Dlrm { c: 1, p: 0, d: 32 };
        let mut towers = Towers::strided(per_feature, 26, 2).unwrap();
        let paper = towers.costs(&w, 2).unwrap();
        towers.maps_at_lookup = true;
        let ours = towers.costs(&w, 2).unwrap();
        assert_eq!(paper.busiest.intra_values, 26.0 * 128.0);
        assert_eq!(ours.busiest.intra_values, 26.0 * 32.0);
        assert_eq!(ours.busiest.peer_values, paper.busiest.peer_values);
        let mut flat_part =
            Towers::strided(TowerModuleKind::Dlrm { c: 1, p: 1, d: 32 }, 26, 2).unwrap();
        flat_part.maps_at_lookup = true;
        assert_eq!(
            flat_part.costs(&w, 2).unwrap().busiest.intra_values,
            26.0 * 128.0
        );
    }

    #[test]
    fn several_towers_share_a_host_group() {
        // towerrec's default without a plan: 4 towers on 2 hosts make 2 groups of 2.
        let w = Workload::dmt_dlrm();
        let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d: 32 };
        let towers = Towers::strided(kind, 26, 4).unwrap();
        let c = towers.costs(&w, 2).unwrap();
        assert_eq!((c.towers, c.groups, c.hosts_per_group), (4, 2, 1));
        // Group 0 holds towers 0 and 2 (7 + 6 tables), group 1 towers 1 and 3 (7 + 6).
        assert_eq!(c.busiest.intra_values, 2.0 * 13.0 * 128.0);
        assert_eq!(c.busiest.peer_values, 2.0 * 13.0 * 32.0);
        // A tower of 2 hosts on 4 hosts: 2 groups; 3 towers cannot fill 4 groups.
        let mut towers = Towers::strided(kind, 26, 2).unwrap();
        towers.hosts_per_tower = Some(2);
        assert_eq!(towers.costs(&w, 4).unwrap().groups, 2);
        let mut three = Towers::strided(kind, 26, 3).unwrap();
        three.hosts_per_tower = Some(1);
        let e = three.costs(&w, 4).unwrap_err().to_string();
        assert!(e.contains("every host group needs a tower"), "{e}");
        three.hosts_per_tower = Some(3);
        assert!(three.costs(&w, 4).is_err());
    }

    #[test]
    fn towers_that_do_not_cover_the_tables_are_refused() {
        let w = Workload::dmt_dlrm();
        let mut t = Towers::strided(TowerModuleKind::Identity, 26, 2).unwrap();
        t.tables[0].pop();
        assert!(t
            .costs(&w, 2)
            .unwrap_err()
            .to_string()
            .contains("in no tower"));
        t.tables[1].push(1);
        assert!(t.costs(&w, 2).is_err());
        assert!(Towers::strided(TowerModuleKind::Identity, 26, 27).is_err());
        assert!(Towers::module_for(&w, f64::NAN).is_err());
    }

    #[test]
    fn table_4_is_computed_from_the_layers_not_fitted() {
        // The paper's DLRM: 14.74 MFLOPs per trained sample (3 × forward); counted from
        // its layers, 14.75. Its DMT version (c = 1, p = 0, D = 64, bottom MLP ending in
        // 64): the paper prints 8.95; the layers give 15.26, whatever the tower count.
        let w = Workload::dmt_dlrm();
        let flat = 3.0 * w.dense_counts().forward_flops();
        assert!((flat / 1e6 - 14.75).abs() < 0.005, "{flat}");
        let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d: 64 };
        for t in [2, 4, 8, 26] {
            let c = Towers::strided(kind, 26, t).unwrap().costs(&w, 1).unwrap();
            let dmt = 3.0 * (c.dense.forward_flops() + c.module_flops);
            assert!((dmt / 1e6 - 15.26).abs() < 0.005, "{t}: {dmt}");
            assert!((dmt / flat - 1.034).abs() < 0.001);
        }
    }
}
