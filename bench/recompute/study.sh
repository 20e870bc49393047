#!/usr/bin/env bash
# Activation recomputation study (docs/recompute.md): under a fixed activation budget per rank,
# the longest trainable sequence (micro-batch 1) and the largest micro-batch (at SEQ) of each
# model at --recompute none / selective / full, from `strata plan --local` (which equals the
# engine's buffers byte for byte: tests/train/test_recompute.cc), each limit then trained for
# one step under `--max-activation-mb BUDGET` (the same check refuses one step further); and
# the tokens/s each policy costs, side by side: the policies interleaved, REPEATS rounds,
# median of each run's median step.
#
#   bash bench/recompute/study.sh      # BUDGET_MB=256 MODELS="small gpt2" SEQ=256 REPEATS=3
#   MODELS="small/llama" bash bench/recompute/study.sh   # PRESET/llama: its sizes, Llama blocks
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata recompute
BUDGET_MB="${BUDGET_MB:-256}"
MODELS="${MODELS:-small gpt2}"
SEQ="${SEQ:-256}"
REPEATS="${REPEATS:-3}"
POLICIES="none selective full"
bench_scratch

# model_flags MODEL: a preset, or PRESET/ARCH (`--arch llama`: the preset's sizes, Llama blocks).
model_flags() {
  if [[ $1 == */* ]]; then echo "--model ${1%/*} --arch ${1#*/}"; else echo "--model $1"; fi
}

# acts MODEL POLICY SEQ MICRO: the planned activation bytes of rank 0 (fp32, one process).
acts() {
  "$STRATA" plan --local $(model_flags "$1") --recompute "$2" --max-seq "$3" --seq "$3" --micro-batch "$4" \
    --precision fp32 --json | "$PYTHON" -c "import json,sys; print(json.load(sys.stdin)['ranks'][0]['activations'])"
}
budget=$((BUDGET_MB * 1024 * 1024))
# fits MODEL POLICY SEQ MICRO: 0 when the planned bytes are within the budget.
fits() { [[ $(acts "$@") -le $budget ]]; }

for model in $MODELS; do
  for policy in $POLICIES; do
    # Longest sequence in steps of 64 (a doubling search, then bisection).
    lo=0 hi=64
    while fits "$model" "$policy" "$hi" 1 && ((hi < 65536)); do lo=$hi; hi=$((hi * 2)); done
    while ((hi - lo > 64)); do
      mid=$(((lo + hi) / 128 * 64))
      if fits "$model" "$policy" "$mid" 1; then lo=$mid; else hi=$mid; fi
    done
    # Largest micro-batch at SEQ.
    mlo=0 mhi=1
    while fits "$model" "$policy" "$SEQ" "$mhi" && ((mhi < 65536)); do mlo=$mhi; mhi=$((mhi * 2)); done
    while ((mhi - mlo > 1)); do
      mid=$(((mlo + mhi) / 2))
      if fits "$model" "$policy" "$SEQ" "$mid"; then mlo=$mid; else mhi=$mid; fi
    done
    # Train one step at each limit under the budget (it must fit), at one OpenMP thread per core.
    # The model's buffers are sized by --max-seq (the position table), so both runs set it.
    for shape in "--max-seq $lo --seq $lo --batch 1" "--max-seq $SEQ --seq $SEQ --batch $mlo"; do
      if ((lo > 0 && mlo > 0)); then
        "$STRATA" train $(model_flags "$model") --recompute "$policy" $shape --steps 1 --eval-batches 1 \
          --sample-tokens 0 --max-activation-mb "$BUDGET_MB" > "$OUT/fit.log" 2>&1 ||
          { echo "bench/recompute: $model $policy $shape does not train under $BUDGET_MB MiB:" >&2; tail -n 3 "$OUT/fit.log" >&2; exit 1; }
      fi
    done
    echo "$model $policy $lo $mlo" >> "$OUT/limits.raw"
    echo "limits $model $policy: seq $lo, micro-batch $mlo" >&2
  done
done

# Throughput at one shape per model (micro-batch 4 for small, 1 for gpt2 and llama-100m), policies
# interleaved.
for r in $(seq 1 "$REPEATS"); do
  for model in $MODELS; do
    mb=4; steps=8
    [[ $model == gpt2 || $model == llama-100m ]] && mb=1 steps=3
    for policy in $POLICIES; do
      "$STRATA" train $(model_flags "$model") --recompute "$policy" --seq "$SEQ" --batch "$mb" --steps "$steps" \
        --eval-batches 1 --sample-tokens 0 --json | tail -n 1 > "$OUT/speed_${model//\//_}_${policy}_$r.json"
    done
  done
  echo "repeat $r/$REPEATS done" >&2
done

"$PYTHON" - "$OUT" "$REPEATS" "$BUDGET_MB" "$SEQ" "$MODELS" <<'EOF'
import json, statistics, subprocess, sys
out, repeats, budget, seq, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split()
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
flags = subprocess.run(["sh", "-c", "grep -o -w -m1 -e avx512f -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | tr '\\n' ' '"],
                       capture_output=True, text=True, shell=False).stdout.strip()
load = open("/proc/loadavg").read().split()[0]
print(f"CPU: {cpu} ({flags}); load average {load}; budget {budget} MiB of activations per rank, fp32")
limits = {}
for line in open(f"{out}/limits.raw"):
    m, p, s, b = line.split()
    limits[(m, p)] = (int(s), int(b))
print(f"| model | policy | longest seq (micro-batch 1) | largest micro-batch (seq {seq}) | tokens/s | vs none |")
print("|---|---|---|---|---|---|")
for m in models:
    base = None
    for p in ["none", "selective", "full"]:
        tps = statistics.median(json.load(open(f"{out}/speed_{m.replace('/', '_')}_{p}_{r}.json"))["median_tokens_per_s"]
                                for r in range(1, repeats + 1))
        base = base or tps
        s, b = limits[(m, p)]
        print(f"| {m} | {p} | {s} | {b} | {tps:.0f} | {tps / base:.2f}x |")
EOF
