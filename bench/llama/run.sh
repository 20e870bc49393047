#!/usr/bin/env bash
# Llama blocks (--arch llama) against PyTorch 1.13 running the same model
# (bench/llama/torch_llama.py: same shapes, init scale, AdamW and clipping), side by side in
# one run, interleaved so that machine noise hits both alike:
#   tiny   llama-tiny: 4 layers, dim 256, 4 heads, 2 KV heads, SwiGLU 768, vocab 256, seq 256,
#          batch 8 -- one process fp32, one process bf16, and 2 ranks data-parallel (fp32,
#          1 thread each; strata --nproc 2 vs DDP gloo)
#   100m   llama-100m: 8 layers, dim 768, 12 heads, 4 KV heads, SwiGLU 2048, vocab 32000, seq
#          256, batch 4 (~99.5M parameters) -- one process fp32 and bf16
# then generation with the KV cache of a trained llama-tiny at kv-heads 4 (MHA), 2 and 1:
# cache bytes and tokens/s (strata rlhf generate).
# Prints the CPU and its flags, tokens/s (median step after a warm-up step) per run, the
# medians and the ratios strata / torch.
#
#   bash bench/llama/run.sh     # THREADS=2 REPEATS=2 STEPS=5 MODELS="tiny 100m" GEN=1
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-2}"
STEPS="${STEPS:-5}"
MODELS="${MODELS:-tiny 100m}"
GEN="${GEN:-1}"
bench_need_strata llama
bench_scratch

shape() {  # layers dim heads kv ffn vocab batch
  case "$1" in
    tiny) echo "4 256 4 2 768 256 8" ;;
    100m) echo "8 768 12 4 2048 32000 4" ;;
    *) echo "bench/llama/run.sh: unknown model $1 (tiny, 100m)" >&2; exit 2 ;;
  esac
}
strata_run() {  # model precision nproc threads out
  read -r L D H K F V B <<<"$(shape "$1")"
  OMP_NUM_THREADS="$4" "$STRATA" train --arch llama --layers "$L" --dim "$D" --heads "$H" \
    --kv-heads "$K" --ffn "$F" --vocab "$V" --max-seq 256 --seq 256 --batch "$B" \
    --micro-batch "$((B / $3))" --steps "$STEPS" --threads "$4" --nproc "$3" --precision "$2" \
    --lr 1e-3 --sample-tokens 0 --eval-batches 1 --json | tail -n 1 > "$5"
}
torch_run() {  # model autocast nproc threads out
  read -r L D H K F V B <<<"$(shape "$1")"
  OMP_NUM_THREADS="$4" "$PYTHON" "$ROOT/bench/llama/torch_llama.py" --layers "$L" --dim "$D" \
    --heads "$H" --kv-heads "$K" --ffn "$F" --vocab "$V" --seq 256 --batch "$B" \
    --steps "$STEPS" --threads "$4" --nproc "$3" --autocast "$2" > "$5"
}
for m in $MODELS; do
  for r in $(seq 1 "$REPEATS"); do
    strata_run "$m" fp32 1 "$THREADS" "$OUT/${m}_strata_fp32_$r.json"
    torch_run "$m" none 1 "$THREADS" "$OUT/${m}_torch_fp32_$r.json"
    strata_run "$m" bf16 1 "$THREADS" "$OUT/${m}_strata_bf16_$r.json"
    torch_run "$m" bf16 1 "$THREADS" "$OUT/${m}_torch_bf16_$r.json"
    if [[ "$m" == tiny ]]; then
      strata_run "$m" fp32 2 1 "$OUT/${m}_strata_dp2_$r.json"
      torch_run "$m" none 2 1 "$OUT/${m}_torch_dp2_$r.json"
    fi
    echo "$m: repeat $r/$REPEATS done" >&2
  done
done

if [[ "$GEN" == 1 ]]; then  # the KV cache: multi-head, grouped, multi-query
  for kv in 4 2 1; do
    OMP_NUM_THREADS="$THREADS" "$STRATA" train --model llama-tiny --kv-heads "$kv" --seq 256 \
      --batch 8 --steps 2 --ckpt-every 2 --sample-tokens 0 --eval-batches 1 --run-dir "$OUT/gen$kv" \
      > /dev/null
    OMP_NUM_THREADS="$THREADS" "$STRATA" rlhf generate --actor "$OUT/gen$kv" --batch 8 \
      --prompt-len 16 --response-len 112 --repeats "$REPEATS" --json > "$OUT/gen_$kv.json"
  done
fi

BENCH_DIR="$ROOT/bench" "$PYTHON" - "$OUT" "$REPEATS" "$THREADS" "$MODELS" "$GEN" <<'PY'
import json, statistics, sys, datetime, os
out, repeats, threads, models, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
sys.path.insert(0, os.environ["BENCH_DIR"])
from machine import machine_line
print(machine_line(threads))
def tps(path):
    j = json.load(open(path))
    return j.get("median_tokens_per_s", j.get("tokens_per_s")), j
print(f"{'model':6} {'run':6} {'strata tok/s':>13} {'torch tok/s':>12} {'strata/torch':>13}  params")
for m in models:
    for run in ("fp32", "bf16", "dp2"):
        files = [(f"{out}/{m}_strata_{run}_{r}.json", f"{out}/{m}_torch_{run}_{r}.json") for r in range(1, repeats + 1)]
        if not os.path.exists(files[0][0]):
            continue
        s = [tps(a)[0] for a, _ in files]
        t = [tps(b)[0] for _, b in files]
        ms, mt = statistics.median(s), statistics.median(t)
        params = tps(files[0][0])[1].get("params", "?")
        print(f"{m:6} {run:6} {ms:13.0f} {mt:12.0f} {ms / mt:12.2f}x  {params}   "
              f"(per repeat strata {' '.join(f'{x:.0f}' for x in s)}; torch {' '.join(f'{x:.0f}' for x in t)})")
if gen == "1":
    print("KV-cache generation, llama-tiny, batch 8, 16 + 112 tokens:")
    base = None
    for kv in (4, 2, 1):
        j = json.load(open(f"{out}/gen_{kv}.json"))
        base = base or j["kv_cache_bytes"]
        print(f"  kv-heads {kv}: cache {j['kv_cache_bytes']} bytes ({j['kv_cache_bytes'] / base:.2f} of MHA), "
              f"cached {j['cached_tokens_per_s']:.0f} tok/s, uncached {j['uncached_tokens_per_s']:.0f} tok/s, "
              f"same tokens: {j['same_tokens']}")
PY
