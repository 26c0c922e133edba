#!/usr/bin/env bash
# OPER's Table 2 analogue (docs/OPER.md): embedding traffic per iteration of OPER plans
# at 0, 1, 5 and 20% extra memory, by the cost model and by the runtime's traffic
# accounting, for each config given (default: the Zipf(1.05) speed config), on HOSTS x
# RANKS_PER_HOST in-process ranks (default 2 x 2). Also the table-wise plan, for reference.
#   scripts/oper-table2.sh [CONFIG...]     (STEPS, MODE, EXTRAS, PROFILE_SAMPLES, HOSTS,
#                                           RANKS_PER_HOST from the environment)
# EXTRAS: the extra-memory percentages (default "0 1 5 20"). PROFILE_SAMPLES: profile
# only the first this many training samples (synthetic configs), so that the runs also
# read samples the plan never saw.
# Per config: profile its training data, plan, train STEPS steps (default 20) with the
# plan, and print one Markdown row per plan: the model's forward MB per iteration, the
# runtime's output-distribution MB per step (forward and backward, summed over ranks),
# the cross-host part, the sparse AllReduce MB per step, the extra memory, and the
# most any placement with that extra memory could cut the model's traffic (reads
# spread evenly over the ranks; `towerrec plan` prints it).
set -euo pipefail
bin=${BIN:-target/release/towerrec}
steps=${STEPS:-20}
mode=${MODE:-training}
read -r -a extras <<<"${EXTRAS:-0 1 5 20}"
profile_set=()
[[ -z ${PROFILE_SAMPLES:-} ]] || profile_set=(--set data.train_samples="$PROFILE_SAMPLES")
configs=("$@")
((${#configs[@]})) || configs=(bench/dmt/speed.toml)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
topo=(--hosts "${HOSTS:-2}" --ranks-per-host "${RANKS_PER_HOST:-2}")
echo "| config | plan | extra memory | model fwd MB/iter | runtime fwd+bwd MB/step | of which cross-host | sparse sync MB/step | model x2 / runtime | best cut at that memory |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for cfg in "${configs[@]}"; do
    name=$(basename "$cfg" .toml)
    "$bin" profile --config "$cfg" "${profile_set[@]}" --quiet --out "$out/$name.profile" >/dev/null
    plans=("table-wise:0")
    for e in "${extras[@]}"; do plans+=("oper:$e"); done
    for p in "${plans[@]}"; do
        strategy=${p%%:*}
        extra=${p##*:}
        plan="$out/$name-$strategy-$extra.json"
        "$bin" plan --config "$cfg" "${topo[@]}" --strategy "$strategy" --profile "$out/$name.profile" \
            --extra-memory "$extra%" --mode "$mode" --output "$plan" 2>"$out/plan.log" >/dev/null ||
            { cat "$out/plan.log"; exit 1; }
        model=$(sed -n 's/^embedding traffic \([0-9.]*\) MB per iteration.*extra memory \([0-9.]*\)% of the tables$/\1 \2/p' "$out/plan.log")
        best=$(sed -n 's/^copies cut.*no placement cuts it by more than \([0-9.]*\)x.*/\1×/p; s/^copies cut.*a placement can leave none.*/all/p' "$out/plan.log")
        run="$out/run"
        "$bin" train --config "$cfg" --plan "$plan" "${topo[@]}" --set train.max_steps="$steps" \
            --set train.eval_every=0 --quiet --out "$run" --overwrite >"$out/train.log" 2>&1 ||
            { cat "$out/train.log"; exit 1; }
        python3 - "$run/summary.json" "$name" "$strategy" "$extra" $model "${best:-—}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, strategy, extra, model_mb, used, best = sys.argv[2:8]
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
out = b["output_dist"]
total = (out["intra_host"] + out["cross_host"]) / 1e6
cross = out["cross_host"] / 1e6
sync = (b["sparse_grad_sync"]["intra_host"] + b["sparse_grad_sync"]["cross_host"]) / 1e6
ratio = f"{2 * float(model_mb) / total:.2f}" if total > 0 else "—"
print(f"| {name} | {strategy} | {extra}% (used {float(used):.2f}%) | {float(model_mb):.3f} | {total:.3f} | {cross:.3f} | {sync:.3f} | {ratio} | {best} |")
PY
    done
done
