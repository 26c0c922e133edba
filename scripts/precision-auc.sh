#!/usr/bin/env bash
# AUC of each reduced-precision setting against fp32 (docs/ACCURACY.md, "Reduced
# precision"), on the Criteo and Avazu samples and MovieLens-100k, 5 seeds; one CSV
# row per run:
#   scripts/precision-auc.sh [CSV=target/precision-auc/results.csv]
# Then the table: per data set and setting, the median over seeds of the per-seed AUC
# difference against fp32 (same seed), its spread (min..max), and fp32's own spread:
#   python3 scripts/precision_auc_table.py CSV
#
# The settings, fixed before the first measurement:
# - models and training: the examples' (examples/criteo.toml, avazu.toml,
#   movielens.toml) with their encodings (hashing), shuffle off; only train.seed
#   changes by seed. Splits as scripts/vocab-auc.sh's: Criteo's last 2,000 rows,
#   Avazu's last 20%, MovieLens by time (the last 20,001 ratings).
# - every run on an in-process cluster of 2 hosts x 2 ranks (one compute thread each),
#   the greedy plan, so that the exchanges run and quantized communication applies.
# - variants (VARIANTS, default "fp32 qcomms"):
#     fp32         nothing reduced;
#     qcomms       [cluster.qcomms] forward = "fp16", backward = "bf16" (the DMT
#                  paper's strong baseline);
#     fp16-tables  model.table_precision = "fp16" (stochastic rounding);
#     bf16-tables  model.table_precision = "bf16";
#     bf16-dense   (added with bf16 dense layers, beside the others)
#                  model.dense_precision = "bf16" (the portable path);
#     int8         (added with int8 tables, beside the others) each seed trained in fp32
#                  in one process (--threads 2; int8 tables are for one process), then
#                  `towerrec eval` of its checkpoint ("int8-base") and of the checkpoint
#                  `towerrec quantize` makes of it ("int8"): the same model, only the
#                  tables' storage differs.
# Environment: TOWERREC (binary), SEEDS (default 5), RUNS (run directories).
set -euo pipefail
cd "$(dirname "$0")/.."
csv=${1:-target/precision-auc/results.csv}
out=$(dirname "$csv")
runs=${RUNS:-$out/runs}
bin=${TOWERREC:-${CARGO_TARGET_DIR:-target}/release/towerrec}
seeds=${SEEDS:-5}
variants=${VARIANTS:-fp32 qcomms}
[ -x "$bin" ] || { echo "no $bin: cargo build --release first" >&2; exit 1; }
mkdir -p "$runs" "$out"
source scripts/auc-data.sh
declare -A setting=([fp32]=''
    [qcomms]='cluster.qcomms={forward="fp16",backward="bf16"}'
    [fp16-tables]='model.table_precision="fp16"'
    [bf16-tables]='model.table_precision="bf16"'
    [bf16-dense]='model.dense_precision="bf16"')
common=(--threads 1 --hosts 2 --ranks-per-host 2 --quiet --overwrite --set train.eval_every=0)
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) | $(git rev-parse --short HEAD) | $($bin --version)" >"$out/machine.txt"
[ -f "$csv" ] || echo "data,variant,seed,auc,logloss" >"$csv"
# One eval's AUC and log loss as a CSV row keyed $2.
eval_row() {
    "$bin" eval --checkpoint "$1" >"$out/eval.json"
    python3 - "$out/eval.json" "$2" >>"$csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]},{s['auc']:.6f},{s['logloss']:.6f}")
PY
}
for data in criteo avazu movielens; do
    for variant in $variants; do
        if [ "$variant" = int8 ]; then
            for seed in $(seq 0 $((seeds - 1))); do
                grep -q "^$data,int8,$seed," "$csv" && continue
                dir="$runs/$data-int8-$seed"
                "$bin" train --config "${cfg[$data]}" --threads 2 --quiet --overwrite \
                    --set train.eval_every=0 --out "$dir" \
                    --set "data.split=${split[$data]}" --set train.seed=$seed
                "$bin" quantize --checkpoint "$dir" --out "$dir/int8.safetensors" >/dev/null
                sed -i "/^$data,int8-base,$seed,/d" "$csv"
                eval_row "$dir" "$data,int8-base,$seed"
                eval_row "$dir/int8.safetensors" "$data,int8,$seed"
                rm -f "$dir/checkpoint.safetensors" "$dir/int8.safetensors"
            done
            continue
        fi
        [ -n "${setting[$variant]+set}" ] || { echo "unknown variant $variant" >&2; exit 1; }
        extra=()
        [ -n "${setting[$variant]}" ] && extra=(--set "${setting[$variant]}")
        for seed in $(seq 0 $((seeds - 1))); do
            key="$data,$variant,$seed"
            grep -q "^$key," "$csv" && continue
            dir="$runs/$data-$variant-$seed"
            "$bin" train --config "${cfg[$data]}" "${common[@]}" --out "$dir" \
                --set "data.split=${split[$data]}" "${extra[@]}" --set train.seed=$seed
            python3 - "$dir/summary.json" "$key" >>"$csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]},{s['auc']:.6f},{s['logloss']:.6f}")
PY
            rm -f "$dir/checkpoint.safetensors"
        done
    done
done
echo "wrote $csv"
