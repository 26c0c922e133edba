//! `towerrec profile` end to end: counts, the summary, the files, and loud failure.

use crate::common;

use crate::common::{text, towerrec};
use towerrec_data::AccessProfile;

#[test]
fn profiles_synthetic_data_with_its_zipf_exponent() {
    let dir = common::tmp("profile_cli", "zipf");
    let out = dir.join("p.profile");
    let o = towerrec(&[
        "profile",
        "--set",
        "data.tables=[{rows=5000,zipf_exponent=1.05,count=2}]",
        "--set",
        "data.train_samples=30000",
        "--max-samples",
        "20000",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("| table | rows | reads |"), "{stdout}");
    let p = AccessProfile::load(&out).unwrap();
    assert_eq!(p.samples, 20_000);
    assert_eq!(p.tables.len(), 2);
    for t in &p.tables {
        assert_eq!(t.reads, 20_000);
        let s = t.ranking().zipf_exponent().unwrap();
        assert!((s - 1.05).abs() < 0.1, "{s}");
        assert!(
            stdout.contains(&format!("| {} | 5000 | 20000 |", t.name)),
            "{stdout}"
        );
    }
    let svg = std::fs::read_to_string(dir.join("p.cdf.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("access CDF"),
        "{svg:.200}"
    );
}

#[test]
fn no_data_is_an_error() {
    let dir = common::tmp("profile_cli", "empty");
    let out = dir.join("p.profile");
    let o = towerrec(&[
        "profile",
        "--max-samples",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("no samples to profile"), "{stderr}");
    assert!(!out.exists());
}

/// Four Zipf(1.05) tables of 4,000 rows, 20,000 training samples.
/// OPER's first steps, `profile` then `plan`, are single-process commands: on a build
/// without the `mpi` feature they run as docs/OPER.md gives them (the topology from the
/// config's `[cluster]`, the profile into a folder not there yet) and never mention MPI.
#[test]
fn profile_and_plan_need_no_mpi_build() {
    let dir = common::tmp("profile_cli", "oper-steps");
    let config = "bench/oper/speed.toml";
    let prof = dir.join("runs/speed.profile");
    let o = towerrec(&[
        "profile",
        "--config",
        config,
        "--max-samples",
        "8192",
        "--quiet",
        "--out",
        prof.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let plan = dir.join("runs/oper.json");
    let p = towerrec(&[
        "plan",
        "--config",
        config,
        "--strategy",
        "oper",
        "--profile",
        prof.to_str().unwrap(),
        "--extra-memory",
        "5%",
        "--output",
        plan.to_str().unwrap(),
    ]);
    let (plan_out, plan_err) = text(&p);
    assert!(p.status.success(), "{plan_err}");
    let plan = towerrec_plan::Plan::load(&plan).unwrap();
    assert_eq!(plan.topology, towerrec_plan::Topology::new(2, 2).unwrap());
    assert!(
        plan_out.contains("predicted by OPER's model (--profile)"),
        "{plan_out}"
    );
    for said in [out, err, plan_out, plan_err] {
        let mut words = said.split(|c: char| !c.is_alphanumeric());
        assert!(!words.any(|w| w.eq_ignore_ascii_case("mpi")), "{said}");
    }
}

const SMALL_ZIPF: [&str; 4] = [
    "--set",
    "data.tables=[{rows=4000,zipf_exponent=1.05,count=4}]",
    "--set",
    "data.train_samples=20000",
];

/// `dir/p.profile`: the access profile of [`SMALL_ZIPF`]'s training data.
fn profile(dir: &std::path::Path) -> std::path::PathBuf {
    let prof = dir.join("p.profile");
    let mut args = vec!["profile", "--quiet", "--out", prof.to_str().unwrap()];
    args.extend(SMALL_ZIPF);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", text(&o).1);
    prof
}

#[test]
fn oper_plans_from_a_profile_and_rates_any_plan() {
    let dir = common::tmp("profile_cli", "oper");
    let prof = profile(&dir);
    let data = SMALL_ZIPF;
    let plan = dir.join("oper.json");
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "oper",
        "--profile",
        prof.to_str().unwrap(),
        "--extra-memory",
        "1%",
        "--output",
        plan.to_str().unwrap(),
    ];
    args.extend(data);
    let o = towerrec(&args);
    let (_, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("degree of balance"), "{stderr}");
    // The copies' cut, and the most any placement of that memory could cut.
    let line = stderr
        .lines()
        .find(|l| l.starts_with("copies cut the traffic"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let factor = |before: &str| -> f64 {
        let rest = line
            .split(before)
            .nth(1)
            .unwrap_or_else(|| panic!("{line}"));
        rest.split('x').next().unwrap().parse().unwrap()
    };
    let (cut, best) = (factor(") by "), factor("more than "));
    assert!(cut > 1.0 && cut <= best + 0.005, "{line}");
    let p = towerrec_plan::Plan::load(&plan).unwrap();
    assert!(p
        .tables
        .iter()
        .all(|t| t.sharding == towerrec_plan::ShardingType::RowPartitioned));
    assert!(p
        .tables
        .iter()
        .any(|t| t.partitions.iter().any(|q| !q.replicas.is_empty())));
    assert!(std::fs::read_to_string(dir.join("oper.comm.svg"))
        .unwrap()
        .starts_with("<svg"));
    // Any strategy is rated by the model when a profile is given; oper needs one.
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "table-wise",
        "--profile",
        prof.to_str().unwrap(),
    ];
    args.extend(data);
    let o = towerrec(&args);
    assert!(
        o.status.success() && text(&o).1.contains("embedding traffic"),
        "{}",
        text(&o).1
    );
    let mut args = vec![
        "plan",
        "--hosts",
        "2",
        "--ranks-per-host",
        "2",
        "--strategy",
        "oper",
    ];
    args.extend(data);
    let o = towerrec(&args);
    assert!(
        !o.status.success() && text(&o).1.contains("needs --profile"),
        "{}",
        text(&o).1
    );
}

/// A drifting stream (4 tables Zipf(1.05), hot rows moving every 4 steps of 1024) on
/// 2 × 2 ranks, with an OPER plan made from its first 4 steps; `extra` sets more keys.
struct Drift {
    dir: std::path::PathBuf,
    data: Vec<String>,
    plan: String,
}

const TOPO: [&str; 4] = ["--hosts", "2", "--ranks-per-host", "2"];

impl Drift {
    fn new(name: &str, extra: &[&str]) -> Self {
        let dir = common::tmp("profile_cli", name);
        let data: Vec<String> = [
            "data.tables=[{rows=2000,zipf_exponent=1.05,count=4}]",
            "data.zipf_rotate_every=4096",
            "data.train_samples=16384",
            "train.batch_size=1024",
        ]
        .iter()
        .chain(extra)
        .flat_map(|kv| ["--set".to_string(), kv.to_string()])
        .collect();
        let plan = dir.join("p0.json").to_str().unwrap().to_string();
        let d = Drift { dir, data, plan };
        let prof = d.path("w0.profile");
        d.run(&[
            "profile",
            "--max-samples",
            "4096",
            "--quiet",
            "--out",
            &prof,
        ]);
        let mut a = vec![
            "plan",
            "--strategy",
            "oper",
            "--profile",
            &prof,
            "--output",
            &d.plan,
        ];
        a.extend_from_slice(&TOPO);
        d.run(&a);
        d
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).to_str().unwrap().to_string()
    }

    /// `towerrec ARGS` with the stream's keys; its stdout and stderr.
    fn run(&self, args: &[&str]) -> String {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(self.data.iter().map(String::as_str));
        let o = towerrec(&a);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{args:?}: {stderr}");
        format!("{stdout}{stderr}")
    }

    /// 12 steps on the first plan into run directory `out`.
    fn train(&self, out: &str, extra: &[&str]) -> String {
        let out = self.path(out);
        let mut a = vec![
            "train",
            "--plan",
            &self.plan,
            "--out",
            &out,
            "--max-steps",
            "12",
        ];
        a.extend_from_slice(&TOPO);
        a.extend_from_slice(extra);
        self.run(&a)
    }

    /// Resumes run directory `out` (without the stream's keys: they are the checkpoint's).
    fn resume(&self, out: &str, extra: &[&str]) {
        let out = self.path(out);
        let mut a = vec!["train", "--resume", &out];
        a.extend_from_slice(&TOPO);
        a.extend_from_slice(extra);
        let o = towerrec(&a);
        assert!(o.status.success(), "{}", common::describe(&o));
    }

    /// The tensors of a run's checkpoint, past the header (whose metadata holds the
    /// config).
    fn tensors(&self, run: &str) -> Vec<u8> {
        let bytes = std::fs::read(self.dir.join(run).join("checkpoint.safetensors")).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + n..].to_vec()
    }

    fn metrics(&self, run: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join(run).join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `[cluster.drift]`: the first check's window is the profile the plan was made from
/// (ratio 1), a check after the hot rows moved writes a fresh plan, and watching leaves
/// training as it was, bit for bit.
#[test]
fn a_run_watches_its_profile_drift_without_changing_training() {
    let d = Drift::new("drift", &["train.log_every=4"]);
    let said = d.train("watched", &["--set", "cluster.drift={check_every=4}"]);
    d.train("plain", &[]);
    let checks: Vec<serde_json::Value> = d
        .metrics("watched")
        .into_iter()
        .filter(|v| v.get("drift").is_some())
        .collect();
    assert_eq!(checks.len(), 3, "{checks:?}");
    let c = |i: usize, k: &str| checks[i]["drift"][k].clone();
    assert_eq!(c(0, "window_samples"), 4096);
    assert!(
        (c(0, "ratio").as_f64().unwrap() - 1.0).abs() < 1e-12,
        "{checks:?}"
    );
    assert!(c(0, "replan").is_null());
    assert!(c(1, "ratio").as_f64().unwrap() > 1.1, "{checks:?}");
    assert_eq!(c(1, "moved"), false);
    let fresh = c(1, "replan");
    assert!(
        fresh.as_str().unwrap().ends_with("replan-step-8.json"),
        "{checks:?}"
    );
    assert!(d.dir.join("watched/replan-step-8.json").exists());
    assert!(said.contains("drift at step 8"), "{said}");
    // The fresh plan moves the rows: a resume with it trains on.
    let copy = std::process::Command::new("cp")
        .args(["-r", &d.path("watched"), &d.path("resumed")])
        .status()
        .unwrap();
    assert!(copy.success());
    let moved = d.path("watched/replan-step-8.json");
    d.resume("resumed", &["--plan", &moved, "--max-steps", "16"]);

    // Training is the same bit for bit: the checkpoint, and every loss.
    assert!(d.tensors("watched") == d.tensors("plain"));
    let losses = |run: &str| -> Vec<String> {
        d.metrics(run)
            .iter()
            .filter(|v| v.get("loss").is_some())
            .map(|v| format!("{} {}", v["step"], v["loss"]))
            .collect()
    };
    assert_eq!(losses("watched"), losses("plain"));
    assert!(!losses("plain").is_empty());
}

/// `[cluster.drift] move = true`: the rows move to the fresh plan inside the run, and a
/// run stopped before the move (mid-window) or after it (the checkpoint names the plan
/// moved to) and resumed ends bit for bit as the run never stopped.
#[test]
fn rows_move_inside_the_run_and_resume_exactly() {
    let d = Drift::new(
        "drift-move",
        &[
            "train.log_every=2",
            "cluster.drift={check_every=4, move=true}",
        ],
    );
    d.train("whole", &[]);
    let checks: Vec<serde_json::Value> = d
        .metrics("whole")
        .into_iter()
        .filter(|v| v.get("drift").is_some())
        .collect();
    assert_eq!(checks[1]["drift"]["moved"], true, "{checks:?}");
    // What a run leaves that must not depend on where it stopped.
    let records = |run: &str| -> Vec<String> {
        d.metrics(run)
            .into_iter()
            .map(|mut v| {
                if let Some(o) = v.as_object_mut() {
                    // Timings, and the bytes of windows that a stop cuts in two.
                    o.remove("samples_per_sec");
                    o.remove("phase_ms_by_rank");
                    o.remove("bytes_per_step");
                }
                if let Some(o) = v.get_mut("drift").and_then(|x| x.as_object_mut()) {
                    o.remove("replan");
                }
                v.to_string()
            })
            .collect()
    };
    for stop in ["6", "10"] {
        let name = format!("stop{stop}");
        d.train(&name, &["--stop-after", stop]);
        d.resume(&name, &[]);
        assert!(d.tensors(&name) == d.tensors("whole"), "stopped at {stop}");
        assert_eq!(records(&name), records("whole"), "stopped at {stop}");
    }
}

/// `--strategy oper --towers 2`: each host's tower tables planned on that host, every
/// partition and copy there; the plan trains on 2 × 2 threads with SPTT and its copies'
/// sync crosses no host; the drift watch refuses it.
#[test]
fn oper_plans_inside_towers_and_trains() {
    let dir = common::tmp("profile_cli", "oper-towers");
    let prof = profile(&dir);
    let data = SMALL_ZIPF;
    let plan = dir.join("oper-towers.json");
    let topo = ["--hosts", "2", "--ranks-per-host", "2"];
    let mut args = vec!["plan", "--strategy", "oper", "--profile"];
    args.extend([
        prof.to_str().unwrap(),
        "--extra-memory",
        "5%",
        "--towers",
        "2",
    ]);
    args.extend(["--output", plan.to_str().unwrap()]);
    args.extend(topo);
    args.extend(data);
    let o = towerrec(&args);
    assert!(o.status.success(), "{}", text(&o).1);
    // The OPER rating says that it prices the flat exchange, not SPTT's.
    assert!(
        text(&o).1.contains("this plan has 2 DMT tower(s)"),
        "{}",
        text(&o).1
    );
    let p = towerrec_plan::Plan::load(&plan).unwrap();
    assert_eq!(p.towers.len(), 2);
    let mut copies = 0;
    for tower in &p.towers {
        for name in &tower.features {
            for part in &p.table(name).unwrap().partitions {
                copies += part.replicas.len();
                for r in std::iter::once(part.rank).chain(part.replicas.iter().copied()) {
                    assert_eq!(vec![r / 2], tower.hosts, "{name} on rank {r}");
                }
            }
        }
    }
    assert!(copies > 0, "no copies at 5% extra memory");
    // Six steps with the plan into `out`, with `set` (a config override).
    let train = |out: &std::path::Path, set: &str| {
        let mut args = vec![
            "train",
            "--plan",
            plan.to_str().unwrap(),
            "--max-steps",
            "6",
        ];
        args.extend(["--set", set, "--quiet", "--out", out.to_str().unwrap()]);
        args.extend(topo);
        args.extend(data);
        towerrec(&args)
    };
    let run = dir.join("run");
    let o = train(&run, "train.eval_every=0");
    assert!(o.status.success(), "{}", text(&o).1);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let phases = summary["cluster"]["bytes_per_step"].as_array().unwrap();
    let sync = phases
        .iter()
        .find(|p| p["phase"] == "sparse_grad_sync")
        .expect("a copies' sync phase");
    assert!(sync["intra_host"].as_f64().unwrap() > 0.0, "{sync}");
    assert_eq!(sync["cross_host"].as_f64().unwrap(), 0.0, "{sync}");
    // The drift watch rates and re-plans flat plans: refused before the run starts.
    let refused = dir.join("drift");
    let o = train(&refused, "cluster.drift={check_every=2}");
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(
        stderr.contains("cluster.drift: the plan has DMT towers"),
        "{stderr}"
    );
    assert!(!refused.exists());
}
