#!/usr/bin/env bash
# Ingestion speed of two towerrec binaries, alternated in one run (issue 39, fast
# ingestion). Builds nothing: give it two release binaries, e.g. one of the commit
# before the work (345cfca) and one of the work.
#
#   bench/ingest.sh OLD_BINARY NEW_BINARY [ROUNDS=3]
#
# DATA (environment, default /tmp/towerrec-ingest) holds criteo.tsv and schema.csv from
# bench/gen_ingest.py (made there, 1M rows each, if missing). Prints the CPU, then one
# line per run and per case the medians of rows/s and bytes/row of each binary and
# their ratios (new / old), and the CPU time per row (user + system: the per-core cost);
# then trains the kaggle-like model (bench/ingest-criteo.toml)
# with NEW from the text and from the binary, alternated, STEPS steps each (default 400,
# 15-40 s on 2 cores, at most about 480 in the one epoch of 990,000 rows), and prints the median wall seconds and their ratio.
# ONLY=preprocess or ONLY=train runs one of the two parts.
set -euo pipefail
old=${1:?usage: bench/ingest.sh OLD_BINARY NEW_BINARY [ROUNDS]}
new=${2:?usage: bench/ingest.sh OLD_BINARY NEW_BINARY [ROUNDS]}
rounds=${3:-3}
steps=${STEPS:-400}
data=${DATA:-/tmp/towerrec-ingest}
cd "$(dirname "$0")/.."
old=$(realpath "$old")
new=$(realpath "$new")
if [[ ! -s $data/criteo.tsv || ! -s $data/schema.csv ]]; then
    echo "generating $data (1M rows each) ..." >&2
    python3 bench/gen_ingest.py "$data"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//' || true)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); old: $old; new: $new; $rounds rounds"
echo "RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-unset}"

now() { date +%s.%N; }
results=$out/results.tsv
: >"$results"
if [[ ${ONLY:-preprocess} == preprocess ]]; then
for round in $(seq "$rounds"); do
    for case in criteo csv; do
        input=$data/$([[ $case == criteo ]] && echo criteo.tsv || echo schema.csv)
        for which in old new; do
            bin=$([[ $which == old ]] && echo "$old" || echo "$new")
            target=$out/$case.$which.bin
            rm -f "$target"
            start=$(now)
            # CPU seconds (user + system) too: per-core cost, whatever the parallelism.
            /usr/bin/time -f '%U %S' -o "$out/cpu" \
                "$bin" preprocess --config "bench/ingest-$case.toml" --data "$input" --out "$target" \
                >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
            end=$(now)
            rows=$(sed -n 's/^wrote \([0-9]*\) rows.*/\1/p' "$out/log")
            bytes=$(stat -c %s "$target")
            cpu=$(tail -1 "$out/cpu")
            python3 - "$round" "$case" "$which" "$rows" "$bytes" "$start" "$end" $cpu >>"$results" <<'EOF'
import sys
r, case, which, rows, size, t0, t1, user, system = sys.argv[1:]
secs = float(t1) - float(t0)
cpu_us = (float(user) + float(system)) * 1e6 / int(rows)
print(f"{r}\t{case}\t{which}\t{int(rows) / secs:.0f}\t{int(size) / int(rows):.1f}\t{secs:.2f}\t{cpu_us:.2f}")
EOF
            tail -1 "$results" | awk -F'\t' '{printf "round %s %-6s %s: %s rows/s, %s bytes/row, %s s, %s CPU us/row\n", $1, $2, $3, $4, $5, $6, $7}'
        done
    done
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
for case in ("criteo", "csv"):
    m = {}
    for which in ("old", "new"):
        sel = [r for r in rows if r[1] == case and r[2] == which]
        m[which] = tuple(statistics.median(float(r[k]) for r in sel) for k in (3, 4, 6))
    pairs = {}
    for r in rows:
        if r[1] == case:
            pairs.setdefault(r[0], {})[r[2]] = float(r[3])
    ratios = sorted(p["new"] / p["old"] for p in pairs.values())
    print(f"{case}: rows/s median old {m['old'][0]:.0f}, new {m['new'][0]:.0f}, ratio {m['new'][0] / m['old'][0]:.2f} "
          f"(per-round {', '.join(f'{x:.2f}' for x in ratios)}); bytes/row old {m['old'][1]:.1f}, new {m['new'][1]:.1f}; "
          f"CPU us/row old {m['old'][2]:.2f}, new {m['new'][2]:.2f}, old/new {m['old'][2] / m['new'][2]:.2f}")
EOF
fi
[[ ${ONLY:-train} == train ]] || exit 0

# Training from text against training from the binary (NEW only, same cores).
echo "training bench/ingest-criteo.toml for $steps steps, from text and from binary (new binary)"
# The whole file (no split), so that the binary holds the same rows and the same split
# of them.
"$new" preprocess --config bench/ingest-criteo.toml --data "$data/criteo.tsv" \
    --set 'data.split={ kind = "none" }' --out "$out/train.bin" >/dev/null 2>&1
train=$out/train.tsv
: >"$train"
for round in $(seq "$rounds"); do
    for src in text binary; do
        input=$([[ $src == text ]] && echo "$data/criteo.tsv" || echo "$out/train.bin")
        rm -rf "$out/run"
        start=$(now)
        "$new" train --config bench/ingest-criteo.toml --data "$input" --set "train.max_steps=$steps" \
            -q --out "$out/run" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        end=$(now)
        sps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("steady_train_samples_per_sec", 0))' "$out/run/summary.json" 2>/dev/null || echo 0)
        secs=$(python3 -c "print(f'{$end - $start:.2f}')")
        printf '%s\t%s\t%s\t%s\n' "$round" "$src" "$secs" "$sps" >>"$train"
        echo "round $round train from $src: $secs s, steady $sps samples/s"
    done
done
python3 - "$train" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
med = {s: statistics.median(float(r[2]) for r in rows if r[1] == s) for s in ("text", "binary")}
sps = {s: statistics.median(float(r[3]) for r in rows if r[1] == s) for s in ("text", "binary")}
print(f"train wall s median: text {med['text']:.2f}, binary {med['binary']:.2f}, text/binary {med['text'] / med['binary']:.3f}; "
      f"steady samples/s text {sps['text']:.0f}, binary {sps['binary']:.0f}")
EOF
