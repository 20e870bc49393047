#!/usr/bin/env bash
# DeepSeek-style MoE block against PyTorch 1.13 (docs/moe.md, "Fine-grained and shared
# experts against PyTorch"): one block forward+backward, strata (bench_moe) and the same layer
# in eager PyTorch (torch_moe.py: one sort by expert, loop over experts, index_add), dropless,
# sigmoid scores, fine-grained routed experts plus shared ones, interleaved REPEATS x for
# each thread count in THREADS; tokens/s (median) and strata / PyTorch (median of the ratios
# of each repeat's pair). First both programs print checksums of one step on the same hashed
# inputs (--check), to show they compute the same function.
#
#   bash bench/moe/fine_grained.sh        # BUILD=build THREADS="1 2" REPEATS=5 ITERS=10
#   BENCH_MOE=build-bench/bench/bench_moe THREADS=1 bash bench/moe/fine_grained.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
BENCH="${BENCH_MOE:-$BUILD/bench/bench_moe}"
THREADS="${THREADS:-1 2}"
REPEATS="${REPEATS:-5}"
ITERS="${ITERS:-10}"
[[ -x "$BENCH" ]] || { echo "bench/moe: $BENCH not built (-DSTRATA_BENCH=ON, target bench_moe)" >&2; exit 1; }
bench_scratch
# E 32 of H = C/2 (4C/8), K 6 + 2 shared: 8 x H = 4C active units, a dense MLP's FLOPs;
# E 16 of H = C, K 4 + 1 shared: 5 x H.
declare -A layer=(
  [e32k6]="--tokens 2048 --dim 256 --experts 32 --top-k 6 --expert-ffn 128 --shared-experts 2"
  [e16k4]="--tokens 2048 --dim 256 --experts 16 --top-k 4 --expert-ffn 256 --shared-experts 1")
common=(--score sigmoid --capacity 0)
names=(e32k6 e16k4)

echo "$(lscpu | grep -m1 'Model name' | sed 's/  */ /g'), family $(lscpu | awk -F: '/^CPU family/ {print $2+0}')" \
  "model $(lscpu | awk -F: '/^Model:/ {print $2+0}'), $(nproc) CPUs"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
echo "flags:$(for f in avx2 fma avx512f avx512_bf16 amx_tile; do [[ " $flags " == *" $f "* ]] && echo -n " $f" || echo -n " no-$f"; done)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
for n in "${names[@]}"; do
  # shellcheck disable=SC2086
  { OMP_NUM_THREADS=1 "$BENCH" ${layer[$n]} "${common[@]}" --check
    "$PYTHON" "$ROOT/bench/moe/torch_moe.py" ${layer[$n]} "${common[@]}" --check; } > "$OUT/check_$n.jsonl"
done
for t in $THREADS; do
  for _ in $(seq 1 "$REPEATS"); do
    for n in "${names[@]}"; do
      # shellcheck disable=SC2086
      OMP_NUM_THREADS="$t" "$BENCH" ${layer[$n]} "${common[@]}" --iters "$ITERS" >> "$OUT/${n}_t$t.jsonl"
      # shellcheck disable=SC2086
      "$PYTHON" "$ROOT/bench/moe/torch_moe.py" ${layer[$n]} "${common[@]}" --iters "$ITERS" \
        --threads "$t" >> "$OUT/${n}_t$t.jsonl"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" "$THREADS" "${names[@]}" <<'PY'
import json, statistics, sys
out, threads, names = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
print("same hashed inputs, one step: strata vs PyTorch (largest relative difference)")
for n in names:
    s, t = (json.loads(l)["check"] for l in open(f"{out}/check_{n}.jsonl"))
    rel = {k: abs(s[k] - t[k]) / max(abs(t[k]), 1e-30) for k in t if t[k] or s[k]}
    worst = max(rel, key=rel.get)
    print(f"  {n}: " + ", ".join(f"{k} {s[k]:.6g}/{t[k]:.6g}" for k in ("y_dot_dy", "aux", "z", "dx_sq"))
          + f"; worst {worst} {rel[worst]:.1e}")
print("| layer (2048 tokens, C 256, sigmoid, dropless) | threads | strata tok/s | PyTorch tok/s | strata / PyTorch |")
print("|---|---|---|---|---|")
for n in names:
    for t in threads:
        rows = [json.loads(l) for l in open(f"{out}/{n}_t{t}.jsonl")]
        s = [r["tokens_per_s"] for r in rows if r["impl"] == "strata"]
        p = [r["tokens_per_s"] for r in rows if r["impl"] == "torch"]
        r0 = rows[0]
        ratios = [a / b for a, b in zip(s, p)]
        print(f"| E {r0['experts']}, K {r0['top_k']}, H {r0['expert_ffn']}, S {r0['shared_experts']} "
              f"| {t} | {statistics.median(s):.0f} | {statistics.median(p):.0f} "
              f"| **{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}, {len(s)} pairs) |")
PY
