//! `towerrec train --backend mpi` end to end (feature `mpi`; needs OpenMPI's `mpirun`):
//! the MPI ranks train exactly as the in-process cluster does, a failing or a stopped
//! rank brings the job down, and on the emulated cluster (as root, with iproute2) the bytes on the
//! wire match the traffic accounting. See docs/CLUSTER.md, "Training on MPI and on the
//! emulated cluster".
//!
//! The tests run one at a time (each takes the whole two-core machine), every MPI
//! launch under `timeout` so that a hang fails the test instead of the CI job.

#[path = "suite/common/mod.rs"]
mod common;
#[path = "suite/diverging/mod.rs"]
mod diverging;

use common::describe;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_towerrec");

/// The variables of the failure-injection knob (see docs/CLUSTER.md).
const FAIL_RANK: &str = "TOWERREC_FAIL_RANK";
const FAIL_STEP: &str = "TOWERREC_FAIL_STEP";

/// The variables of the stall-injection knob (see docs/CLUSTER.md).
const STALL_RANK: &str = "TOWERREC_STALL_RANK";
const STALL_STEP: &str = "TOWERREC_STALL_STEP";

/// Every variable the tests set, removed from what they inherit.
const OURS: [&str; 5] = [
    FAIL_RANK,
    FAIL_STEP,
    STALL_RANK,
    STALL_STEP,
    "TOWERREC_RANKS_PER_HOST",
];

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    common::tmp("mpi-train", name)
}

/// The quickstart shrunk to a few seconds: 30 steps of 256, a loss every 5 steps, two
/// evaluations on the way and the final one.
fn small_args() -> Vec<String> {
    [
        "--max-steps",
        "30",
        "--set",
        "data.train_samples=7680",
        "--set",
        "data.eval_samples=2000",
        "--set",
        "train.log_every=5",
        "--set",
        "train.eval_every=15",
        "--quiet",
    ]
    .map(String::from)
    .into()
}

/// `towerrec ARGS` in this process's environment plus `env`, killed after `limit_s`.
fn towerrec(args: &[String], env: &[(&str, &str)], limit_s: u64) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), BIN]).args(args);
    for k in OURS {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("timeout and towerrec run")
}

/// `mpirun -np 4` of `towerrec ARGS` as 2 hosts × 2 ranks (TOWERREC_RANKS_PER_HOST=2)
/// with `env` exported to the ranks, killed after `limit_s`.
fn mpirun(args: &[String], env: &[(&str, &str)], limit_s: u64) -> Output {
    mpirun_as((2, 2), args, env, limit_s)
}

/// [`mpirun`] as `hosts × ranks_per_host` ranks.
fn mpirun_as(
    (hosts, ranks_per_host): (usize, usize),
    args: &[String],
    env: &[(&str, &str)],
    limit_s: u64,
) -> Output {
    let np = (hosts * ranks_per_host).to_string();
    let rph = format!("TOWERREC_RANKS_PER_HOST={ranks_per_host}");
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), "mpirun"])
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-np", &np, "--mca", "mpi_yield_when_idle", "1"])
        .args(["-x", &rph]);
    for k in OURS {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.args(["-x", &format!("{k}={v}")]);
    }
    cmd.arg(BIN).args(args);
    cmd.output()
        .expect("mpirun runs (install openmpi-bin: see docs/CLUSTER.md)")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// metrics.jsonl without its timings (`samples_per_sec`, `phase_ms_by_rank`), one value
/// per record (bytes per step stay: both backends count the same).
fn metrics(run: &Path) -> Vec<Value> {
    let path = run.join("metrics.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(o) = v.as_object_mut() {
                o.remove("samples_per_sec");
                o.remove("phase_ms_by_rank");
            }
            v
        })
        .collect()
}

