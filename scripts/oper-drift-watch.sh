#!/usr/bin/env bash
# A run that watches its access profile drift and moves its rows (docs/OPER.md, "Drift
# and re-planning"): the Zipf config with its hot rows moving every ROTATE samples, on
# 2 x 2 in-process ranks. OPER plans from the first window of the data; the run checks
# every CHECK steps ([cluster.drift]) and stops at STOP; then it is resumed twice from
# that checkpoint, once with the fresh plan the last check wrote (rows moved) and once
# with the first plan (rows left), and the bytes per step of the two are printed.
#   scripts/oper-drift-watch.sh [ROTATE=196608] [CHECK=12] [STOP=60] [STEPS=96]
set -euo pipefail
rotate=${1:-196608}
check=${2:-12}
stop=${3:-60}
steps=${4:-96}
bin=${BIN:-target/release/towerrec}
cfg=${CONFIG:-bench/oper/speed.toml}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
batch=$(sed -n 's/^batch_size = \([0-9_]*\).*/\1/p' "$cfg" | tr -d _)
data=(--set "data.zipf_rotate_every=$rotate" --set "data.train_samples=$((steps * batch))")
topo=(--hosts 2 --ranks-per-host 2)
"$bin" profile --config "$cfg" "${data[@]}" --max-samples $((check * batch)) --quiet \
    --out "$out/first.profile" >/dev/null
"$bin" plan --config "$cfg" "${data[@]}" "${topo[@]}" --strategy oper --profile "$out/first.profile" \
    --output "$out/first.json" 2>/dev/null
"$bin" train --config "$cfg" "${data[@]}" "${topo[@]}" --plan "$out/first.json" \
    --set "train.max_steps=$steps" --set "cluster.drift={check_every=$check}" \
    --stop-after "$stop" --out "$out/run" 2>&1 | grep -E "^drift|^stopped"
fresh="$out/run/replan-step-$stop.json"
[ -f "$fresh" ] || { echo "no re-plan was written at step $stop: nothing to move" >&2; exit 1; }
cp -r "$out/run" "$out/stay"
for variant in moved stay; do
    plan=$fresh
    [ "$variant" = stay ] && plan="$out/first.json"
    echo "---- resumed at step $stop, rows $variant"
    "$bin" train --resume "$out/$( [ "$variant" = moved ] && echo run || echo stay )" "${topo[@]}" \
        --plan "$plan" 2>&1 | grep -E "^drift|output_dist|sparse_grad_sync|^final"
done
