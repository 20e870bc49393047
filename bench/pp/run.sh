#!/usr/bin/env bash
# Pipeline parallelism on 2 ranks, side by side in one run, interleaved so machine noise hits
# all alike: for M = 2, 4, 8, 16 micro-batches (2 sequences each), strata pp 2 with 1F1B,
# the PyTorch 1.13 peer running a hand-written 1F1B with torch.distributed send/recv over gloo
# (bench/pp/torch_pp.py: same model, same 2+2 layer split, same M), and strata pp 2 with
# zero-bubble (ZB-H1). Model: 4 layers, dim 256, 4 heads, seq 128, vocab 256; 1 thread per
# rank.
#
#   bash bench/pp/run.sh                 # BUILD=build STEPS=8 MS="2 4 8 16"
#   BEFORE=/path/to/older/strata bash bench/pp/run.sh   # also that binary's 1F1B, per M
#   PEER=0 bash bench/pp/run.sh          # without the PyTorch peer (bubble only)
#
# Each summary's pipeline record also has the planner's bubble for the run (the schedule
# run with the measured layer costs and stage-to-stage message time, parallel/pipeline/predict.h),
# that model replayed with each step's measured stage compute (stages slowed unevenly by other
# work on the machine included), and the share of the schedule each stage spent waiting for messages its peer had already
# sent (the transport's part of the bubble; the rest is waiting on a peer still computing).
#
# Targets (issue): 1F1B's measured bubble within 10% (relative) of (P−1)/(M+P−1); zero-bubble's
# below 1F1B's at the same M; strata >= 1.3x the peer's tokens/s. Prints a table
# (bench/pp/report.py); docs/pipeline.md records it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
STEPS="${STEPS:-8}"
MS="${MS:-2 4 8 16}"
bench_need_strata pp
bench_scratch
export OMP_NUM_THREADS=1
model=(--layers 4 --dim 256 --heads 4 --seq 128 --vocab 256)
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
for M in $MS; do
  B=$((2 * M))
  common=("${model[@]}" --batch "$B" --micro-batches "$M" --steps "$STEPS" --threads 1
          --sample-tokens 0 --eval-batches 1 --nproc 2 --pp 2 --pp-split 2,2 --json)
  "$STRATA" train "${common[@]}" --schedule 1f1b --run-dir "$OUT/1f1b_$M" | summary > "$OUT/1f1b_$M.json"
  if [[ -n "${BEFORE:-}" ]]; then
    "$BEFORE" train "${common[@]}" --schedule 1f1b --run-dir "$OUT/before_$M" | summary > "$OUT/before_$M.json"
  fi
  if [[ "${PEER:-1}" != 0 ]]; then
    "$PYTHON" "$ROOT/bench/pp/torch_pp.py" --layers 4 --dim 256 --heads 4 --seq 128 --vocab 256 \
      --batch "$B" --micro-batches "$M" --steps "$STEPS" --threads 1 > "$OUT/peer_$M.json"
  fi
  "$STRATA" train "${common[@]}" --schedule zb --run-dir "$OUT/zb_$M" | summary > "$OUT/zb_$M.json"
  echo "M $M done" >&2
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(lscpu | grep 'Model name' | sed 's/  */ /g')"
"$PYTHON" "$ROOT/bench/pp/report.py" "$OUT" "$MS"
