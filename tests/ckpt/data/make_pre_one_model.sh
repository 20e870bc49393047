#!/usr/bin/env bash
# Regenerates tests/ckpt/data/pre_one_model: checkpoints written by strata at commit d03a807,
# the last one before the one-model change (one block, one trunk, one data-parallel/ZeRO
# engine for every layout; the pipeline's own engine and the one-process engine deleted):
#   pp2/      a 2-stage 1F1B pipeline (the stage engine of then), ZeRO 1 over dp 1
#   moe/      one process (the one-process engine of then) training an MoE model
# each at step 2 of 3, with step 3's metrics record of the uninterrupted run. Usage:
#   make_pre_one_model.sh PATH/TO/strata-built-at-d03a807
set -euo pipefail
strata=${1:?path to a strata binary built at commit d03a807}
here=$(cd "$(dirname "$0")" && pwd)/pre_one_model
run=$(mktemp -d /tmp/strata-pre-one-model-XXXXXX)
common=(--layers 2 --dim 8 --heads 2 --seq 8 --max-seq 8 --vocab 256 --data synthetic:400 --steps 3
        --batch 4 --ckpt-every 2 --ckpt-keep 0 --eval-every 0 --sample-tokens 0 --threads 1)
OMP_NUM_THREADS=1 "$strata" train "${common[@]}" --nproc 2 --pp 2 --micro-batches 2 --run-dir "$run/pp2"
OMP_NUM_THREADS=1 "$strata" train "${common[@]}" --experts 4 --top-k 2 --capacity-factor 0.5 \
  --micro-batch 1 --run-dir "$run/moe"
rm -rf "$here" && mkdir -p "$here"
for k in pp2 moe; do
  mkdir -p "$here/$k"
  cp -r "$run/$k/ckpt/step-000002" "$here/$k/"
  grep '"step":3' "$run/$k/metrics.jsonl" | grep '"loss"' > "$here/$k/reference.jsonl"
done
rm -rf "$run"
