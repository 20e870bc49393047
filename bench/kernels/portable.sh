#!/usr/bin/env bash
# One binary for every x86-64 CPU against a binary built for this one (docs/kernels.md):
# training tokens/s of the default build (the rest at x86-64-v2, the hot kernels chosen at
# run time, src/kernels/isa.h) and of a -DSTRATA_NATIVE=ON build (-march=native everywhere),
# side by side in interleaved rounds, as the median of each and their ratio. Also the
# portable binary forced down to each lower level it has (STRATA_ISA), which is what a CPU
# without the level gets. Each cell is the median over the rounds and, in brackets, the best
# round (the least disturbed one on a shared machine); the ratios are to native's.
#
#   bash bench/kernels/portable.sh        # builds $BUILD-native unless NATIVE=path/to/strata
#   ROUNDS=7 STEPS=30 MODELS="tiny small" bash bench/kernels/portable.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata kernels/portable
ROUNDS="${ROUNDS:-5}"
STEPS="${STEPS:-20}"
MODELS="${MODELS:-tiny small}"
THREADS="${THREADS:-1}"
if [[ -z "${NATIVE:-}" ]]; then
  cmake -S "$ROOT" -B "$BUILD-native" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_NATIVE=ON \
    -DSTRATA_BENCH=OFF >/dev/null
  cmake --build "$BUILD-native" --target strata >/dev/null
  NATIVE="$BUILD-native/strata"
fi
bench_scratch
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "portable: $STRATA; native: $NATIVE; $ROUNDS rounds x $STEPS steps, $THREADS threads"

# median tokens/s of one run's summary
tps() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median_tokens_per_s"])' "$1"; }
run() {  # run BINARY MODEL DIR [ENV...]
  local bin="$1" model="$2" dir="$3"; shift 3
  env "$@" OMP_NUM_THREADS="$THREADS" "$bin" train --model "$model" --data synthetic --seq 128 \
    --batch 8 --steps "$STEPS" --threads "$THREADS" --eval-every 0 --sample-tokens 0 \
    --peak-gflops 1000 --log-every 1000 --run-dir "$dir" >/dev/null 2>&1
  tps "$dir/summary.json"
}
levels=(x86-64-v3 x86-64-v2)
grep -qw avx512f /proc/cpuinfo && levels=(x86-64-v4 x86-64-v3 x86-64-v2)
for model in $MODELS; do
  declare -A got=()
  for ((r = 0; r < ROUNDS; r++)); do
    got[native]+="$(run "$NATIVE" "$model" "$OUT/n$r") "
    got[portable]+="$(run "$STRATA" "$model" "$OUT/p$r") "
    for l in "${levels[@]:1}"; do got[$l]+="$(run "$STRATA" "$model" "$OUT/$l$r" STRATA_ISA="$l") "; done
  done
  /usr/bin/python3 - "$model" "${got[native]}" "${got[portable]}" "${levels[@]:1}" \
    $(for l in "${levels[@]:1}"; do echo "${got[$l]// /,}"; done) <<'PY'
import statistics as st, sys
model, native, portable = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rest = sys.argv[4:]
lv, vals = rest[:len(rest) // 2], rest[len(rest) // 2:]
med = lambda xs: st.median(float(x) for x in xs if x)
best = lambda xs: max(float(x) for x in xs if x)
n, nb = med(native), best(native)
cell = lambda xs: f"{med(xs):7.0f} = {med(xs) / n:.3f}x [best {best(xs):7.0f} = {best(xs) / nb:.3f}x]"
print(f"{model:6s} native {n:7.0f} [best {nb:7.0f}] tok/s | portable (auto) {cell(portable)}", end="")
for l, v in zip(lv, vals):
    print(f" | forced {l} {cell(v.split(','))}", end="")
print()
PY
  unset got
done
