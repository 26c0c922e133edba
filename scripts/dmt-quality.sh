#!/usr/bin/env bash
# DMT model quality (docs/DMT.md, "Table 4/5/6 analogue"): every training run of the
# three tables, one CSV row per run.
#   scripts/dmt-quality.sh [CSV=target/dmt-quality/results.csv]
# Then print the tables from the CSV:
#   cargo run --release -p towerrec --example dmt_tables -- CSV
#
# Table 4: flat DLRM and DCN against DMT-DLRM (c = 1, p = 0, D = N/2) and DMT-DCN
#   (one cross layer, D = N and D = N/2) with 2, 4 and 8 towers, on the Criteo and
#   Avazu samples and MovieLens-100k as CTR (the examples' models, N = 16).
# Table 5: 8-tower DMT-DLRM on Criteo at N = 32, D = 16, 8, 4, 2 (compression 2 to
#   16), with a flat N = 32 reference; and the cross-host bytes of SPTT's peer step
#   (tower_peer) on 8 hosts x 1 in-process rank against pass-through towers.
# Table 6: 8-tower DMT-DLRM with the naive strided towers against the Tower
#   Partitioner's (coherent and diverse), on Criteo and Avazu; the partitions come
#   from a flat DLRM trained with seed 0 (not one of the compared seeds).
# Training length: Table 4's DLRM rows on MovieLens (1, 2, 4, 8 epochs) and Criteo
#   (1, 2, 4 epochs).
#
# Every run trains in one process (one thread; JOBS runs at a time), its data split
# fixed by the example config; only train.seed changes between seeds. A run whose
# summary.json exists is not repeated, so an interrupted call resumes. Environment:
# TOWERREC (binary), JOBS (default 2), SEEDS (Tables 4 and 5, default 9), TP_SEEDS
# (Table 6, default 15), RUNS (run directories, default beside the CSV), BIAS_INIT
# (the Tower Modules' `bias_init`, default normal; give another CSV path with it, since
# finished runs are found by name: BIAS_INIT=zero scripts/dmt-quality.sh
# target/dmt-quality-zero/results.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
csv=${1:-target/dmt-quality/results.csv}
runs=${RUNS:-$(dirname "$csv")/runs}
bin=${TOWERREC:-${CARGO_TARGET_DIR:-target}/release/towerrec}
jobs=${JOBS:-2}
bias_init=${BIAS_INIT:-normal}
seeds=${SEEDS:-9}
tp_seeds=${TP_SEEDS:-15}
[ -x "$bin" ] || { echo "no $bin: cargo build --release first" >&2; exit 1; }
mkdir -p "$runs" "$(dirname "$csv")"
if [ ! -f target/data/ml100k.csv ]; then
    python3 scripts/movielens_to_csv.py ../shared/data/ml-100k target/data/ml100k.csv
fi

# Each dataset's example configs, and the overrides that make the flat DCN of
# examples/dcn.toml from a DLRM example.
declare -A dlrm_cfg=([criteo]=examples/criteo.toml [avazu]=examples/avazu.toml
    [movielens]=examples/movielens.toml)
declare -A bottom=([criteo]=512,256,64 [avazu]=64 [movielens]=32)
dcn_of_dlrm=(--set 'model.kind="dcn"' --set 'model.bottom_mlp=[]' --set model.cross_layers=3
    --set model.cross_rank=64 --set 'model.top_mlp=[256,128,1]')
common=(--threads 1 --hosts 1 --ranks-per-host 1 --quiet --overwrite --set train.eval_every=0)

# One run: KEY, then its CSV fields (data model n towers module d assignment seed),
# then `--` and its towerrec train arguments.
jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
job() {
    local key=$1
    shift 10
    printf '%s\t%s\n' "$key" "$(printf '%q ' "$@")" >>"$jobs_file"
}
fields=()
add() { # KEY DATA MODEL N TOWERS MODULE D ASSIGNMENT SEED -- ARGS...
    fields+=("$1,$2,$3,$4,$5,$6,$7,$8,$9")
    job "$@"
}
base() { # DATA MODEL: the flat model's config arguments
    if [ "$2" = dlrm ]; then
        echo "--config ${dlrm_cfg[$1]}"
    elif [ "$1" = criteo ]; then
        echo "--config examples/dcn.toml"
    else
        echo "--config ${dlrm_cfg[$1]} ${dcn_of_dlrm[*]}"
    fi
}
dlrm_towers() { # DATA TOWERS-SPEC D
    echo "--set model.towers={module=\"dlrm\",$2,d=$3,c=1,p=0,bias_init=\"$bias_init\"} --set model.bottom_mlp=[${bottom[$1]},$3]"
}

