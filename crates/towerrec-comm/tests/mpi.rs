//! The MPI backend against the in-process one (feature `mpi`; needs `mpirun`).
//!
//! A test without libtest's harness: run plainly, it launches itself under `mpirun`
//! (directly, and through `scripts/emulated-cluster.sh` when running as root with
//! `ip`/`tc`), and compares the ranks' self-test lines, byte counts included, with the
//! same self-test on the in-process backend; and that a panicking or a stopped rank
//! brings the job down. Started by `mpirun` (OpenMPI sets `OMPI_COMM_WORLD_RANK`), it
//! is one rank, doing what `TOWERREC_MPI_TEST_MODE` says.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::{Duration, Instant};
use towerrec_comm::{
    init_mpi, init_mpi_with, run_in_process, selftest, Comm, Phase, Topology, Watchdog,
};

const MODE_ENV: &str = "TOWERREC_MPI_TEST_MODE";

fn main() -> ExitCode {
    if std::env::var_os("OMPI_COMM_WORLD_RANK").is_some() || std::env::var_os("PMI_RANK").is_some()
    {
        return rank_main();
    }
    type Test = fn() -> Result<Option<String>, String>;
    let tests: [(&str, Test); 7] = [
        (
            "mpirun_2x2_matches_in_process",
            mpirun_2x2_matches_in_process,
        ),
        ("mpirun_detects_one_host", mpirun_detects_one_host),
        (
            "panicking_rank_aborts_the_job",
            panicking_rank_aborts_the_job,
        ),
        (
            "stopped_rank_is_named_by_the_watchdog",
            stopped_rank_is_named_by_the_watchdog,
        ),
        (
            "busy_rank_answers_the_watchdog",
            busy_rank_answers_the_watchdog,
        ),
        (
            "emulated_cluster_2x2_matches_in_process",
            emulated_cluster_2x2,
        ),
        (
            "emulated_cluster_detects_hosts",
            emulated_cluster_detects_hosts,
        ),
    ];
    // `cargo test -- NAME` runs the tests whose name contains NAME.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed, mut ignored, mut filtered) = (0, 0, 0, 0);
    println!("\nrunning {} tests", tests.len());
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            filtered += 1;
            continue;
        }
        let start = Instant::now();
        match test() {
            Ok(None) => {
                passed += 1;
                println!(
                    "test {name} ... ok ({:.1} s)",
                    start.elapsed().as_secs_f64()
                );
            }
            Ok(Some(reason)) => {
                ignored += 1;
                println!("test {name} ... ignored, {reason}");
            }
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED\n{e}");
            }
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; {ignored} ignored; \
         0 measured; {filtered} filtered out\n"
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The watchdog's timeout in the "stall" and "busy" modes, seconds.
const STALL_TIMEOUT: f64 = 1.0;

