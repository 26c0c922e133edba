#!/usr/bin/env bash
# Samples/s and cross-host bytes of the hierarchical dense gradient sync against the
# flat one (docs/DMT.md), on the multi-hot config, 2 hosts x 2 MPI ranks on the emulated
# cluster (cross-host links shaped to RATE), alternated ROUNDS times. Needs root,
# OpenMPI and a release build with --features mpi.
#   scripts/dense-sync-speed.sh [ROUNDS=3] [RATE=1gbit]
set -euo pipefail
rounds=${1:-3}
rate=${2:-1gbit}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    for m in flat hierarchical; do
        scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate "$rate" -- \
            target/release/towerrec train --backend mpi --config bench/multihot.toml \
            --max-steps 8 --set train.eval_every=0 --set data.train_samples=8192 \
            --set data.eval_samples=256 --set "cluster.dense_sync=\"$m\"" --quiet \
            --out "$out/$m-$r" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        python3 - "$out/$m-$r/summary.json" "$m" "$r" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
d = b["dense_grad_sync"]
print(f"{sys.argv[2]:13} round {sys.argv[3]}: {s['steady_train_samples_per_sec']:7.0f} samples/s (steady)  "
      f"dense sync MB per step (all ranks): intra {d['intra_host']/1e6:.2f}, cross {d['cross_host']/1e6:.2f}")
PY
    done
done