# Table 4.
for data in criteo avazu movielens; do
    for s in $(seq "$seeds"); do
        for model in dlrm dcn; do
            read -ra b <<<"$(base $data $model)"
            add "$data-$model-flat-s$s" $data $model 16 0 none 0 - "$s" -- "${b[@]}" \
                --set train.seed="$s"
        done
        for t in 2 4 8; do
            read -ra b <<<"$(base $data dlrm) $(dlrm_towers $data count=$t 8)"
            add "$data-dlrm-t$t-d8-s$s" $data dlrm 16 $t dlrm 8 naive "$s" -- "${b[@]}" \
                --set train.seed="$s"
            for d in 16 8; do
                read -ra b <<<"$(base $data dcn)"
                add "$data-dcn-t$t-d$d-s$s" $data dcn 16 $t dcn $d naive "$s" -- "${b[@]}" \
                    --set "model.towers={module=\"dcn\",count=$t,d=$d,cross_layers=1,bias_init=\"$bias_init\"}" \
                    --set train.seed="$s"
            done
        done
    done
done

# Table 5: N = 32.
n32=(--set model.embedding_dim=32)
for s in $(seq "$seeds"); do
    add "criteo-dlrm-n32-flat-s$s" criteo dlrm 32 0 none 0 - "$s" -- --config examples/criteo.toml \
        "${n32[@]}" --set 'model.bottom_mlp=[512,256,64,32]' --set train.seed="$s"
    for d in 16 8 4 2; do
        read -ra b <<<"$(dlrm_towers criteo count=8 $d)"
        add "criteo-dlrm-n32-t8-d$d-s$s" criteo dlrm 32 8 dlrm $d naive "$s" -- \
            --config examples/criteo.toml "${n32[@]}" "${b[@]}" --set train.seed="$s"
    done
done

# Table 4's DLRM rows at other training lengths (the examples' own are above).
for data in movielens criteo; do
    case $data in movielens) lengths="1 4 8" ;; criteo) lengths="2 4" ;; esac
    for e in $lengths; do
        for s in $(seq "$seeds"); do
            read -ra b <<<"$(base $data dlrm)"
            add "$data-dlrm-flat-e$e-s$s" $data dlrm 16 0 none 0 - "$s" -- "${b[@]}" \
                --set train.epochs="$e" --set train.seed="$s"
            for t in 2 4 8; do
                read -ra b <<<"$(base $data dlrm) $(dlrm_towers $data count=$t 8)"
                add "$data-dlrm-t$t-d8-e$e-s$s" $data dlrm 16 $t dlrm 8 naive "$s" -- "${b[@]}" \
                    --set train.epochs="$e" --set train.seed="$s"
            done
        done
    done
done

# Table 6: the partitions first (a flat DLRM of seed 0 per dataset).
for data in criteo avazu; do
    src=$runs/$data-dlrm-flat-tp-source
    if [ ! -f "$runs/$data-partition-diverse.json" ]; then
        read -ra b <<<"$(base $data dlrm)"
        nice "$bin" train "${common[@]}" "${b[@]}" --set train.seed=0 --out "$src" >/dev/null
        for mode in coherent diverse; do
            nice "$bin" partition --checkpoint "$src" --towers 8 --mode "$mode" --threads 1 \
                --out "$runs/$data-partition-$mode.json" 2>/dev/null \
                | tee "$runs/$data-partition-$mode.txt" >&2
        done
        rm -f "$src/checkpoint.safetensors"
    fi
    for s in $(seq "$tp_seeds"); do
        read -ra b <<<"$(base $data dlrm) $(dlrm_towers $data count=8 8)"
        add "$data-dlrm-t8-d8-s$s" $data dlrm 16 8 dlrm 8 naive "$s" -- "${b[@]}" \
            --set train.seed="$s"
        for mode in coherent diverse; do
            file=$(realpath "$runs/$data-partition-$mode.json")
            read -ra b <<<"$(base $data dlrm) $(dlrm_towers $data "file=\"$file\"" 8)"
            add "$data-dlrm-tp-$mode-t8-d8-s$s" $data dlrm 16 8 dlrm 8 "$mode" "$s" -- "${b[@]}" \
                --set train.seed="$s"
        done
    done
