#!/usr/bin/env bash
# Long context under one activation budget per rank: for cp 1, 2 and 4, the longest sequence
# (a multiple of STEP tokens) whose activations per rank fit BUDGET_MB, found with the
# prediction `strata plan --local --cp C` prints (and --max-activation-mb enforces), then
# trained for one step at that length to read the measured activation peak of rank 0
# (summary.json memory.activations.peak) and confirmed refused one STEP longer.
#
#   bash bench/cp/long_context.sh          # BUDGET_MB=48 BUILD=build MODE=ring
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
BUDGET_MB="${BUDGET_MB:-48}"
MODE="${MODE:-ring}"
STEP="${STEP:-512}"
MAXSEQ="${MAXSEQ:-65536}"
arch=(--layers 2 --heads 4)
bench_scratch
export OMP_NUM_THREADS=1

predict() {  # cp seq -> MiB of activations per rank
  "$STRATA" plan --local "${arch[@]}" --dim 64 --vocab 256 --max-seq "$2" --seq "$2" --cp "$1" \
    --cp-mode "$MODE" --micro-batch 1 --precision fp32 --json |
    "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["ranks"][0]["activations"] / 2**20)'
}
fits() { "$PYTHON" -c "import sys; sys.exit(0 if $1 <= $BUDGET_MB else 1)"; }

printf "%-4s %-10s %-14s %-14s %-10s %s\n" cp "longest" "plan MiB" "measured MiB" "s/step" "one STEP longer"
for C in 1 2 4; do
  lo=0 hi=$((MAXSEQ / STEP))
  while (( lo < hi )); do  # largest k with predict(k * STEP) <= budget
    mid=$(( (lo + hi + 1) / 2 ))
    if fits "$(predict "$C" $((mid * STEP)))"; then lo=$mid; else hi=$((mid - 1)); fi
  done
  seq=$((lo * STEP))
  run=(train "${arch[@]}" --dim 64 --vocab 256 --batch 1 --steps 1 --sample-tokens 0
       --eval-batches 1 --eval-every 0 --threads 1 --cp "$C"
       --max-activation-mb "$BUDGET_MB")
  [[ $C -gt 1 ]] && run+=(--nproc "$C" --cp-mode "$MODE")  # train refuses --cp-mode with --cp 1
  t0=$(date +%s.%N)
  "$STRATA" "${run[@]}" --max-seq "$seq" --seq "$seq" --run-dir "$OUT/cp$C" > /dev/null
  t1=$(date +%s.%N)
  measured=$("$PYTHON" -c "import json; s=json.load(open('$OUT/cp$C/summary.json')); print(round(s['memory']['activations']['peak'] / 2**20, 1))")
  next=$((seq + STEP))
  refused=$("$STRATA" "${run[@]}" --max-seq "$next" --seq "$next" 2>&1 >/dev/null | head -n 1 || true)
  printf "%-4s %-10s %-14.1f %-14s %-10.1f %s\n" "$C" "$seq" "$(predict "$C" "$seq")" "$measured" \
    "$("$PYTHON" -c "print($t1 - $t0)")" "${refused:-(not refused)}"
done
