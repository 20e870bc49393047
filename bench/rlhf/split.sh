#!/usr/bin/env bash
# Where a PPO iteration's time goes (docs/rlhf.md): generation, scoring (actor, reference,
# critic and reward forwards) and training, for response lengths RESPONSES and rollout
# batches ROLLOUTS, with and without the KV cache. The bench model of run.sh (`tiny`-shaped,
# random weights), PROMPT prompt tokens, minibatch 8, 2 epochs; median shares over
# iterations 2..ITERS+1.
#
#   bash bench/rlhf/split.sh          # BUILD=build RESPONSES="16 56" ROLLOUTS="16 32" ITERS=2
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
RESPONSES="${RESPONSES:-16 56}" ROLLOUTS="${ROLLOUTS:-16 32}" PROMPT="${PROMPT:-8}" ITERS="${ITERS:-2}"
bench_scratch
export OMP_NUM_THREADS="${THREADS:-1}"
"$PYTHON" "$ROOT/bench/rlhf/torch_rlhf.py" write --out "$OUT/actor.safetensors" > /dev/null
"$PYTHON" "$ROOT/bench/rlhf/torch_rlhf.py" write --value-head --out "$OUT/rm.safetensors" > /dev/null
echo "| rollout | response | KV cache | generate | score | train | iteration s (cpu s) | gen tokens/s |"
echo "|---|---|---|---|---|---|---|---|"
for g in $ROLLOUTS; do
  for r in $RESPONSES; do
    for kv in --kv-cache --no-kv-cache; do
      "$STRATA" rlhf ppo --actor "$OUT/actor.safetensors" --reward "$OUT/rm.safetensors" $kv \
        --iterations $((ITERS + 1)) --rollout-batch "$g" --minibatch 8 --epochs 2 --prompt-len "$PROMPT" \
        --response-len "$r" --run-dir "$OUT/run" > /dev/null
      "$PYTHON" - "$OUT/run/metrics.jsonl" "$g" "$r" "$kv" <<'PY'
import json, statistics, sys
its = [json.loads(l) for l in open(sys.argv[1])][1:]
med = lambda f: statistics.median(f(i) for i in its)
sh = {k: med(lambda i: i["share"][k]) for k in ("generate", "score", "train")}
wall = med(lambda i: sum(i["time"][k] for k in ("generate_s", "score_s", "train_s")))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {'yes' if sys.argv[4] == '--kv-cache' else 'no'} | "
      f"{sh['generate']:.0%} | {sh['score']:.0%} | {sh['train']:.0%} | {wall:.2f} ({med(lambda i: i['time']['cpu_s']):.2f}) | "
      f"{med(lambda i: i['gen_tokens_per_s']):.0f} |")
PY
    done
  done
done
