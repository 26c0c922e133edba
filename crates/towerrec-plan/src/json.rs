//! Plans as JSON files: reading, writing, and a layout meant for people.
//!
//! `serde_json`'s pretty printer puts every number of a `[start, end)` range on its own
//! line; [`Plan::to_json_pretty`] writes one table entry per block and one shard per
//! line instead, so a plan of hundreds of tables stays readable and diffable. Both
//! layouts read back the same.

use crate::error::{Error, Result};
use crate::plan::{Partition, Plan, Shard, TablePlan, TowerPlan};
use std::fmt::Write as _;
use std::path::Path;

impl Plan {
    /// Parses a plan. Checks only the JSON's shape; [`Plan::validate`] checks the plan
    /// against a model and a cluster.
    pub fn from_json(text: &str) -> Result<Plan> {
        Ok(serde_json::from_str(text)?)
    }

    /// The plan as JSON: one line per shard, and no `shards` key where there are none
    /// (data-parallel tables). Ends with a newline.
    pub fn to_json_pretty(&self) -> String {
        let mut out = String::new();
        let t = self.topology;
        out.push_str("{\n");
        let _ = writeln!(
            out,
            "  \"topology\": {{ \"hosts\": {}, \"ranks_per_host\": {} }},",
            t.hosts, t.ranks_per_host
        );
        if self.tables.is_empty() {
            out.push_str("  \"tables\": []");
        } else {
            out.push_str("  \"tables\": [\n");
            for (i, entry) in self.tables.iter().enumerate() {
                write_entry(&mut out, entry);
                out.push_str(if i + 1 < self.tables.len() {
                    ",\n"
                } else {
                    "\n"
                });
            }
            out.push_str("  ]");
        }
        if !self.towers.is_empty() {
            out.push_str(",\n  \"towers\": [\n");
            for (i, tower) in self.towers.iter().enumerate() {
                write_tower(&mut out, tower);
                out.push_str(if i + 1 < self.towers.len() {
                    ",\n"
                } else {
                    "\n"
                });
            }
            out.push_str("  ]");
        }
        out.push_str("\n}\n");
        out
    }

    /// Reads a plan file (see [`Plan::from_json`]); errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Plan> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| Error::Io {
            path: path.to_path_buf(),
            error,
        })?;
        serde_json::from_str(&text).map_err(|error| Error::JsonFile {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Writes the plan to `path` as [`Plan::to_json_pretty`] does, atomically (a
    /// temporary file renamed into place); errors name the file.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        towerrec_core::fsio::write_atomic(path, self.to_json_pretty().as_bytes()).map_err(|error| {
            Error::Io {
                path: path.to_path_buf(),
                error,
            }
        })
    }
}

fn write_entry(out: &mut String, entry: &TablePlan) {
    // A JSON string with its escapes; `Value`'s Display cannot fail.
    let name = serde_json::Value::String(entry.table.clone());
    let _ = write!(
        out,
        "    {{ \"table\": {name}, \"sharding\": \"{}\"",
        entry.sharding.name()
    );
    if !entry.shards.is_empty() {
        out.push_str(", \"shards\": [\n");
        write_lines(out, &entry.shards, write_shard);
        out.push_str("    ]");
    }
    if !entry.hot_rows.is_empty() {
        out.push_str(",\n      \"hot_rows\": [");
        for (i, chunk) in entry.hot_rows.chunks(HOT_ROWS_PER_LINE).enumerate() {
            let line: Vec<String> = chunk.iter().map(usize::to_string).collect();
            let sep = if i == 0 { "" } else { ",\n        " };
            let _ = write!(out, "{sep}{}", line.join(", "));
        }
        out.push(']');
    }
    if !entry.partitions.is_empty() {
        out.push_str(",\n      \"partitions\": [\n");
        write_lines(out, &entry.partitions, write_partition);
        out.push_str("    ]");
    }
    out.push_str(" }");
}

/// Hot rows written per line of a plan file.
const HOT_ROWS_PER_LINE: usize = 16;

/// One item per line, comma-separated.
fn write_lines<T>(out: &mut String, items: &[T], write: fn(&mut String, &T)) {
    for (i, item) in items.iter().enumerate() {
        write(out, item);
        out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
    }
}

fn write_partition(out: &mut String, p: &Partition) {
    let _ = write!(
        out,
        "      {{ \"order\": [{}, {}], \"rank\": {}",
        p.order.0, p.order.1, p.rank
    );
    if !p.replicas.is_empty() {
        let _ = write!(
            out,
            ", \"replicas\": {}",
            serde_json::Value::from(p.replicas.clone())
        );
    }
    out.push_str(" }");
}

