#!/usr/bin/env python3
"""The table of scripts/vocab-auc.sh's CSV: per data set, shuffle setting and
encoding, the median AUC over seeds; for each vocabulary the median of the per-seed
differences against hashing (same data, shuffle and seed) and their spread
(min..max); and the spread of hashing's own AUC over seeds. A difference is marked
"outside" when every seed's difference has the same sign and the median difference is
larger than hashing's own spread over seeds.

Usage: python3 scripts/vocab_auc_table.py CSV
"""
import csv
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    auc = defaultdict(dict)
    for r in csv.DictReader(open(sys.argv[1])):
        auc[(r["data"], r["shuffle"], r["encoding"])][int(r["seed"])] = float(r["auc"])
    print("| data | shuffle | encoding | median AUC | seeds | Δ vs hashing: median | Δ spread (min..max) | hashing's spread | outside? |")
    print("|---|---|---|---:|---:|---:|---|---:|---|")
    for data in ["criteo", "avazu", "movielens"]:
        for shuffle in ["false", "true"]:
            base = auc.get((data, shuffle, "hash"), {})
            if not base:
                continue
            spread = max(base.values()) - min(base.values())
            for enc in ["hash", "vocab2", "vocab5"]:
                runs = auc.get((data, shuffle, enc), {})
                if not runs:
                    continue
                med = statistics.median(runs.values())
                if enc == "hash":
                    print(f"| {data} | {shuffle} | hashing | {med:.4f} | {len(runs)} | | | {spread:.4f} | |")
                    continue
                d = [runs[s] - base[s] for s in sorted(runs) if s in base]
                dm = statistics.median(d)
                same_sign = all(x > 0 for x in d) or all(x < 0 for x in d)
                outside = "yes" if same_sign and abs(dm) > spread else "no"
                name = "vocab, min_count = " + enc[len("vocab"):]
                print(f"| {data} | {shuffle} | {name} | {med:.4f} | {len(d)} | {dm:+.4f} | {min(d):+.4f}..{max(d):+.4f} | | {outside} |")
    print()
    print("Shuffling on against off, per encoding (same data, encoding and seed):")
    print()
    print("| data | encoding | Δ AUC (on − off): median | spread (min..max) | off's spread | outside? |")
    print("|---|---|---:|---|---:|---|")
    for data in ["criteo", "avazu", "movielens"]:
        for enc in ["hash", "vocab2", "vocab5"]:
            off, on = auc.get((data, "false", enc), {}), auc.get((data, "true", enc), {})
            d = [on[s] - off[s] for s in sorted(on) if s in off]
            if not d:
                continue
            spread = max(off.values()) - min(off.values())
            dm = statistics.median(d)
            same_sign = all(x > 0 for x in d) or all(x < 0 for x in d)
            outside = "yes" if same_sign and abs(dm) > spread else "no"
            print(f"| {data} | {enc} | {dm:+.4f} | {min(d):+.4f}..{max(d):+.4f} | {spread:.4f} | {outside} |")


if __name__ == "__main__":
    main()