/// A run's checkpoint.safetensors: its JSON header (tensors and metadata, whose order
/// varies from run to run) and its data, the weights and optimizer state.
fn checkpoint(run: &Path) -> (Value, Vec<u8>) {
    let path = run.join("checkpoint.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    (header, bytes[8 + n..].to_vec())
}

/// Asserts that two runs trained alike: the same records in metrics.jsonl (losses and
/// evaluations, exactly), the same final metrics, the same bytes per step in every
/// phase, and the same checkpoint (weights bit for bit). Returns the number of losses.
fn assert_same_run(case: &str, a: &Path, b: &Path) -> usize {
    assert_same_run_as(case, (2, 2), a, b)
}

fn assert_same_run_as(case: &str, shape: (usize, usize), a: &Path, b: &Path) -> usize {
    let (ma, mb) = (metrics(a), metrics(b));
    let losses: Vec<&Value> = ma.iter().filter_map(|r| r.get("loss")).collect();
    assert!(!losses.is_empty(), "{case}: no losses in {}", a.display());
    assert_eq!(ma, mb, "{case}: metrics.jsonl differ");
    let (sa, sb) = (
        read_json(&a.join("summary.json")),
        read_json(&b.join("summary.json")),
    );
    for key in [
        "auc",
        "logloss",
        "ne",
        "steps",
        "train_samples",
        "eval_samples",
    ] {
        assert_eq!(sa[key], sb[key], "{case}: summary.json's {key}");
    }
    let bytes = &sa["cluster"]["bytes_per_step"];
    assert_eq!(
        bytes.as_array().map_or(0, Vec::len),
        towerrec_comm::Phase::ALL.len(),
        "{case}: bytes_per_step of every phase: {sa}"
    );
    assert_eq!(
        bytes, &sb["cluster"]["bytes_per_step"],
        "{case}: bytes per step"
    );
    for (key, want) in [("hosts", shape.0), ("ranks_per_host", shape.1)] {
        assert_eq!(sa["cluster"][key], want, "{case}: {key}");
        assert_eq!(sb["cluster"][key], want, "{case}: {key}");
    }
    for s in [&sa, &sb] {
        let by_rank = s["cluster"]["phase_ms_per_step_by_rank"].as_array();
        let phases = by_rank.map_or(0, Vec::len);
        assert_eq!(phases, 10, "{case}: every phase's times by rank: {s}");
        for entry in by_rank.into_iter().flatten() {
            let ranks = entry[1].as_array().map_or(0, Vec::len);
            assert_eq!(ranks, shape.0 * shape.1, "{case}: a time per rank: {entry}");
        }
    }
    let (ca, cb) = (checkpoint(a), checkpoint(b));
    assert_eq!(
        ca.0, cb.0,
        "{case}: the checkpoints' tensors or metadata differ"
    );
    assert!(ca.1 == cb.1, "{case}: the checkpoints' weights differ");
    println!(
        "{case}: {} losses, final auc {} logloss {} equal; bytes per step {}",
        losses.len(),
        sa["auc"],
        sa["logloss"],
        bytes
    );
    losses.len()
}

/// Writes `towerrec plan ARGS` into `dir/name` and returns its path.
fn write_plan(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut all: Vec<String> = std::iter::once("plan")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    all.extend(["--output".into(), path.to_str().unwrap().into()]);
    let o = towerrec(&all, &[], 60);
    assert!(
        o.status.success(),
        "towerrec plan {args:?}: {}",
        describe(&o)
    );
    path
}

/// Trains `args` on `hosts × ranks_per_host` in-process into `dir/CASE-in-process` and
/// under mpirun into `dir/CASE-mpi`, and checks the two runs are the same; returns the
/// number of losses logged.
fn train_both(dir: &Path, case: &str, shape: (usize, usize), args: &[String]) -> usize {
    let run = |name: &str| dir.join(format!("{}-{name}", case.replace(' ', "-")));
    let (a, b) = (run("in-process"), run("mpi"));
    let (hosts, rph) = (shape.0.to_string(), shape.1.to_string());
    let mut in_process: Vec<String> = ["train", "--hosts", &hosts, "--ranks-per-host", &rph]
        .map(String::from)
        .into();
    in_process.extend(args.iter().cloned());
    in_process.extend(["--out".into(), a.to_str().unwrap().into()]);
    let o = towerrec(&in_process, &[], 300);
    assert!(o.status.success(), "{case}, in-process: {}", describe(&o));

    let mut mpi: Vec<String> = ["train", "--backend", "mpi"].map(String::from).into();
    mpi.extend(args.iter().cloned());
    mpi.extend(["--out".into(), b.to_str().unwrap().into()]);
    let o = mpirun_as(shape, &mpi, &[], 300);
    assert!(o.status.success(), "{case}, mpirun: {}", describe(&o));
    assert_same_run_as(case, shape, &a, &b)
}

/// A set-up error that every rank meets (here a plan for another topology) is said
/// once, not once per rank, and the job still fails.
#[test]
fn a_setup_error_of_every_rank_is_said_once() {
    let _serial = serial();
    let dir = tmp("setup-once");
    let plan = dir.join("1x4.json");
    let o = towerrec(
        &[
            "plan",
            "--hosts",
            "1",
            "--ranks-per-host",
            "4",
            "--output",
            plan.to_str().unwrap(),
        ]
        .map(String::from),
        &[],
        60,
    );
    assert!(o.status.success(), "{}", describe(&o));
    let mut args: Vec<String> = ["train", "--backend", "mpi", "--plan"]
        .map(String::from)
        .into();
    args.push(plan.to_str().unwrap().into());
    args.extend(small_args());
    args.extend(["--out".into(), dir.join("run").to_str().unwrap().into()]);
    let o = mpirun(&args, &[], 60);
    let text = describe(&o);
    assert!(!o.status.success(), "{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(
        errors[0].contains("every rank: plan: the plan is for 1 hosts × 4 ranks per host"),
        "{text}"
    );
    assert!(!text.contains("MPI_Abort"), "{text}");
}

#[test]
fn mpi_equals_in_process_on_2x2() {
    let _serial = serial();
    let dir = tmp("equal");
    let shape = ["--hosts", "2", "--ranks-per-host", "2"];
    let row_wise = write_plan(
        &dir,
        "row-wise.json",
        &[&["--strategy", "row-wise"][..], &shape].concat(),
    );
    // Table-row-wise: each table's row shards on one host, summed there before their
    // sums cross hosts (two exchanges, on the host's and the peers' communicators).
    let table_row_wise = write_plan(
        &dir,
        "table-row-wise.json",
        &[&["--strategy", "table-row-wise"][..], &shape].concat(),
    );
    // DMT's SPTT: two towers, one per host, tables whole on the ranks of their host.
    let towers = write_plan(
        &dir,
        "towers.json",
        &[&["--strategy", "table-wise", "--towers", "2"][..], &shape].concat(),
    );
    // Towers spanning both hosts with their tables split by rows: step d crosses hosts
    // and sums partial sums (a ReduceScatter); with mean pooling (below) the peers
    // share their bag lengths.
    let wide = write_plan(
        &dir,
        "wide-towers.json",
        &[
            &[
                "--strategy",
                "row-wise",
                "--towers",
                "2",
                "--hosts-per-tower",
                "2",
            ][..],
            &shape,
        ]
        .concat(),
    );

    // OPER: rows partitioned by an access profile of the training data, hot rows
    // replicated on every rank and synchronised by the sparse AllReduce.
    let profile = dir.join("train.profile");
    let o = towerrec(
        &[
            "profile",
            "--set",
            "data.train_samples=7680",
            "--quiet",
            "--out",
            profile.to_str().unwrap(),
        ]
        .map(String::from),
        &[],
        60,
    );
    assert!(o.status.success(), "towerrec profile: {}", describe(&o));
    let oper_plan = |name: &str, more: &[&str]| {
        let mut args = vec![
            "--strategy",
            "oper",
            "--profile",
            profile.to_str().unwrap(),
            "--extra-memory",
            "5%",
            "--set",
            "data.train_samples=7680",
        ];
        args.extend(more);
        args.extend(shape);
        write_plan(&dir, name, &args)
    };
    let oper = oper_plan("oper.json", &[]);
    // OPER inside two one-host towers: each host's rows and replicas on its own ranks,
    // the replicas synchronised within the host.
    let oper_towers = oper_plan("oper-towers.json", &["--towers", "2"]);

    for (case, plan) in [
        ("greedy plan", None),
        ("row-wise plan", Some(&row_wise)),
        ("table-row-wise plan", Some(&table_row_wise)),
        ("oper plan", Some(&oper)),
        ("oper plan, whole steps", Some(&oper)),
        ("oper plan in towers", Some(&oper_towers)),
        ("tower plan", Some(&towers)),
        ("row-wise towers of 2 hosts", Some(&wide)),
        ("dmt model", None),
        ("dmt per-feature model", None),
        ("greedy plan, quantized communication", None),
        ("dmt model, quantized communication", None),
    ] {
        let start = Instant::now();
        let mut args = small_args();
        let sets: &[&str] = match case {
            // DMT-DLRM: two towers with DLRM Tower Modules, run inside SPTT.
            "dmt model" => &[
                "model.towers={module=\"dlrm\",count=2,d=8,c=1,p=1}",
                "model.bottom_mlp=[64,8]",
            ],
            // Per-feature modules (p = 0): run before step d, the exchange in 3 chunks
            // (non-blocking AlltoAlls under MPI).
            "dmt per-feature model" => &[
                "model.towers={module=\"dlrm\",count=2,d=8,c=1,p=0}",
                "model.bottom_mlp=[64,8]",
                "cluster.tower_chunks=3",
            ],
            // Steps in halves are the default: the flat plans here run in halves, and of
            // the tower cases the per-feature model (maps before step d); the
            // table-row-wise plan and the other tower cases run whole steps, as this one.
            "oper plan, whole steps" => &["cluster.overlap_halves=false"],
            // fp16 pooled embeddings, bf16 gradients (docs/DISTRIBUTED.md, "Quantized
            // communication"): the same rounding on both backends.
            "greedy plan, quantized communication" => {
                &["cluster.qcomms={forward=\"fp16\",backward=\"bf16\",dense=\"bf16\"}"]
            }
            "dmt model, quantized communication" => &[
                "model.towers={module=\"dlrm\",count=2,d=8,c=1,p=0}",
                "model.bottom_mlp=[64,8]",
                "cluster.qcomms={forward=\"bf16\",backward=\"bf16\"}",
            ],
            "row-wise towers of 2 hosts" => &[
                "model.pooling=\"mean\"",
                "data.tables=[{rows=20000,zipf_exponent=1.05,pooling={mean=3.0},count=26}]",
            ],
            _ => &[],
        };
        for set in sets {
            args.extend(["--set".into(), set.to_string()]);
        }
        if let Some(p) = plan {
            args.extend(["--plan".into(), p.to_str().unwrap().into()]);
        }
        let n = train_both(&dir, case, (2, 2), &args);
        assert_eq!(n, 6, "{case}: a loss every 5 steps of 30");
        println!(
            "{case}: both runs in {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// SPTT on 8 MPI processes, as in-process (which the towerrec-train `sptt` tests show
/// is the flat path bit for bit): 4 hosts × 2 ranks with two towers of 2 hosts
/// (column-wise tables: step d crosses hosts with column blocks), and 2 hosts × 4 ranks
/// with four one-host towers, two per host (row-wise tables: step d sums).
#[test]
fn mpi_sptt_equals_in_process_on_8_ranks() {
    let _serial = serial();
    let dir = tmp("sptt8");
    for (shape, towers, per_tower, strategy) in [
        ((4, 2), "2", "2", "column-wise"),
        ((2, 4), "4", "1", "row-wise"),
    ] {
        let case = format!("{}x{} {strategy} towers", shape.0, shape.1);
        let (hosts, rph) = (shape.0.to_string(), shape.1.to_string());
        let plan = write_plan(
            &dir,
            &format!("{}x{}.json", shape.0, shape.1),
            &[
                "--strategy",
                strategy,
                "--towers",
                towers,
                "--hosts-per-tower",
                per_tower,
                "--hosts",
                &hosts,
                "--ranks-per-host",
                &rph,
            ],
        );
        let mut args = small_args();
        // The quickstart's row-wise Adagrad keeps one accumulator per whole row, which
        // column-split tables cannot.
        args.extend(["--set".into(), "optimizer.sparse={kind=\"adam\"}".into()]);
        args.extend(["--plan".into(), plan.to_str().unwrap().into()]);
        assert_eq!(train_both(&dir, &case, shape, &args), 6, "{case}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_failing_mpi_rank_brings_the_job_down() {
    let _serial = serial();
    let dir = tmp("fail");
    let fail = [(FAIL_RANK, "1"), (FAIL_STEP, "3")];
    let message = "injected failure on rank 1 at step 3 (TOWERREC_FAIL_RANK)";

    // MPI: rank 1 returns an error while the others wait for it in a collective.
    let mut args: Vec<String> = ["train", "--backend", "mpi"].map(String::from).into();
    args.extend(small_args());
    args.extend(["--out".into(), dir.join("mpi").to_str().unwrap().into()]);
    let start = Instant::now();
    let o = mpirun(&args, &fail, 60);
    let elapsed = start.elapsed();
    let text = describe(&o);
    assert!(
        !o.status.success() && !matches!(o.status.code(), Some(124) | Some(137)),
        "expected mpirun to fail by itself, got {} after {elapsed:?}\n{text}",
        o.status
    );
    assert!(
        elapsed < Duration::from_secs(30),
        "the job took {elapsed:?} to go down\n{text}"
    );
    assert!(
        text.contains(&format!("error: rank 1 of 4: cluster: {message}")),
        "the output does not name the failing rank\n{text}"
    );
    println!("mpirun went down in {elapsed:?}, {}", o.status);

    // In-process: the failing rank stops the others, and its error names it.
    let mut args: Vec<String> = ["train", "--hosts", "2", "--ranks-per-host", "2"]
        .map(String::from)
        .into();
    args.extend(small_args());
    args.extend([
        "--out".into(),
        dir.join("in-process").to_str().unwrap().into(),
    ]);
    let start = Instant::now();
    let o = towerrec(&args, &fail, 60);
    let elapsed = start.elapsed();
    let text = describe(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        elapsed < Duration::from_secs(30),
        "the run took {elapsed:?} to stop\n{text}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("rank 1 failed") && stderr.contains(message),
        "the error does not name the failing rank\n{text}"
    );

    // A knob set to nonsense is an error, not a panic.
    args.push("--overwrite".into());
    let o = towerrec(&args, &[(FAIL_RANK, "one")], 60);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(
        stderr.contains("TOWERREC_FAIL_RANK=one: expected a non-negative integer"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_diverging_mpi_run_stops_naming_the_step_and_writes_no_summary() {
    let _serial = serial();
    let dir = tmp("nan");
    let mut args: Vec<String> = ["train", "--backend", "mpi"].map(String::from).into();
    args.extend(small_args());
    for set in [
        "optimizer.dense={ kind = \"sgd\" }",
        "optimizer.sparse={ kind = \"sgd\" }",
        "optimizer.dense_lr=1e5",
        "optimizer.sparse_lr=1e5",
    ] {
        args.extend(["--set".into(), set.into()]);
    }
    args.extend(["--out".into(), dir.join("run").to_str().unwrap().into()]);
    let o = mpirun(&args, &[], 60);
    let text = describe(&o);
    assert!(
        !o.status.success() && !matches!(o.status.code(), Some(124) | Some(137)),
        "expected mpirun to fail by itself\n{text}"
    );
    assert!(
        text.contains("non-finite loss")
            && text.contains("at step ")
            && text.contains("calling MPI_Abort"),
        "{text}"
    );
    assert!(!dir.join("run/summary.json").exists(), "{text}");
}

/// On the shape of examples/criteo.toml's DLRM, whose backward overflows while its loss
/// stays finite: every rank that reports names the step and the tensor that one
/// process names, and no rank writes a summary.
#[test]
fn a_diverging_criteo_dlrm_stops_every_mpi_rank_at_the_step_one_process_stops() {
    let _serial = serial();
    let dir = tmp("nan-criteo");
    let cfg = diverging::diverging_criteo(&dir);
    let cfg = cfg.to_str().unwrap().to_string();
    let alone = dir.join("alone");
    let args: Vec<String> = ["train", "-q", "--config", &cfg, "--out"]
        .map(String::from)
        .into();
    let mut one = args.clone();
    one.extend([alone.to_str().unwrap().into()]);
    one.extend(["--hosts", "1", "--ranks-per-host", "1"].map(String::from));
    let o = towerrec(&one, &[], 120);
    let text = describe(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let step = diverging::step_named(&text).unwrap_or_else(|| panic!("no step: {text}"));
    let tensor = diverging::tensor_named(&text).unwrap_or_else(|| panic!("no tensor: {text}"));
    let run = dir.join("mpi");
    let mut mpi = args;
    mpi.extend([run.to_str().unwrap().into()]);
    mpi.extend(["--backend", "mpi"].map(String::from));
    let o = mpirun(&mpi, &[], 120);
    let text = describe(&o);
    assert!(
        !o.status.success() && !matches!(o.status.code(), Some(124) | Some(137)),
        "expected mpirun to fail by itself\n{text}"
    );
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("error: rank ") && l.contains("non-finite "))
        .collect();
    assert!(!reports.is_empty(), "{text}");
    for report in &reports {
        assert_eq!(
            diverging::step_named(report),
            Some(step),
            "{report}\n{text}"
        );
        assert_eq!(
            diverging::tensor_named(report),
            Some(tensor),
            "{report}\n{text}"
        );
        assert!(
            report.contains("after the all-reduce over 4 ranks")
                || report.contains("after their exchange"),
            "{report}"
        );
        assert!(
            report.ends_with("calling MPI_Abort to stop the job"),
            "{report}"
        );
    }
    assert!(!run.join("summary.json").exists(), "{text}");
    assert!(!alone.join("summary.json").exists());
}

#[test]
fn a_stopped_mpi_rank_is_named_by_the_watchdog() {
    let _serial = serial();
    let dir = tmp("stall");
    // Rank 1 stops itself (SIGSTOP) after step 3; the others wait for it in step 4.
    let stall = [(STALL_RANK, "1"), (STALL_STEP, "3")];
    let mut args: Vec<String> = ["train", "--backend", "mpi", "--collective-timeout", "2"]
        .map(String::from)
        .into();
    args.extend(small_args());
    args.extend(["--out".into(), dir.join("mpi").to_str().unwrap().into()]);
    let start = Instant::now();
    let o = mpirun(&args, &stall, 120);
    let elapsed = start.elapsed();
    let text = describe(&o);
    assert!(
        !o.status.success() && !matches!(o.status.code(), Some(124) | Some(137)),
        "expected mpirun to fail by itself, got {} after {elapsed:?}\n{text}",
        o.status
    );
    assert!(
        elapsed < Duration::from_secs(60),
        "the job took {elapsed:?} to go down\n{text}"
    );
    assert!(
        text.contains("rank 1: hanging after step 3 as asked (TOWERREC_STALL_RANK)"),
        "{text}"
    );
    // Every rank whose watchdog fired before the abort reports. The first names rank 1
    // as not heard from; a later one whose second of listening was still open when the
    // first MPI_Abort made the launcher resume the stopped process (SIGCONT before
    // SIGTERM) may have heard from it, where it stopped or in its next collective.
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("made no progress"))
        .collect();
    assert!(
        !text.contains("error: error:"),
        "ranks' lines came out interleaved\n{text}"
    );
    assert!(
        reports
            .iter()
            .any(|r| r.contains("ranks not heard from: [1];")),
        "no watchdog report names rank 1 as not heard from\n{text}"
    );
    for report in &reports {
        assert!(
            report.starts_with("error: rank ")
                && report.contains(" at step 4 made no progress for 2 s; ranks not heard from: ")
                && report.ends_with("calling MPI_Abort to stop the job"),
            "{report}\n{text}"
        );
        let collective = report
            .split("collective ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_default();
        assert!(
            ["all_to_all_v", "all_gather", "all_reduce", "reduce_scatter"].contains(&collective),
            "{report}"
        );
    }
    println!("mpirun went down in {elapsed:?}, {}: {reports:?}", o.status);
    std::fs::remove_dir_all(dir).ok();
}

/// Why the emulated cluster cannot run here, if it cannot.
fn emulated_cluster_unavailable() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Some("the emulated cluster needs root".into());
    }
    for tool in ["ip", "tc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Some(format!("the emulated cluster needs `{tool}` (iproute2)"));
        }
    }
    None
}

/// The script's `emulated-cluster: host I tx_bytes N rx_bytes M …` lines: (tx, rx) per host.
fn wire_bytes(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l
                .strip_prefix("emulated-cluster: host ")?
                .split(' ')
                .collect();
            match w[..] {
                [_, "tx_bytes", tx, "rx_bytes", rx, ..] => {
                    Some((tx.parse().ok()?, rx.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

/// DLRM "multi-hot" as benchmarked (bench/multihot.toml: 26 tables × 100,000 rows,
/// dim 64, 20 ids per bag, batch 1024) for 4 steps on 2 hosts × 2 ranks joined by
/// 1 Gbit/s links: the same training and per-phase bytes as the in-process cluster, and
/// the bytes that crossed the links on the wire at least the accounted cross-host
/// payload and at most 1.25 × it + 5 MB.
#[test]
fn emulated_cluster_trains_multihot() {
    if let Some(reason) = emulated_cluster_unavailable() {
        println!("skipped: {reason}");
        return;
    }
    let _serial = serial();
    let dir = tmp("emulated");
    let config = repo().join("bench/multihot.toml");
    let args = |out: &Path| -> Vec<String> {
        [
            "train",
            "--config",
            config.to_str().unwrap(),
            "--max-steps",
            "4",
            "--set",
            "train.log_every=1",
            "--set",
            "train.eval_every=0",
            "--set",
            "data.train_samples=4096",
            "--set",
            "data.eval_samples=256",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ]
        .map(String::from)
        .into()
    };
    let (a, b) = (dir.join("in-process"), dir.join("emulated"));

    let start = Instant::now();
    let mut in_process = args(&a);
    in_process.extend(["--hosts", "2", "--ranks-per-host", "2"].map(String::from));
    let o = towerrec(&in_process, &[], 300);
    assert!(o.status.success(), "in-process: {}", describe(&o));
    let in_process_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let script = repo().join("scripts/emulated-cluster.sh");
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", "300", "bash"])
        .arg(&script)
        .args([
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--rate",
            "1gbit",
            "--",
        ])
        .arg(BIN)
        .args(args(&b))
        .args(["--backend", "mpi"]);
    for k in OURS {
        cmd.env_remove(k);
    }
    let o = cmd.output().expect("the emulated cluster script runs");
    let emulated_s = start.elapsed().as_secs_f64();
    assert!(o.status.success(), "emulated cluster: {}", describe(&o));
    assert_same_run("multihot, emulated vs in-process", &a, &b);

    // The accounting: bytes per training step, all phases, control (loss reports and the
    // final checkpoint's gather) included; evaluations are left out of it.
    let summary = read_json(&b.join("summary.json"));
    let steps = summary["steps"].as_f64().unwrap();
    let phases = summary["cluster"]["bytes_per_step"].as_array().unwrap();
    let mut payload = 0u64;
    for p in phases {
        let (intra, cross) = (
            p["intra_host"].as_f64().unwrap(),
            p["cross_host"].as_f64().unwrap(),
        );
        println!(
            "  {:<18} intra-host {:>12.0} B/step  cross-host {:>12.0} B/step",
            p["phase"].as_str().unwrap(),
            intra,
            cross
        );
        payload += (cross * steps).round() as u64;
    }
    let wire = wire_bytes(&String::from_utf8_lossy(&o.stderr));
    assert_eq!(wire.len(), 2, "one counter line per host: {}", describe(&o));
    let tx: u64 = wire.iter().map(|w| w.0).sum();
    let rx: u64 = wire.iter().map(|w| w.1).sum();
    let ratio = tx as f64 / payload as f64;
    println!(
        "multihot 2×2 at 1gbit, {steps} steps: accounted cross-host payload {payload} B, \
         on the wire tx {tx} B (rx {rx} B), ratio {ratio:.4}; \
         in-process {in_process_s:.1} s, emulated {emulated_s:.1} s"
    );
    assert!(
        tx >= payload,
        "fewer bytes on the wire ({tx}) than the accounted payload ({payload})"
    );
    assert!(
        tx as f64 <= payload as f64 * 1.25 + 5e6,
        "the wire carried {tx} bytes for {payload} of payload (ratio {ratio:.3})"
    );
    std::fs::remove_dir_all(dir).ok();
}
