#!/usr/bin/env python3
"""The table of scripts/precision-auc.sh's CSV: per data set and setting, the median
AUC over seeds, the median of the per-seed differences against its base (same data and
seed: fp32 training; for int8, `towerrec eval` of the same run's fp32 checkpoint,
"int8-base") and their spread (min..max), the base's own spread over seeds, and whether
the median difference is within the bound the issue sets for the setting (0.002; int8
inference 0.003).

Usage: python3 scripts/precision_auc_table.py CSV
"""
import csv
import statistics
import sys
from collections import defaultdict

BOUND = {"int8": 0.003}
# The base each setting is compared with (fp32 where not named).
BASE = {"int8": "int8-base"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    auc = defaultdict(dict)
    order = []
    for r in csv.DictReader(open(sys.argv[1])):
        auc[(r["data"], r["variant"])][int(r["seed"])] = float(r["auc"])
        if r["variant"] not in order:
            order.append(r["variant"])
    bases = {"fp32"} | set(BASE.values())
    print("| data | setting | median AUC | seeds | Δ vs base: median | Δ spread (min..max) | base's spread | within bound? |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for data in ["criteo", "avazu", "movielens"]:
        for v in order:
            runs = auc.get((data, v), {})
            if not runs:
                continue
            med = statistics.median(runs.values())
            if v in bases:
                spread = max(runs.values()) - min(runs.values())
                print(f"| {data} | {v} | {med:.4f} | {len(runs)} | | | {spread:.4f} | |")
                continue
            base = auc.get((data, BASE.get(v, "fp32")), {})
            if not base:
                continue
            spread = max(base.values()) - min(base.values())
            d = [runs[s] - base[s] for s in sorted(runs) if s in base]
            dm = statistics.median(d)
            bound = BOUND.get(v, 0.002)
            ok = "yes" if abs(dm) <= bound else f"NO (bound {bound})"
            print(f"| {data} | {v} | {med:.4f} | {len(d)} | {dm:+.4f} | {min(d):+.4f}..{max(d):+.4f} | {spread:.4f} | {ok} |")


if __name__ == "__main__":
    main()
