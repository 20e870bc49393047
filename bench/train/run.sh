#!/usr/bin/env bash
# strata vs PyTorch, single process, the `tiny` GPT (4 layers, dim 256, 4 heads, seq 256,
# vocab 256), batch 8 = micro-batch 8, AdamW + clipping, same thread count. Runs the two
# interleaved (strata, torch, strata, torch, ...) so machine noise hits both alike, then prints
# tokens/s of each (median over repeats of the per-run median step), the ratio, and strata's
# MFU against the measured sgemm peak.
#
#   bash bench/train/run.sh                      # BUILD=build THREADS=2 REPEATS=3 STEPS=20
#   THREADS=1 REPEATS=5 bash bench/train/run.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-20}"
bench_need_strata train

bench_scratch
export OMP_NUM_THREADS="$THREADS"
for r in $(seq 1 "$REPEATS"); do
  "$STRATA" train --model tiny --seq 256 --batch 8 --micro-batch 8 --steps "$STEPS" \
    --threads "$THREADS" --sample-tokens 0 --eval-batches 1 --json | tail -n 1 \
    > "$OUT/strata_$r.json"
  "$PYTHON" "$ROOT/bench/train/torch_gpt.py" --steps "$STEPS" --threads "$THREADS" \
    > "$OUT/torch_$r.json"
  echo "repeat $r/$REPEATS done" >&2
done

"$PYTHON" - "$OUT" "$REPEATS" "$THREADS" <<'PY'
import json, platform, statistics, sys, datetime
out, repeats, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = [json.load(open(f"{out}/strata_{r}.json")) for r in range(1, repeats + 1)]
t = [json.load(open(f"{out}/torch_{r}.json")) for r in range(1, repeats + 1)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
st = statistics.median(x["median_tokens_per_s"] for x in s)
tt = statistics.median(x["tokens_per_s"] for x in t)
mfu = statistics.median(x["median_mfu"] for x in s)
print(f"machine: {cpu}, {threads} thread(s); {datetime.date.today()}; {t[0]['peer']}")
print(f"model tiny ({s[0]['params']} params), seq 256, batch 8, AdamW, {repeats} interleaved repeats")
print(f"{'repeat':>6} {'strata tok/s':>13} {'torch tok/s':>12} {'ratio':>6} {'strata MFU':>10}")
for r, (a, b) in enumerate(zip(s, t), 1):
    print(f"{r:>6} {a['median_tokens_per_s']:>13.0f} {b['tokens_per_s']:>12.0f} "
          f"{a['median_tokens_per_s'] / b['tokens_per_s']:>6.2f} {100 * a['median_mfu']:>9.1f}%")
print(f"median: strata {st:.0f} tok/s, pytorch {tt:.0f} tok/s, ratio {st / tt:.2f}x "
      f"(target >= 1.3x)")
print(f"strata MFU {100 * mfu:.1f}% of the {s[0]['peak_gflops']:.1f} GFLOP/s sgemm peak "
      f"({s[0]['peak_source']}; target >= 60%)")
PY
