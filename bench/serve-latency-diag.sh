#!/usr/bin/env bash
# Where a 256-row request's latency goes at low load (docs/SERVING.md, "Speed"): the
# server with 1 and 2 scoring threads, one request at a time (closed loop, 1
# connection) and open loop at 20 and 100 requests/s; prints p50, p99 and the server's
# CPU milliseconds per request. Needs bench/serve-load.sh's DATA and the release builds.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${DATA:-/tmp/towerrec-serve-bench}
bin=${TOWERREC:-target/release/towerrec}
loadgen=${LOADGEN:-target/release/examples/loadgen}
out=$(mktemp)
for th in 1 2; do
    "$bin" serve --checkpoint "$data/run" --listen 127.0.0.1:0 --threads "$th" --max-wait-ms 0 > "$out" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.2; done
    addr=$(grep -o 'http://[0-9.:]*' "$out" | head -1 | sed 's|http://||')
    for load in "open --rate 20" "open --rate 100" "closed --connections 1"; do
        # shellcheck disable=SC2086
        "$loadgen" --addr "$addr" --rows "$data/rows.tsv" --rows-per-request 256 --duration-s 4 \
            --server-pid "$pid" $load |
            python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'threads': $th, 'load': '$load', 'p50_ms': d['p50_ms'], 'p99_ms': d['p99_ms'], 'server_cpu_ms_per_request': 1000 * d['server_cpu_s'] / d['requests']}))"
    done
    kill -TERM $pid; wait $pid || true
done
rm -f "$out"
