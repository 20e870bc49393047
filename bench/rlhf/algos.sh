#!/usr/bin/env bash
# PPO, GRPO, RLOO and DPO side by side from the same SFT start (docs/rlhf.md): an SFT policy
# (strata train on the synthetic corpus), a reward model trained on pairs sampled from it and
# ranked by the seeded gold rule (rlhf/gold.h), then each algorithm in turn in this one run:
#   PPO   ROLLOUT prompts x 1 response per iteration, actor + critic + reference + reward
#   GRPO  ROLLOUT/GROUP prompts x GROUP responses (the same responses per iteration), no critic
#   RLOO  the same as GRPO with the leave-one-out baseline
#   DPO   the reward model's own training pairs, the policy and its reference only; no
#         generation for training (its gold score is measured on sampled responses)
# Prints gold score against samples and wall time per algorithm, iterations/s, model states
# per rank (and whether they equal strata plan --rlhf --algo's), and the time split.
#
#   bash bench/rlhf/algos.sh      # BUILD=build ITERS=30 ROLLOUT=32 GROUP=4 THREADS=1 NPROC=1
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/common.sh"
bench_need_strata rlhf
ITERS="${ITERS:-30}" ROLLOUT="${ROLLOUT:-32}" GROUP="${GROUP:-4}" NPROC="${NPROC:-1}"
bench_scratch
export OMP_NUM_THREADS="${THREADS:-1}"
rlhf_machine "$NPROC"
rlhf_start "$OUT" --save-pairs "$OUT/pairs.txt"
COMMON=(--actor "$OUT/sft" --reward "$OUT/rm.safetensors" --iterations "$ITERS" --minibatch 8 --epochs 2
        --actor-lr 3e-4 --kl-coef 0.02 --nproc "$NPROC")
"$STRATA" rlhf ppo "${COMMON[@]}" --rollout-batch "$ROLLOUT" --critic-lr 1e-3 --run-dir "$OUT/ppo" > /dev/null
"$STRATA" rlhf grpo "${COMMON[@]}" --rollout-batch $((ROLLOUT / GROUP)) --group-size "$GROUP" \
  --run-dir "$OUT/grpo" > /dev/null
"$STRATA" rlhf rloo "${COMMON[@]}" --rollout-batch $((ROLLOUT / GROUP)) --group-size "$GROUP" \
  --run-dir "$OUT/rloo" > /dev/null
"$STRATA" rlhf dpo --policy "$OUT/sft" --pairs "$OUT/pairs.txt" --steps $((ITERS * 4)) --batch 8 --lr 3e-4 \
  --beta 0.5 --eval-every $((ITERS / 3)) --eval-prompts 64 --nproc "$NPROC" --run-dir "$OUT/dpo" > /dev/null
"$PYTHON" - "$OUT" "$ROLLOUT" <<'PY'
import json, sys
out, rollout = sys.argv[1], int(sys.argv[2])
def lines(name):
    return [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
def summary(name):
    return json.load(open(f"{out}/{name}/summary.json"))
print("| algorithm | gold first | gold last 3 (mean) | iterations/s | model states per rank | = plan | generate / score / train |")
print("|---|---|---|---|---|---|---|")
curves = {}
for name in ["ppo", "grpo", "rloo"]:
    recs, s = lines(name), summary(name)
    t = sum(r["time"]["generate_s"] + r["time"]["score_s"] + r["time"]["train_s"] for r in recs)
    mem = s["memory"]
    sh = s["share"]
    last = sum(r["gold"] for r in recs[-3:]) / 3
    print(f"| {name} | {recs[0]['gold']:.3f} | {last:.3f} | {len(recs) / t:.2f} | {mem['model_states']:,} B | "
          f"{mem['model_states_match_plan']} | {sh['generate']:.0%} / {sh['score']:.0%} / {sh['train']:.0%} |")
    clock, curve = 0.0, []
    for i, r in enumerate(recs):
        clock += r["time"]["generate_s"] + r["time"]["score_s"] + r["time"]["train_s"]
        curve.append(((i + 1) * rollout, clock, r["gold"]))
    curves[name] = curve
recs, s = lines("dpo"), summary("dpo")
steps = [r for r in recs if "eval" not in r]
evals = [r for r in recs if "eval" in r]
t = sum(r["time_s"] for r in steps)
mem, sh = s["memory"], s["share"]
print(f"| dpo | {evals[0]['gold']:.3f} | {evals[-1]['gold']:.3f} (last eval) | {len(steps) / t:.2f} steps/s | "
      f"{mem['model_states']:,} B | {mem['model_states_match_plan']} | "
      f"{sh['generate']:.0%} / {sh['score']:.0%} / {sh['train']:.0%} |")
print()
print("gold against responses sampled for training and seconds (every 5th iteration):")
print("| iteration | " + " | ".join(f"{n}: samples / s / gold" for n in curves) + " |")
print("|---|" + "---|" * len(curves))
n = min(len(c) for c in curves.values())
for i in [0] + list(range(4, n, 5)):
    print(f"| {i + 1} | " + " | ".join(f"{c[i][0]} / {c[i][1]:.1f} / {c[i][2]:.3f}" for c in curves.values()) + " |")
print()
print("DPO: pairs seen / s / gold / held-out accuracy / margin at each evaluation:")
clock = {0: 0.0}
acc = 0.0
for r in steps:
    acc += r["time_s"]
    clock[r["step"]] = acc
for e in evals:
    print(f"  step {e['step']}: {e['step'] * 8} / {clock[e['step']]:.1f} / {e['gold']:.3f} / "
          f"{e.get('eval_accuracy', 0):.3f} / {e.get('eval_margin', 0):+.3f}")
ppo_last = sum(r[2] for r in curves["ppo"][-3:]) / 3
for name in ["grpo", "rloo"]:
    c = curves[name]
    hit = next((p for p in c if p[2] >= ppo_last), None)
    print(f"{name}: reaches PPO's final gold {ppo_last:.3f} " +
          (f"at {hit[0]} samples, {hit[1]:.1f} s" if hit else "not within the run") +
          f" (PPO's run: {curves['ppo'][-1][0]} samples, {curves['ppo'][-1][1]:.1f} s)")
PY
