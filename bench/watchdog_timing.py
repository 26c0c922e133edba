#!/usr/bin/env python3
"""How fast a broken MPI job ends, and what the collective watchdog costs (docs/CLUSTER.md).

    python3 bench/watchdog_timing.py kill [--runs 5]
    python3 bench/watchdog_timing.py stop --timeout 2 [--runs 5]
    python3 bench/watchdog_timing.py speed --baseline OTHER_TOWERREC [--rounds 8]

`kill` and `stop` start `mpirun -np 4` (2 hosts x 2 ranks on this machine) training the
quickstart for far longer than the measurement, wait until rank 0 has logged its first
step, send rank 1's process SIGKILL (`kill`) or SIGSTOP (`stop`, with
`--collective-timeout TIMEOUT`), and time from the signal to mpirun's exit; they print
each run and the median. `speed` alternates `towerrec bench model` on an in-process
2 x 2 cluster with this build and with OTHER_TOWERREC (say, one built before the
watchdog) and prints the median samples/s of each and the median of the per-round
ratios. The binary is target/release/towerrec (`--exe` to change it), built with
`--features mpi` for `kill` and `stop`. Standard library only; Linux (/proc).
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TRAIN = ["--set", "data.train_samples=100000000", "--set", "data.eval_samples=256",
         "--set", "train.log_every=1", "--set", "train.eval_every=0",
         "--set", "train.checkpoint_every=0", "--max-steps", "1000000", "-q"]


def children(pid):
    """The processes whose parent is `pid`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                # pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(d))
    return out


def rank_pid(mpirun_pid, rank):
    """The pid of world rank `rank` among mpirun's children (OpenMPI, one host)."""
    want = f"OMPI_COMM_WORLD_RANK={rank}".encode()
    for pid in children(mpirun_pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    return pid
        except OSError:
            continue
    return None


def one_run(exe, sig, extra, limit):
    """Seconds from `sig` to rank 1 until mpirun exits, and mpirun's status."""
    with tempfile.TemporaryDirectory(prefix="towerrec-watchdog-") as out:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", "4", "--mca", "mpi_yield_when_idle", "1",
               "-x", "TOWERREC_RANKS_PER_HOST=2",
               exe, "train", "--backend", "mpi", *TRAIN, *extra, "--out", out]
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
        metrics = os.path.join(out, "metrics.jsonl")
        start = time.monotonic()
        try:
            while not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
                if p.poll() is not None or time.monotonic() - start > limit:
                    raise RuntimeError(f"the job did not start training: {p.stderr.read()}")
                time.sleep(0.05)
            time.sleep(0.5)
            pid = rank_pid(p.pid, 1)
            if pid is None:
                raise RuntimeError("rank 1's process not found")
            t0 = time.monotonic()
            os.kill(pid, sig)
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"mpirun still running {limit} s after the signal")
            elapsed = time.monotonic() - t0
            err = p.stderr.read().decode(errors="replace")
            return elapsed, p.returncode, err
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def timings(a, sig, extra):
    times = []
    for i in range(a.runs):
        elapsed, code, err = one_run(a.exe, sig, extra, 120)
        report = next((l for l in err.splitlines() if "made no progress" in l), "")
        print(f"run {i + 1}/{a.runs}: {elapsed:.2f} s, mpirun exit {code}"
              + (f"; {report}" if report else ""), flush=True)
        times.append(elapsed)
    print(f"median {statistics.median(times):.2f} s (min {min(times):.2f}, "
          f"max {max(times):.2f}) over {len(times)} runs")


def bench(exe, a):
    r = subprocess.run([exe, "bench", "model", "--json", "--hosts", "2", "--ranks-per-host",
                        "2", "--steps", str(a.steps), "--reps", "5"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{exe} bench model failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["median_samples_per_sec"]


def speed(a):
    new, old, ratios = [], [], []
    for i in range(a.rounds):
        # Alternate which goes first, so that neither gains from its place.
        if i % 2 == 0:
            n, o = bench(a.exe, a), bench(a.baseline, a)
        else:
            o, n = bench(a.baseline, a), bench(a.exe, a)
        new.append(n)
        old.append(o)
        ratios.append(n / o)
        print(f"round {i + 1}/{a.rounds}: this build {n:.0f}, baseline {o:.0f} samples/s, "
              f"ratio {n / o:.3f}", flush=True)
    print(f"median: this build {statistics.median(new):.0f} samples/s, baseline "
          f"{statistics.median(old):.0f} samples/s, ratio {statistics.median(ratios):.3f} "
          f"(per round: {min(ratios):.3f} to {max(ratios):.3f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["kill", "stop", "speed"])
    ap.add_argument("--exe", default=os.path.join(ROOT, "target", "release", "towerrec"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=2.0,
                    help="--collective-timeout for `stop`")
    ap.add_argument("--baseline", help="another towerrec binary, for `speed`")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="steps per repetition, `speed`")
    a = ap.parse_args()
    if a.what == "kill":
        timings(a, signal.SIGKILL, [])
    elif a.what == "stop":
        timings(a, signal.SIGSTOP, ["--collective-timeout", str(a.timeout)])
    else:
        if not a.baseline:
            sys.exit("speed needs --baseline OTHER_TOWERREC")
        speed(a)


if __name__ == "__main__":
    main()