/// The "stall" mode: rank 1 stops itself (SIGSTOP) at step 5 while rank 0, on its
/// host, waits for it in an AllReduce of the intra-host group and the other host's
/// ranks, done with theirs, wait in a barrier of the world. The "busy" mode: the same,
/// but rank 1 stays alive (its thread sleeps), so its watchdog answers.
fn stall(world: &Comm, stop: bool) -> towerrec_comm::Result<String> {
    world.set_step(5);
    let host = world.intra_host()?;
    if world.rank() == 1 {
        if stop {
            world.hang();
        } else {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    let mut v = [1.0f32; 8];
    host.all_reduce(&mut v, Phase::Control)?;
    world.barrier()?;
    Ok(String::from("passed the collectives without rank 1"))
}

/// One MPI rank.
fn rank_main() -> ExitCode {
    let mode = std::env::var(MODE_ENV).unwrap_or_else(|_| "selftest".into());
    let session = match mode.as_str() {
        "stall" | "busy" => Watchdog::new(STALL_TIMEOUT).and_then(init_mpi_with),
        _ => init_mpi(),
    };
    let session = match session {
        Ok(s) => s,
        Err(e) => {
            eprintln!("MPI set-up failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !session.thread_multiple() {
        eprintln!("rank {}: MPI without MPI_THREAD_MULTIPLE", session.rank());
    }
    let out = session.world().and_then(|world| match mode.as_str() {
        "panic" => {
            if world.rank() == 1 {
                std::thread::sleep(Duration::from_millis(300));
                panic!("deliberate panic in the MPI test");
            }
            // The others wait for rank 1 forever, unless the job is aborted.
            world.barrier()?;
            Ok(String::from("barrier passed without rank 1"))
        }
        "stall" => stall(&world, true),
        "busy" => stall(&world, false),
        _ => Ok(format!(
            "{} topology {}",
            selftest(&world)?,
            session.topology()
        )),
    });
    match out {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {}: {e}", session.rank());
            ExitCode::FAILURE
        }
    }
}

/// The lines the ranks print, from the in-process backend.
fn in_process_lines(t: Topology) -> Result<Vec<String>, String> {
    run_in_process(t, |comm| selftest(&comm))
        .map(|reports| {
            reports
                .iter()
                .map(|r| format!("{r} topology {t}"))
                .collect()
        })
        .map_err(|e| format!("in-process selftest on {t}: {e}"))
}

/// The `rank …` lines of a run, in rank order.
fn rank_lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<(usize, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let rank = l.strip_prefix("rank ")?.split(' ').next()?.parse().ok()?;
            Some((rank, l.to_string()))
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, l)| l).collect()
}

fn describe(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn this_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("current_exe: {e}"))
}

/// Runs `mpirun` on this executable with `-np`, the environment `env`, under `timeout`.
fn mpirun(np: usize, env: &[(&str, &str)], limit_s: u64) -> Result<Output, String> {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &limit_s.to_string(), "mpirun"])
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-np", &np.to_string(), "--mca", "mpi_yield_when_idle", "1"]);
    for (k, v) in env {
        cmd.args(["-x", &format!("{k}={v}")]);
        cmd.env(k, v);
    }
    cmd.arg(this_exe()?);
    cmd.output().map_err(|e| format!("cannot run mpirun: {e}"))
}

fn compare(out: &Output, want: &[String]) -> Result<Option<String>, String> {
    if !out.status.success() {
        return Err(format!("the MPI run failed: {}", describe(out)));
    }
    let got = rank_lines(out);
    if got != want {
        return Err(format!(
            "MPI and in-process results differ\n--- MPI\n{}\n--- in-process\n{}\n{}",
            got.join("\n"),
            want.join("\n"),
            describe(out)
        ));
    }
    Ok(None)
}

fn mpirun_2x2_matches_in_process() -> Result<Option<String>, String> {
    let want = in_process_lines(Topology::new(2, 2).map_err(|e| e.to_string())?)?;
    let out = mpirun(
        4,
        &[(MODE_ENV, "selftest"), ("TOWERREC_RANKS_PER_HOST", "2")],
        120,
    )?;
    compare(&out, &want)
}

fn mpirun_detects_one_host() -> Result<Option<String>, String> {
    let want = in_process_lines(Topology::new(1, 3).map_err(|e| e.to_string())?)?;
    let out = mpirun(3, &[(MODE_ENV, "selftest")], 120)?;
    compare(&out, &want)
}

fn panicking_rank_aborts_the_job() -> Result<Option<String>, String> {
    let start = Instant::now();
    let out = mpirun(4, &[(MODE_ENV, "panic")], 60)?;
    let elapsed = start.elapsed();
    let text = describe(&out);
    if out.status.success() || out.status.code() == Some(124) || out.status.code() == Some(137) {
        return Err(format!(
            "expected mpirun to fail by itself, got {} after {elapsed:?}\n{text}",
            out.status
        ));
    }
    if elapsed > Duration::from_secs(30) {
        return Err(format!("the job took {elapsed:?} to go down\n{text}"));
    }
    if !text.contains("rank 1 of 4 panicked") || !text.contains("deliberate panic") {
        return Err(format!(
            "the output does not name the panicking rank\n{text}"
        ));
    }
    Ok(None)
}

