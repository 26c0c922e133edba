#!/usr/bin/env bash
# DMT-DLRM's slow start (docs/DMT.md, "Model quality"): flat DLRM against 2-tower
# DMT-DLRM (c = 1, p = 0, D = 8) with the modules' biases drawn (`bias_init =
# "normal"`) and zero (`bias_init = "zero"`, the DLRM module's default), on
# MovieLens-100k, the Criteo and the Avazu samples, SEEDS seeds (default 5), one
# process, one thread, two runs at a time. Prints one line per run (data variant seed
# auc) and the medians. Build first:
#   cargo build --release && scripts/dmt-bias-init.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TOWERREC:-target/release/towerrec}
seeds=${SEEDS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -f target/data/ml100k.csv ] ||
    python3 scripts/movielens_to_csv.py ../shared/data/ml-100k target/data/ml100k.csv >&2
declare -A cfg=([movielens]=examples/movielens.toml [criteo]=examples/criteo.toml
    [avazu]=examples/avazu.toml)
declare -A bottom=([movielens]=32 [criteo]=512,256,64 [avazu]=64)
run() { # DATA VARIANT SEED
    local d=$1 v=$2 s=$3 extra=()
    case $v in
    flat) ;;
    drawn | zero)
        extra=(--set "model.towers={module=\"dlrm\",count=2,d=8,c=1,p=0,bias_init=\"${v/drawn/normal}\"}"
            --set "model.bottom_mlp=[${bottom[$d]},8]") ;;
    esac
    "$bin" train --config "${cfg[$d]}" --threads 1 --hosts 1 --ranks-per-host 1 --quiet \
        --set train.eval_every=0 --set train.seed="$s" "${extra[@]}" \
        --out "$out/$d-$v-$s" >/dev/null
    python3 -c "import json,sys; print(sys.argv[1], sys.argv[2], sys.argv[3], json.load(open(sys.argv[4]))['auc'])" \
        "$d" "$v" "$s" "$out/$d-$v-$s/summary.json" >"$out/$d-$v-$s.line"
}
for d in movielens criteo avazu; do
    for s in $(seq "$seeds"); do
        run "$d" flat "$s" &
        run "$d" drawn "$s"
        wait
        run "$d" zero "$s"
    done
done
cat "$out"/*.line | tee "$out/all.txt"
python3 - "$out/all.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    d, v, s, auc = line.split()
    runs.setdefault((d, v), []).append(float(auc))
for (d, v), aucs in sorted(runs.items()):
    sd = statistics.stdev(aucs) if len(aucs) > 1 else 0.0
    print(f"{d:10} {v:6} median {statistics.median(aucs):.4f} std {sd:.4f} over {len(aucs)} seeds")
PY
