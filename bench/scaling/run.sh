#!/usr/bin/env bash
# The scaling study of docs/report.md: calibrate the planner to this host on the study's
# model, then strong scaling at ZeRO 0 and 3 and weak scaling at ZeRO 0 over 1-4 ranks of one
# thread each (every point REPEAT times in interleaved rounds, the median kept), then one
# report over the three studies.
#
#   bash bench/scaling/run.sh     # BUILD=build, OUT=runs/scaling-bench, STEPS=20, REPEAT=3
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
OUT="${OUT:-$ROOT/runs/scaling-bench}"
STEPS="${STEPS:-20}"
REPEAT="${REPEAT:-3}"
MODEL=(--model tiny --seq 64)
export STRATA_CALIBRATION="$OUT/local-gpu.json"
mkdir -p "$OUT"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
"$BUILD/strata" plan calibrate "${MODEL[@]}" --batch 12 --steps 10
for zero in 0 3; do
  echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BUILD/strata" bench scaling --nproc 1,2,3,4 --repeat "$REPEAT" --strong --out "$OUT/strong-z$zero" \
    "${MODEL[@]}" --batch 12 --steps "$STEPS" --zero "$zero"
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/strata" bench scaling --nproc 1,2,3,4 --repeat "$REPEAT" --weak --out "$OUT/weak-z0" \
  "${MODEL[@]}" --batch 4 --steps "$STEPS" --zero 0
"$BUILD/strata" report "$OUT/strong-z0" "$OUT/strong-z3" "$OUT/weak-z0" -o "$OUT/report.html"
