#!/usr/bin/env bash
# How long `towerrec report` takes, and how much memory, on a very long metrics log
# (docs/REPORT.md, "Limits"). Builds nothing: give it a release binary and a finished
# run directory (e.g. the 2 x 2 quickstart: `towerrec train --out runs/q-2x2`); the
# log is that run's sixth step line and first evaluation repeated, LINES step lines
# (default 200,000) with an evaluation every 1,000, in a scratch directory.
#
#   bench/report-big-log.sh BINARY RUN_DIR [ROUNDS=3]
set -euo pipefail
bin=$(realpath "${1:?usage: bench/report-big-log.sh BINARY RUN_DIR [ROUNDS]}")
src=$(realpath "${2:?usage: bench/report-big-log.sh BINARY RUN_DIR [ROUNDS]}")
rounds=${3:-3}
lines=${LINES:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/run"
cp "$src/config.toml" "$work/run/"
python3 - "$src/metrics.jsonl" "$work/run/metrics.jsonl" "$lines" <<'PY'
import json, random, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(src)]
step = [r for r in rows if "loss" in r][5]
ev = [r for r in rows if "split" in r][0]
random.seed(1)
with open(out, "w") as f:
    for i in range(1, n + 1):
        d = dict(step, step=i * 20, loss=0.45 + random.random() * 0.02)
        f.write(json.dumps(d) + "\n")
        if i % 1000 == 0:
            f.write(json.dumps(dict(ev, step=i * 20)) + "\n")
PY
cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || true)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); binary: $bin"
echo "log: $lines step lines, $(stat -c %s "$work/run/metrics.jsonl") bytes"
for r in $(seq "$rounds"); do
    /usr/bin/time -f "round $r: %e s wall, %M KB peak memory" \
        "$bin" report "$work/run" --out "$work/page.html" 2>&1 >/dev/null | tail -1
done
echo "page: $(stat -c %s "$work/page.html") bytes"