fn stopped_rank_is_named_by_the_watchdog() -> Result<Option<String>, String> {
    watchdog_reports("stall", "ranks not heard from: [1]; calling MPI_Abort")
}

fn busy_rank_answers_the_watchdog() -> Result<Option<String>, String> {
    watchdog_reports(
        "busy",
        "ranks not heard from: [] (alive: rank 1 outside any collective at step 5); \
         calling MPI_Abort",
    )
}

/// Runs `mode` ("stall" or "busy") on 2 × 2 and checks that mpirun fails by itself
/// with watchdog reports from the waiting ranks that all contain `silent`.
fn watchdog_reports(mode: &str, silent: &str) -> Result<Option<String>, String> {
    let start = Instant::now();
    let out = mpirun(4, &[(MODE_ENV, mode), ("TOWERREC_RANKS_PER_HOST", "2")], 60)?;
    let elapsed = start.elapsed();
    let text = describe(&out);
    if out.status.success() || out.status.code() == Some(124) || out.status.code() == Some(137) {
        return Err(format!(
            "expected mpirun to fail by itself, got {} after {elapsed:?}\n{text}",
            out.status
        ));
    }
    // Rank 0 waits in the host's AllReduce, ranks 2 and 3 in the world's barrier: the
    // first watchdog to fire ends the job (if the library lacks MPI_THREAD_MULTIPLE,
    // the reports say they cannot tell who is missing).
    let silent = if text.contains("MPI without MPI_THREAD_MULTIPLE") {
        "ranks not heard from: unknown"
    } else {
        silent
    };
    let expected = [
        "rank 0: collective all_reduce (phase control) at step 5",
        "rank 2: collective barrier at step 5",
        "rank 3: collective barrier at step 5",
    ];
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("made no progress"))
        .collect();
    // A stopped rank is resumed (SIGCONT, then SIGTERM) by the launcher once the first
    // report has called MPI_Abort, and may answer a later report's grace second, from
    // where it stopped or from the next collective it entered: those reports may not
    // name it. At least one (the first) does.
    let named = |l: &&str| {
        expected.iter().any(|e| l.contains(e))
            && l.contains("made no progress for 1 s")
            && (l.contains(silent) || (mode == "stall" && l.contains("ranks not heard from: [")))
    };
    if text.contains("error: error:") {
        return Err(format!("ranks' lines came out interleaved\n{text}"));
    }
    if !reports.iter().any(|l| l.contains(silent)) || !reports.iter().all(named) {
        return Err(format!(
            "expected watchdog reports with {silent:?}, got {reports:?}\n{text}"
        ));
    }
    println!("    the job went down in {elapsed:?}: {}", reports[0]);
    Ok(None)
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

fn emulated_cluster(detect: bool) -> Result<Option<String>, String> {
    if let Some(reason) = emulated_cluster_unavailable() {
        return Ok(Some(reason));
    }
    let want = in_process_lines(Topology::new(2, 2).map_err(|e| e.to_string())?)?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/emulated-cluster.sh");
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", "180", "bash"]).arg(&script);
    cmd.args(["--hosts", "2", "--ranks-per-host", "2", "--rate", "1gbit"]);
    if detect {
        cmd.arg("--detect");
    }
    let out = cmd
        .arg("--")
        .arg(this_exe()?)
        .env(MODE_ENV, "selftest")
        .env_remove("TOWERREC_RANKS_PER_HOST")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    compare(&out, &want)
}

fn emulated_cluster_2x2() -> Result<Option<String>, String> {
    emulated_cluster(false)
}

fn emulated_cluster_detects_hosts() -> Result<Option<String>, String> {
    emulated_cluster(true)
}
