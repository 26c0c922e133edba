#!/usr/bin/env bash
# Runs every fault and bad input of docs/RELIABILITY.md's tables on the release build
# and prints, for each, the command, what the user sees (stdout and stderr) and the exit
# status: the raw output the tables quote. Data is generated here (no ../shared).
#
#   cargo build --release && scripts/reliability-messages.sh > docs/data/reliability-messages-DATE.txt
#
# BIN=path/to/towerrec picks another binary; SCRATCH=dir another scratch directory.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
bin=$(realpath "${BIN:-target/release/towerrec}")
scratch=${SCRATCH:-$(mktemp -d /tmp/towerrec-messages.XXXXXX)}
mkdir -p "$scratch"
cd "$scratch" || exit 1
echo "# towerrec reliability messages: $bin ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null)), $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "# scratch: $scratch (paths below are shown relative to it)"

# One case: a title, then the command; prints the command, its output and exit status.
case_() {
    local title=$1
    shift
    echo
    echo "## $title"
    # (A byte that is not UTF-8 in an argument is shown as ?.)
    echo "\$ $*" | sed "s|^\\$ t |$ towerrec |; s|$bin|towerrec|g; s|$scratch/||g; s|$repo/||g" |
        LC_ALL=C tr '\377' '?'
    local start=$(date +%s.%N)
    "$@" > out.txt 2>&1
    local status=$?
    local took=$(echo "$(date +%s.%N) - $start" | bc)
    sed "s|$scratch/||g; s|$repo/||g" out.txt | cut -c1-2000
    printf 'exit %s (%.2f s)\n' "$status" "$took"
    # The cases that write a run into r start from none.
    rm -rf r
}
t() { "$bin" "$@"; }

tiny=(--set data.train_samples=2000 --set data.eval_samples=500
    --set 'data.tables=[{ rows = 200, zipf_exponent = 1.05, pooling = 1, count = 8 }]'
    --set train.eval_every=0 --set cluster.hosts=1 --set cluster.ranks_per_host=1)
sgd_1e5=(--set 'optimizer.dense={kind="sgd"}' --set 'optimizer.sparse={kind="sgd"}'
    --set optimizer.dense_lr=1e5 --set optimizer.sparse_lr=1e5)
model='[model]
kind = "dlrm"
embedding_dim = 4
bottom_mlp = [8, 4]
top_mlp = [8, 1]
[optimizer]
dense = { kind = "sgd" }
dense_lr = 0.1
sparse = { kind = "sgd" }
sparse_lr = 0.1
[train]
batch_size = 16'
csv() { # csv FILE ROWS [BAD_LINE]: y,d,a,b rows; line BAD_LINE (header = 1) has label x
    python3 - "$@" <<'EOF'
import sys
path, rows = sys.argv[1], int(sys.argv[2])
bad = int(sys.argv[3]) if len(sys.argv) > 3 else None
with open(path, "w") as f:
    f.write("y,d,a,b\n")
    for i in range(rows):
        label = "x" if bad == i + 2 else str(i % 2)
        f.write(f"{label},{i % 3},{i % 7},{i % 5}\n")
EOF
}
csv_config() { # csv_config CONFIG DATA
    cat > "$1" <<EOF
$model
[data]
format = "csv"
path = "$2"
split = { kind = "tail", eval_rows = 20 }
[data.schema]
label = { column = "y" }
dense = [{ column = "d" }]
sparse = [{ column = "a", rows = 10 }, { column = "b", rows = 10 }]
EOF
}
csv d.csv 200
csv_config c.toml d.csv
criteo() { # criteo FILE ROWS: Criteo TSV rows (label, 13 integers, 26 hex fields)
    python3 -c '
import sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write("\t".join([str(i % 2)] + [str(i % 9)] * 13 + ["%x" % (i % 40 + 10)] * 26) + "\n")
' "$@"
}
criteo d.tsv 100
criteo e.tsv 20
cat > crit.toml <<EOF
$model
[data]
format = "criteo"
path = "d.tsv"
eval_path = "e.tsv"
table_rows = [100]
EOF

echo
echo "# 1. Config paths"
cp "$repo/examples/quickstart.toml" q.toml
case_ "a config named by its bare file name" t plan --config q.toml --hosts 1 --ranks-per-host 2 --output /dev/stdout