done

# Every training run not done yet, JOBS at a time (a key listed twice runs once).
run_one() { # KEY ARGS (quoted)
    local dir=$runs/$1
    [ -f "$dir/summary.json" ] && return 0
    local start end
    start=$(date +%s.%N)
    eval "nice \"$bin\" train \"\${common[@]}\" $2 --out \"$dir.tmp\"" >"$runs/$1.log" 2>&1 \
        || { echo "run $1 failed:" >&2; cat "$runs/$1.log" >&2; return 1; }
    end=$(date +%s.%N)
    rm -f "$dir.tmp/checkpoint.safetensors"
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" \
        "$start" "$end" >"$dir.tmp/seconds"
    rm -rf "$dir" && mv "$dir.tmp" "$dir" && rm -f "$runs/$1.log"
}
sort -u -t$'\t' -k1,1 "$jobs_file" >"$jobs_file.u" && mv "$jobs_file.u" "$jobs_file"
total=$(wc -l <"$jobs_file")
echo "$total training runs ($jobs at a time) in $runs" >&2
n=0
while IFS=$'\t' read -r key args; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$key" "$args" &
    n=$((n + 1))
    [ $((n % 20)) -eq 0 ] && echo "  $n / $total started" >&2
done <"$jobs_file"
wait

# Table 5's bytes: a few steps on 8 hosts x 1 rank, modules inside SPTT.
for d in 0 16 8 4 2; do
    key=criteo-dlrm-n32-t8-d$d-bytes
    if [ "$d" = 0 ]; then
        spec=(--set 'model.towers={module="identity",count=8}'
            --set 'model.bottom_mlp=[512,256,64,32]')
        module=identity
    else
        read -ra spec <<<"$(dlrm_towers criteo count=8 $d)"
        module=dlrm
    fi
    if [ ! -f "$runs/$key/summary.json" ]; then
        nice "$bin" train --config examples/criteo.toml --threads 1 --quiet --overwrite \
            "${n32[@]}" "${spec[@]}" --hosts 8 --ranks-per-host 1 --max-steps 4 \
            --out "$runs/$key" >/dev/null
        rm -f "$runs/$key/checkpoint.safetensors"
    fi
    fields+=("$key,criteo,dlrm,32,8,$module,$d,naive,0")
done

# The CSV: one row per run, in the order listed above.
{
    echo "run,data,model,n,towers,module,d,assignment,seed,epochs,auc,logloss,flops_per_sample,params,dense_params,embedding_params,tower_peer_cross_host_bytes_per_step,seconds"
    printf '%s\n' "${fields[@]}" | awk -F, '!seen[$1]++' | while IFS= read -r f; do
        python3 - "$runs/${f%%,*}" "$f" <<'PY'
import json, os, sys, tomllib
d, f = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(d, "summary.json")))
epochs = tomllib.load(open(os.path.join(d, "config.toml"), "rb"))["train"].get("epochs", 1)
peer = ""
if "cluster" in s:
    b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
    v = float(b["tower_peer"]["cross_host"])
    peer = str(int(v)) if v.is_integer() else repr(v)
secs = os.path.join(d, "seconds")
secs = open(secs).read().strip() if os.path.exists(secs) else ""
print(f"{f},{epochs},{s['auc']:.6f},{s['logloss']:.6f},{s['flops_per_sample']},{s['params']},"
      f"{s['dense_params']},{s['embedding_params']},{peer},{secs}")
PY
    done
} >"$csv.tmp"
mv "$csv.tmp" "$csv"
echo "wrote $(($(wc -l <"$csv") - 1)) rows to $csv" >&2