fn write_tower(out: &mut String, tower: &TowerPlan) {
    // Strings with their escapes; `Value`'s Display cannot fail.
    let features = serde_json::Value::from(tower.features.clone());
    let hosts = serde_json::Value::from(tower.hosts.clone());
    let _ = write!(
        out,
        "    {{ \"features\": {features}, \"hosts\": {hosts} }}"
    );
}

fn write_shard(out: &mut String, s: &Shard) {
    let _ = write!(
        out,
        "      {{ \"rank\": {}, \"rows\": [{}, {}], \"columns\": [{}, {}] }}",
        s.rank, s.rows.0, s.rows.1, s.columns.0, s.columns.1
    );
}

#[cfg(test)]
mod tests {
    use crate::{Error, Plan, Shard, ShardingType, TablePlan};
    use towerrec_comm::Topology;

    fn sample() -> Plan {
        Plan {
            topology: Topology::new(2, 2).unwrap(),
            towers: Vec::new(),
            tables: vec![
                TablePlan {
                    hot_rows: Vec::new(),
                    partitions: Vec::new(),
                    table: "C\"1\"".into(),
                    sharding: ShardingType::RowWise,
                    shards: vec![
                        Shard {
                            rank: 0,
                            rows: (0, 5),
                            columns: (0, 4),
                        },
                        Shard {
                            rank: 3,
                            rows: (5, 9),
                            columns: (0, 4),
                        },
                    ],
                },
                TablePlan {
                    hot_rows: Vec::new(),
                    partitions: Vec::new(),
                    table: "C2".into(),
                    sharding: ShardingType::DataParallel,
                    shards: vec![],
                },
                TablePlan {
                    hot_rows: Vec::new(),
                    partitions: Vec::new(),
                    table: "C3".into(),
                    sharding: ShardingType::TableWise,
                    shards: vec![Shard {
                        rank: 1,
                        rows: (0, 7),
                        columns: (0, 4),
                    }],
                },
            ],
        }
    }

    #[test]
    fn towers_read_back_one_line_each() {
        let mut plan = sample();
        plan.towers = vec![
            crate::TowerPlan {
                features: vec!["C\"1\"".into(), "C3".into()],
                hosts: vec![0],
            },
            crate::TowerPlan {
                features: vec!["C2".into()],
                hosts: vec![1],
            },
        ];
        let text = plan.to_json_pretty();
        assert!(
            text.contains("{ \"features\": [\"C2\"], \"hosts\": [1] }"),
            "{text}"
        );
        assert_eq!(Plan::from_json(&text).unwrap(), plan);
        assert!(!sample().to_json_pretty().contains("towers"));
    }

    #[test]
    fn pretty_json_reads_back_and_serde_agrees() {
        let plan = sample();
        let text = plan.to_json_pretty();
        assert!(text.contains("\"rows\": [5, 9]"), "{text}");
        assert!(!text.contains("\"shards\": []"), "{text}");
        assert_eq!(Plan::from_json(&text).unwrap(), plan);
        let via_serde = serde_json::to_string(&plan).unwrap();
        assert_eq!(Plan::from_json(&via_serde).unwrap(), plan);
        let empty = Plan {
            topology: Topology::single(),
            towers: Vec::new(),
            tables: vec![],
        };
        assert_eq!(Plan::from_json(&empty.to_json_pretty()).unwrap(), empty);
    }

    #[test]
    fn rejects_unknown_keys_and_bad_sharding_names() {
        let bad = r#"{ "topology": { "hosts": 1, "ranks_per_host": 1 }, "tables": [
            { "table": "a", "sharding": "diagonal" } ] }"#;
        let e = Plan::from_json(bad).unwrap_err().to_string();
        assert!(e.contains("diagonal"), "{e}");
        let bad = r#"{ "topology": { "hosts": 1, "ranks_per_host": 1 }, "tables": [
            { "table": "a", "sharding": "table_wise", "shards": [ { "rank": 0, "rows": [0, 1], "columns": [0, 1], "gpu": 0 } ] } ] }"#;
        let e = Plan::from_json(bad).unwrap_err().to_string();
        assert!(e.contains("gpu"), "{e}");
    }

    #[test]
    fn load_and_save_name_the_file() {
        let dir = std::env::temp_dir().join(format!("towerrec-plan-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plan.json");
        sample().save(&path).unwrap();
        assert_eq!(Plan::load(&path).unwrap(), sample());

        let missing = dir.join("missing.json");
        let e = Plan::load(&missing).unwrap_err();
        assert!(matches!(e, Error::Io { .. }));
        assert!(e.to_string().contains("missing.json"), "{e}");

        std::fs::write(&path, "{ not json").unwrap();
        let e = Plan::load(&path).unwrap_err();
        assert!(matches!(e, Error::JsonFile { .. }));
        assert!(e.to_string().contains("plan.json"), "{e}");

        let e = sample().save(dir.join("no/such/dir/p.json")).unwrap_err();
        assert!(e.to_string().contains("no/such/dir"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
