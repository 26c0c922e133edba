#!/usr/bin/env bash
# Sharded serving (issue 41; docs/SERVING.md, "Sharded serving"): `towerrec serve` on
# 2 hosts × 2 in-process ranks with OPER's inference plan against table-wise, at the
# same open-loop load, alternated ROUNDS times (default 2): p99 latency (bench/loadgen.rs)
# and bytes per micro-batch (/metrics: the embedding exchange's bytes over the batches).
#
#   cargo build --release && cargo build --release -p towerrec-serve --example loadgen
#   bench/serve-load.sh          # first: makes the rows and trains the model (DATA)
#   bench/serve-sharded.sh [OUT_DIR]
#
# RATE requests/s of 256 rows (default 40), SECONDS_EACH per run (default 15). The
# plans: `towerrec plan --strategy table-wise` and `--strategy oper --mode inference
# --profile P` (P: `towerrec profile` of the training rows), both for 2 × 2.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/serve-sharded.XXXX)}
mkdir -p "$out"
data=${DATA:-/tmp/towerrec-serve-bench}
rate=${RATE:-40}
seconds=${SECONDS_EACH:-15}
rounds=${ROUNDS:-2}
bin=${TOWERREC:-target/release/towerrec}
loadgen=${LOADGEN:-target/release/examples/loadgen}
[ -s "$data/run/checkpoint.safetensors" ] || { echo "run bench/serve-load.sh first" >&2; exit 1; }
lscpu | grep -E 'Model name|^CPU\(s\)' | tee "$out/cpu.txt"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)'); rate $rate/s of 256 rows" | tee -a "$out/cpu.txt"
cfg=(--config bench/serve.toml --set "data.path=\"$data/train.tsv\"")
[ -s "$data/profile.safetensors" ] || "$bin" profile "${cfg[@]}" --out "$data/profile.safetensors" > /dev/null
topo=(--hosts 2 --ranks-per-host 2)
"$bin" plan "${cfg[@]}" "${topo[@]}" --strategy table-wise --output "$out/table-wise.json" > "$out/plan-table-wise.txt"
"$bin" plan "${cfg[@]}" "${topo[@]}" --strategy oper --mode inference \
    --profile "$data/profile.safetensors" --output "$out/oper.json" > "$out/plan-oper.txt"
for round in $(seq "$rounds"); do
    for plan in table-wise oper; do
        "$bin" serve --checkpoint "$data/run" --listen 127.0.0.1:0 "${topo[@]}" --plan "$out/$plan.json" \
            --threads 2 --max-batch-rows 1024 --max-wait-ms 1 > "$out/serve-$plan.out" 2>&1 &
        pid=$!
        for _ in $(seq 200); do grep -q "listening on" "$out/serve-$plan.out" && break; sleep 0.2; done
        addr=$(grep -o 'http://[0-9.:]*' "$out/serve-$plan.out" | head -1 | sed 's|http://||')
        "$loadgen" --addr "$addr" --rows "$data/rows.tsv" --rows-per-request 256 --duration-s 2 closed --connections 2 > /dev/null
        curl -s "http://$addr/metrics" > "$out/metrics-before-$plan-$round.txt"
        res=$("$loadgen" --addr "$addr" --rows "$data/rows.tsv" --rows-per-request 256 \
            --duration-s "$seconds" --server-pid "$pid" open --rate "$rate")
        curl -s "http://$addr/metrics" > "$out/metrics-$plan-$round.txt"
        kill -TERM $pid; wait $pid || true
        python3 - "$plan" "$round" "$res" "$out/metrics-before-$plan-$round.txt" "$out/metrics-$plan-$round.txt" <<'PY' | tee -a "$out/sharded.jsonl"
import json, sys
plan, rnd, res = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
def read(path):
    m = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
    return m
a, b = read(sys.argv[4]), read(sys.argv[5])
d = lambda k: b.get(k, 0.0) - a.get(k, 0.0)
batches = d("towerrec_serve_batch_rows_count")
out = {"plan": plan, "round": rnd, "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"],
       "ok_requests_per_s": res["ok_requests_per_s"], "statuses": res["statuses"], "batches": batches,
       "rows_per_batch": d("towerrec_serve_batch_rows_sum") / batches}
for link in ("intra_host", "cross_host"):
    out[f"lookup_{link}_bytes_per_batch"] = d(f'towerrec_serve_bytes_total{{link="{link}",what="lookup"}}') / batches
print(json.dumps(out))
PY
    done
done
echo "raw: $out"
