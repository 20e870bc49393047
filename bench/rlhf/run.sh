#!/usr/bin/env bash
# RLHF side by side with PyTorch 1.13, interleaved in one run so machine noise hits both:
#   generation  strata rlhf generate (KV cache; also the uncached path) vs torch_rlhf.py
#               generate (the same GPT with a hand-written KV cache): BATCH sequences, PROMPT
#               + RESPONSE tokens, tokens/s by wall clock and per CPU second (one thread)
#   PPO         one iteration of strata rlhf ppo vs torch_rlhf.py ppo, the same four models
#               (random GPT-2 initialised `tiny`-shaped: 4 layers, dim 256, 4 heads, vocab 256),
#               ROLLOUT prompts, MINIBATCH, EPOCHS; median over iterations after the first
# Both sides load the same weights (torch_rlhf.py writes them as safetensors).
#
#   bash bench/rlhf/run.sh              # BUILD=build REPEATS=2 THREADS=1
#
# Targets (issue 16): KV-cache generation >= 1.3x PyTorch; a PPO iteration >= 1.3x PyTorch.
# docs/rlhf.md records the figures.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
REPEATS="${REPEATS:-2}"
THREADS="${THREADS:-1}"
BATCH="${BATCH:-8}" PROMPT="${PROMPT:-8}" RESPONSE="${RESPONSE:-56}"
ROLLOUT="${ROLLOUT:-16}" MINIBATCH="${MINIBATCH:-8}" EPOCHS="${EPOCHS:-2}" ITERS="${ITERS:-3}"
[[ -x "$STRATA" ]] || { echo "bench/rlhf: $STRATA not built" >&2; exit 1; }
bench_scratch
export OMP_NUM_THREADS="$THREADS"
PEER=("$PYTHON" "$ROOT/bench/rlhf/torch_rlhf.py" --threads "$THREADS")
"${PEER[@]}" write --out "$OUT/actor.safetensors" > /dev/null
"${PEER[@]}" write --value-head --out "$OUT/rm.safetensors" > /dev/null
lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); threads $THREADS"
for r in $(seq 1 "$REPEATS"); do
  "$STRATA" rlhf generate --actor "$OUT/actor.safetensors" --batch "$BATCH" --prompt-len "$PROMPT" \
    --response-len "$RESPONSE" --repeats 3 --json > "$OUT/gen_s_$r.json"
  "${PEER[@]}" generate --batch "$BATCH" --prompt-len "$PROMPT" --response-len "$RESPONSE" \
    --repeats 3 > "$OUT/gen_t_$r.json"
  "$STRATA" rlhf ppo --actor "$OUT/actor.safetensors" --reward "$OUT/rm.safetensors" \
    --iterations $((ITERS + 1)) --rollout-batch "$ROLLOUT" --minibatch "$MINIBATCH" --epochs "$EPOCHS" \
    --prompt-len "$PROMPT" --response-len "$RESPONSE" --kl-coef 0.05 --actor-lr 1e-4 --critic-lr 1e-4 \
    --run-dir "$OUT/ppo_$r" > /dev/null
  "${PEER[@]}" ppo --iterations "$ITERS" --rollout-batch "$ROLLOUT" --minibatch "$MINIBATCH" \
    --epochs "$EPOCHS" --prompt-len "$PROMPT" --response-len "$RESPONSE" > "$OUT/ppo_t_$r.json"
done
"$PYTHON" - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
print(f"{'round':>5} {'gen strata':>11} {'(cpu)':>8} {'uncached':>9} {'gen torch':>10} {'(cpu)':>8} "
      f"{'ratio':>6} {'cpu ratio':>9} | {'ppo strata s':>12} {'(cpu)':>6} {'torch s':>8} {'(cpu)':>6} "
      f"{'ratio':>6} {'cpu ratio':>9} | gen/score/train")
for r in range(1, reps + 1):
    gs = json.load(open(f"{out}/gen_s_{r}.json")); gt = json.load(open(f"{out}/gen_t_{r}.json"))
    its = [json.loads(l) for l in open(f"{out}/ppo_{r}/metrics.jsonl")][1:]
    wall = statistics.median(sum(i["time"][k] for k in ("generate_s", "score_s", "train_s")) for i in its)
    cpu = statistics.median(i["time"]["cpu_s"] for i in its)
    share = {k: statistics.median(i["share"][k] for i in its) for k in ("generate", "score", "train")}
    pt = json.load(open(f"{out}/ppo_t_{r}.json"))
    print(f"{r:>5} {gs['cached_tokens_per_s']:>11.0f} {gs['cached_cpu_tokens_per_s']:>8.0f} "
          f"{gs['uncached_tokens_per_s']:>9.0f} {gt['tokens_per_s']:>10.0f} {gt['cpu_tokens_per_s']:>8.0f} "
          f"{gs['cached_tokens_per_s'] / gt['tokens_per_s']:>5.2f}x "
          f"{gs['cached_cpu_tokens_per_s'] / gt['cpu_tokens_per_s']:>8.2f}x | {wall:>12.2f} {cpu:>6.2f} "
          f"{pt['iteration_s']:>8.2f} {pt['iteration_cpu_s']:>6.2f} {pt['iteration_s'] / wall:>5.2f}x "
          f"{pt['iteration_cpu_s'] / cpu:>8.2f}x | {share['generate']:.0%}/{share['score']:.0%}/{share['train']:.0%}"
          f"  same tokens cached/uncached: {gs['same_tokens']}")
PY