echo
echo "# 2. Non-finite numbers"
case_ "SGD at 1e5, one process" t train -q --out nan1 "${tiny[@]}" "${sgd_1e5[@]}"
case_ "SGD at 1e5, 2 x 2 in-process" t train -q --out nan4 "${tiny[@]}" "${sgd_1e5[@]}" --hosts 2 --ranks-per-host 2
# The issue's setting: examples/criteo.toml's DLRM on the Criteo sample (CRITEO=FILE, a
# Criteo TSV; default: the sample beside the repository, where it is).
criteo_file=${CRITEO:-$repo/../shared/data/criteo_10k/train-10k.txt}
if [ -f "$criteo_file" ]; then
    for topo in "1 1" "2 2" "1 4" "4 1"; do
        set -- $topo
        case_ "examples/criteo.toml, SGD at 1e5, $1 x $2 in-process" t train -q --config "$repo/examples/criteo.toml" --data "$criteo_file" --out "crit$1$2" "${sgd_1e5[@]}" --hosts "$1" --ranks-per-host "$2"
    done
else
    echo "(no Criteo file at $criteo_file: the criteo.toml cases are left out)"
fi
case_ "dense Adagrad eps = 0" t train -q --out eps "${tiny[@]}" --set 'optimizer.dense={kind="adagrad",eps=0}'
case_ "dense Adam weight_decay = nan" t train -q --out r "${tiny[@]}" --set 'optimizer.dense={kind="adam",weight_decay=nan}'
case_ "sparse Adam beta2 = 1.5" t train -q --out r "${tiny[@]}" --set 'optimizer.sparse={kind="adam",beta2=1.5}'

echo
echo "# 3. Numeric ranges"
case_ "batch size 2^62" t train -q --out r "${tiny[@]}" --set train.batch_size=4611686018427387904
case_ "eval batch size 0" t train -q --out r "${tiny[@]}" --set train.eval_batch_size=0
case_ "max_bad_fraction 1.5" t train -q --out r "${tiny[@]}" --set train.max_bad_fraction=1.5
case_ "--stop-after 0" t train -q --out r --stop-after 0
case_ "--threads 10000" t train -q --out r --threads 10000
case_ "64 x 64 in-process" t train -q --out r --hosts 64 --ranks-per-host 64
case_ "--max-bad-fraction 2" t train -q --out r --max-bad-fraction 2
case_ "--collective-timeout 0" t train -q --out r --collective-timeout 0
case_ "--collective-timeout 1e-6" t train -q --out r "${tiny[@]}" --hosts 2 --ranks-per-host 1 --collective-timeout 1e-6
preset="$repo/crates/towerrec-sim/presets/recspeed.toml"
sed 's/^peak_tflops = 200.0/peak_tflops = 200.0\nefficiency = 1.5/' "$preset" > hw-eff.toml
case_ "hardware efficiency 1.5" t simulate --hardware hw-eff.toml
sed 's/^peak_tflops = 200.0/peak_tflops = 2e30/' "$preset" > hw-big.toml
case_ "hardware peak_tflops 2e30" t simulate --hardware hw-big.toml
sed 's/^peak_tflops = 200.0/peak_tflops = 200.0\nefficiency = 1e-300/' "$preset" > hw-small.toml
case_ "hardware efficiency 1e-300" t simulate --hardware hw-small.toml
case_ "simulate --compression nan" t simulate --compare dmt --compression nan
case_ "simulate --gpus 4294967296" t simulate --gpus 4294967296

