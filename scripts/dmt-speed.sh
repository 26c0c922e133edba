#!/usr/bin/env bash
# DMT speed on the emulated cluster (docs/DMT.md): flat, SPTT alone, and DMT at
# compression 2, 4 and 8, alternated ROUNDS times, 2 hosts x 2 MPI ranks, cross-host
# links shaped to RATE. Needs root, OpenMPI and a release build with --features mpi.
#   scripts/dmt-speed.sh [ROUNDS=3] [RATE=1gbit]
# Prints one line per run: variant, train samples/s (steady state: the run's figure),
# and the cross-host bytes per step (summed over the ranks) of the embedding phases
# and of the dense sync.
set -euo pipefail
rounds=${1:-3}
rate=${2:-1gbit}
bin=target/release/towerrec
cfg=bench/dmt/speed.toml
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" plan --config "$cfg" --hosts 2 --ranks-per-host 2 --towers 2 --strategy table-wise \
    --output "$out/sptt.json" 2>/dev/null
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p.pop('towers'); json.dump(p, open(sys.argv[2],'w'))" \
    "$out/sptt.json" "$out/flat.json"
towers() { # D: DLRM tower module, c = 1, p = 0, compression 64 / D
    echo "--set model.towers={module=\"dlrm\",count=2,d=$1,c=1,p=0} --set model.bottom_mlp=[64,$1]"
}
declare -A args=(
    [flat]="--plan $out/flat.json"
    [sptt]="--plan $out/sptt.json"
    [dmt-c2]="--plan $out/sptt.json $(towers 32)"
    [dmt-c4]="--plan $out/sptt.json $(towers 16)"
    [dmt-c8]="--plan $out/sptt.json $(towers 8)"
)
for r in $(seq "$rounds"); do
    for v in flat sptt dmt-c2 dmt-c4 dmt-c8; do
        run="$out/run-$v-$r"
        # shellcheck disable=SC2086
        scripts/emulated-cluster.sh --hosts 2 --ranks-per-host 2 --rate "$rate" -- \
            "$bin" train --backend mpi --config "$cfg" ${args[$v]} --quiet --out "$run" \
            >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
        python3 - "$run/summary.json" "$v" "$r" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {p["phase"]: p for p in s["cluster"]["bytes_per_step"]}
emb = sum(b[p]["cross_host"] for p in ["output_dist", "tower_intra", "tower_peer"]) / 1e6
dense = b["dense_grad_sync"]["cross_host"] / 1e6
print(f"{sys.argv[2]:8} round {sys.argv[3]}: {s['train_samples_per_sec']:8.0f} samples/s  "
      f"cross-host MB per step (all ranks): embeddings {emb:.2f}, dense sync {dense:.2f}  auc {s['auc']:.4f}")
PY
    done
done
