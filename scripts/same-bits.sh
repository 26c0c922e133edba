#!/usr/bin/env bash
# Trains the same runs with two towerrec binaries and checks that they end the same, bit
# for bit: every logged loss and evaluation figure (metrics.jsonl, less its speed
# fields) and every tensor of the checkpoint (names, shapes and bytes). Used to show that
# a change to the runtime's structure changed no number (docs/DISTRIBUTED.md, "The step
# schedule and the runtime's files").
#
#   scripts/same-bits.sh OLD_BINARY NEW_BINARY [OUT_DIR]
#
# Runs: the quickstart (2 × 2 threads, steps in halves, the default), the same in whole
# steps and under table-row-wise, row-wise, column-wise and data-parallel plans, DCN, DMT-DLRM and DMT-DCN on the Criteo sample (examples/dmt_*.toml; skipped
# with a line when ../shared/data is absent), and OPER's plan on bench/oper/speed.toml
# (profile and plan made once, by NEW, and given to both). Exits non-zero on the first
# difference, printing it.
set -euo pipefail
old=${1:?usage: scripts/same-bits.sh OLD_BINARY NEW_BINARY [OUT_DIR]}
new=${2:?usage: scripts/same-bits.sh OLD_BINARY NEW_BINARY [OUT_DIR]}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
cd "$(dirname "$0")/.."

compare() { # name
    python3 - "$out/$1.old" "$out/$1.new" "$1" <<'EOF'
import json, struct, sys
a, b, name = sys.argv[1:]
def metrics(d):
    rows = []
    for line in open(f"{d}/metrics.jsonl"):
        r = json.loads(line)
        rows.append({k: v for k, v in r.items() if k != "samples_per_sec"})
    return rows
def tensors(d):
    f = open(f"{d}/checkpoint.safetensors", "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    head.pop("__metadata__", None)
    return head, f.read()
ma, mb = metrics(a), metrics(b)
if ma != mb:
    for x, y in zip(ma, mb):
        if x != y:
            sys.exit(f"{name}: metrics differ: {x} against {y}")
    sys.exit(f"{name}: metrics differ in length: {len(ma)} against {len(mb)}")
(ha, da), (hb, db) = tensors(a), tensors(b)
if ha != hb:
    sys.exit(f"{name}: checkpoint tensors differ in names or shapes")
for t, meta in sorted(ha.items()):
    lo, hi = meta["data_offsets"]
    if da[lo:hi] != db[lo:hi]:
        sys.exit(f"{name}: tensor {t} differs")
losses = [r["loss"] for r in ma if "loss" in r]
print(f"{name}: same bits: {len(ma)} metric rows (last loss {losses[-1] if losses else '-'}), "
      f"{len(ha)} tensors, {len(da)} bytes")
EOF
}

run() { # name, then train's arguments
    local name=$1
    shift
    for side in old new; do
        local bin=$old
        [ "$side" = new ] && bin=$new
        rm -rf "$out/$name.$side"
        "$bin" train -q --out "$out/$name.$side" "$@" >"$out/$name.$side.log" 2>&1 ||
            { tail -5 "$out/$name.$side.log"; echo "$name: $side binary failed"; exit 1; }
    done
    compare "$name"
}

run quickstart --set train.max_steps=60 --set train.log_every=5
run quickstart-whole-steps --set train.max_steps=60 --set train.log_every=5 \
    --set cluster.overlap_halves=false
# Every sharding type on the quickstart's 2 × 2 (table-row-wise across hosts runs whole
# steps, its tables summed in two steps; Adam, which column-wise tables allow).
for strategy in table-row-wise row-wise column-wise data-parallel; do
    "$new" plan --hosts 2 --ranks-per-host 2 --strategy "$strategy" \
        --output "$out/$strategy.json" >"$out/plan-$strategy.log" 2>&1
    run "quickstart-$strategy" --plan "$out/$strategy.json" --set train.max_steps=30 \
        --set 'optimizer.sparse={kind="adam"}' \
        --set train.log_every=5
done
if [ -d ../shared/data/criteo_10k ] || [ -e ../shared/data/criteo_10k.tsv ]; then
    run dcn --config examples/dcn.toml --set train.max_steps=30
    run dmt-dlrm --config examples/dmt_dlrm.toml --set train.max_steps=30
    run dmt-dcn --config examples/dmt_dcn.toml --set train.max_steps=30
else
    echo "dcn, dmt-dlrm, dmt-dcn: skipped (../shared/data/criteo_10k absent)"
fi
"$new" profile --config bench/oper/speed.toml --out "$out/speed.profile" >"$out/profile.log" 2>&1
"$new" plan --config bench/oper/speed.toml --hosts 2 --ranks-per-host 2 --strategy oper \
    --profile "$out/speed.profile" --extra-memory 5% --output "$out/oper.json" >"$out/plan.log" 2>&1
run oper --config bench/oper/speed.toml --plan "$out/oper.json" --set train.max_steps=12 \
    --set data.eval_samples=16384
echo "all runs the same, bit for bit (outputs in $out)"
