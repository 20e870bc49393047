#!/usr/bin/env bash
# Over-optimization on the synthetic task (docs/rlhf.md): an SFT policy (strata train on the
# synthetic corpus), a reward model trained on pairs sampled from it and ranked by the gold
# rule (rlhf/gold.h), then PPO pushed hard (lr 3e-3, 4 epochs) with KL coefficients KLS.
# Prints proxy reward, gold score and KL from the reference every STEP iterations per
# coefficient. Seeded: the same run gives the same table on the same machine and threads.
#
#   bash bench/rlhf/overopt.sh            # BUILD=build ITERS=40 STEP=5 KLS="0 0.05 0.2"
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ITERS="${ITERS:-40}" STEP="${STEP:-5}" KLS="${KLS:-0 0.05 0.2}"
OUT="${OUT:-$(mktemp -d)}"
export OMP_NUM_THREADS="${THREADS:-1}"
"$STRATA" train --layers 2 --dim 64 --heads 2 --max-seq 64 --steps 150 --batch 8 --lr 3e-3 \
  --ckpt-every 150 --sample-tokens 0 --log-every 150 --run-dir "$OUT/sft" > /dev/null
"$STRATA" rlhf reward --init "$OUT/sft" --pairs synthetic --num-pairs 512 --steps 200 \
  -o "$OUT/rm.safetensors" | tail -n 1
for kl in $KLS; do
  "$STRATA" rlhf ppo --actor "$OUT/sft" --reward "$OUT/rm.safetensors" --run-dir "$OUT/ppo_$kl" \
    --iterations "$ITERS" --rollout-batch 32 --minibatch 8 --epochs 4 --actor-lr 3e-3 \
    --critic-lr 1e-3 --kl-coef "$kl" > /dev/null
done
"$PYTHON" - "$OUT" "$STEP" $KLS <<'PY'
import json, sys
out, step, kls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {kl: [json.loads(l) for l in open(f"{out}/ppo_{kl}/metrics.jsonl")] for kl in kls}
print("| iteration | " + " | ".join(f"β={kl}: proxy / gold / KL" for kl in kls) + " |")
print("|---|" + "---|" * len(kls))
n = len(next(iter(runs.values())))
for i in [0] + list(range(step - 1, n, step)):
    cells = [f"{r[i]['reward']:+.2f} / {r[i]['gold']:.3f} / {r[i]['kl']:.1f}" for r in runs.values()]
    print(f"| {i + 1} | " + " | ".join(cells) + " |")
for kl, r in runs.items():
    best = max(range(n), key=lambda i: r[i]["gold"])
    print(f"β={kl}: gold peak {r[best]['gold']:.3f} at iteration {best + 1}, last {r[-1]['gold']:.3f}; "
          f"proxy last {r[-1]['reward']:+.3f}, KL last {r[-1]['kl']:.1f}")
PY
