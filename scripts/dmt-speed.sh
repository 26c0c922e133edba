#!/usr/bin/env bash
# DMT speed on the emulated cluster (docs/DMT.md): flat, SPTT alone, and DMT at
# compression 2, 4 and 8, and flat on the greedy plan (tables spread over every rank,
# the other baseline), alternated ROUNDS times, 2 hosts x 2 MPI ranks, cross-host
# links shaped to RATE. Needs root, OpenMPI and a release build with --features mpi.
# Variants flat-q and dmt-c2-q are flat and DMT at compression 2 with quantized
# communication (fp16 forward, bf16 backward: the DMT paper's strong baseline;
# docs/DISTRIBUTED.md, "Quantized communication"); with flat-q among the variants the
# summary adds each variant's median per-round ratio to flat-q.
#   scripts/dmt-speed.sh [ROUNDS=3] [RATE=1gbit] [--predict]
# CONFIG (environment; default bench/dmt/speed.toml) is the model; DMT's module is the
# DLRM one with c = 1, p = 0 and D = embedding_dim / compression. VARIANTS (environment)
# runs a subset, e.g. VARIANTS="flat flat-greedy dmt-c2"; flat is always among them.
# BIN (environment) names the binary (default target/release/towerrec).
# Prints one line per run: variant, train samples/s (the steady figure, every step but
# the first: `steady_train_samples_per_sec`; the whole run's beside it), and the
# cross-host bytes per step (summed over the ranks) of the embedding phases and of the
# dense sync; then per variant the median steady samples/s and its ratio to flat.
# Plans without towers (flat, flat-greedy) run their steps in halves, the runtime's
# default (`cluster.overlap_halves`); EXTRA_ARGS (environment) is added to every run,
# e.g. EXTRA_ARGS="--set cluster.overlap_halves=false" for whole steps.
# --predict: every round first runs `towerrec calibrate` on the same emulated cluster
# and `towerrec simulate` on its file, and prints the round's predicted step times
# before that round's runs; the summary adds predicted / measured per variant.
set -euo pipefail
rounds=${1:-3}
rate=${2:-1gbit}
predict=0
[[ ${3:-} == --predict ]] && predict=1
bin=${BIN:-target/release/towerrec}
cfg=${CONFIG:-bench/dmt/speed.toml}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results=$out/results.tsv
: >"$results"
cluster() { scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate "$rate" -- "$@"; }
read -r dim batch < <(python3 -c "import sys, tomllib; c = tomllib.load(open(sys.argv[1], 'rb'))
print(c['model']['embedding_dim'], c['train']['batch_size'])" "$cfg")
"$bin" plan --config "$cfg" --hosts 2 --ranks-per-host 2 --towers 2 --strategy table-wise \
    --output "$out/sptt.json" 2>/dev/null
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p.pop('towers'); json.dump(p, open(sys.argv[2],'w'))" \
    "$out/sptt.json" "$out/flat.json"
"$bin" plan --config "$cfg" --hosts 2 --ranks-per-host 2 --strategy greedy \
    --output "$out/greedy.json" 2>/dev/null
towers() { # compression C: DLRM tower module, c = 1, p = 0, D = dim / C
    local d=$((dim / $1))
    echo "--set model.towers={module=\"dlrm\",count=2,d=$d,c=1,p=0} --set model.bottom_mlp=[64,$d]"
}
variants=${VARIANTS:-flat sptt dmt-c2 dmt-c4 dmt-c8 flat-greedy}
qset='--set cluster.qcomms={forward="fp16",backward="bf16"}'
qcfg=$out/quantized.toml
{ cat "$cfg"; printf '\n[cluster.qcomms]\nforward = "fp16"\nbackward = "bf16"\n'; } >"$qcfg"
[[ " $variants " == *" flat "* ]] || variants="flat $variants"
declare -A args=(
    [flat]="--plan $out/flat.json"
    [flat-greedy]="--plan $out/greedy.json"
    [sptt]="--plan $out/sptt.json"
    [dmt-c2]="--plan $out/sptt.json $(towers 2)"
    [dmt-c4]="--plan $out/sptt.json $(towers 4)"
    [dmt-c8]="--plan $out/sptt.json $(towers 8)"
    [flat-q]="--plan $out/flat.json $qset"
    [dmt-c2-q]="--plan $out/sptt.json $(towers 2) $qset"
)
for r in $(seq "$rounds"); do
    if ((predict)); then
        cluster "$bin" calibrate --backend mpi --quiet --out "$out/cal-$r.toml" >"$out/log" 2>&1 ||
            { cat "$out/log"; exit 1; }
        {
            for c in 2 4 8; do
                "$bin" simulate --config "$cfg" --hardware "$out/cal-$r.toml" \
                    --compare flat,sptt,dmt --compression "$c" --json
            done
            # The quantized variants: the config with [cluster.qcomms] (a synthetic
            # config: no relative paths to move with the copy).
            "$bin" simulate --config "$qcfg" --hardware "$out/cal-$r.toml" \
                --compare flat,dmt --compression 2 --json | sed 's/^{/{"quantized":true,/'
        } | python3 -c '
import json, sys
r, out = sys.argv[1], sys.argv[2]
step = {}
for line in sys.stdin:
    p = json.loads(line)
    name = p["plan"] if p["plan"] != "dmt" else "dmt-c%d" % round(p["towers"]["compression"])
    step[name + ("-q" if p.get("quantized") else "")] = p["step_seconds"]
with open(out, "a") as f:
    for v, s in step.items():
        f.write(f"{r}\tpredicted\t{v}\t{s}\n")
print(f"round {r} predicted step: " + ", ".join(f"{v} {s * 1e3:.1f} ms" for v, s in step.items()))
' "$r" "$results"
    fi
    for v in $variants; do
        run="$out/run-$v-$r"
        # shellcheck disable=SC2086
        cluster "$bin" train --backend mpi --config "$cfg" ${args[$v]} ${EXTRA_ARGS:-} --quiet --out "$run" \
            >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        python3 - "$run/summary.json" "$v" "$r" "$results" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
emb = sum(b[p]["cross_host"] for p in ["output_dist", "tower_intra", "tower_peer"]) / 1e6
dense = b["dense_grad_sync"]["cross_host"] / 1e6
sps = s["steady_train_samples_per_sec"]
if sps is None:
    sys.exit("the run has no step after its first: raise train.max_steps")
with open(sys.argv[4], "a") as f:
    f.write(f"{sys.argv[3]}\tmeasured\t{sys.argv[2]}\t{sps}\n")
print(f"{sys.argv[2]:8} round {sys.argv[3]}: {sps:8.0f} samples/s (whole run {s['train_samples_per_sec']:.0f})  "
      f"cross-host MB per step (all ranks): embeddings {emb:.2f}, dense sync {dense:.2f}  auc {s['auc']:.4f}")
PY
    done
done
python3 - "$results" "$batch" <<'PY'
import statistics as st, sys
batch = float(sys.argv[2])
pred, meas = {}, {}
for line in open(sys.argv[1]):
    r, kind, v, x = line.split("\t")
    (pred if kind == "predicted" else meas).setdefault(v, {})[int(r)] = float(x)
flat = meas["flat"]
print("\nvariant   median samples/s  ratio of medians  median per-round ratio  rounds >= 1.5x flat"
      + ("  predicted step (median)  measured step (median)  median predicted/measured  range" if pred else ""))
for v, m in meas.items():
    rounds = sorted(m)
    per_round = [m[r] / flat[r] for r in rounds]
    line = (f"{v:8} {st.median(m.values()):17.0f} {st.median(m.values()) / st.median(flat.values()):17.2f}"
            f" {st.median(per_round):23.2f} {sum(x >= 1.5 for x in per_round):11d} of {len(rounds)}")
    if v in pred:
        ratios = [pred[v][r] / (batch / m[r]) for r in rounds]
        line += (f"  {st.median(pred[v].values()) * 1e3:19.1f} ms  {st.median(batch / x for x in m.values()) * 1e3:18.1f} ms"
                 f"  {st.median(ratios):24.2f}  {min(ratios):.2f}-{max(ratios):.2f}")
    print(line)
if "flat-q" in meas:
    strong = meas["flat-q"]
    print("\nagainst flat-q (the strong baseline): median per-round ratio")
    for v, m in meas.items():
        per_round = [m[r] / strong[r] for r in sorted(m) if r in strong]
        print(f"{v:8} {st.median(per_round):.2f} ({min(per_round):.2f}-{max(per_round):.2f})")
PY