echo
echo "# 4. No data"
case_ "training file /dev/null (Criteo config)" t train -q --config crit.toml --out r --data /dev/null
printf '' > empty.csv
csv_config empty.toml empty.csv
case_ "empty CSV" t train -q --config empty.toml --out r
echo "y,d,a,b" > header.csv
csv_config header.toml header.csv
case_ "header-only CSV" t train -q --config header.toml --out r
csv bad.csv 200 3
csv_config bad.toml bad.csv
case_ "a bad row at line 3 (fail)" t train -q --config bad.toml --out r
case_ "1 bad row of 200 with --bad-rows skip, --max-bad-fraction 0.001" t train -q --config bad.toml --out r --bad-rows skip --max-bad-fraction 0.001
python3 -c 'print("y,d,a,b"); [print("x,1,1,1") for _ in range(60)]' > allbad.csv
csv_config allbad.toml allbad.csv
case_ "--bad-rows skip with every row bad" t train -q --config allbad.toml --out r --bad-rows skip
case_ "data.split.eval_rows = 0" t train -q --config c.toml --out r --set 'data.split={kind="tail",eval_rows=0}'
case_ "data.eval_samples = 0 (synthetic)" t train -q --out r "${tiny[@]}" --set data.eval_samples=0
case_ "eval_rows beyond the file's rows" t train -q --config c.toml --out r --set 'data.split={kind="tail",eval_rows=5000}'
case_ "a head split that leaves no evaluation rows" t train -q --config c.toml --out r --set 'data.split={kind="head",train_rows=200}'
t train -q --config c.toml --out evalrun > /dev/null
case_ "eval on a header-only file" t eval --checkpoint evalrun --data header.csv
case_ "--data /dev/zero (Criteo config)" t train -q --config crit.toml --out r --data /dev/zero
case_ "--data /dev/zero (Criteo config), --bad-rows skip" t train -q --config crit.toml --out r --data /dev/zero --bad-rows skip
python3 -c '
import sys
row = "\t".join(["1"] + ["3"] * 13 + ["a1"] * 26)
print(row); print("1\t" + "9" * (2 << 20)); print(row)' > long.tsv
case_ "a line over 1 MiB at line 2 (Criteo)" t train -q --config crit.toml --out r --data long.tsv
printf '%s\n' "$(head -1 d.tsv)" > tabs.tsv
printf '\t%.0s' $(seq 39) >> tabs.tsv
printf '\n' >> tabs.tsv
case_ "a line of 39 tabs at line 2 (Criteo)" t train -q --config crit.toml --out r --data tabs.tsv
case_ "preprocess of a file with no rows" t preprocess --config crit.toml --data /dev/null --out none.bin
mkfifo pipe
case_ "--eval-data a named pipe" timeout 60 "$bin" train -q --out r "${tiny[@]}" --eval-data pipe
sed 's|path = "d.csv"|path = "pipe"|' c.toml > fifo.toml
case_ "a CSV config whose file is a named pipe (tail split)" timeout 60 "$bin" train -q --config fifo.toml --out r
case_ "--eval-data /dev/urandom" timeout 60 "$bin" train -q --out r "${tiny[@]}" --eval-data /dev/urandom
mkdir -p adir
case_ "--eval-data a directory" t train -q --out r "${tiny[@]}" --eval-data adir

echo
echo "# 5. Memory"
case_ "bottom_mlp = [2147483648, 16], one process" t train -q --out r --set 'model.bottom_mlp=[2147483648, 16]' --set cluster.hosts=1 --set cluster.ranks_per_host=1
case_ "the same, 2 x 2 in-process" t train -q --out r --set 'model.bottom_mlp=[2147483648, 16]' --hosts 2 --ranks-per-host 2
case_ "a table of 10^11 rows" t train -q --out r "${tiny[@]}" --set 'data.tables=[{ rows = 100000000000, count = 1 }]'
case_ "tables that fit once but not through a checkpoint (160M rows, SGD)" t train -q --out r "${tiny[@]}" --set 'data.tables=[{ rows = 160000000, count = 1 }]' --set 'optimizer.sparse={kind="sgd"}'
case_ "datagen of 10^14 rows" t datagen --out big.bin --set data.train_samples=100000000000000
case_ "top_mlp = [100000, 1], one process (fits)" t train -q --out topmlp "${tiny[@]}" --set 'model.top_mlp=[100000, 1]' --max-steps 2

