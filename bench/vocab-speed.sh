#!/usr/bin/env bash
# `towerrec vocab` against one `towerrec preprocess` pass over the same Criteo-format
# TSV (issue 39: vocabularies for 26 features over 10M rows within 2x the time of one
# preprocess pass, memory bounded and stated). Alternates the passes RUNS times; prints
# wall seconds and peak RSS (GNU time) of each, and the vocab command's own summary.
#
#   ROWS=10000000 RUNS=2 bench/vocab-speed.sh > docs/data/vocab-speed-$(date +%F).txt
#
# Env: ROWS (default 10M), RUNS (2), SKETCH (1: also time --sketch once; 0: not), DIR (scratch, default /tmp/towerrec-vocab-bench; the
# TSV is kept there between runs), BIN (default target/release/towerrec; build it with
# `cargo build --release -p towerrec`).
set -euo pipefail
ROWS=${ROWS:-10000000}
RUNS=${RUNS:-2}
DIR=${DIR:-/tmp/towerrec-vocab-bench}
BIN=$(realpath "${BIN:-target/release/towerrec}")
HERE=$(dirname "$(realpath "$0")")
mkdir -p "$DIR"
TSV="$DIR/criteo-$ROWS.tsv"
if [ ! -s "$TSV" ]; then
    awk -v rows="$ROWS" -v seed=1 -f "$HERE/criteo_like_tsv.awk" > "$TSV.tmp"
    mv "$TSV.tmp" "$TSV"
fi
cat > "$DIR/c.toml" <<TOML
[model]
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
batch_size = 16
[data]
format = "criteo"
path = "$(basename "$TSV")"
table_rows = [1000000]
TOML
echo "# $(date -u +%FT%TZ) $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?') on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $TSV: $ROWS rows, $(stat -c %s "$TSV") bytes"
timed() {
    local name=$1
    shift
    /usr/bin/time -f "$name: %e s wall, %M KiB peak RSS" "$@" > "$DIR/$name.out" 2> "$DIR/$name.err" || {
        cat "$DIR/$name.err" >&2
        exit 1
    }
    tail -n 1 "$DIR/$name.err"
}
# Warm the page cache once, so that no pass pays the first read.
cat "$TSV" > /dev/null
for run in $(seq 1 "$RUNS"); do
    echo "## run $run"
    timed preprocess "$BIN" preprocess --config "$DIR/c.toml" --out "$DIR/p.bin"
    rm -f "$DIR/p.bin"
    timed vocab "$BIN" vocab --config "$DIR/c.toml" --min-count 2 --out "$DIR/v.vocab"
done
if [ "${SKETCH:-1}" != 0 ]; then
    echo "## once: the bounded-memory mode"
    timed vocab-sketch "$BIN" vocab --config "$DIR/c.toml" --min-count 2 --sketch \
        --max-rows 100001 --out "$DIR/s.vocab"
fi
echo "## vocab summary (last exact run)"
cat "$DIR/vocab.out"
if [ "${SKETCH:-1}" != 0 ]; then
    echo "## vocab --sketch --max-rows 100001 summary"
    cat "$DIR/vocab-sketch.out"
fi
