#!/usr/bin/env bash
# Speed of reduced-precision tables against fp32 (issue 40; docs/PERFORMANCE.md,
# "Reduced-precision tables"): `towerrec bench model` on a config, fp32 and each of
# PRECISIONS (default "fp16 bf16") for model.table_precision, alternated ROUNDS times
# (fp32, fp16, bf16, fp32, ...), each run a separate process; prints the CPU model,
# every run's median samples/s, and per precision the median of its per-round ratio
# to fp32 with its range.
#   bench/precision-speed.sh [CONFIG=bench/multihot.toml] [MODE=train] [ROUNDS=3]
# BIN (environment) names the binary (default target/release/towerrec); THREADS
# (default 2).
# int8 (row-wise quantized tables) is for inference only: PRECISIONS="fp16 int8" with
# MODE=infer (docs/PERFORMANCE.md, "int8 inference tables").
# KEY (default model.table_precision) names the key set: KEY=model.dense_precision
# PRECISIONS=bf16 times bf16 dense layers (docs/PERFORMANCE.md, "bf16 dense layers").
set -euo pipefail
cfg=${1:-bench/multihot.toml}
mode=${2:-train}
rounds=${3:-3}
bin=${BIN:-target/release/towerrec}
threads=${THREADS:-2}
precisions=${PRECISIONS:-fp16 bf16}
key=${KEY:-model.table_precision}
[ -x "$bin" ] || { echo "no $bin: cargo build --release first" >&2; exit 1; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $($bin --version); $cfg $mode, $threads threads, $rounds rounds, $key"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
    for p in fp32 $precisions; do
        sps=$("$bin" bench model --config "$cfg" --mode "$mode" --threads "$threads" --json \
            --set "$key=\"$p\"" | tail -1 |
            python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["median_samples_per_sec"])')
        printf '%s\t%s\t%s\n' "$r" "$p" "$sps" >>"$out"
        printf 'round %s %-5s %10.0f samples/s\n' "$r" "$p" "$sps"
    done
done
python3 - "$out" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    r, p, x = line.split("\t")
    runs.setdefault(p, {})[int(r)] = float(x)
base = runs["fp32"]
print("\nprecision  median samples/s  median per-round ratio to fp32 (range)")
for p, m in runs.items():
    ratios = [m[r] / base[r] for r in sorted(m)]
    print(f"{p:9} {st.median(m.values()):16.0f}  {st.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
PY
