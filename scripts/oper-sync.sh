#!/usr/bin/env bash
# OPER's local-aggregated sparse AllReduce against a dense AllReduce of the same
# replicated rows and an AllGather-based sparse one (docs/OPER.md), on the emulated
# cluster (2 hosts x 2 MPI ranks, cross-host links shaped to RATE): the same OPER plan
# trained with [cluster] replica_sync = sparse, dense and all_gather, alternated
# ROUNDS times. Needs root, OpenMPI and a release build with --features mpi.
#   scripts/oper-sync.sh [ROUNDS=3] [RATE=1gbit]
# PLANS (environment; default "training:5% inference:20%") are the OPER plans, as
# MODE:EXTRA; CONFIG (default bench/oper/speed.toml) the model. Prints per run the
# sync's time per step (the slowest rank's time inside the sync's collectives) and
# its bytes per step, then per plan and mode the medians and the ratio to dense.
set -euo pipefail
rounds=${1:-3}
rate=${2:-1gbit}
bin=${BIN:-target/release/towerrec}
cfg=${CONFIG:-bench/oper/speed.toml}
plans=${PLANS:-training:5% inference:20%}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results=$out/results.tsv
: >"$results"
"$bin" profile --config "$cfg" --quiet --out "$out/train.profile" >/dev/null
for p in $plans; do
    "$bin" plan --config "$cfg" --hosts 2 --ranks-per-host 2 --strategy oper --profile "$out/train.profile" \
        --mode "${p%%:*}" --extra-memory "${p##*:}" --output "$out/$p.json" 2>/dev/null
done
for r in $(seq "$rounds"); do
    for p in $plans; do
        for sync in sparse dense all_gather; do
            run="$out/run"
            scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate "$rate" -- \
                "$bin" train --backend mpi --config "$cfg" --plan "$out/$p.json" \
                --set "cluster.replica_sync=\"$sync\"" --set train.eval_every=0 \
                --set data.eval_samples=4096 --quiet --out "$run" --overwrite >"$out/log" 2>&1 ||
                { cat "$out/log"; exit 1; }
            python3 - "$run/summary.json" "$p" "$sync" "$results" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = s["cluster"]
ms = max(dict((k, v) for k, v in c["collective_ms_per_step_by_rank"])["sparse_grad_sync"])
b = {p["phase"]: p for p in c["bytes_per_step"]}["sparse_grad_sync"]
mb = (b["intra_host"] + b["cross_host"]) / 1e6
line = f'{sys.argv[2]}\t{sys.argv[3]}\t{ms:.2f}\t{mb:.3f}\t{b["cross_host"] / 1e6:.3f}\t{s["steady_train_samples_per_sec"]:.0f}'
print(line.replace("\t", "  "))
open(sys.argv[4], "a").write(line + "\n")
PY
        done
    done
done
python3 - "$results" <<'PY'
import sys, statistics as st
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
print("| plan | replica_sync | sync ms/step (median) | dense / this | MB/step | cross-host MB/step | steady train samples/s |")
print("|---|---|---:|---:|---:|---:|---:|")
for plan in dict.fromkeys(r[0] for r in rows):
    med = {m: [st.median(float(r[i]) for r in rows if r[0] == plan and r[1] == m) for i in range(2, 6)]
           for m in dict.fromkeys(r[1] for r in rows)}
    for m, (ms, mb, cross, sps) in med.items():
        print(f"| {plan} | {m} | {ms:.2f} | {med['dense'][0] / ms:.2f} | {mb:.3f} | {cross:.3f} | {sps:,.0f} |")
PY
