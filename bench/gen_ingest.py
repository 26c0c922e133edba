#!/usr/bin/env python3
"""Generates the ingestion benchmark's inputs (issue 39, fast ingestion): a Criteo-format
TSV and a schema CSV of the same shape, deterministic for a seed.

    python3 bench/gen_ingest.py OUT_DIR [--rows 1000000] [--seed 39]

writes OUT_DIR/criteo.tsv (read with bench/ingest-criteo.toml) and OUT_DIR/schema.csv
(bench/ingest-csv.toml). Value distributions mimic the Criteo click logs:

- label 1 with probability 0.26;
- 13 counts, heavy-tailed (exp of an exponential, capped at e^20, so a few reach the millions), a
  small share of negatives in I2 as in Criteo, and each count empty with its own
  probability (0-45 %);
- 26 categoricals with cardinalities from 4 to 2 million, Zipf-like frequencies
  (rank = cardinality^u, u uniform: log-uniform ranks, frequency ~ 1/rank), written as
  8 hex digits (Criteo) or short strings (CSV), each empty with its own probability.

The CSV has a header, the label, 13 numbers (counts and a few decimals), 25 categorical
strings and one multi-valued column (up to 4 values joined by '|'), some fields quoted.
"""

import argparse
import math
import os
import random

NUM_DENSE = 13
NUM_SPARSE = 26


def params(rng):
    cards = [int(4 * (2_000_000 / 4) ** (k / (NUM_SPARSE - 1))) for k in range(NUM_SPARSE)]
    rng.shuffle(cards)
    empty_dense = [rng.choice([0.0, 0.0, 0.05, 0.2, 0.45]) for _ in range(NUM_DENSE)]
    empty_sparse = [rng.choice([0.0, 0.0, 0.0, 0.03, 0.3, 0.45]) for _ in range(NUM_SPARSE)]
    scale = [rng.uniform(0.8, 3.5) for _ in range(NUM_DENSE)]
    return cards, empty_dense, empty_sparse, scale


def count(rng, k, scale):
    if k == 1 and rng.random() < 0.1:
        return -rng.randint(1, 3)
    # Capped at e^20 (about 5e8): heavy-tailed, within the integers Criteo holds.
    return int(math.exp(min(rng.expovariate(1.0) * scale, 20.0))) - 1


def rank(rng, card):
    return int(card ** rng.random()) - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=39)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    rng = random.Random(a.seed)
    cards, empty_dense, empty_sparse, scale = params(rng)
    mix = [0x9E3779B97F4A7C15 * (f + 1) & 0xFFFFFFFF for f in range(NUM_SPARSE)]
    tsv = open(os.path.join(a.out_dir, "criteo.tsv"), "w")
    csv = open(os.path.join(a.out_dir, "schema.csv"), "w")
    header = ["click"] + [f"n{k + 1}" for k in range(NUM_DENSE)]
    header += [f"c{k + 1}" for k in range(NUM_SPARSE - 1)] + ["tags"]
    csv.write(",".join(header) + "\n")
    rnd = rng.random
    for _ in range(a.rows):
        label = "1" if rnd() < 0.26 else "0"
        dense = [
            "" if rnd() < empty_dense[k] else str(count(rng, k, scale[k]))
            for k in range(NUM_DENSE)
        ]
        ranks = [
            None if rnd() < empty_sparse[f] else rank(rng, cards[f]) for f in range(NUM_SPARSE)
        ]
        hexes = [
            "" if r is None else format((r * 2654435761 + mix[f]) & 0xFFFFFFFF, "08x")
            for f, r in enumerate(ranks)
        ]
        tsv.write("\t".join([label] + dense + hexes) + "\n")
        # CSV: decimals in two columns, strings, a quoted field now and then, tags.
        cdense = list(dense)
        for k in (3, 7):
            if cdense[k]:
                cdense[k] = f"{int(cdense[k]) / 7:.3f}"
        strs = ["" if r is None else f"v{f}_{r}" for f, r in enumerate(ranks[:-1])]
        if rnd() < 0.05:
            strs[2] = f'"{strs[2]}, x"'
        tags = "|".join(f"t{rank(rng, 5000)}" for _ in range(rng.randint(0, 4)))
        csv.write(",".join([label] + cdense + strs + [tags]) + "\n")
    tsv.close()
    csv.close()


if __name__ == "__main__":
    main()
