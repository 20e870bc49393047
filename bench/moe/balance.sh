#!/usr/bin/env bash
# Load balancing side by side in one run (docs/moe.md): the same MoE model and data trained
# three ways, interleaved over REPEATS rounds: the Switch auxiliary loss (--aux-loss-coef
# AUX), balancing without an auxiliary loss (--router-bias-update-rate RATE --aux-loss-coef 0,
# DeepSeek-V3), and neither. Prints per run the held-out loss and the max/mean load of the
# experts (chosen assignments, the mean over the blocks) at the first step, over the last
# quarter of the run, and at the end.
#
#   bash bench/moe/balance.sh      # BUILD=build DATA=text STEPS=300 RATE=1e-3 AUX=1e-2 REPEATS=1
#   EXTRA="--router-score sigmoid" bash bench/moe/balance.sh   # flags added to all three runs
# DATA=text prepares ../shared/data/tinyshakespeare.txt with GPT-2's BPE (the product never
# needs it); DATA=synthetic uses the generated corpus.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata moe
DATA="${DATA:-text}" STEPS="${STEPS:-300}" RATE="${RATE:-1e-3}" AUX="${AUX:-1e-2}" REPEATS="${REPEATS:-1}"
bench_scratch
export OMP_NUM_THREADS="${THREADS:-1}"
lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "flags: $(grep -o 'avx[0-9a-z_]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
data=synthetic
vocab=256
if [[ $DATA == text ]]; then
  shared="$ROOT/../shared/data"
  "$STRATA" data prepare "$shared/tinyshakespeare.txt" --tokenizer "$shared/gpt2-bpe" --val-tokens 16384 \
    -o "$OUT/shakespeare" > /dev/null
  data="$OUT/shakespeare"
  vocab=50257
fi
MODEL=(--layers 4 --dim 64 --heads 4 --seq 64 --max-seq 64 --vocab "$vocab" --batch 16 --experts 8 --top-k 2
       --moe-every 2 --dropless --steps "$STEPS" --lr 3e-3 --eval-every "$((STEPS / 4))" --eval-batches 8
       --sample-tokens 0 --log-every "$STEPS" --data "$data" ${EXTRA:-})
for r in $(seq 1 "$REPEATS"); do
  "$STRATA" train "${MODEL[@]}" --aux-loss-coef "$AUX" --run-dir "$OUT/aux_$r" > /dev/null
  "$STRATA" train "${MODEL[@]}" --aux-loss-coef 0 --router-bias-update-rate "$RATE" --run-dir "$OUT/bias_$r" > /dev/null
  "$STRATA" train "${MODEL[@]}" --aux-loss-coef 0 --run-dir "$OUT/none_$r" > /dev/null
done
"$PYTHON" - "$OUT" "$REPEATS" <<'PY'
import json, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def maxmean(rec):
    vals = []
    for b in rec["moe"]:
        w = b["wanted_per_expert"]
        m = sum(w) / len(w)
        vals.append(max(w) / m if m > 0 else 0)
    return sum(vals) / len(vals)
print("| run | held-out loss (evals) | max/mean load: step 1 / last quarter (mean) / last step | final bias range |")
print("|---|---|---|---|")
for name in ["aux", "bias", "none"]:
    for r in range(1, repeats + 1):
        recs = [json.loads(l) for l in open(f"{out}/{name}_{r}/metrics.jsonl")]
        steps = [x for x in recs if "loss" in x and "moe" in x]
        evals = [x["eval_loss"] for x in recs if "eval_loss" in x]
        q = steps[len(steps) * 3 // 4:]
        last_q = sum(maxmean(x) for x in q) / len(q)
        bias = [v for b in steps[-1]["moe"] for v in b.get("router_bias", [])]
        rng = f"{min(bias):+.3f} .. {max(bias):+.3f}" if bias else "–"
        print(f"| {name} | {' / '.join(f'{e:.4f}' for e in evals)} | {maxmean(steps[0]):.2f} / {last_q:.2f} / "
              f"{maxmean(steps[-1]):.2f} | {rng} |")
PY