echo
echo "# 6. Run directories"
t train -q --out run1 "${tiny[@]}" > /dev/null
sum() { (cd run1 && find . -type f ! -name .towerrec.lock | sort | xargs md5sum | md5sum | cut -c1-12); }
echo "(run1: a finished run; hash of its files $(sum))"
case_ "train --out run1 (holds a run)" t train -q --out run1 "${tiny[@]}"
"$bin" train -q --out busy "${tiny[@]}" --set train.epochs=100000 > /dev/null 2>&1 &
busy=$!
while [ ! -f busy/metrics.jsonl ]; do sleep 0.01; done
case_ "a second run in a directory a run is using" t train -q --out busy "${tiny[@]}" --overwrite
kill $busy
wait $busy 2>/dev/null
case_ "--overwrite, the new run fails at start-up" t train -q --out run1 "${tiny[@]}" --overwrite --eval-data /dev/null
echo "(run1 files now: $(sum))"
case_ "--overwrite, a bad row at line 3 once training began" t train -q --config bad.toml --out run1 --overwrite
echo "(run1 files now: $(sum))"
case_ "--overwrite, diverging" t train -q --out run1 "${tiny[@]}" --overwrite "${sgd_1e5[@]}"
echo "(run1 files now: $(sum))"
"$bin" train -q --out run1 "${tiny[@]}" --overwrite --set train.epochs=100000 --set train.checkpoint_every=1 > /dev/null 2>&1 &
pid=$!
while [ ! -d run1/.towerrec-replaced ] || [ ! -f run1/metrics.jsonl ]; do sleep 0.01; done
sleep 0.5
kill -9 $pid
wait $pid 2>/dev/null
echo "(kill -9 of an --overwrite run 0.5 s after it began writing: run1 holds $(ls -A run1 | tr '\n' ' '))"
case_ "the next command in run1 after the kill" t eval --checkpoint run1
echo "(run1 files now: $(sum))"
t train -q --out run2 "${tiny[@]}" --stop-after 2 > /dev/null
printf 'half' > run2/checkpoint.safetensors.tmp.2000000000
case_ "a temporary left by a killed checkpoint write (process 2000000000 gone), then --resume" t train -q --resume run2 --max-steps 3
case_ "--resume of a finished run" t train -q --resume run2 --max-steps 3

echo
echo "# 7. Resume checks"
t train -q --config c.toml --out split --stop-after 2 > /dev/null
cp d.csv other.csv
case_ "--resume with --eval-data on a run with a tail split" t train -q --resume split --eval-data other.csv
case_ "--resume --set model.self_interaction=true" t train -q --resume split --set model.self_interaction=true
case_ "--resume --bad-rows skip on a run that read with fail" t train -q --resume split --bad-rows skip
case_ "--resume --set train.max_steps=5 --threads 1" t train -q --resume split --set train.max_steps=5 --threads 1
sed -i '0,/^0,/s//1,/' d.csv
case_ "--resume after a same-size edit of the data" t train -q --resume split
case_ "partition on data edited since the checkpoint" t partition --checkpoint split --towers 2 --out p.json
python3 -c '
import sys
with open("day.tsv", "w") as f:
    i = 0
    size = 0
    while size < 72 << 20:
        row = "\t".join([str(i % 2)] + [str((i * 7 + d) % 1000) for d in range(13)] + ["%08x" % ((i * 31 + c * 17) % 4099) for c in range(26)]) + "\n"
        f.write(row)
        size += len(row)
        i += 1'
