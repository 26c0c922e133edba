//! Where a run's towers come from: one answer for training, resuming, `eval`,
//! `partition` and scoring (docs/DMT.md, "Where the towers come from").
//!
//! The model config says the Tower Module, its sizes and how many towers
//! (`[model.towers] count`); which tables each tower holds is a placement (DMT paper
//! §3.1), so it is the plan's. Without a plan that has towers, the default planner's
//! towers are the paper's naive split, table `i` in tower `i mod count`. A checkpoint
//! records the towers it was trained with, and whatever reads it takes them from there.
//!
//! An old config that lists the tables of each tower (`features`, or a partition
//! `file`) is read once: its towers stand in for the default planner's, and the run's
//! own config and checkpoint then say `count` and record the towers.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use towerrec_data::Schema;
use towerrec_plan::Plan;

/// The tables of each tower, as indices into the model's tables (`names`), for a model
/// of `model` that trains or runs with `plan` (where it has one) and was trained with
/// the towers `recorded` (a checkpoint's, by table name; `None` for a fresh run or a
/// checkpoint older than the record). `None` for a model without towers.
///
/// In order: the recorded towers; else the plan's; else those an old config listed;
/// else the naive split. Refused: recorded towers that are not the plan's (a run resumes
/// on the towers it trained with), towers listed in an old config that are not the
/// plan's, and a tower count other than the model's.
pub fn run_towers(
    model: &ModelConfig,
    names: &[String],
    plan: Option<&Plan>,
    recorded: Option<&[Vec<String>]>,
) -> Result<Option<Vec<Vec<usize>>>> {
    let Some(config) = &model.towers else {
        return Ok(None);
    };
    let planned: Option<Vec<Vec<String>>> = plan
        .filter(|p| !p.towers.is_empty())
        .map(|p| p.towers.iter().map(|t| t.features.clone()).collect());
    let (towers, from) = match (recorded, planned, &config.features) {
        (Some(r), Some(p), _) if r != p.as_slice() => {
            return Err(Error::Plan(format!(
                "the checkpoint was trained with the towers {r:?}, the plan has {p:?}: \
                 resume with a plan of the same towers, or without --plan"
            )))
        }
        (Some(r), _, _) => (by_name(r, names, "the checkpoint's towers")?, "checkpoint"),
        (None, Some(p), Some(listed)) if *listed != p => {
            return Err(Error::Plan(format!(
                "the plan's towers {p:?} are not those model.towers.features (or file) lists, \
                 {listed:?}: the plan holds a run's towers; drop features and file from \
                 [model.towers] and give count"
            )))
        }
        (None, Some(p), _) => (by_name(&p, names, "the plan's towers")?, "plan"),
        (None, None, _) => (config.assignment(names).map_err(Error::Model)?, "model"),
    };
    match config.count {
        Some(count) if count != towers.len() => Err(Error::Plan(format!(
            "the {from}'s {} towers are not the model's {count} (model.towers.count)",
            towers.len()
        ))),
        _ => Ok(Some(towers)),
    }
}

/// [`run_towers`] of a fresh run (nothing recorded) of `model` on data of `schema`.
pub fn fresh_towers(
    model: &ModelConfig,
    schema: &Schema,
    plan: Option<&Plan>,
) -> Result<Option<Vec<Vec<usize>>>> {
    let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
    run_towers(model, &names, plan, None)
}

/// The towers `towers` (indices into `names`) by table name, as a checkpoint records
/// them.
pub fn tower_names(towers: &[Vec<usize>], names: &[String]) -> Vec<Vec<String>> {
    towers
        .iter()
        .map(|t| t.iter().map(|&i| names[i].clone()).collect())
        .collect()
}

