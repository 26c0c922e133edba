#!/usr/bin/env bash
# OPER inside DMT towers (docs/OPER.md, "Replicas under DMT towers"): the same tables
# planned three ways on 2 hosts x 2 ranks, and each plan's bytes per step by phase,
# within and across hosts, from the runtime's traffic accounting:
#   oper         OPER over all four ranks, hot rows copied on every rank (flat exchange);
#   oper-towers  two one-host towers, each host's tables planned by OPER on its two
#                ranks, copies on that host only (SPTT exchange);
#   table-wise-towers  the same towers, whole tables (SPTT, no copies);
#   greedy-towers      the same towers, whole tables placed by the greedy cost planner;
#   row-wise-towers    the same towers, every table split by rows over its host's ranks
#                      (SPTT; step d sums a partial row per sample from every shard);
#   dmt-c4-oper-towers, dmt-c4-table-wise-towers  the two tower plans as DMT-DLRM with
#                      its Tower Module at compression 4 (c = 1, p = 0, D = dim / 4).
#   scripts/oper-towers.sh [CONFIG] [ROUNDS]
# CONFIG defaults to bench/dmt/speed.toml (26 Zipf(1.05) tables of dim 64, global batch
# 4096). With ROUNDS (needs root, OpenMPI and a release build with --features mpi) the
# plans also train on the emulated cluster (scripts/emulated-cluster.sh, 1 Gbit/s
# between hosts), alternated ROUNDS times, and the samples/s are printed. STEPS
# (default 20) and EXTRA (default 5%) from the environment; BIN names the binary.
set -euo pipefail
bin=${BIN:-target/release/towerrec}
cfg=${1:-bench/dmt/speed.toml}
rounds=${2:-0}
steps=${STEPS:-20}
extra=${EXTRA:-5%}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
topo=(--hosts 2 --ranks-per-host 2)
"$bin" profile --config "$cfg" --quiet --out "$out/p.profile" >/dev/null
plan() { # NAME ARGS...
    local name=$1
    shift
    "$bin" plan --config "$cfg" "${topo[@]}" "$@" --output "$out/$name.json" \
        >/dev/null 2>"$out/plan.log" || { cat "$out/plan.log"; exit 1; }
}
plan oper --strategy oper --profile "$out/p.profile" --extra-memory "$extra"
plan oper-towers --strategy oper --profile "$out/p.profile" --extra-memory "$extra" --towers 2
plan table-wise-towers --strategy table-wise --towers 2
plan row-wise-towers --strategy row-wise --towers 2
plan greedy-towers --strategy greedy --towers 2
dim=$(python3 -c "import sys, tomllib; print(tomllib.load(open(sys.argv[1], 'rb'))['model']['embedding_dim'])" "$cfg")
dmt=(--set "model.towers={module=\"dlrm\",count=2,d=$((dim / 4)),c=1,p=0}" --set "model.bottom_mlp=[64,$((dim / 4))]")
variants=(oper oper-towers table-wise-towers greedy-towers row-wise-towers dmt-c4-oper-towers dmt-c4-table-wise-towers)
args() { # VARIANT: its plan and model arguments
    case $1 in
    dmt-c4-*) echo "--plan $out/${1#dmt-c4-}.json" ;;
    *) echo "--plan $out/$1.json" ;;
    esac
}
report() { # SUMMARY VARIANT
    python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
cells = []
for ph in ["input_dist", "output_dist", "tower_intra", "tower_peer", "sparse_grad_sync", "dense_grad_sync"]:
    p = b.get(ph, {"intra_host": 0, "cross_host": 0})
    cells.append(f"{p['intra_host'] / 1e6:.3f} / {p['cross_host'] / 1e6:.3f}")
print(f"| {sys.argv[2]} | " + " | ".join(cells) + f" | {s['steady_train_samples_per_sec']:.0f} |")
PY
}
echo "bytes per step, all ranks, MB within / across hosts ($steps steps in-process, $cfg, extra memory $extra):"
echo "| plan | input_dist | output_dist | tower_intra | tower_peer | sparse_grad_sync | dense_grad_sync | steady samples/s (in-process) |"
echo "|---|---|---|---|---|---|---|---:|"
extra_args() { # VARIANT
    if [[ $1 == dmt-c4-* ]]; then printf '%s\n' "${dmt[@]}"; fi
}
for v in "${variants[@]}"; do
    mapfile -t more < <(extra_args "$v")
    # shellcheck disable=SC2046
    "$bin" train --config "$cfg" $(args "$v") "${more[@]}" "${topo[@]}" --set train.max_steps="$steps" \
        --set train.eval_every=0 --quiet --out "$out/run-$v" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
    report "$out/run-$v/summary.json" "$v"
done
((rounds > 0)) || exit 0
echo
echo "emulated cluster, 1 Gbit/s between hosts, $rounds rounds alternated (steady train samples/s: every step but the first):"
for r in $(seq "$rounds"); do
    line="round $r:"
    for v in "${variants[@]}"; do
        run="$out/mpi-$v-$r"
        mapfile -t more < <(extra_args "$v")
        # shellcheck disable=SC2046
        scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
            "$bin" train --backend mpi --config "$cfg" $(args "$v") "${more[@]}" \
            --set train.max_steps="$steps" --set train.eval_every=0 --quiet --out "$run" \
            >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        sps=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_train_samples_per_sec']))" "$run/summary.json")
        line="$line $v $sps"
        echo "$r $v $sps" >>"$out/speed.tsv"
    done
    echo "$line"
done
python3 - "$out/speed.tsv" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, v, s = line.split()
    runs.setdefault(v, []).append(float(s))
base = statistics.median(runs["oper"])
for v, xs in runs.items():
    m = statistics.median(xs)
    print(f"{v}: median {m:.0f} samples/s, {m / base:.2f}x oper")
PY
