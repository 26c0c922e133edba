#!/usr/bin/env python3
"""Side-by-side speed of towerrec and PyTorch on the same DLRM (bench/README.md).

    python3 bench/compare.py [--threads 2] [--rounds 5] [--configs kaggle,multihot]
                             [--modes train,infer,infer-serial] [--batch N] [--quick]

Installs torch with pip if this interpreter lacks it, builds towerrec in release mode,
then for each config and mode alternates the two (towerrec, pytorch, towerrec, ...),
each run a separate process timing a few repetitions with the same thread count. It
prints a table of the medians over all repetitions; its last lines are one per
comparison:

    ratio <config> <train|infer> <towerrec samples/s ÷ pytorch samples/s>

Standard library only; progress goes to stderr.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("kaggle", "multihot")
MODES = ("train", "infer", "infer-serial")
# towerrec's `infer` scores a stream with consecutive batches overlapped;
# `infer-serial` finishes each batch before the next. PyTorch runs its one way for both.
TORCH_MODE = {"train": "train", "infer": "infer", "infer-serial": "infer"}
DEFAULT_MODES = ["train", "infer"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ensure_torch():
    probe = [sys.executable, "-c", "import torch"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    log(f"torch is not installed for {sys.executable}: running pip install torch")
    print("installing torch (pip install torch)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "torch"], check=True)
    if subprocess.run(probe).returncode != 0:
        sys.exit("torch still cannot be imported after pip install torch")


def build():
    log("building towerrec: cargo build --release")
    subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(target, "release", "towerrec")
    if not os.path.exists(exe):
        sys.exit(f"no binary at {exe} after cargo build --release")
    return exe


def run_json(cmd, env=None):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}")
    for line in reversed(r.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"no JSON line in the output of: {' '.join(cmd)}\n{r.stdout}")


def csv_list(allowed):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(allowed)}, got {s!r}")
        return items
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="alternating runs of each per comparison (default 5; 1 with --quick)")
    ap.add_argument("--configs", type=csv_list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--modes", type=csv_list(MODES), default=DEFAULT_MODES,
                    help="train, infer (a stream, batches overlapped), infer-serial "
                         "(one batch at a time); default train,infer")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per run (default 3)")
    ap.add_argument("--steps", type=int, default=None, help="steps per repetition (default 10)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per run (default 3)")
    ap.add_argument("--batch", type=int, default=None,
                    help="samples per batch for both (default: each config's)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 1 round, 1 warm-up step, 2 steps, 1 repetition")
    ap.add_argument("--no-build", action="store_true", help="use the existing release binary")
    a = ap.parse_args()

    q = a.quick
    rounds = a.rounds if a.rounds is not None else (1 if q else 5)
    warmup = a.warmup if a.warmup is not None else (1 if q else 3)
    steps = a.steps if a.steps is not None else (2 if q else 10)
    reps = a.reps if a.reps is not None else (1 if q else 3)
    if min(rounds, steps, reps, a.threads) < 1 or warmup < 0:
        sys.exit("--rounds, --steps, --reps and --threads must be at least 1")
    timing = ["--warmup", str(warmup), "--steps", str(steps), "--reps", str(reps),
              "--threads", str(a.threads)]
    tr_batch = ["--set", f"train.batch_size={a.batch}"] if a.batch else []
    pt_batch = ["--batch", str(a.batch)] if a.batch else []

    ensure_torch()
    if a.no_build:
        exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                           "release", "towerrec")
    else:
        exe = build()
    # Keep PyTorch's OpenMP/MKL pools at the same size as its intra-op setting.
    torch_env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True).stdout.strip()

    results = []
    for config in a.configs:
        for mode in a.modes:
            tr_rates, pt_rates, batch = [], [], None
            for r in range(1, rounds + 1):
                log(f"[{config} {mode}] round {r}/{rounds}: towerrec")
                out = run_json([exe, "bench", "model", "--config", f"bench/{config}.toml",
                                "--mode", mode, "--json"] + timing + tr_batch)
                tr_rates += out["samples_per_sec"]
                batch = out["batch_size"]
                log(f"  towerrec median {out['median_samples_per_sec']:.0f} samples/s")
                log(f"[{config} {mode}] round {r}/{rounds}: pytorch")
                out = run_json([sys.executable, os.path.join(HERE, "torch_dlrm.py"),
                                "--config", config, "--mode", TORCH_MODE[mode]] + timing + pt_batch, env=torch_env)
                pt_rates += out["samples_per_sec"]
                if out["batch_size"] != batch:
                    sys.exit(f"batch sizes differ: towerrec {batch}, pytorch {out['batch_size']}")
                log(f"  pytorch  median {out['median_samples_per_sec']:.0f} samples/s")
            tr, pt = statistics.median(tr_rates), statistics.median(pt_rates)
            results.append((config, mode, batch, tr, min(tr_rates), max(tr_rates),
                            pt, min(pt_rates), max(pt_rates), len(tr_rates), tr / pt))

    print(f"towerrec vs PyTorch {torch_version}, {a.threads} threads, {rounds} rounds × "
          f"{reps} reps × {steps} steps (samples/s; median [min–max] over all reps)")
    head = ("config", "mode", "batch", "towerrec", "range", "pytorch", "range", "ratio")
    rows = [(c, m, str(b), f"{tr:.0f}", f"{trlo:.0f}–{trhi:.0f}", f"{pt:.0f}",
             f"{ptlo:.0f}–{pthi:.0f}", f"{ratio:.3f}")
            for c, m, b, tr, trlo, trhi, pt, ptlo, pthi, _, ratio in results]
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    for row in [head] + rows:
        print("  ".join(x.rjust(w) if i >= 2 else x.ljust(w)
                        for i, (x, w) in enumerate(zip(row, widths))).rstrip())
    for c, m, *_, ratio in results:
        print(f"ratio {c} {m} {ratio:.3f}")


if __name__ == "__main__":
    main()
