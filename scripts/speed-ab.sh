#!/usr/bin/env bash
# Speed of two towerrec binaries, alternated in one run (old, new, old, new, ...), on
# the cases a change to the runtime must not slow: the quickstart (2 × 2 in-process
# ranks, steady train samples/s), `bench model` on the kaggle-like and multi-hot shapes
# (train and infer, one process), and on the emulated cluster (2 hosts × 2 MPI ranks,
# 1 Gbit/s between hosts) the DMT run (bench/dmt/speed.toml, two towers, DLRM modules
# at compression 2) and the OPER run (bench/oper/speed.toml, OPER's plan at 5% extra
# memory). Prints the machine's CPU, one line per run, then per case the median of
# each binary, the ratio of medians (new / old), and the median and range of the
# per-pair ratios.
#
#   scripts/speed-ab.sh OLD_BINARY NEW_BINARY [PAIRS=5]
#
# The emulated cases need root, OpenMPI and both binaries built with --features mpi;
# CASES (environment) runs a subset, e.g. CASES="quickstart kaggle-train".
set -euo pipefail
old=${1:?usage: scripts/speed-ab.sh OLD_BINARY NEW_BINARY [PAIRS]}
new=${2:?usage: scripts/speed-ab.sh OLD_BINARY NEW_BINARY [PAIRS]}
pairs=${3:-5}
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cases=${CASES:-quickstart kaggle-train kaggle-infer multihot-train multihot-infer dmt oper}
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//' || true)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs; old: $old; new: $new; $pairs pairs"
cluster() { scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- "$@"; }

# Plans made once, by the new binary, and given to both.
if [[ " $cases " == *" dmt "* ]]; then
    "$new" plan --config bench/dmt/speed.toml --hosts 2 --ranks-per-host 2 --towers 2 \
        --strategy table-wise --output "$out/sptt.json" >/dev/null 2>&1
fi
if [[ " $cases " == *" oper "* ]]; then
    "$new" profile --config bench/oper/speed.toml --quiet --out "$out/oper.profile" >/dev/null
    "$new" plan --config bench/oper/speed.toml --hosts 2 --ranks-per-host 2 --strategy oper \
        --profile "$out/oper.profile" --extra-memory 5% --output "$out/oper.json" >/dev/null 2>&1
fi
dmt_towers='--set model.towers={module="dlrm",count=2,d=32,c=1,p=0} --set model.bottom_mlp=[64,32]'

steady() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steady_train_samples_per_sec"])' "$1"; }
bench() { # binary, config, mode
    "$1" bench model --config "$2" --mode "$3" --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["median_samples_per_sec"])'
}
measure() { # case, binary: prints samples/s
    local run=$out/run
    rm -rf "$run"
    case $1 in
    quickstart) "$2" train -q --out "$run" >/dev/null 2>&1 && steady "$run/summary.json" ;;
    kaggle-train) bench "$2" bench/kaggle.toml train ;;
    kaggle-infer) bench "$2" bench/kaggle.toml infer ;;
    multihot-train) bench "$2" bench/multihot.toml train ;;
    multihot-infer) bench "$2" bench/multihot.toml infer ;;
    dmt)
        # shellcheck disable=SC2086
        cluster "$2" train --backend mpi --config bench/dmt/speed.toml --plan "$out/sptt.json" \
            $dmt_towers --quiet --out "$run" >/dev/null 2>&1 && steady "$run/summary.json"
        ;;
    oper)
        cluster "$2" train --backend mpi --config bench/oper/speed.toml --plan "$out/oper.json" \
            --quiet --out "$run" >/dev/null 2>&1 && steady "$run/summary.json"
        ;;
    *) echo "unknown case $1" >&2; return 1 ;;
    esac
}

results=$out/results.tsv
: >"$results"
for p in $(seq "$pairs"); do
    for c in $cases; do
        for side in old new; do
            bin=$old
            [[ $side == new ]] && bin=$new
            x=$(measure "$c" "$bin") || { echo "$c: $side binary failed" >&2; exit 1; }
            printf '%s\t%s\t%s\t%s\n' "$c" "$p" "$side" "$x" >>"$results"
            printf '%-15s pair %d %-3s %10.0f samples/s\n' "$c" "$p" "$side" "$x"
        done
    done
done
python3 - "$results" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    c, p, side, x = line.split("\t")
    runs.setdefault(c, {}).setdefault(side, {})[int(p)] = float(x)
print(f"\n{'case':15} {'old median':>11} {'new median':>11} {'new/old':>8} "
      f"{'pair ratios: median':>20} {'min':>6} {'max':>6}")
for c, s in runs.items():
    ratios = [s["new"][p] / s["old"][p] for p in sorted(s["old"])]
    mo, mn = st.median(s["old"].values()), st.median(s["new"].values())
    print(f"{c:15} {mo:11.0f} {mn:11.0f} {mn / mo:8.3f} {st.median(ratios):20.3f} "
          f"{min(ratios):6.3f} {max(ratios):6.3f}")
PY
