#!/usr/bin/env bash
# Serving speed (issue 41; docs/SERVING.md, "Speed"): `towerrec serve` under the load
# generator (bench/loadgen.rs) against `towerrec eval` on the same rows, on this machine's
# cores shared by server and load generator.
#
#   cargo build --release && cargo build --release -p towerrec-serve --example loadgen
#   bench/serve-load.sh [OUT_DIR]
#
# Makes (once, in DATA, default /tmp/towerrec-serve-bench) 200,000 training rows and
# 100,000 request rows with bench/criteo_like_tsv.awk, trains bench/serve.toml for
# STEPS steps (default 40), then:
# 1. eval: `towerrec eval` of the 100,000 rows and of 256 of them, alternated, 3 each;
#    rows/s = (100,000 - 256) / (median time of the large - median of the small), so
#    that loading the model counts for neither side.
# 2. serve with the batch limits below; per request size (256 rows, 1 row): closed loop
#    at saturation (CONNS_256, CONNS_1 connections, SECONDS each), then open loop at
#    25%, 50% and 75% of the saturated request rate.
# Each run prints one JSON line (bench/loadgen.rs) with the CPU seconds of load
# generator and server; everything goes to OUT_DIR (default: a new directory in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/serve-load.XXXX)}
mkdir -p "$out"
data=${DATA:-/tmp/towerrec-serve-bench}
steps=${STEPS:-40}
seconds=${SECONDS_EACH:-15}
conns_256=${CONNS_256:-8}
conns_1=${CONNS_1:-64}
bin=${TOWERREC:-target/release/towerrec}
loadgen=${LOADGEN:-target/release/examples/loadgen}
batch_flags=(--max-batch-rows 1024 --max-wait-ms 1 --threads 2 --http-threads 1
    --max-concurrency 256 --queue 256)
for b in "$bin" "$loadgen"; do
    [ -x "$b" ] || { echo "missing $b: see the usage at the top" >&2; exit 1; }
done
lscpu | grep -E 'Model name|^CPU\(s\)' | tee "$out/cpu.txt"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)')" | tee -a "$out/cpu.txt"
echo "batch flags: ${batch_flags[*]}" | tee -a "$out/cpu.txt"
mkdir -p "$data"
[ -s "$data/train.tsv" ] || awk -v rows=200000 -v seed=1 -f bench/criteo_like_tsv.awk > "$data/train.tsv"
[ -s "$data/rows.tsv" ] || awk -v rows=100000 -v seed=2 -f bench/criteo_like_tsv.awk > "$data/rows.tsv"
head -256 "$data/rows.tsv" > "$data/rows256.tsv"
if [ ! -s "$data/run/checkpoint.safetensors" ]; then
    "$bin" train --config bench/serve.toml --data "$data/train.tsv" --out "$data/run" \
        --overwrite --max-steps "$steps" --quiet
fi

echo "== eval (same rows from a file)"
for i in 1 2 3; do
    for f in rows rows256; do
        s=$(date +%s%N)
        "$bin" eval --checkpoint "$data/run" --data "$data/$f.tsv" > /dev/null
        ns=$(($(date +%s%N) - s))
        printf '%s %d.%09d\n' "$f" $((ns / 1000000000)) $((ns % 1000000000)) | tee -a "$out/eval.txt"
    done
done
python3 - "$out/eval.txt" <<'PY' | tee "$out/eval-rate.txt"
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    f, s = line.split(); t.setdefault(f, []).append(float(s))
big, small = statistics.median(t["rows"]), statistics.median(t["rows256"])
print(f"eval: median {big:.3f} s for 100000 rows, {small:.3f} s for 256: {(100000 - 256) / (big - small):.0f} rows/s")
PY

echo "== serve"
"$bin" serve --checkpoint "$data/run" --listen 127.0.0.1:0 "${batch_flags[@]}" \
    > "$out/serve.out" 2> "$out/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out/serve.out" && break; sleep 0.2; done
addr=$(grep -o 'http://[0-9.:]*' "$out/serve.out" | head -1 | sed 's|http://||')
load() { "$loadgen" --addr "$addr" --rows "$data/rows.tsv" --server-pid "$pid" "$@"; }
for per in 256 1; do
    conns=$([ "$per" = 256 ] && echo "$conns_256" || echo "$conns_1")
    # A short warm-up (page faults, connection set-up), not recorded.
    load --rows-per-request "$per" --duration-s 2 closed --connections "$conns" > /dev/null
    sat=$(load --rows-per-request "$per" --duration-s "$seconds" closed --connections "$conns")
    echo "$sat" | tee -a "$out/load.jsonl"
    rate=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['ok_requests_per_s'])" "$sat")
    for share in 0.25 0.5 0.75; do
        r=$(python3 -c "print(round($rate * $share, 1))")
        load --rows-per-request "$per" --duration-s "$seconds" open --rate "$r" | tee -a "$out/load.jsonl"
    done
done
kill -TERM $pid
wait $pid
trap - EXIT
cat "$out/serve.out"
echo "raw: $out"
