//! A run directory as the report reads it: the metrics log's step and evaluation lines,
//! the summary (a finished run's), and the topology from the config. Read as files in
//! their documented formats (docs/REPORT.md, "What it reads"), so a report can be drawn
//! of any run, finished, failed or still going.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use towerrec_train::rundir::{CONFIG_FILE, METRICS_FILE, SUMMARY_FILE};

/// Bytes one phase sent per step, all ranks together.
#[derive(Debug, Clone, Deserialize)]
pub struct PhaseBytes {
    pub phase: String,
    pub intra_host: f64,
    pub cross_host: f64,
}

/// A logged step: the figures of the steps since the line before.
#[derive(Debug, Clone, Deserialize)]
pub struct StepLine {
    pub step: u64,
    /// None where the log holds `null` (JSON has no NaN).
    pub loss: Option<f64>,
    pub samples_per_sec: f64,
    /// Each phase's milliseconds per step, by rank (absent in logs of older runs).
    #[serde(default)]
    pub phase_ms_by_rank: Vec<(String, Vec<f64>)>,
    #[serde(default)]
    pub bytes_per_step: Option<Vec<PhaseBytes>>,
}

/// An evaluation.
#[derive(Debug, Clone, Deserialize)]
pub struct EvalLine {
    pub step: u64,
    pub auc: Option<f64>,
}

/// What a cluster run's summary adds.
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterSummary {
    pub hosts: usize,
    pub ranks_per_host: usize,
    pub bytes_per_step: Vec<PhaseBytes>,
    pub phase_ms_per_step_by_rank: Vec<(String, Vec<f64>)>,
}

/// The summary of a finished run (the fields the report shows).
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    pub auc: Option<f64>,
    pub logloss: Option<f64>,
    pub ne: Option<f64>,
    pub train_samples_per_sec: f64,
    pub steady_train_samples_per_sec: Option<f64>,
    pub steps: u64,
    pub model: String,
    pub params: u64,
    pub eval_samples_per_sec: f64,
    #[serde(default)]
    pub cluster: Option<ClusterSummary>,
}

/// One run, read.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    /// The name the page gives the run (its directory's, made unique).
    pub label: String,
    pub steps: Vec<StepLine>,
    pub evals: Vec<EvalLine>,
    pub summary: Option<Summary>,
    /// Hosts × ranks per host, from the summary or the config.
    pub topology: Option<(usize, usize)>,
    /// The resolved config as the run wrote it.
    pub config: Option<String>,
    /// Lines of the metrics log that did not parse (a torn last line of a killed run).
    pub unreadable_lines: usize,
    /// Why the run failed: the log's failure record, or what `train` passes.
    pub failure: Option<String>,
}

/// The files of `dir` the report reads (for the command's files rule).
pub fn inputs(dir: &Path) -> [PathBuf; 3] {
    [
        dir.join(METRICS_FILE),
        dir.join(SUMMARY_FILE),
        dir.join(CONFIG_FILE),
    ]
}

/// Reads the run in `dir`: its metrics log must exist; the summary and config are
/// read where they are.
pub fn read(dir: &Path) -> Result<Run> {
    let metrics = dir.join(METRICS_FILE);
    // Read line by line: the log can be far larger than what is kept of it.
    let file = match std::fs::File::open(&metrics) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let what = if dir.is_dir() {
                "has no metrics.jsonl: not the directory of a run of `towerrec train`"
            } else {
                "is not a directory"
            };
            bail!("{} {what}", dir.display());
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", metrics.display())),
    };
    let metrics = parse_metrics(std::io::BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("reading {}", metrics.display()))?;
    let summary = read_optional(&dir.join(SUMMARY_FILE))?
        .map(|t| serde_json::from_str::<Summary>(&t))
        .transpose()
        .with_context(|| {
            format!(
                "{}: not a summary of towerrec train",
                dir.join(SUMMARY_FILE).display()
            )
        })?;
    let config = read_optional(&dir.join(CONFIG_FILE))?;
    let topology = summary
        .as_ref()
        .and_then(|s| s.cluster.as_ref())
        .map(|c| (c.hosts, c.ranks_per_host))
        .or_else(|| config.as_deref().and_then(config_topology));
    // A failure record is the last attempt's (a resume drops it, a new run empties
    // the log); a summary beside it would be a later run's, so it wins.
    let failure = metrics.failed.filter(|_| summary.is_none());
    Ok(Run {
        dir: dir.to_path_buf(),
        label: dir_name(dir),
        steps: metrics.steps,
        evals: metrics.evals,
        summary,
        topology,
        config,
        unreadable_lines: metrics.unreadable,
        failure,
    })
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A metrics log, parsed.
#[derive(Debug, Default)]
pub struct Metrics {
    pub steps: Vec<StepLine>,
    pub evals: Vec<EvalLine>,
    /// The last failure record's reason (`train` appends one when a run fails).
    pub failed: Option<String>,
    /// Lines that did not parse.
    pub unreadable: usize,
}

