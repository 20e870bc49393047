#!/usr/bin/env bash
# The binary before a change and after it, side by side in one run, interleaved so machine
# noise hits both alike: 1 process, dp 2, tp 2, pp 2 (1F1B) and cp 2, same model, batch and
# seed. Prints each layout's median tokens/s for both, the ratio after/before, and whether
# the losses agree (a structural change must not move them).
#
#   OLD=/path/to/old/strata bash bench/model/before_after.sh
#   REF=<commit> bash bench/model/before_after.sh     # builds REF's strata in a scratch worktree
#
# Environment: STRATA (after; default build/strata), THREADS=1, REPEATS=3, STEPS=10, SEQ=128,
# BATCH=8, MODEL=small, LAYOUTS (a subset of "one dp2 tp2 pp2 cp2"). docs/model.md records the figures.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-10}"
SEQ="${SEQ:-128}"
BATCH="${BATCH:-8}"
MODEL="${MODEL:-small}"
bench_need_strata model
bench_scratch

OLD="${OLD:-}"
if [[ -z "$OLD" ]]; then
  [[ -n "${REF:-}" ]] || { echo "bench/model: set OLD (a strata binary) or REF (a commit)" >&2; exit 1; }
  git -C "$ROOT" worktree add -q --detach "$OUT/old" "$REF"
  trap 'git -C "$ROOT" worktree remove --force "$OUT/old" 2>/dev/null; rm -rf "$OUT"' EXIT
  cmake -S "$OUT/old" -B "$OUT/old/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSTRATA_BENCH=OFF >/dev/null
  cmake --build "$OUT/old/build" -j "$(nproc)" --target strata >/dev/null
  OLD="$OUT/old/build/strata"
fi
[[ -x "$OLD" ]] || { echo "bench/model: $OLD is not an executable" >&2; exit 1; }

export OMP_NUM_THREADS="$THREADS"
common=(--model "$MODEL" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --threads "$THREADS"
        --sample-tokens 0 --eval-every 0 --eval-batches 1 --seed 7 --json)
declare -A layouts=(
  [one]=""
  [dp2]="--nproc 2 --zero 1"
  [tp2]="--nproc 2 --tp 2"
  [pp2]="--nproc 2 --pp 2 --schedule 1f1b --micro-batches 4"
  [cp2]="--nproc 2 --cp 2"
)
read -r -a order <<< "${LAYOUTS:-one dp2 tp2 pp2 cp2}"  # a subset: LAYOUTS="pp2 cp2"
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
for r in $(seq 1 "$REPEATS"); do
  for l in "${order[@]}"; do
    # shellcheck disable=SC2086  # the layout's flags are words
    "$OLD" train ${layouts[$l]} "${common[@]}" | summary > "$OUT/old_${l}_$r.json"
    # shellcheck disable=SC2086
    "$STRATA" train ${layouts[$l]} "${common[@]}" | summary > "$OUT/new_${l}_$r.json"
  done
  echo "repeat $r/$REPEATS done" >&2
done
"$PYTHON" "$ROOT/bench/model/report.py" "$OUT" "$REPEATS" "${order[@]}"
echo "threads $THREADS, model $MODEL, seq $SEQ, global batch $BATCH, $STEPS steps, $REPEATS repeats"
