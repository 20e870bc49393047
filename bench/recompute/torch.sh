#!/usr/bin/env bash
# Recomputation's cost, side by side (docs/recompute.md): strata `train --recompute none |
# selective | full` and the same GPT in PyTorch (bench/recompute/torch_checkpoint.py) without
# checkpointing and with torch.utils.checkpoint around every block, same shape, batch and
# threads, one process, fp32, the five runs interleaved REPEATS times. Prints tokens/s (median
# over repeats of each run's median step), the step-time ratio full / none against Megatron's
# FLOP count (96 vs 72 factors, cost/flops.h), strata / PyTorch at the same policy, and the
# bytes each keeps from the forward for the backward: strata's activation buffers (`strata plan
# --local`, equal to the engine's byte for byte) less its working buffers (the recomputation
# working layer and the backward scratch, which PyTorch allocates during the backward and this
# count does not see), and the tensors PyTorch's autograd saves in a forward.
#
#   bash bench/recompute/torch.sh  # MODEL=small SEQ=256 BATCH=2 THREADS=2 REPEATS=3 STEPS=4
#                                  # STRATA_STEPS=20 (strata's steps are short: more of them)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata recompute
MODEL="${MODEL:-small}"
SEQ="${SEQ:-256}"
BATCH="${BATCH:-2}"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-3}"
STEPS="${STEPS:-4}"
STRATA_STEPS="${STRATA_STEPS:-20}"
"$PYTHON" -c "import torch" 2>/dev/null ||
  { echo "bench/recompute: $PYTHON has no torch (make bench-deps installs python3-torch)" >&2; exit 1; }
case "$MODEL" in  # the shapes of model/config.cc's presets, for the PyTorch peer
  tiny) shape="--layers 4 --dim 256 --heads 4 --vocab 256" ;;
  small) shape="--layers 6 --dim 384 --heads 6 --vocab 256" ;;
  *) echo "bench/recompute: MODEL=$MODEL: tiny or small (a vocabulary without padding)" >&2; exit 1 ;;
esac
bench_scratch
export OMP_NUM_THREADS="$THREADS"

for policy in none selective full; do
  "$STRATA" plan --local --model "$MODEL" --max-seq "$SEQ" --seq "$SEQ" --micro-batch "$BATCH" \
    --precision fp32 --recompute "$policy" --json > "$OUT/plan_$policy.json"
done
for r in $(seq 1 "$REPEATS"); do
  for policy in none selective full; do
    "$STRATA" train --model "$MODEL" --max-seq "$SEQ" --seq "$SEQ" --batch "$BATCH" \
      --micro-batch "$BATCH" --steps "$STRATA_STEPS" --threads "$THREADS" --recompute "$policy" \
      --eval-batches 1 --sample-tokens 0 --json | tail -n 1 > "$OUT/strata_${policy}_$r.json"
  done
  for ckpt in none full; do
    "$PYTHON" "$ROOT/bench/recompute/torch_checkpoint.py" $shape --seq "$SEQ" --batch "$BATCH" \
      --steps "$STEPS" --threads "$THREADS" --checkpoint "$ckpt" > "$OUT/torch_${ckpt}_$r.json"
  done
  echo "repeat $r/$REPEATS done" >&2
done

"$PYTHON" - "$OUT" "$REPEATS" "$MODEL" "$SEQ" "$BATCH" "$THREADS" <<'EOF'
import json, statistics, subprocess, sys, datetime
out, repeats, model, seq, batch, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
runs = lambda name: [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, repeats + 1)]
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
flags = subprocess.run(["sh", "-c", "grep -o -w -e avx512f -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | tr '\\n' ' '"],
                       capture_output=True, text=True).stdout.strip()
load = open("/proc/loadavg").read().split()[:3]
layers, dim, vocab = {"tiny": (4, 256, 256), "small": (6, 384, 256)}[model]
tok = {}
for p in ("none", "selective", "full"):
    tok["strata " + p] = [x["median_tokens_per_s"] for x in runs("strata_" + p)]
for c in ("none", "full"):
    tok["torch " + c] = [x["tokens_per_s"] for x in runs("torch_" + c)]
kept, work = {}, {}
for p in ("none", "selective", "full"):
    b = json.load(open(f"{out}/plan_{p}.json"))["ranks"][0]["activation_buffers"]
    work["strata " + p] = b["recompute_work"] + b["scratch"]
    kept["strata " + p] = sum(b.values()) - work["strata " + p]
for c in ("none", "full"):
    kept["torch " + c] = runs("torch_" + c)[0]["saved_bytes"]
med = {k: statistics.median(v) for k, v in tok.items()}
print(f"CPU: {cpu} ({flags}); {threads} thread(s); load average {' '.join(load)} at the end; "
      f"{datetime.date.today()}; {runs('torch_none')[0]['peer']}")
print(f"model {model} ({layers} x {dim}), seq {seq}, batch {batch} (one micro-batch), fp32, "
      f"{repeats} interleaved repeats")
print(f"{'run':>16} {'tokens/s':>9} {'per repeat':>30} {'kept MiB':>9} {'+ working MiB':>14}")
for k in tok:
    each = " ".join(f"{t:.0f}" for t in tok[k])
    extra = f"{work[k] / 2**20:>14.1f}" if k in work else f"{'-':>14}"
    print(f"{k:>16} {med[k]:>9.0f} {each:>30} {kept[k] / 2**20:>9.1f} {extra}")
# Megatron's FLOPs per iteration (cost/flops.h): full recomputation over none.
s, l, h, V = seq, layers, dim, vocab
f96 = 96 * (1 + s / (6 * h) + V / (16 * l * h))
f72 = 72 * (1 + s / (6 * h) + V / (12 * l * h))
print(f"step time full / none: strata {med['strata none'] / med['strata full']:.3f}, "
      f"pytorch {med['torch none'] / med['torch full']:.3f}; Megatron's FLOPs 96/72 form: {f96 / f72:.3f}")
print(f"step time selective / none: strata {med['strata none'] / med['strata selective']:.3f} "
      f"(its elementwise recomputation: about 1 by the FLOP count)")
print(f"strata / pytorch tokens/s, same policy: none {med['strata none'] / med['torch none']:.2f}x, "
      f"full (checkpoint per block) {med['strata full'] / med['torch full']:.2f}x (target >= 1.3x)")
# Each repeat's runs ran back to back under the same load: their ratios, paired.
for c in ("none", "full"):
    pairs = [a / b for a, b in zip(tok["strata " + c], tok["torch " + c])]
    print(f"  {c}, per repeat: " + " ".join(f"{x:.2f}x" for x in pairs) +
          f"; median {statistics.median(pairs):.2f}x")
# The same saved bytes: strata's fastest policy keeping no more than PyTorch does.
for c in ("none", "full"):
    fits = [p for p in ("none", "selective", "full") if kept["strata " + p] <= kept["torch " + c]]
    if not fits:
        print(f"pytorch {c} keeps {kept['torch ' + c] / 2**20:.1f} MiB: no strata policy keeps as little")
        continue
    best = max(fits, key=lambda p: med["strata " + p])
    print(f"pytorch {c} keeps {kept['torch ' + c] / 2**20:.1f} MiB; strata {best} keeps "
          f"{kept['strata ' + best] / 2**20:.1f} MiB at {med['strata ' + best] / med['torch ' + c]:.2f}x its "
          f"tokens/s (target >= 1.0x)")
EOF
