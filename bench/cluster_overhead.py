#!/usr/bin/env python3
"""Overhead of an in-process cluster on one host against one process (docs/DISTRIBUTED.md).

    python3 bench/cluster_overhead.py [--config bench/kaggle.toml] [--ranks 2] [--rounds 6]
                                      [--mode train|infer] [--no-build]

Alternates `towerrec bench model` in one process and on 1 host x RANKS ranks (same
threads in all), ROUNDS times each, and prints the median samples/s of each, the
per-round ratios and their median; its last line is

    ratio cluster-1x<RANKS> <mode> <median of cluster ÷ single>

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


def bench(exe, args):
    r = subprocess.run([exe, "bench", "model", "--json", *args], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(f"failed: towerrec bench model {' '.join(args)}")
    return json.loads(r.stdout.strip().splitlines()[-1])["median_samples_per_sec"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="bench/kaggle.toml")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mode", choices=["train", "infer"], default="train")
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        print("building: cargo build --release", file=sys.stderr, flush=True)
        subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(target, "release", "towerrec")
    common = ["--config", a.config, "--mode", a.mode]
    single, cluster, ratios = [], [], []
    for i in range(a.rounds):
        s = bench(exe, common)
        c = bench(exe, common + ["--hosts", "1", "--ranks-per-host", str(a.ranks)])
        single.append(s)
        cluster.append(c)
        ratios.append(c / s)
        print(f"round {i + 1}/{a.rounds}: one process {s:.0f}, 1x{a.ranks} {c:.0f} samples/s, "
              f"ratio {c / s:.3f}", file=sys.stderr, flush=True)
    print(f"{a.config} {a.mode}: one process median {statistics.median(single):.0f} samples/s, "
          f"1 host x {a.ranks} ranks median {statistics.median(cluster):.0f} samples/s")
    print("per-round ratios: " + " ".join(f"{r:.3f}" for r in ratios))
    print(f"ratio cluster-1x{a.ranks} {a.mode} {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
