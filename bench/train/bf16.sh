#!/usr/bin/env bash
# bf16 training speed, single process, same thread count: strata --precision fp32, strata
# --precision bf16 and PyTorch 1.13 with torch.autocast("cpu", dtype=torch.bfloat16), run
# interleaved (strata fp32, strata bf16, torch bf16, strata fp32, ...) so machine noise hits
# all alike, on two models:
#   tiny   4 layers, dim 256, 4 heads, seq 256, vocab 256, batch 8
#   L12    12 layers, dim 768, 12 heads, seq 256, vocab 256, batch 4
# Prints the CPU model and its bf16 flags, tokens/s per run (median step after a warm-up
# step), the medians and the ratios strata bf16 / torch bf16 and strata bf16 / strata fp32,
# and which GEMM strata ran. EMULATED=1 adds a fourth run per round, strata --precision bf16
# with STRATA_KERNELS=fp32 (the emulated path a CPU without bf16 units takes).
#
#   bash bench/train/bf16.sh     # BUILD=build THREADS=2 REPEATS=2 STEPS=6 MODELS="tiny L12" EMULATED=0
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-2}"
STEPS="${STEPS:-6}"
MODELS="${MODELS:-tiny L12}"
EMULATED="${EMULATED:-0}"
bench_need_strata train

bench_scratch
export OMP_NUM_THREADS="$THREADS"
arch() {
  case "$1" in
    tiny) echo "4 256 4 8" ;;
    L12) echo "12 768 12 4" ;;
    *) echo "bench/train/bf16.sh: unknown model $1 (tiny, L12)" >&2; exit 2 ;;
  esac
}
for m in $MODELS; do
  read -r L D H B <<<"$(arch "$m")"
  for r in $(seq 1 "$REPEATS"); do
    runs="fp32 bf16"
    [[ "$EMULATED" == 1 ]] && runs="$runs emulated"
    for p in $runs; do
      kernels=auto prec="$p"
      [[ "$p" == emulated ]] && kernels=fp32 prec=bf16
      STRATA_KERNELS="$kernels" "$STRATA" train --layers "$L" --dim "$D" --heads "$H" --seq 256 \
        --vocab 256 --batch "$B" --micro-batch "$B" --steps "$STEPS" --threads "$THREADS" \
        --precision "$prec" --sample-tokens 0 --eval-batches 1 --json | tail -n 1 \
        > "$OUT/${m}_strata_${p}_$r.json"
    done
    "$PYTHON" "$ROOT/bench/train/torch_gpt.py" --layers "$L" --dim "$D" --heads "$H" --seq 256 \
      --vocab 256 --batch "$B" --steps "$STEPS" --threads "$THREADS" --autocast bf16 \
      > "$OUT/${m}_torch_bf16_$r.json"
    echo "$m: repeat $r/$REPEATS done" >&2
  done
done

BENCH_DIR="$ROOT/bench" "$PYTHON" - "$OUT" "$REPEATS" "$THREADS" "$MODELS" <<'PY'
import json, statistics, sys, datetime, os
out, repeats, threads, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
sys.path.insert(0, os.environ["BENCH_DIR"])
from machine import machine_line
print(machine_line(threads))
for m in models:
    load = lambda kind, r: json.load(open(f"{out}/{m}_{kind}_{r}.json"))
    sf = [load("strata_fp32", r) for r in range(1, repeats + 1)]
    sb = [load("strata_bf16", r) for r in range(1, repeats + 1)]
    tb = [load("torch_bf16", r) for r in range(1, repeats + 1)]
    print(f"\n{m}: {sb[0]['params']} params, seq 256, batch {sb[0]['config']['batch']}; strata gemm "
          f"{sb[0]['gemm']} (fp32 runs: {sf[0]['gemm']}); peer {tb[0]['peer']}")
    print(f"{'repeat':>6} {'strata fp32':>12} {'strata bf16':>12} {'torch bf16':>11} "
          f"{'bf16/torch':>10} {'bf16/fp32':>9} {'bf16 MFU':>8}")
    for r in range(repeats):
        a, b, t = sf[r]["median_tokens_per_s"], sb[r]["median_tokens_per_s"], tb[r]["tokens_per_s"]
        print(f"{r + 1:>6} {a:>12.0f} {b:>12.0f} {t:>11.0f} {b / t:>10.2f} {b / a:>9.2f} "
              f"{100 * sb[r]['median_mfu']:>7.1f}%")
    a = statistics.median(x["median_tokens_per_s"] for x in sf)
    b = statistics.median(x["median_tokens_per_s"] for x in sb)
    t = statistics.median(x["tokens_per_s"] for x in tb)
    print(f"median tok/s: strata fp32 {a:.0f}, strata bf16 {b:.0f}, torch bf16 {t:.0f}; "
          f"strata bf16 / torch bf16 {b / t:.2f}x (target >= 1.3x), "
          f"strata bf16 / strata fp32 {b / a:.2f}x")
    print(f"bf16 peak {sb[0]['peak_gflops']:.1f} GFLOP/s ({sb[0]['peak_kind']}, {sb[0]['peak_source']})")
    if os.path.exists(f"{out}/{m}_strata_emulated_1.json"):
        se = [load("strata_emulated", r) for r in range(1, repeats + 1)]
        e = statistics.median(x["median_tokens_per_s"] for x in se)
        print(f"emulated bf16 (STRATA_KERNELS=fp32, gemm {se[0]['gemm']}): "
              + ", ".join(f"{x['median_tokens_per_s']:.0f}" for x in se)
              + f" tok/s; median {e:.0f} = {e / a:.2f}x strata fp32")
PY
