#!/usr/bin/env bash
# Context parallelism on one host, side by side in one run, interleaved so machine noise hits
# all alike: strata cp 2 ring (zigzag), ring (contiguous), Ulysses, strata cp 1 (one process
# with both ranks' threads), and the PyTorch 1.13 peer running ring attention by hand over gloo
# (bench/cp/torch_cp.py). Same GPT (LAYERS x DIM, HEADS heads), same sequences (BATCH of SEQ
# tokens), 2 ranks x THREADS. Then one traced ring run for the overlap of the ring's transfers.
#
#   bash bench/cp/run.sh                # BUILD=build THREADS=1 REPEATS=2 STEPS=4 SEQ=4096
#
# Targets (issue): strata ring and Ulysses >= 1.3x the peer's tokens/s; per-rank attention
# time within 10% under zigzag. Prints tokens/s, ratios and the attention balance
# (bench/cp/report.py); docs/context_parallel.md records them.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-2}"
STEPS="${STEPS:-4}"
SEQ="${SEQ:-4096}"
BATCH="${BATCH:-1}"
LAYERS="${LAYERS:-2}"
DIM="${DIM:-128}"
HEADS="${HEADS:-4}"
bench_need_strata cp

bench_scratch
export OMP_NUM_THREADS="$THREADS"
model=(--layers "$LAYERS" --dim "$DIM" --heads "$HEADS" --max-seq "$SEQ" --seq "$SEQ"
       --vocab 256 --batch "$BATCH" --steps "$STEPS" --sample-tokens 0 --eval-batches 1
       --eval-every 0 --json)
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
for r in $(seq 1 "$REPEATS"); do
  "$STRATA" train "${model[@]}" --threads "$THREADS" --nproc 2 --cp 2 --cp-mode ring \
    --run-dir "$OUT/ring_$r" | summary > "$OUT/ring_$r.json"
  "$PYTHON" "$ROOT/bench/cp/torch_cp.py" --nproc 2 --layers "$LAYERS" --dim "$DIM" \
    --heads "$HEADS" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --threads "$THREADS" \
    > "$OUT/peer_$r.json"
  "$STRATA" train "${model[@]}" --threads "$THREADS" --nproc 2 --cp 2 --cp-mode ulysses \
    --run-dir "$OUT/uly_$r" | summary > "$OUT/uly_$r.json"
  "$STRATA" train "${model[@]}" --threads "$THREADS" --nproc 2 --cp 2 --cp-chunks contiguous \
    --run-dir "$OUT/cont_$r" | summary > "$OUT/cont_$r.json"
  OMP_NUM_THREADS=$((2 * THREADS)) "$STRATA" train "${model[@]}" --threads $((2 * THREADS)) \
    | summary > "$OUT/one_$r.json"
  echo "repeat $r/$REPEATS done" >&2
done
mkdir -p "$OUT/trace"
"$STRATA" train "${model[@]}" --threads "$THREADS" --nproc 2 --cp 2 --trace --steps 2 \
  --run-dir "$OUT/trace" > /dev/null
"$STRATA" trace merge "$OUT/trace" -o "$OUT/trace/merged.json" > /dev/null 2>&1 || true

"$PYTHON" "$ROOT/bench/cp/report.py" "$OUT" "$REPEATS"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed -e 's/Flags:.*\(avx512f\).*\(avx512_bf16\).*/Flags: ... \1 ... \2 .../'
