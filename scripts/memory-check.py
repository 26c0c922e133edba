#!/usr/bin/env python3
"""Compares towerrec's memory estimate with the peak RSS a run really reaches.

Usage: python3 scripts/memory-check.py [--bin target/release/towerrec] [--only SUBSTR]
                                      [--work DIR] [--keep]

For every run config in examples/*.toml, bench/*.toml and bench/*/*.toml (files
without a [model] section, such as hardware descriptions, are listed as skipped), for
the quickstart with `model.top_mlp = [100000, 1]` on 2 × 2 ranks and on one rank, for
the quickstart on one rank, and for the tiny run whose peak towerrec's PROCESS_BYTES
was measured on (towerrec_train::memory), it runs `towerrec train` in a fresh run directory, bounded by --max-steps (the config's
eval_every + 1 where that is at most 200, so that one evaluation runs beside the
training reader, else 20; never past the config's own end), so that every run also
writes its final checkpoint and runs its final evaluation. It reads the estimate from
the run's start-up line ("memory estimate: ...") and the peak resident set size of the
process from the kernel (ru_maxrss, threads included: it is one process), as GNU time
reports it (see TIME below; without /usr/bin/time, os.wait4's).
A run the memory check refuses is listed as refused, with the estimate its error gives
(it has allocated nothing: its peak is not comparable).

Configs that need an MPI launcher are not run (none of these does: the clusters they
ask for run in-process). With --mpi, every config runs as 4 MPI processes instead
(mpirun -np 4, 2 hosts x 2 ranks; a build with --features mpi), and the table gives
rank 0's estimate (the one printed) against rank 0's peak, the other ranks' beside. examples/movielens.toml reads the CSV made by
scripts/movielens_to_csv.py from ../shared/data/ml-100k beside the repository (or
$ML100K: MovieLens-100k from https://grouplens.org/datasets/movielens/100k/); the
Criteo and Avazu examples read their samples there too.

Runs go one at a time: each one's peak is its own. Only the standard library is used.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ESTIMATE = re.compile(r"memory estimate: ([0-9.]+) (GiB|MiB)")
REFUSED = re.compile(r"not enough memory for .*: ([0-9.]+) (GiB) needed")


def steps_for(cfg):
    """--max-steps: one periodic evaluation where it comes early, else 20."""
    train = cfg.get("train", {})
    every = train.get("eval_every", 0)
    steps = every + 1 if 0 < every <= 200 else 20
    data = cfg.get("data", {})
    if data.get("format") == "synthetic":
        per_epoch = -(-data.get("train_samples", 0) // train["batch_size"])
        steps = min(steps, per_epoch * train.get("epochs", 1))
    if "max_steps" in train:
        steps = min(steps, train["max_steps"])
    return steps


def runs(work):
    """(label, args, note) of every run to measure, and (label, why) of the skipped."""
    todo, skipped = [], []
    paths = []
    for pattern in ("examples", "bench"):
        d = os.path.join(ROOT, pattern)
        paths += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".toml"))
    d = os.path.join(ROOT, "bench")
    for sub in sorted(os.listdir(d)):
        s = os.path.join(d, sub)
        if os.path.isdir(s):
            paths += sorted(os.path.join(s, f) for f in os.listdir(s) if f.endswith(".toml"))
    for path in paths:
        rel = os.path.relpath(path, ROOT)
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
        if "model" not in cfg:
            skipped.append((rel, "not a run config (no [model])"))
            continue
        args = ["--config", path, "--max-steps", str(steps_for(cfg))]
        if os.path.basename(path) == "movielens.toml":
            csv = os.path.join(work, "ml100k.csv")
            if not os.path.exists(csv):
                src = os.environ.get(
                    "ML100K", os.path.join(ROOT, "..", "shared", "data", "ml-100k")
                )
                subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "movielens_to_csv.py"),
                                src, csv], check=True)
            args += ["--data", csv]
        todo.append((rel, args))
    quick = os.path.join(ROOT, "examples", "quickstart.toml")
    with open(quick, "rb") as f:
        steps = str(steps_for(tomllib.load(f)))
    # A step of the wide model takes seconds on 2 cores: 4 steps, evaluating after the
    # third (beside the training reader) and at the end.
    wide = ["--config", quick, "--max-steps", "4", "--set", "model.top_mlp=[100000, 1]",
            "--set", "train.eval_every=3"]
    todo.append(("quickstart top_mlp=[100000, 1]", wide))
    todo.append(("quickstart top_mlp=[100000, 1], 1 rank",
                 wide + ["--hosts", "1", "--ranks-per-host", "1"]))
    todo.append(("quickstart, 1 rank", ["--config", quick, "--max-steps", steps,
                                        "--hosts", "1", "--ranks-per-host", "1"]))
    tiny = ["--config", quick, "--max-steps", "2", "--set", "data.tables=[{rows=10,count=1}]",
            "--set", "data.num_dense=1", "--set", "model.bottom_mlp=[16]",
            "--set", "model.top_mlp=[1]", "--set", "train.batch_size=4",
            "--set", "data.eval_samples=8", "--set", "data.train_samples=8"]
    todo.append(("tiny (PROCESS_BYTES), 1 rank", tiny + ["--hosts", "1", "--ranks-per-host", "1"]))
    todo.append(("tiny (PROCESS_BYTES), 2 x 2", tiny))
    return todo, skipped


# A child forked from this interpreter starts with its resident memory (about 16 MB),
# and ru_maxrss keeps that across exec; GNU time (a small C program) forks the run
# itself, so its figure is the run's alone. Without it, runs under that size read high.
TIME = "/usr/bin/time"


def measure(binary, args, out, mpi=False):
    """(estimate in bytes or None, peak RSS in bytes, seconds, exit status, tail, output,
    the other ranks' largest peak or None). With `mpi`, 4 processes as 2 × 2 under
    mpirun, each under GNU time; the estimate and the peak are rank 0's."""
    cmd = [binary, "train", "--out", out, "--overwrite"] + args
    rss_file = out + ".maxrss"
    if mpi:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", "4", "--mca", "mpi_yield_when_idle", "1",
               "-x", "TOWERREC_RANKS_PER_HOST=2", "bash", "-c",
               f'exec {TIME} -f %M -o {rss_file}.$OMPI_COMM_WORLD_RANK "$@"', "_"] \
            + cmd + ["--backend", "mpi"]
    elif os.access(TIME, os.X_OK):
        cmd = [TIME, "-f", "%M", "-o", rss_file] + cmd
    start = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.stdout.close()
    seconds = time.time() - start
    code = os.waitstatus_to_exitcode(status)
    peak_kib, others = usage.ru_maxrss, None
    if mpi:
        peaks = []
        for r in range(4):
            try:
                with open(f"{rss_file}.{r}") as f:
                    peaks.append(int(f.read().split()[-1]))
                os.remove(f"{rss_file}.{r}")
            except (OSError, ValueError, IndexError):
                peaks.append(0)
        peak_kib, others = peaks[0], max(peaks[1:]) * 1024
    elif os.path.exists(rss_file):
        with open(rss_file) as f:
            peak_kib = int(f.read().split()[-1])
        os.remove(rss_file)
    m = ESTIMATE.search(text) or REFUSED.search(text)
    estimate = None
    if m:
        estimate = float(m.group(1)) * (1 << 30 if m.group(2) == "GiB" else 1 << 20)
    tail = [l for l in text.splitlines() if l.strip()][-1:] or [""]
    return estimate, peak_kib * 1024, seconds, code, tail[0], text, others


