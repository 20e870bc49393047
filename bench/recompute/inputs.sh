#!/usr/bin/env bash
# --recompute-inputs bf16 side by side with fp32 inputs (docs/recompute.md): strata `train
# --precision bf16 --recompute full` with the kept block inputs in fp32 and in bf16, the two
# runs interleaved REPEATS times, one process. Prints tokens/s (median over repeats of each
# run's median step), their ratio, the activation bytes each keeps (summary.json, equal to
# `strata plan --local`) and the final losses (the rounding's effect).
#
#   bash bench/recompute/inputs.sh  # MODEL=small SEQ=256 BATCH=2 THREADS=2 REPEATS=3 STEPS=20
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata recompute
MODEL="${MODEL:-small}"
SEQ="${SEQ:-256}"
BATCH="${BATCH:-2}"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-20}"
bench_scratch
export OMP_NUM_THREADS="$THREADS"

for r in $(seq 1 "$REPEATS"); do
  for inputs in fp32 bf16; do
    "$STRATA" train --model "$MODEL" --max-seq "$SEQ" --seq "$SEQ" --batch "$BATCH" \
      --micro-batch "$BATCH" --steps "$STEPS" --threads "$THREADS" --precision bf16 \
      --recompute full --recompute-inputs "$inputs" --eval-batches 1 --sample-tokens 0 \
      --run-dir "$OUT/run_${inputs}_$r" > /dev/null
  done
  echo "repeat $r/$REPEATS done" >&2
done

PYTHONPATH="$ROOT/bench" "$PYTHON" - "$OUT" "$REPEATS" "$MODEL" "$SEQ" "$BATCH" "$THREADS" <<'EOF'
import json, statistics, sys
from machine import machine_line
out, repeats, model, seq, batch, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
print(machine_line(threads))
print(f"model {model}, seq {seq}, batch {batch} (one micro-batch), bf16 compute, --recompute full, "
      f"{repeats} interleaved repeats")
med, act = {}, {}
for inputs in ("fp32", "bf16"):
    tok, loss = [], []
    for r in range(1, repeats + 1):
        s = json.load(open(f"{out}/run_{inputs}_{r}/summary.json"))
        tok.append(s["median_tokens_per_s"])
        loss.append(s["final_loss"])
        act[inputs] = (s["recompute"]["activation_bytes"], s["recompute"]["activation_bytes_plan"],
                       s["memory"]["activations"]["peak"])
    med[inputs] = statistics.median(tok)
    print(f"inputs {inputs}: tokens/s {med[inputs]:.0f} (" + " ".join(f"{t:.0f}" for t in tok) +
          f"); activations {act[inputs][0] / 2**20:.2f} MiB (plan {act[inputs][1] / 2**20:.2f}, "
          f"tracker peak {act[inputs][2] / 2**20:.2f}); final loss {loss[-1]:.4f}")
print(f"bf16 / fp32 inputs: tokens/s {med['bf16'] / med['fp32']:.3f}x, activation bytes "
      f"{act['bf16'][0] / act['fp32'][0]:.3f}x ({(act['fp32'][0] - act['bf16'][0]) / 2**20:.2f} MiB fewer)")
EOF
