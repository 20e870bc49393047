#!/usr/bin/env bash
# Rollouts on their own ranks against colocated rollouts (docs/rlhf.md), one invocation, the
# same SFT model and reward model: `rlhf ppo --nproc N` (every rank samples its share, then
# scores and trains) and `--nproc N --rollout-ranks R` (R ranks sample the next rollout with
# the weights one update old while N - R train on the last one), interleaved over REPEATS
# rounds. Long responses make generation the larger part, as in practice. Prints
# iterations/s (median of the rounds, wall clock), the final gold score and the split.
#
#   bash bench/rlhf/rollout_ranks.sh   # BUILD=build NPROC=2 LAYOUTS="0 1" ITERS=12 RESPONSE=48 REPEATS=3
# NPROC beyond the machine's cores oversubscribes them: correct, but not a timing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/common.sh"
bench_need_strata rlhf
NPROC="${NPROC:-2}" LAYOUTS="${LAYOUTS:-0 1}" ITERS="${ITERS:-12}" RESPONSE="${RESPONSE:-48}" REPEATS="${REPEATS:-3}"
ROLLOUT="${ROLLOUT:-32}"
bench_scratch
export OMP_NUM_THREADS=1
rlhf_machine "$NPROC"
rlhf_start "$OUT"
for r in $(seq 1 "$REPEATS"); do
  for R in $LAYOUTS; do
    "$STRATA" rlhf ppo --actor "$OUT/sft" --reward "$OUT/rm.safetensors" --iterations "$ITERS" \
      --rollout-batch "$ROLLOUT" --minibatch 8 --epochs 2 --prompt-len 8 --response-len "$RESPONSE" \
      --actor-lr 3e-4 --kl-coef 0.02 --nproc "$NPROC" --rollout-ranks "$R" --run-dir "$OUT/r${R}_$r" > /dev/null
  done
done
"$PYTHON" - "$OUT" "$REPEATS" $LAYOUTS <<'PY'
import json, statistics, sys
out, repeats, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| rollout ranks | iterations/s (median; rounds) | gold first | gold last 3 | generate (or wait) / score / train |")
print("|---|---|---|---|---|")
rates = {}
for R in layouts:
    its, golds = [], None
    for r in range(1, repeats + 1):
        recs = [json.loads(l) for l in open(f"{out}/r{R}_{r}/metrics.jsonl")]
        s = json.load(open(f"{out}/r{R}_{r}/summary.json"))
        t = sum(x["time"]["generate_s"] + x["time"]["score_s"] + x["time"]["train_s"] for x in recs)
        its.append(len(recs) / t)
        golds = (recs[0]["gold"], sum(x["gold"] for x in recs[-3:]) / 3, s["share"])
    rates[R] = statistics.median(its)
    sh = golds[2]
    print(f"| {R} | {rates[R]:.2f} ({', '.join(f'{x:.2f}' for x in its)}) | {golds[0]:.3f} | {golds[1]:.3f} | "
          f"{sh['generate']:.0%} / {sh['score']:.0%} / {sh['train']:.0%} |")
base = rates[layouts[0]]
for R in layouts[1:]:
    print(f"--rollout-ranks {R}: {rates[R] / base:.2f}x the iterations/s of colocated")
PY
