#!/usr/bin/env bash
# Mixture of Experts, side by side in one run (docs/moe.md):
#  1. one MoE block forward+backward, strata (bench_moe) against PyTorch 1.13 running the same
#     layer (torch_moe.py: router, top-k, capacity, loop over experts), interleaved REPEATS x;
#  2. expert parallelism on 2 ranks: ep 2 against ep 1 (dp 2, every expert on each rank), the
#     all-to-all share of the step read from the traces, weak scaling against 1 rank with
#     half the batch, and per-rank model states and gradient reduce bytes (summary.json);
#  3. MoE (E = 8, K = 2, every 2nd block of 6) against a dense model of 8 blocks (the same
#     active matmul FLOPs per token: 3 x 20C^2 + 3 x 12C^2 = 8 x 12C^2) on the synthetic
#     corpus for the same tokens: final loss, eval loss, tokens/s, peak memory.
#
#   bash bench/moe/run.sh                 # BUILD=build THREADS=1 REPEATS=3 STEPS=150
#   PARTS=ep EP_STEPS=10 bash bench/moe/run.sh   # part 2 only, short (PARTS: layer ep corpus)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
BENCH="${BENCH_MOE:-$BUILD/bench/bench_moe}"
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-150}"
EP_STEPS="${EP_STEPS:-30}"
PARTS="${PARTS:-layer ep corpus}"
part() { [[ " $PARTS " == *" $1 "* ]]; }
[[ -x "$STRATA" ]] && { ! part layer || [[ -x "$BENCH" ]]; } ||
  { echo "bench/moe: build strata and bench_moe (-DSTRATA_BENCH=ON)" >&2; exit 1; }
bench_scratch
export OMP_NUM_THREADS="$THREADS"
LAYER=(--tokens 2048 --dim 256 --experts 8 --top-k 2 --capacity 1.25 --iters 10)
for r in $(seq 1 "$REPEATS"); do
  part layer || break
  "$BENCH" "${LAYER[@]}" >> "$OUT/layer.jsonl"
  "$PYTHON" "$ROOT/bench/moe/torch_moe.py" "${LAYER[@]}" --threads "$THREADS" >> "$OUT/layer.jsonl"
done

summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
small=(--layers 4 --dim 128 --heads 4 --max-seq 64 --seq 64 --experts 8 --top-k 2 --steps "$EP_STEPS"
       --sample-tokens 0 --eval-batches 1 --threads "$THREADS" --json --trace)
for r in $(seq 1 "$REPEATS"); do
  part ep || break
  for ep in 1 2; do
    "$STRATA" train --nproc 2 --ep "$ep" --batch 16 "${small[@]}" --run-dir "$OUT/ep${ep}_$r" \
      | summary > "$OUT/ep${ep}_$r.json"
  done
  "$STRATA" train --batch 8 "${small[@]}" --run-dir "$OUT/one_$r" | summary > "$OUT/one_$r.json"
done

if part corpus; then
corpus=(--dim 128 --heads 4 --max-seq 64 --seq 64 --batch 8 --steps "$STEPS" --lr 3e-3
        --sample-tokens 0 --eval-batches 4 --threads "$THREADS" --json)
"$STRATA" train --layers 6 --experts 8 --top-k 2 --moe-every 2 "${corpus[@]}" \
  --run-dir "$OUT/moe" | summary > "$OUT/moe.json"
"$STRATA" train --layers 8 "${corpus[@]}" --run-dir "$OUT/dense" | summary > "$OUT/dense.json"
fi
lscpu | grep -m1 'Model name' > "$OUT/cpu.txt" || true

"$PYTHON" "$ROOT/bench/moe/report.py" "$OUT" "$REPEATS"
