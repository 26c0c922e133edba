#!/usr/bin/env bash
# Bytes per step of the flat output distribution against SPTT's two steps, for the
# same table placement (a tower plan with and without its towers), on the quickstart
# model (its row-wise Adagrad rules out column-wise tables), 2 hosts x 2 in-process
# ranks. Usage: scripts/sptt-bytes.sh [STRATEGY...]
set -euo pipefail
bin=${TOWERREC:-target/release/towerrec}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for strategy in "${@:-table-wise row-wise}"; do
  for s in $strategy; do
    "$bin" plan --hosts 2 --ranks-per-host 2 --towers 2 --strategy "$s" --output "$out/$s-sptt.json" 2>/dev/null
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p.pop('towers'); json.dump(p, open(sys.argv[2],'w'))" \
      "$out/$s-sptt.json" "$out/$s-flat.json"
    for mode in flat sptt; do
      "$bin" train --hosts 2 --ranks-per-host 2 --plan "$out/$s-$mode.json" --max-steps 20 \
        --set data.train_samples=5120 --set data.eval_samples=1000 --quiet --out "$out/run-$s-$mode" >/dev/null 2>&1
      python3 - "$out/run-$s-$mode/summary.json" "$s" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
emb = ["output_dist", "tower_intra", "tower_peer"]
intra = sum(b[p]["intra_host"] for p in emb) / 1e3
cross = sum(b[p]["cross_host"] for p in emb) / 1e3
print(f"| {sys.argv[2]} | {sys.argv[3]} | {intra:.1f} | {cross:.1f} | {s['auc']:.6f} | {s['logloss']:.6f} |")
PY
    done
  done
done
