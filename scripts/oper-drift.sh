#!/usr/bin/env bash
# Access-profile drift and re-planning (docs/OPER.md): the Zipf config with its hot
# rows moving every WINDOW samples (data.zipf_rotate_every), 2 hosts x 2 ranks. Plans
# OPER from the first window's profile, then for each window rates that plan and a
# fresh one under the window's profile (OPER's model: embedding traffic per iteration)
# and says when the old plan costs more than THRESHOLD (default 1.10) times the fresh
# one. Then moves rows: trains the first window with the first plan, stops with a
# checkpoint, and resumes on the second window with its fresh plan.
#   scripts/oper-drift.sh [WINDOWS=4] [WINDOW=50000]
set -euo pipefail
windows=${1:-4}
window=${2:-50000}
threshold=${THRESHOLD:-1.10}
bin=${BIN:-target/release/towerrec}
cfg=${CONFIG:-bench/oper/speed.toml}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
data=(--set "data.zipf_rotate_every=$window" --set "data.train_samples=$((windows * window))")
topo=(--hosts 2 --ranks-per-host 2)
traffic() { sed -n 's/^embedding traffic \([0-9.]*\) MB per iteration.*/\1/p' "$1"; }
echo "| window | traffic of the first plan (MB/iter) | of a fresh plan | ratio | re-plan? |"
echo "|---:|---:|---:|---:|---|"
for k in $(seq 0 $((windows - 1))); do
    "$bin" profile --config "$cfg" "${data[@]}" --skip-samples $((k * window)) --max-samples "$window" \
        --quiet --out "$out/w$k.profile" >/dev/null
    "$bin" plan --config "$cfg" "${data[@]}" "${topo[@]}" --strategy oper --profile "$out/w$k.profile" \
        --output "$out/p$k.json" 2>"$out/fresh.log"
    "$bin" plan --config "$cfg" "${data[@]}" "${topo[@]}" --rate "$out/p0.json" \
        --profile "$out/w$k.profile" 2>"$out/old.log"
    python3 -c "
old, fresh, t = float('$(traffic "$out/old.log")'), float('$(traffic "$out/fresh.log")'), float('$threshold')
print(f'| $k | {old:.3f} | {fresh:.3f} | {old / fresh:.2f} | {\"yes\" if old > t * fresh else \"no\"} |')"
done
# Moving rows is a checkpoint and a resume with the new plan (checkpoints hold whole
# tables, loaded into any plan bit for bit: cargo test -p towerrec-train --test suite distributed::).
steps=$((window / 4096))
"$bin" train --config "$cfg" "${data[@]}" "${topo[@]}" --plan "$out/p0.json" --set train.max_steps=$((2 * steps)) \
    --stop-after "$steps" --quiet --out "$out/run" >/dev/null
"$bin" train --resume "$out/run" "${topo[@]}" --plan "$out/p1.json" --quiet | tail -1
