#!/usr/bin/env bash
# Checkpoint stall and write time, strata vs torch.save, interleaved on the same disk.
#
# For each size (tiny: 3.3M params, gpt2: 124M params; 4 fp32 states each = 16 bytes/param)
# and each repeat: bench_ckpt on 1 and 2 ranks (threads; ZeRO stage 1), then the torch.save
# peer on the same bytes. strata's stall is the copy into the host buffer (the writer thread
# does the rest); torch.save's stall is the whole synchronous save. When `strata train`
# works, the stall is also put against a measured tiny step (single process, batch 16).
# Last, fault recovery on `tiny` over 2 ranks (recovery.py): the save stall of a real
# `strata train --nproc 2 --ckpt-every 5` as a share of its step, and the time from a rank's
# SIGKILL to the first completed step after the supervisor's restart (RECOVERY_REPS runs).
#
#   bash bench/ckpt/run.sh        # BUILD=build REPEATS=3 SIZES="tiny gpt2" DIR=/tmp
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
BENCH="${BENCH:-$BUILD/bench/bench_ckpt}"
REPEATS="${REPEATS:-3}"
RECOVERY_REPS="${RECOVERY_REPS:-3}"
SIZES="${SIZES:-tiny gpt2}"
[[ -x "$BENCH" ]] || { echo "bench/ckpt: $BENCH not built (make bench)" >&2; exit 1; }
OUT="$(mktemp -d "${DIR:-/tmp}/strata-bench-ckpt.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT

for size in $SIZES; do
  reps=5; [[ $size == gpt2 ]] && reps=2
  for r in $(seq 1 "$REPEATS"); do
    for w in 1 2; do
      "$BENCH" --model "$size" --world "$w" --stage 1 --reps "$reps" --dir "$OUT/run" --json \
        >> "$OUT/strata_${size}_w$w.jsonl"
    done
    if "$PYTHON" -c "import torch" 2>/dev/null; then
      params="$("$PYTHON" -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['params'])" \
        "$OUT/strata_${size}_w1.jsonl")"
      "$PYTHON" "$ROOT/bench/ckpt/peer_torch_save.py" --params "$params" --reps "$reps" \
        --dir "$OUT/peer" >> "$OUT/torch_$size.jsonl"
    fi
    echo "$size: repeat $r/$REPEATS done" >&2
  done
done

STEP_MS=""
if [[ -x "$STRATA" ]] && OMP_NUM_THREADS=1 "$STRATA" train --model tiny --data synthetic --batch 16 \
    --steps 8 --threads 2 --sample-tokens 0 --eval-batches 1 --json > "$OUT/train.jsonl" 2>/dev/null; then
  STEP_MS="$("$PYTHON" -c "
import json,sys
s=json.loads(open('$OUT/train.jsonl').read().strip().splitlines()[-1])
tps=s.get('median_tokens_per_s',0)
print(16*256/tps*1e3 if tps else '')")"
fi

"$PYTHON" - "$OUT" "$SIZES" "$STEP_MS" <<'PY'
import json, os, statistics, sys
out, sizes, step_ms = sys.argv[1], sys.argv[2].split(), sys.argv[3]
med = statistics.median
for size in sizes:
    for w in (1, 2):
        S = [json.loads(l) for l in open(f"{out}/strata_{size}_w{w}.jsonl")]
        stall = med(s["stall_ms_median"] for s in S)
        save = med(s["save_s_median"] for s in S)
        load = med(s["load_s"] for s in S)
        print(f"{size} ({S[0]['params']/1e6:.1f}M params, {S[0]['bytes']/1e6:.0f} MB), strata {w} rank(s): "
              f"stall {stall:.2f} ms (max {max(s['stall_ms_max'] for s in S):.2f}), background save "
              f"{save:.3f} s ({S[0]['bytes']/save/1e9:.2f} GB/s), load {load:.3f} s")
    tp = f"{out}/torch_{size}.jsonl"
    if os.path.exists(tp):
        T = [json.loads(l) for l in open(tp)]
        tsave = med(t["torch_save_s_median"] for t in T)
        clone = med(t["clone_ms_median"] for t in T)
        S1 = [json.loads(l) for l in open(f"{out}/strata_{size}_w1.jsonl")]
        stall1 = med(s["stall_ms_median"] for s in S1)
        save1 = med(s["save_s_median"] for s in S1)
        print(f"{size} torch.save + fsync: {tsave:.3f} s stall ({T[0]['bytes']/tsave/1e9:.2f} GB/s), "
              f"clone {clone:.2f} ms, torch.load {med(t['torch_load_s_median'] for t in T):.3f} s")
        print(f"{size} ratios (1 rank): stall torch.save/strata = {tsave*1e3/stall1:.0f}x; "
              f"write time strata/torch.save = {save1/tsave:.2f}")
    if size == "tiny" and step_ms:
        S2 = [json.loads(l) for l in open(f"{out}/strata_tiny_w2.jsonl")]
        stall2 = med(s["stall_ms_median"] for s in S2)
        print(f"tiny step (single process, 2 threads, batch 16): {float(step_ms):.1f} ms; "
              f"2-rank stall = {100*stall2/float(step_ms):.2f}% of a step")
PY

if [[ -x "$STRATA" && "$RECOVERY_REPS" -gt 0 ]]; then
  "$PYTHON" "$ROOT/bench/ckpt/recovery.py" --strata "$STRATA" --model tiny --nproc 2 --zero 1 \
    --reps "$RECOVERY_REPS"
fi