/// The step and evaluation lines of a metrics log, its last failure record, and how
/// many lines did not parse, text that is not UTF-8 included (other records, such as
/// drift checks, are skipped).
pub fn parse_metrics(mut log: impl std::io::BufRead) -> std::io::Result<Metrics> {
    let mut m = Metrics::default();
    let Metrics {
        steps,
        evals,
        failed,
        unreadable: bad,
    } = &mut m;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        if log.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        let Ok(line) = std::str::from_utf8(&bytes) else {
            *bad += 1;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            *bad += 1;
            continue;
        };
        let parsed = if let Some(why) = value.get("failed") {
            *failed = Some(why.as_str().map_or_else(|| why.to_string(), str::to_string));
            Ok(())
        } else if value.get("split").is_some() {
            serde_json::from_value(value).map(|e| evals.push(e))
        } else if value.get("loss").is_some() {
            serde_json::from_value(value).map(|s| steps.push(s))
        } else {
            Ok(())
        };
        if parsed.is_err() {
            *bad += 1;
        }
    }
    Ok(m)
}

/// `[cluster] hosts` and `ranks_per_host` of a config's text (1 × 1 where absent).
fn config_topology(text: &str) -> Option<(usize, usize)> {
    let value: toml::Table = text.parse().ok()?;
    let cluster = value.get("cluster").and_then(|c| c.as_table());
    let get = |key: &str| {
        cluster
            .and_then(|c| c.get(key))
            .and_then(|v| v.as_integer())
            .map_or(Some(1), |v| usize::try_from(v).ok())
    };
    Some((get("hosts")?, get("ranks_per_host")?))
}

fn dir_name(dir: &Path) -> String {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    absolute
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// Gives runs with the same directory name their parent's name too, then a number.
pub fn unique_labels(runs: &mut [Run]) {
    let original: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, run) in runs.iter_mut().enumerate() {
        if original.iter().filter(|l| **l == original[i]).count() < 2 {
            continue;
        }
        let parent = std::path::absolute(&run.dir).ok().and_then(|p| {
            let name = p.parent()?.file_name()?;
            Some(name.to_string_lossy().into_owned())
        });
        if let Some(parent) = parent {
            run.label = format!("{parent}/{}", run.label);
        }
    }
    for i in 0..runs.len() {
        let same = runs[..i]
            .iter()
            .filter(|r| r.label == runs[i].label)
            .count();
        if same > 0 {
            runs[i].label = format!("{} ({})", runs[i].label, same + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_lines_are_told_apart_and_torn_lines_counted() {
        let text = r#"{"step":10,"loss":0.5,"samples_per_sec":100.0,"lr":0.1,"phase_ms_by_rank":[["top_forward",[1.0,2.0]]],"bytes_per_step":[{"phase":"dense_grad_sync","intra_host":10.0,"cross_host":4.0}]}
{"step":10,"split":"eval","auc":0.7,"logloss":0.6,"ne":0.9,"samples":50,"samples_per_sec":1000.0}
{"step":20,"loss":null,"samples_per_sec":90.0,"lr":0.1}
{"step":20,"check":"drift","moved":false}
{"failed":"step 25: loss is NaN"}
{"step":30,"loss":0.4,"samp"#;
        let Metrics {
            steps,
            evals,
            failed,
            unreadable: bad,
        } = parse_metrics(text.as_bytes()).unwrap();
        assert_eq!(failed.as_deref(), Some("step 25: loss is NaN"));
        // Bytes that are not UTF-8 are an unreadable line, not a failed read.
        let mut log = b"{\"step\":1,\"loss\":0.5,\"samples_per_sec\":1.0}\r\n".to_vec();
        log.extend_from_slice(b"\xff\xfe\n\n");
        let m = parse_metrics(&log[..]).unwrap();
        assert_eq!((m.steps.len(), m.unreadable), (1, 1));
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].phase_ms_by_rank[0].1, vec![1.0, 2.0]);
        assert_eq!(steps[0].bytes_per_step.as_ref().unwrap()[0].cross_host, 4.0);
        assert_eq!(steps[1].loss, None);
        assert!(steps[1].phase_ms_by_rank.is_empty());
        assert_eq!(evals.len(), 1);
        assert_eq!(evals[0].auc, Some(0.7));
        assert_eq!(bad, 1);
    }

    #[test]
    fn topology_comes_from_the_config() {
        let text = "[model]\nkind = \"dlrm\"\n[cluster]\nhosts = 2\nranks_per_host = 3\n";
        assert_eq!(config_topology(text), Some((2, 3)));
        assert_eq!(config_topology("[model]\n"), Some((1, 1)));
        assert_eq!(config_topology("not toml ["), None);
    }

    #[test]
    fn labels_are_made_unique() {
        let run = |dir: &str| Run {
            dir: PathBuf::from(dir),
            label: dir_name(Path::new(dir)),
            steps: vec![],
            evals: vec![],
            summary: None,
            topology: None,
            config: None,
            unreadable_lines: 0,
            failure: None,
        };
        let mut runs = vec![run("/a/run"), run("/b/run"), run("/c/other"), run("/a/run")];
        unique_labels(&mut runs);
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["a/run", "b/run", "other", "a/run (2)"]);
    }
}