def machine():
    """Cores, memory and transparent huge pages, where Linux says."""
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""
    mem = {l.split(":")[0]: l.split()[1] for l in read("/proc/meminfo").splitlines() if ":" in l}
    gib = lambda k: f"{int(mem[k]) / 2**20:.1f} GiB" if k in mem else "?"
    thp = read("/sys/kernel/mm/transparent_hugepage/enabled").strip() or "?"
    return (f"{os.cpu_count()} cores, MemTotal {gib('MemTotal')}, MemAvailable "
            f"{gib('MemAvailable')} at the start, transparent huge pages: {thp}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "towerrec"))
    ap.add_argument("--only", default="", help="run only the labels containing this")
    ap.add_argument("--skip", action="append", default=[],
                    help="leave out the labels containing this (repeatable)")
    ap.add_argument("--work", default="/tmp/towerrec-memory-check")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--verbose", action="store_true", help="print each run's output")
    ap.add_argument("--mpi", action="store_true",
                    help="run each config under mpirun as 2 x 2 processes (a build with "
                         "--features mpi); the runs on one rank are left out")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    todo, skipped = runs(a.work)
    print(f"# {' '.join(['python3'] + sys.argv)}")
    print(f"# binary: {a.bin}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"# machine: {machine()}")
    how = "GNU time's %M" if os.access(TIME, os.X_OK) else "os.wait4 (includes ~16 MB of python)"
    if a.mpi:
        how = "rank 0's, GNU time's %M; mpirun -np 4 as 2 x 2, --backend mpi"
    print(f"# estimate: towerrec's start-up line; peak: the process's ru_maxrss ({how}); "
          "MB = 10^6 bytes")
    print(f"{'config':<46} {'steps':>5} {'estimate MB':>12} {'peak RSS MB':>12} "
          f"{'ratio':>6} {'s':>6}  exit")
    worst, lines = [], []
    for label, args in todo:
        if (a.only and a.only not in label) or any(s in label for s in a.skip):
            continue
        if a.mpi and "--hosts" in args:
            continue
        out = os.path.join(a.work, "run")
        est, peak, secs, code, tail, text, others = measure(a.bin, args, out, a.mpi)
        steps = args[args.index("--max-steps") + 1]
        refused = code != 0 and REFUSED.search(text) is not None
        ratio = est / peak if est and not refused else float("nan")
        e = f"{est / 1e6:12.1f}" if est else f"{'-':>12}"
        p = f"{'refused':>12}" if refused else f"{peak / 1e6:12.1f}"
        rest = f"  (ranks 1-3: peak {others / 1e6:.1f} MB at most)" if others else ""
        print(f"{label:<46} {steps:>5} {e} {p} {ratio:6.2f} {secs:6.1f}  {code}"
              + ("" if code == 0 else f"  ({tail})") + rest, flush=True)
        if a.verbose:
            print(text)
        line = next((l for l in text.splitlines()
                     if l.startswith("memory estimate") or "not enough memory" in l), None)
        lines.append(f"{label}: {line or '(no estimate line)'}")
        if est and not refused and not label.startswith("tiny"):
            worst.append(ratio)
        if not a.keep:
            shutil.rmtree(out, ignore_errors=True)
    for label, why in skipped:
        print(f"{label:<46} skipped: {why}")
    if worst:
        print(f"# ratio estimate / peak over the configs and the quickstart runs: lowest "
              f"{min(worst):.2f}, highest {max(worst):.2f} (the tiny runs, PROCESS_BYTES's "
              "measurement, are left out: their estimate counts a GEMM slab per thread, "
              "which products that small never allocate)")
    print("# the start-up lines:")
    for l in lines:
        print(l)


if __name__ == "__main__":
    main()