sed 's|path = "d.tsv"|path = "day.tsv"|; s|eval_path = "e.tsv"|split = { kind = "tail", eval_rows = 1000 }|' crit.toml > day.toml
t train -q --config day.toml --out day --stop-after 1 > /dev/null
python3 -c '
size = __import__("os").path.getsize("day.tsv")
block, last = 64 << 10, size - (64 << 10)
starts = [last * i // 63 for i in range(64)]
b = bytearray(open("day.tsv", "rb").read())
p = next(p for p in range(size // 2, size) if all(p < s or p >= s + block for s in starts) and chr(b[p]).isdigit() and b[p - 1] == 9 and b[p + 1] == 9)
b[p] = ord("2") if b[p] == ord("1") else ord("1")
open("day.tsv", "wb").write(b)
print("(changed one digit of day.tsv, %d bytes, at byte %d, between the blocks a sampled hash reads)" % (size, p))'
case_ "--resume after a one-digit edit of a 72 MB file" t train -q --resume day
case_ "--resume of a missing directory" t train -q --resume none
csv d.csv 200
t train -q --out stop "${tiny[@]}" --stop-after 2 > /dev/null
case_ "--resume --stop-after 3 of a run stopped at step 2" t train -q --resume stop --stop-after 3

echo
echo "# 9. Inputs and outputs"
case_ "eval --predictions onto the checkpoint" t eval --checkpoint run1 --predictions run1/checkpoint.safetensors
case_ "eval --predictions onto the run's summary" t eval --checkpoint run1 --predictions run1/summary.json
case_ "plan --output onto its --config" t plan --config q.toml --hosts 1 --ranks-per-host 2 --output q.toml
t profile --config q.toml --out prof.st --quiet "${tiny[@]}" > /dev/null
case_ "plan --output onto its --profile" t plan --config q.toml --hosts 1 --ranks-per-host 2 --profile prof.st --output prof.st "${tiny[@]}"
ln -sf q.toml q-link.toml
case_ "datagen --out a symbolic link to its --config" t datagen --config q.toml --out q-link.toml
case_ "preprocess --out onto its --config" t preprocess --config c.toml --out c.toml
case_ "preprocess --data X --out X" t preprocess --config crit.toml --data d.tsv --out d.tsv
case_ "train --out run1 --overwrite --plan run1/summary.json" t train -q --out run1 "${tiny[@]}" --overwrite --plan run1/summary.json
case_ "train --config run1/config.toml --out run1 --overwrite" t train -q --config run1/config.toml --out run1 --overwrite
echo "(run1 files now: $(sum))"

echo
echo "# 8. Checkpoints"
t train -q --out corrupt "${tiny[@]}" > /dev/null
python3 -c '
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + n])
name = sorted(k for k in head if k != "__metadata__")[-1]
start = 8 + n + head[name]["data_offsets"][0]
for i in range(start, start + 4):
    b[i] ^= 0xFF
open(p, "wb").write(b)' corrupt/checkpoint.safetensors
case_ "four bytes flipped in a tensor" t eval --checkpoint corrupt

echo
echo "# 11. Messages"
echo '{ 1: 2 }' > bad.json
case_ "a plan file that is not JSON" t train -q --out r "${tiny[@]}" --hosts 1 --ranks-per-host 2 --plan bad.json
echo 'name = "x"' > missing.toml
case_ "a hardware file missing a field" t simulate --hardware missing.toml
echo 'y,a,a' > dup.csv
echo '1,2,3' >> dup.csv
sed 's|path = "d.csv"|path = "dup.csv"|' c.toml > dup.toml
case_ "a CSV header naming a column twice" t train -q --config dup.toml --out r

echo
echo "# 12. Settings"
t datagen --part eval --out e.bin "${tiny[@]:0:6}" > /dev/null
cp e.bin "$(printf 'e-\377.bin')"
case_ "--eval-data with a name that is not UTF-8" t train -q --out utf "${tiny[@]}" --eval-data "$(printf 'e-\377.bin')"
case_ "profile, train.bad_rows = \"skip\"" t profile --config bad.toml --out bad.st --quiet --set 'train.bad_rows="skip"'
case_ "[cluster.drift] in one process" t train -q --out drift "${tiny[@]}" --max-steps 2 --set 'cluster.drift={check_every=2}'
towers=(--set 'model.towers={module="dlrm",count=2,d=4,c=1,p=0}' --set 'model.bottom_mlp=[8,4]')
t plan --hosts 2 --ranks-per-host 1 --output flat.json "${tiny[@]:0:6}" > /dev/null 2>&1
case_ "a DMT model on a plan without towers" t train -q --out dmt "${tiny[@]}" "${towers[@]}" --hosts 2 --ranks-per-host 1 --plan flat.json --max-steps 2
t plan --hosts 2 --ranks-per-host 1 --towers 2 --strategy table-wise --output towers.json "${tiny[@]:0:6}" > /dev/null 2>&1
case_ "a plan with towers for a model without" t train -q --out sptt "${tiny[@]}" --hosts 2 --ranks-per-host 1 --plan towers.json --max-steps 2
case_ "simulate --reproduce dmt --hardware dgx2" t simulate --reproduce dmt --hardware dgx2
case_ "simulate --towers 2 (flat only)" t simulate --towers 2
