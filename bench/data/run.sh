#!/usr/bin/env bash
# Loader throughput against the rate `tiny` trains at on 2 ranks, interleaved.
#
# Each repeat runs bench_loader (writes a TOKENS-token llm.c .bin file to a temp dir, pulls a
# whole epoch of rank 0's batches through Loader::next with prefetch: tokens/s and CPU cores
# used), then a short `strata train --model tiny` on 2 ranks (batch 16 = micro-batch 8 x 2
# ranks, seq 256) and reads its median tokens/s. The ratio compares ONE rank's loader with
# the WHOLE 2-rank training rate (the stricter reading: each rank needs only half of it).
# A second loader run per repeat turns on document starts (--doc-mask) and reads a 0.7/0.3
# mixture of two files, to show what masks and mixtures cost the loader.
# Without `--nproc` support in `strata train`, the single-process run on the same 2 threads
# stands in for the 2-rank rate (same cores, same global batch) and the output says so.
#
#   bash bench/data/run.sh          # BUILD=build TOKENS=100000000 REPEATS=3 STEPS=20
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
LOADER="${LOADER:-$BUILD/bench/bench_loader}"
TOKENS="${TOKENS:-100000000}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-20}"
for exe in "$STRATA" "$LOADER"; do
  [[ -x "$exe" ]] || { echo "bench/data: $exe not built (make bench)" >&2; exit 1; }
done

bench_scratch
if "$STRATA" train --help 2>/dev/null | grep -- "--nproc" >/dev/null; then  # no -q: pipefail and SIGPIPE
  TRAIN=("$STRATA" train --nproc 2 --threads 1)
  MODE="2 ranks x 1 thread"
else
  TRAIN=("$STRATA" train --threads 2)
  MODE="1 process x 2 threads (no --nproc yet)"
fi
for r in $(seq 1 "$REPEATS"); do
  "$LOADER" --tokens "$TOKENS" --world 2 --micro-batch 8 --seq 256 --json > "$OUT/loader_$r.json"
  "$LOADER" --tokens "$TOKENS" --world 2 --micro-batch 8 --seq 256 --doc-mask --mixture --json \
    > "$OUT/loader_mix_$r.json"
  OMP_NUM_THREADS=1 "${TRAIN[@]}" --model tiny --data synthetic --batch 16 --micro-batch 8 \
    --steps "$STEPS" --sample-tokens 0 --eval-batches 1 --json | tail -n 1 > "$OUT/train_$r.json"
  echo "repeat $r/$REPEATS done" >&2
done

"$PYTHON" - "$OUT" "$REPEATS" "$MODE" <<'EOF'
import json, statistics, sys
out, repeats, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
L = [json.load(open(f"{out}/loader_{r}.json")) for r in range(1, repeats + 1)]
M = [json.load(open(f"{out}/loader_mix_{r}.json")) for r in range(1, repeats + 1)]
T = [json.load(open(f"{out}/train_{r}.json")) for r in range(1, repeats + 1)]
def med(xs): return statistics.median(xs)
load_tps = med([l["prefetch_run"]["tokens_per_s"] for l in L])
mix_tps = med([m["prefetch_run"]["tokens_per_s"] for m in M])
sync_tps = med([l["sync_run"]["tokens_per_s"] for l in L])
cores = med([l["prefetch_run"]["cores"] for l in L])
cpu_ns = med([l["prefetch_run"]["cpu_s"] / l["prefetch_run"]["tokens"] * 1e9 for l in L])
paced_wait = med([l["paced_run"]["wait_s"] / l["paced_run"]["steps"] * 1e3 for l in L])
train_tps = med([t.get("median_tokens_per_s", 0) for t in T])
print(f"file: {L[0]['file_tokens']} tokens; open + validate {med([l['open_validate_s'] for l in L]):.3f} s")
print(f"loader, one rank (prefetch {L[0]['prefetch']}): {load_tps/1e6:.1f} M tokens/s at {cores:.2f} cores "
      f"(synchronous {sync_tps/1e6:.1f} M tokens/s)")
print(f"paced at {L[0]['paced_ms']} ms/step: next() waits {paced_wait:.4f} ms per step")
print(f"tiny training, {mode}: {train_tps:.0f} tokens/s (median of {repeats} runs of the median step)")
if train_tps > 0:
    print(f"ratio: {load_tps / train_tps:.0f}x the whole 2-rank training rate "
          f"({2 * load_tps / train_tps:.0f}x a rank's share); target >= 50x")
    print(f"with document starts and a 0.7/0.3 mixture: {mix_tps/1e6:.1f} M tokens/s, "
          f"{mix_tps / train_tps:.0f}x the whole 2-rank training rate ({mix_tps / load_tps:.2f}x the plain loader)")
    print(f"loader CPU: {cpu_ns:.1f} ns per token, i.e. {100 * cpu_ns * 1e-9 * train_tps / 2:.3f}% "
          f"of a core per rank at the training rate")
EOF
