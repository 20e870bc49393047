#!/usr/bin/env bash
# Tensor parallelism on one host, side by side in one run, interleaved so machine noise hits
# all alike: strata tp 2 (sequence parallel, the default), strata tp 2 --no-sp, strata dp 2
# (ZeRO 0), and the PyTorch 1.13 peer running the same Megatron-style tensor parallelism by
# hand over gloo (bench/tp/torch_tp.py, all-reduce form). Same model (`small`: 6 layers,
# dim 384, 6 heads), same global batch (BATCH sequences of SEQ tokens), 2 ranks x THREADS.
# Then one traced tp 2 run for the share of step time spent in tp collectives.
#
#   bash bench/tp/run.sh                         # BUILD=build THREADS=1 REPEATS=2 STEPS=8
#
# Target (issue): strata tp 2 >= 1.3x the peer's tokens/s. Prints tokens/s, activation
# memory per rank and ratios (bench/tp/report.py); docs/tensor_parallel.md records them.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-2}"
STEPS="${STEPS:-8}"
SEQ="${SEQ:-128}"
BATCH="${BATCH:-8}"
MODEL="${MODEL:-small}"
bench_need_strata tp

bench_scratch
export OMP_NUM_THREADS="$THREADS"
common=(--model "$MODEL" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --threads "$THREADS"
        --sample-tokens 0 --eval-batches 1 --nproc 2 --json)
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
read -r L D H < <("$STRATA" train --model "$MODEL" --steps 1 --batch 1 --seq 8 --sample-tokens 0 \
  --eval-batches 1 --json | summary | "$PYTHON" -c \
  'import json,sys; c=json.load(sys.stdin)["config"]; print(c["layers"], c["dim"], c["heads"])')

for r in $(seq 1 "$REPEATS"); do
  "$STRATA" train --tp 2 "${common[@]}" --run-dir "$OUT/tp_$r" | summary > "$OUT/tp_$r.json"
  "$PYTHON" "$ROOT/bench/tp/torch_tp.py" --nproc 2 --layers "$L" --dim "$D" --heads "$H" \
    --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --threads "$THREADS" > "$OUT/peer_$r.json"
  "$STRATA" train --tp 2 --no-sp "${common[@]}" --run-dir "$OUT/nosp_$r" | summary > "$OUT/nosp_$r.json"
  "$STRATA" train --zero 0 "${common[@]}" | summary > "$OUT/dp_$r.json"
  echo "repeat $r/$REPEATS done" >&2
done
mkdir -p "$OUT/trace"
"$STRATA" train --tp 2 "${common[@]}" --trace --run-dir "$OUT/trace" > /dev/null

"$PYTHON" "$ROOT/bench/tp/report.py" "$OUT" "$REPEATS" "$THREADS" "$MODEL" "$SEQ" "$BATCH"
