#!/usr/bin/env bash
# OPER speed on the emulated cluster (docs/OPER.md): training and inference samples/s
# of OPER plans (training replicas by Eq. 4-5, inference replicas by Algorithm 1, at
# EXTRA extra memory, default 5%) against the table-wise, row-wise and greedy plans,
# alternated ROUNDS times on 2 hosts x 2 MPI ranks with cross-host links shaped to
# RATE. Needs root, OpenMPI and a release build with --features mpi.
#   scripts/oper-speed.sh [ROUNDS=3] [RATE=1gbit]
# CONFIG (environment; default bench/oper/speed.toml) is the model; the profile is
# its training data's. Train samples/s is the run's steady-state figure
# (`steady_train_samples_per_sec`: every step but the first, whose time includes the
# data reader's start and the first touch of the buffers), with the whole run's
# (`train_samples_per_sec`) beside it; inference is the final evaluation's (the scorer
# on every rank). One line per run (plan, round, steady train, inference, cross-host
# MB, whole-run train), then per plan the median of each and its ratio to the best
# baseline's median.
# The first line names the machine's CPU: the ratios depend on it (docs/OPER.md, "Speed
# on the emulated cluster").
# TORCHREC=1 adds TorchRec's plan of the same tables as a fourth baseline
# (bench/torchrec/torchrec_plan.py; its venv from bench/torchrec/setup.sh), with the
# per-round ratios against the best baseline of each round printed after the table.
set -euo pipefail
rounds=${1:-3}
rate=${2:-1gbit}
bin=${BIN:-target/release/towerrec}
cfg=${CONFIG:-bench/oper/speed.toml}
extra=${EXTRA:-5%}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//' || true)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs; binary: $bin"
results=$out/results.tsv
: >"$results"
topo=(--hosts 2 --ranks-per-host 2)
"$bin" profile --config "$cfg" --quiet --out "$out/train.profile" >/dev/null
baselines="table-wise row-wise greedy"
for s in $baselines; do
    "$bin" plan --config "$cfg" "${topo[@]}" --strategy "$s" --output "$out/$s.json" 2>/dev/null
done
if [[ ${TORCHREC:-0} == 1 ]]; then
    "$bin" plan --config "$cfg" "${topo[@]}" --tables-out "$out/tables.json" >/dev/null 2>&1
    python3 "$(dirname "$0")/../bench/torchrec/torchrec_plan.py" --tables "$out/tables.json" \
        --out "$out/torchrec.json" 2>"$out/torchrec.log" >"$out/torchrec.line" ||
        { cat "$out/torchrec.log"; exit 1; }
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("torchrec:", d["sharding_types"], "planned in", d["planning_seconds"], "s")' "$out/torchrec.line"
    baselines+=" torchrec"
fi
for m in training inference; do
    "$bin" plan --config "$cfg" "${topo[@]}" --strategy oper --profile "$out/train.profile" \
        --extra-memory "$extra" --mode "$m" --output "$out/oper-$m.json" 2>"$out/plan-$m.log"
    grep -E "^embedding traffic" "$out/plan-$m.log" | sed "s/^/oper-$m: /"
done
plans="$baselines oper-training oper-inference"
for r in $(seq "$rounds"); do
    for p in $plans; do
        run="$out/run-$p-$r"
        scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate "$rate" -- \
            "$bin" train --backend mpi --config "$cfg" --plan "$out/$p.json" --quiet --out "$run" \
            >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        python3 - "$run/summary.json" "$p" "$r" "$results" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
cross = sum(b[p]["cross_host"] for p in ["input_dist", "output_dist", "sparse_grad_sync"]) / 1e6
steady = s["steady_train_samples_per_sec"]
if steady is None:
    sys.exit("the run has no step after its first: raise train.max_steps")
line = f'{sys.argv[2]}\t{sys.argv[3]}\t{steady:.0f}\t{s["eval_samples_per_sec"]:.0f}\t{cross:.2f}\t{s["train_samples_per_sec"]:.0f}'
print(line.replace("\t", "  "))
open(sys.argv[4], "a").write(line + "\n")
PY
        rm -rf "$run" # its checkpoint: 2 GB a run on bench/oper/kaggle-zipf.toml
    done
done
python3 - "$results" <<'PY'
import sys, statistics as st
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
plans = list(dict.fromkeys(r[0] for r in rows))
med = {p: [st.median(float(r[c]) for r in rows if r[0] == p) for c in range(2, 6)] for p in plans}
base = [p for p in plans if not p.startswith("oper")]
best_train = max(med[p][0] for p in base)
best_infer = max(med[p][1] for p in base)
best_whole = max(med[p][3] for p in base)
print("| plan | train samples/s (median, steady) | vs best baseline | train, whole run | vs best baseline | inference samples/s (median) | vs best baseline | cross-host MB/step (embeddings + sparse sync) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for p in plans:
    t, i, c, w = med[p]
    print(f"| {p} | {t:,.0f} | {t / best_train:.2f} | {w:,.0f} | {w / best_whole:.2f} | {i:,.0f} | {i / best_infer:.2f} | {c:.2f} |")
rounds = sorted({int(r[1]) for r in rows})
for p, col, what in [("oper-training", 2, "train"), ("oper-training", 5, "train (whole run)"), ("oper-inference", 3, "infer")]:
    ratios = []
    for n in rounds:
        got = {r[0]: float(r[col]) for r in rows if int(r[1]) == n}
        ratios.append(got[p] / max(got[b] for b in base))
    print(f"{p} {what} per round against that round's best baseline: "
          + ", ".join(f"{x:.3f}" for x in ratios) + f" (median {st.median(ratios):.3f})")
PY
