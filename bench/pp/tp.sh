#!/usr/bin/env bash
# Pipeline x tensor parallel against the pipeline alone, on the same model, interleaved in one
# run: pp 2 (2 ranks) and pp 2 · tp 2 (4 ranks, sequence parallel; zero-bubble also without
# it), 1F1B and zero-bubble, M = 4 micro-batches of 2 sequences. Model as bench/pp/run.sh: 4
# layers, dim 256, 4 heads, seq 128, vocab 256; 1 thread per rank.
#
#   bash bench/pp/tp.sh                  # BUILD=build STEPS=8 ROUNDS=2
#
# Per layout and round: median tokens/s, each stage's parameters and activation bytes (its
# slots and scratch, the stage's own count), rank 0's peak memory. 4 ranks on fewer than 4
# cores measure oversubscription as well as the schedule: name the CPU with the figures.
# Prints a table (bench/pp/tp_report.py); docs/pipeline.md records it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
STEPS="${STEPS:-8}"
ROUNDS="${ROUNDS:-2}"
bench_need_strata pp
bench_scratch
export OMP_NUM_THREADS=1
common=(--layers 4 --dim 256 --heads 4 --seq 128 --vocab 256 --batch 8 --micro-batches 4
        --steps "$STEPS" --threads 1 --sample-tokens 0 --eval-batches 1 --pp 2 --pp-split 2,2
        --json)
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
layouts=("pp2_1f1b:--nproc 2 --schedule 1f1b" "pp2tp2_1f1b:--nproc 4 --tp 2 --schedule 1f1b"
         "pp2_zb:--nproc 2 --schedule zb" "pp2tp2_zb:--nproc 4 --tp 2 --schedule zb"
         "pp2tp2nosp_zb:--nproc 4 --tp 2 --no-sp --schedule zb")
names=()
for l in "${layouts[@]}"; do names+=("${l%%:*}"); done
for r in $(seq 1 "$ROUNDS"); do
  for l in "${layouts[@]}"; do
    name="${l%%:*}"
    # shellcheck disable=SC2086
    "$STRATA" train "${common[@]}" ${l#*:} --run-dir "$OUT/${name}_$r" | summary \
      > "$OUT/${name}_$r.json"
  done
  echo "round $r done" >&2
done
"$PYTHON" "$ROOT/bench/pp/tp_report.py" "$OUT" "$ROUNDS" "${names[@]}"
