#!/usr/bin/env bash
# Regenerates tests/ckpt/data/v1: a checkpoint in the range-based manifest format (version 1),
# written by strata at commit c23ecd8 (the last one that wrote it). Usage:
#   make_v1.sh PATH/TO/strata-built-at-c23ecd8
set -euo pipefail
strata=${1:?path to a strata binary built at commit c23ecd8}
here=$(cd "$(dirname "$0")" && pwd)
run=$(mktemp -d /tmp/strata-v1-fixture-XXXXXX)
OMP_NUM_THREADS=1 "$strata" train --model tiny --layers 1 --dim 4 --heads 2 --max-seq 8 --vocab 256 \
  --steps 3 --batch 2 --ckpt-every 2 --nproc 2 --zero 1 --eval-every 0 --sample-every 0 \
  --run-dir "$run/run"
rm -rf "$here/v1" && mkdir -p "$here/v1"
cp -r "$run/run/ckpt/step-000002" "$here/v1/"
# Step 3 of the uninterrupted run, which a resume from step 2 must reproduce bit for bit.
grep '"step":3' "$run/run/metrics.jsonl" | grep '"loss"' > "$here/v1/reference.jsonl"
rm -rf "$run"
