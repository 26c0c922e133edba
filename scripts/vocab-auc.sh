#!/usr/bin/env bash
# AUC with hashing against vocabularies (docs/DATA.md, "Hashing or a vocabulary"), on
# the Criteo and Avazu samples and MovieLens-100k, with shuffling off and on; one CSV
# row per run:
#   scripts/vocab-auc.sh [CSV=target/vocab-auc/results.csv]
# Then the table, per data set, encoding and shuffle setting: the median over seeds
# of the per-seed AUC difference against hashing (same seed, same shuffle), its
# spread (min..max), and the spread of hashing's own AUC over the seeds:
#   python3 scripts/vocab_auc_table.py CSV
#
# The settings, fixed before the first measurement:
# - models and training: the examples' (examples/criteo.toml, avazu.toml,
#   movielens.toml), in one process on one thread; only train.seed changes by seed.
# - splits: Criteo's last 2,000 rows evaluate (the example's tail split); Avazu by file
#   order too (its last 20%; the example's random split is replaced); MovieLens by
#   time, `split = { kind = "column", column = "timestamp", eval_from = 889237269 }`:
#   the timestamp of the 80,000th of the 100,000 ratings in time order (shared with
#   the next one), so 79,999 ratings train and the last 20,001 evaluate.
# - encodings: hashing into the example's `rows`, and vocabularies built on each
#   training part with min_count = 2 and min_count = 5 (row 0 for everything else).
# - shuffle: off (file order) and on (train.shuffle = true, the default buffer of
#   65,536 records: every training row of the Criteo and Avazu samples, 8,000 and 7,999; 82%
#   of MovieLens's 79,999, so not a full shuffle there).
# Environment: TOWERREC (binary), SEEDS (default 5), RUNS (run directories).
set -euo pipefail
cd "$(dirname "$0")/.."
csv=${1:-target/vocab-auc/results.csv}
out=$(dirname "$csv")
runs=${RUNS:-$out/runs}
bin=${TOWERREC:-${CARGO_TARGET_DIR:-target}/release/towerrec}
seeds=${SEEDS:-5}
[ -x "$bin" ] || { echo "no $bin: cargo build --release first" >&2; exit 1; }
mkdir -p "$runs" "$out"
source scripts/auc-data.sh
common=(--threads 1 --hosts 1 --ranks-per-host 1 --quiet --overwrite --set train.eval_every=0)
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) | $(git rev-parse --short HEAD) | $($bin --version)" >"$out/machine.txt"
[ -f "$csv" ] || echo "data,encoding,shuffle,seed,auc,logloss,embedding_params" >"$csv"
for data in criteo avazu movielens; do
    for enc in hash vocab2 vocab5; do
        vocab=()
        conf=${cfg[$data]}
        if [ "$enc" != hash ]; then
            v="$out/$data-$enc.vocab"
            [ -f "$v" ] || "$bin" vocab --config "${cfg[$data]}" --set "data.split=${split[$data]}" \
                --min-count "${enc#vocab}" --out "$v" >"$out/$data-$enc.vocab.log"
            vocab=(--set "data.vocab=\"$(realpath "$v")\"")
            # The vocabulary gives the table sizes, which the examples' own would
            # contradict: Criteo's table_rows is emptied; a CSV example is copied
            # without its `rows` (its data path made absolute for the copy).
            if [ "$data" = criteo ]; then
                vocab+=(--set "data.table_rows=[]")
            else
                rel=$(sed -n 's/^path = "\(.*\)".*/\1/p' "${cfg[$data]}")
                conf=$out/$data-vocab.toml
                sed -E 's/, rows = [0-9]+//' "${cfg[$data]}" >"$conf"
                vocab+=(--set "data.path=\"$(cd examples && realpath -m "$rel")\"")
            fi
        fi
        for shuffle in false true; do
            for seed in $(seq 0 $((seeds - 1))); do
                key="$data,$enc,$shuffle,$seed"
                grep -q "^$key," "$csv" && continue
                dir="$runs/$data-$enc-$shuffle-$seed"
                "$bin" train --config "$conf" "${common[@]}" --out "$dir" \
                    --set "data.split=${split[$data]}" "${vocab[@]}" \
                    --set train.shuffle=$shuffle --set train.seed=$seed
                python3 - "$dir/summary.json" "$key" "$dir/config.toml" >>"$csv" <<'PY'
import json, sys, re
s = json.load(open(sys.argv[1]))
rows = s.get("embedding_params", 0)
print(f"{sys.argv[2]},{s['auc']:.6f},{s['logloss']:.6f},{rows}")
PY
                # Keep the summary and metrics; a hashed Criteo checkpoint is ~0.5 GB.
                rm -f "$dir/checkpoint.safetensors"
            done
        done
    done
done
echo "wrote $csv"
