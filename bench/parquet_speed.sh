#!/usr/bin/env bash
# Parquet (snappy, row groups of 131072) against the binary format, both read from the
# page cache into batches of 2048 (towerrec_data::next_batch), on a generated click log
# of ROWS rows (default 500000): 2 dense + 1 int dense with nulls, a string, an int64
# id, a list and a separated string column. Prints rows/s per round, alternated.
# Usage: bench/parquet_speed.sh [ROWS] > docs/data/parquet-speed-<date>.txt
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --short HEAD
PARQUET_SPEED_ROWS="${1:-500000}" cargo test --release -p towerrec-data \
  --test suite parquet_reader::parquet_speed -- --ignored --nocapture 2>&1 \
  | grep -E "rows|round"
