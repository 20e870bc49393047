#!/usr/bin/env bash
# Muon against AdamW, side by side in one invocation (docs/muon.md, "Measured"):
#   1. held-out loss against tokens for each optimizer at each learning rate of a small sweep,
#      on real text (Tiny Shakespeare with GPT-2's BPE, from ../shared/data: the product never
#      needs them) and on the synthetic corpus; the tokens Muon's best run needs to reach AdamW's
#      best final held-out loss, as a fraction of AdamW's tokens;
#   2. step time at dp 2 ZeRO 1 (Muon's gathers, scatters and Newton-Schulz against AdamW),
#      alternating the two optimizers over ROUNDS rounds, median of each run's median ms/step.
#
#   bash bench/muon/vs_adamw.sh      # STEPS=200 EVAL_EVERY=20 LRS="3e-4 1e-3 3e-3 1e-2 3e-2" ROUNDS=3
#   DATASETS= ROUNDS=5 bash bench/muon/vs_adamw.sh   # the step times alone
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
STEPS="${STEPS:-200}"
EVAL_EVERY="${EVAL_EVERY:-20}"
LRS="${LRS:-3e-4 1e-3 3e-3 1e-2 3e-2}"
ROUNDS="${ROUNDS:-3}"
THREADS="${THREADS:-$(nproc)}"  # the loss runs; the timing runs use 1 thread per rank
DATASETS="${DATASETS-text synthetic}"  # empty: the step times alone
bench_need_strata muon
bench_scratch
"$PYTHON" -c "import sys; sys.path.insert(0, '$ROOT/bench'); from machine import machine_line; print(machine_line(1))"
shared="$ROOT/../shared/data"
for d in $DATASETS; do
  if [[ $d == text ]]; then
    "$STRATA" data prepare "$shared/tinyshakespeare.txt" --tokenizer "$shared/gpt2-bpe" --val-tokens 16384 \
      -o "$OUT/shakespeare" >/dev/null
    model="--layers 4 --dim 128 --heads 4 --seq 64 --max-seq 64 --vocab 50257 --batch 8 --data $OUT/shakespeare"
  else
    model="--layers 4 --dim 128 --heads 4 --seq 64 --max-seq 64 --vocab 256 --batch 16"
  fi
  echo "== $d: $model; $STEPS steps, eval every $EVAL_EVERY (4 held-out batches)"
  for opt in adamw muon; do
    for lr in $LRS; do
      "$STRATA" train $model --optimizer $opt --lr $lr --steps $STEPS --warmup $((STEPS / 20)) --threads $THREADS \
        --sample-tokens 0 --eval-every $EVAL_EVERY --eval-batches 4 --peak-gflops 100 \
        --run-dir "$OUT/$d-$opt-$lr" >/dev/null 2>&1 || echo "   $opt lr $lr: failed"
    done
  done
  "$PYTHON" - "$OUT" "$d" "$LRS" <<'PY'
import json, sys
out, d, lrs = sys.argv[1], sys.argv[2], sys.argv[3].split()
def curve(opt, lr):
    pts = []
    for line in open(f"{out}/{d}-{opt}-{lr}/metrics.jsonl"):
        r = json.loads(line)
        if "eval_loss" in r:
            pts.append((r["step"], r["step"], r["eval_loss"]))
    return pts
runs = {(o, lr): curve(o, lr) for o in ("adamw", "muon") for lr in lrs}
for (o, lr), pts in runs.items():
    print(f"   {o:5s} lr {lr:>5s}: " + " ".join(f"{p[2]:.3f}" for p in pts))
best = {o: min(((lr, pts) for (oo, lr), pts in runs.items() if oo == o and pts), key=lambda x: x[1][-1][2])
        for o in ("adamw", "muon")}
(alr, a), (mlr, m) = best["adamw"], best["muon"]
target, a_step = a[-1][2], a[-1][1]
reach = next((p[1] for p in m if p[2] <= target), None)
print(f"   best AdamW lr {alr}: final held-out {target:.4f} at step {a_step}; best Muon lr {mlr}: final {m[-1][2]:.4f}")
if reach is None:
    print(f"   Muon never reached AdamW's final held-out loss in {a_step} steps (goal: <= 0.75x the tokens)")
else:
    print(f"   Muon reached it at step {reach}: {reach / a_step:.2f}x AdamW's tokens (goal: <= 0.75x)")
PY
done
# Newton-Schulz costs about 30 r² c FLOPs per r x c matrix per step, the model 6 r c per token:
# its share is about 5 r / tokens per step, so the overhead falls as the batch grows.
for batch in ${TIME_BATCHES:-16 64}; do
  echo "== step time at dp 2 ZeRO 1 (synthetic, batch $batch x seq 128, $ROUNDS rounds alternating, 20 steps each)"
  timing="--layers 4 --dim 256 --heads 4 --seq 128 --max-seq 128 --vocab 256 --batch $batch --steps 20 --nproc 2 \
    --zero 1 --threads 1 --sample-tokens 0 --eval-every 0 --peak-gflops 100"
  for ((r = 0; r < ROUNDS; r++)); do
    for opt in adamw muon; do
      "$STRATA" train $timing --optimizer $opt --run-dir "$OUT/t$batch-$opt-$r" >/dev/null 2>&1
    done
  done
  "$PYTHON" - "$OUT/t$batch" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ms = {o: [json.load(open(f"{out}-{o}-{r}/summary.json"))["median_ms"] for r in range(rounds)] for o in ("adamw", "muon")}
a, m = statistics.median(ms["adamw"]), statistics.median(ms["muon"])
s = json.load(open(f"{out}-muon-0/summary.json"))["muon"]
print(f"   adamw {a:.1f} ms/step, muon {m:.1f} ms/step: overhead {100 * (m / a - 1):+.1f}% (goal: <= 10%)")
print(f"   muon per rank per step: {s['bytes_per_step']} bytes gathered + scattered, {s['ns_flops_per_step']:.3g} "
      f"Newton-Schulz FLOP (every matrix once; each rank runs its half)")
PY
done
