#!/usr/bin/env bash
# Data parallelism on one host: strata ZeRO stage 0 against PyTorch DDP (gloo), weak scaling,
# stage 3 against stage 0, and the share of gradient communication hidden behind compute.
# Model `tiny` (4 layers, dim 256, seq 256), global batch 8, 2 ranks x THREADS thread(s),
# bucket BUCKET_MB for both engines. Runs are interleaved (strata z0, torch DDP, strata 1
# rank, strata z3, ...) so machine noise hits all alike; prints medians and ratios.
#
#   bash bench/zero/run.sh                      # BUILD=build THREADS=1 REPEATS=3 STEPS=20
#   BUCKET_MB=2 REPEATS=5 bash bench/zero/run.sh
#
# Targets (issue): stage 0 >= 1.3x DDP tokens/s; weak scaling (2 ranks vs 1 rank at the same
# per-rank batch) >= 90%; stage 3 step time <= 1.15x stage 0; >= 80% of gradient
# communication hidden, read from the --trace files.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-20}"
BUCKET_MB="${BUCKET_MB:-4}"
PREFETCH="${PREFETCH:-1}"
PRECISION="${PRECISION:-fp32}"
bench_need_strata zero

bench_scratch
export OMP_NUM_THREADS="$THREADS"
common=(--model tiny --seq 256 --steps "$STEPS" --threads "$THREADS" --sample-tokens 0
        --eval-batches 1 --precision "$PRECISION" --bucket-mb "$BUCKET_MB" --json)

# The last JSON object strata prints (the summary), with any "[rank R] " prefix removed.
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }

for r in $(seq 1 "$REPEATS"); do
  "$STRATA" train --nproc 2 --zero 0 --batch 8 "${common[@]}" | summary > "$OUT/z0_$r.json"
  "$PYTHON" "$ROOT/bench/zero/torch_ddp.py" --nproc 2 --batch 8 --threads "$THREADS" \
    --steps "$STEPS" --bucket-mb "$BUCKET_MB" > "$OUT/ddp_$r.json"
  "$STRATA" train --nproc 1 --zero 0 --batch 4 "${common[@]}" | summary > "$OUT/one_$r.json"
  "$STRATA" train --nproc 2 --zero 3 --prefetch "$PREFETCH" --batch 8 "${common[@]}" \
    | summary > "$OUT/z3_$r.json"
  echo "repeat $r/$REPEATS done" >&2
done
# Overlap, from a traced run of each stage (tracing costs a little, so it is a separate run).
for z in 0 3; do
  mkdir -p "$OUT/trace_z$z"
  "$STRATA" train --nproc 2 --zero "$z" --prefetch "$PREFETCH" --batch 8 "${common[@]}" \
    --trace --run-dir "$OUT/trace_z$z" > /dev/null
done

"$PYTHON" "$ROOT/bench/zero/report.py" "$OUT" "$REPEATS" "$THREADS" "$BUCKET_MB" "$PRECISION"
