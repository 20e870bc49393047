#!/usr/bin/env bash
# MoE with tensor parallelism on 2 ranks (docs/moe.md, "MoE x tensor parallelism"): tp 2
# (experts' hidden units split over the 2 ranks, with and without sequence parallelism)
# against tp 1 x dp 2 (every expert whole on each rank), the same global batch, interleaved
# REPEATS x; tokens/s (median of each run's steps) and model states per rank.
#
#   bash bench/moe/tp.sh                  # BUILD=build THREADS=1 REPEATS=3 STEPS=20
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata moe
THREADS="${THREADS:-1}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-20}"
bench_scratch
export OMP_NUM_THREADS="$THREADS"
summary() { sed -e 's/^\[rank [0-9]*\] //' | grep '^{' | tail -n 1; }
small=(--layers 4 --dim 128 --heads 4 --max-seq 64 --seq 64 --experts 8 --top-k 2 --batch 16
       --steps "$STEPS" --sample-tokens 0 --eval-batches 1 --threads "$THREADS" --json)
declare -A layout=([dp2]="--dp 2" [tp2]="--tp 2" [tp2nosp]="--tp 2 --no-sp")
for r in $(seq 1 "$REPEATS"); do
  for n in dp2 tp2 tp2nosp; do
    # shellcheck disable=SC2086
    "$STRATA" train --nproc 2 ${layout[$n]} "${small[@]}" --run-dir "$OUT/${n}_$r" \
      | summary > "$OUT/${n}_$r.json"
  done
done
"$PYTHON" - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def runs(n):
    return [json.load(open(f"{out}/{n}_{r}.json")) for r in range(1, repeats + 1)]
def states(j):
    m = j.get("memory", {})
    return sum(m.get(k, {}).get("peak", 0) for k in ("parameters", "gradients", "optimizer")) / 2**20
tps = {n: [j["median_tokens_per_s"] for j in runs(n)] for n in ("dp2", "tp2", "tp2nosp")}
print("2 ranks, 4 blocks C 128 (all MoE, E 8, K 2, F 1.25), batch 16 x 64, "
      f"{repeats} interleaved repeats (tokens/s, median):")
for n, what in (("dp2", "tp 1 x dp 2"), ("tp2", "tp 2, SP"), ("tp2nosp", "tp 2, no SP")):
    print(f"  {what:12s} {statistics.median(tps[n]):7.0f} tok/s (repeats "
          f"{', '.join(f'{x:.0f}' for x in tps[n])}), model states rank 0 "
          f"{states(runs(n)[0]):.1f} MiB; vs tp 1 x dp 2: "
          f"{statistics.median(tps[n]) / statistics.median(tps['dp2']):.2f}x")
PY