/// `towers` by name as indices into `names`, every table in exactly one tower.
fn by_name(towers: &[Vec<String>], names: &[String], what: &str) -> Result<Vec<Vec<usize>>> {
    crate::config::towers_by_name(towers, names).map_err(|e| Error::Plan(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use towerrec_comm::Topology;
    use towerrec_plan::TowerPlan;

    fn model(towers: &str) -> ModelConfig {
        let set = format!("model.towers={{ module = \"identity\", {towers} }}");
        Config::quickstart(&[set]).unwrap().model
    }

    fn names() -> Vec<String> {
        (1..=4).map(|i| format!("C{i}")).collect()
    }

    fn plan(towers: &[&[&str]]) -> Plan {
        Plan {
            topology: Topology::new(1, 1).unwrap(),
            tables: Vec::new(),
            towers: towers
                .iter()
                .map(|t| TowerPlan {
                    features: t.iter().map(|s| s.to_string()).collect(),
                    hosts: vec![0],
                })
                .collect(),
        }
    }

    #[test]
    fn the_naive_split_without_plan_or_record() {
        let got = run_towers(&model("count = 2"), &names(), None, None).unwrap();
        assert_eq!(got, Some(vec![vec![0, 2], vec![1, 3]]));
        let flat = plan(&[]);
        let got = run_towers(&model("count = 2"), &names(), Some(&flat), None).unwrap();
        assert_eq!(got, Some(vec![vec![0, 2], vec![1, 3]]));
    }

    #[test]
    fn the_plan_holds_the_towers() {
        let p = plan(&[&["C4", "C1"], &["C2", "C3"]]);
        let got = run_towers(&model("count = 2"), &names(), Some(&p), None).unwrap();
        assert_eq!(got, Some(vec![vec![3, 0], vec![1, 2]]));
        let err = run_towers(&model("count = 3"), &names(), Some(&p), None).unwrap_err();
        assert!(
            err.to_string()
                .contains("plan's 2 towers are not the model's 3"),
            "{err}"
        );
    }

    #[test]
    fn the_checkpoint_record_rules_and_must_match_the_plan() {
        let rec = vec![
            vec!["C2".to_string()],
            vec!["C1".into(), "C3".into(), "C4".into()],
        ];
        let got = run_towers(&model("count = 2"), &names(), None, Some(&rec)).unwrap();
        assert_eq!(got, Some(vec![vec![1], vec![0, 2, 3]]));
        let p = plan(&[&["C1", "C3"], &["C2", "C4"]]);
        let err = run_towers(&model("count = 2"), &names(), Some(&p), Some(&rec)).unwrap_err();
        assert!(err.to_string().contains("trained with the towers"), "{err}");
        let same = plan(&[&["C2"], &["C1", "C3", "C4"]]);
        let got = run_towers(&model("count = 2"), &names(), Some(&same), Some(&rec)).unwrap();
        assert_eq!(got, Some(vec![vec![1], vec![0, 2, 3]]));
    }

    #[test]
    fn an_old_config_listing_towers_converts_once() {
        let m = model("features = [[\"C3\"], [\"C1\", \"C2\", \"C4\"]]");
        assert_eq!(m.towers.as_ref().unwrap().count, Some(2));
        let got = run_towers(&m, &names(), None, None).unwrap();
        assert_eq!(got, Some(vec![vec![2], vec![0, 1, 3]]));
        // Written back, the config gives the count, not the tables.
        let text = toml::to_string(&m).unwrap();
        assert!(
            text.contains("count = 2") && !text.contains("features"),
            "{text}"
        );
        let p = plan(&[&["C3"], &["C1", "C2", "C4"]]);
        // The default planner's plan of them holds the same towers.
        let got = run_towers(&m, &names(), Some(&p), None).unwrap();
        assert_eq!(got, Some(vec![vec![2], vec![0, 1, 3]]));
        let other = plan(&[&["C1"], &["C2", "C3", "C4"]]);
        let err = run_towers(&m, &names(), Some(&other), None).unwrap_err();
        assert!(
            err.to_string().contains("not those model.towers.features"),
            "{err}"
        );
    }

    #[test]
    fn no_towers_without_model_towers() {
        let mut m = model("count = 2");
        m.towers = None;
        let p = plan(&[&["C1", "C3"], &["C2", "C4"]]);
        assert_eq!(run_towers(&m, &names(), Some(&p), None).unwrap(), None);
    }
}
