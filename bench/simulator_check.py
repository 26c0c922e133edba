#!/usr/bin/env python3
"""Checks `towerrec simulate` against measured towerrec steps on this machine.

For each of three runs (kaggle-like and multi-hot on one process, kaggle-like on an
in-process cluster of 2 hosts x 2 ranks) and each of several rounds: calibrates this
machine for the run's topology (`towerrec calibrate`), measures the training step
(`towerrec bench model`) and predicts it (`towerrec simulate --hardware <the file>`),
back to back, so that both see the same machine. Prints the median measured and
predicted step times and the median ratio; the last lines are

    check <run> <predicted / measured>

Usage: python3 bench/simulator_check.py [--rounds 3] [--bin target/release/towerrec]
(build first: cargo build --release). See docs/SIMULATOR.md.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RUNS = [
    ("kaggle-1x1", "bench/kaggle.toml", None),
    ("multihot-1x1", "bench/multihot.toml", None),
    ("kaggle-2x2", "bench/kaggle.toml", (2, 2)),
]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="target/release/towerrec")
    ap.add_argument("--seconds", type=float, default=0.5,
                    help="calibrate's budget per measurement")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="towerrec-simcheck-"))
    measured = {r[0]: [] for r in RUNS}
    predicted = {r[0]: [] for r in RUNS}
    ratios = {r[0]: [] for r in RUNS}
    for i in range(a.rounds):
        for label, config, topo in RUNS:
            # Calibrate right before each measurement: the machine's speed drifts over
            # minutes, and the prediction should see the conditions the run sees.
            hw = tmp / f"{label}.toml"
            cmd = [a.bin, "calibrate", "-q", "--seconds", str(a.seconds), "--out", str(hw)]
            bench = [a.bin, "bench", "model", "--config", config, "--mode", "train", "--json"]
            if topo:
                extra = ["--hosts", str(topo[0]), "--ranks-per-host", str(topo[1])]
                cmd += extra
                bench += extra
            run(cmd)
            r = json.loads(run(bench).strip().splitlines()[-1])
            step = r["batch_size"] / r["median_samples_per_sec"]
            sim = run([a.bin, "simulate", "--config", config, "--hardware", str(hw),
                       "--mode", "train", "--json"])
            p = json.loads(sim.strip().splitlines()[-1])
            # bench model steps over batches held in memory: it reads nothing, so its
            # prediction leaves out the reader (the data_read phase train pays).
            pred = p["step_seconds"] - p["exposed_seconds"].get("data_read", 0.0)
            measured[label].append(step)
            predicted[label].append(pred)
            ratios[label].append(pred / step)
            print(f"round {i + 1} {label}: measured {step * 1e3:.2f} ms, "
                  f"predicted {pred * 1e3:.2f} ms, ratio {pred / step:.3f}", file=sys.stderr)
    print(f"{'run':<14} {'measured':>12} {'predicted':>12} {'median ratio':>13} {'range':>13}")
    lines = []
    for label, _, _ in RUNS:
        m = statistics.median(measured[label])
        p = statistics.median(predicted[label])
        r = statistics.median(ratios[label])
        lo, hi = min(ratios[label]), max(ratios[label])
        print(f"{label:<14} {m * 1e3:>9.2f} ms {p * 1e3:>9.2f} ms {r:>13.3f} {lo:>6.3f}-{hi:.3f}")
        lines.append(f"check {label} {r:.3f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
