#!/usr/bin/env bash
# Reading a snappy Parquet file against the binary format, both from the page cache,
# into batches of 2,048 rows (`towerrec bench data`: the input pipeline alone, no
# model), on the 1M rows of bench/gen_ingest.py's schema.csv (issue 39, Parquet input).
#
#   bench/parquet-vs-binary.sh TOWERREC [ROUNDS=3]
#
# DATA (environment, default /tmp/towerrec-ingest) holds schema.csv (made by
# bench/gen_ingest.py if missing); schema.parquet (bench/csv_to_parquet.py --lists,
# row groups of 131,072 rows; needs pyarrow) and schema.bin (towerrec preprocess of
# the CSV) are made there if missing. Each round reads each file once untimed (into
# the page cache) and then REPS (default 5) timed passes, Parquet and binary
# alternated; prints every round's medians, then the median over rounds and the ratio.
# WITH_CSV=1 reads the CSV itself in each round as well (a third file, beside the two).
set -euo pipefail
bin=$(realpath "${1:?usage: bench/parquet-vs-binary.sh TOWERREC [ROUNDS]}")
rounds=${2:-3}
reps=${REPS:-5}
data=${DATA:-/tmp/towerrec-ingest}
cd "$(dirname "$0")/.."
[[ -s $data/schema.csv ]] || python3 bench/gen_ingest.py "$data"
[[ -s $data/schema.parquet ]] ||
    python3 bench/csv_to_parquet.py bench/ingest-csv.toml "$data/schema.csv" "$data/schema.parquet" --lists
[[ -s $data/schema.bin ]] ||
    "$bin" preprocess --config bench/ingest-csv.toml --data "$data/schema.csv" --out "$data/schema.bin" >/dev/null
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//' || true)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $bin ($(git rev-parse --short HEAD)); $rounds rounds of $reps passes"
ls -l "$data/schema.parquet" "$data/schema.bin" | awk '{print $5, $NF}'
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
    formats="parquet binary"
    [[ ${WITH_CSV:-0} == 1 ]] && formats="$formats csv"
    for fmt in $formats; do
        cfg=bench/ingest-$([[ $fmt == parquet ]] && echo parquet || echo csv).toml
        case $fmt in parquet) file=$data/schema.parquet ;; binary) file=$data/schema.bin ;; *) file=$data/schema.csv ;; esac
        "$bin" bench data --config "$cfg" --data "$file" --reps 1 --json >/dev/null
        j=$("$bin" bench data --config "$cfg" --data "$file" --reps "$reps" --json)
        echo "round $round $fmt: $j"
        printf '%s\t%s\t%s\n' "$round" "$fmt" "$j" >>"$out"
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
med = {}
for fmt in ("parquet", "binary", "csv"):
    per = [statistics.median(json.loads(r[2])["rows_per_sec"]) for r in rows if r[1] == fmt]
    if not per:
        continue
    med[fmt] = statistics.median(per)
    print(f"{fmt}: rows/s per round {', '.join(f'{x:.0f}' for x in per)}; median {med[fmt]:.0f}")
print(f"parquet/binary: {med['parquet'] / med['binary']:.2f}")
if "csv" in med:
    print(f"parquet/csv: {med['parquet'] / med['csv']:.2f}")
PY
