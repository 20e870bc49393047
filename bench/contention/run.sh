#!/usr/bin/env bash
# CPU time and wall time per training step with and without a competing CPU load, for two
# strata binaries side by side in one run: OLD (an earlier build, given by path) and STRATA
# (this build). The job: the GPT-2 124M preset at seq 64, a few steps, on 1 and on 2 ranks
# (OMP_NUM_THREADS unset, so one rank takes every core and two ranks split them, as strata
# does by default). The load: LOAD busy-loop processes (default: one per core) that run for the
# whole "loaded" half. Each condition runs OLD and STRATA interleaved, REPEATS times, so the
# machine's own noise hits both. OpenMP wait-policy variables are cleared for both binaries:
# each runs with the policy it picks itself.
#
# Prints the CPU model and flags, then per condition: user+sys CPU seconds per step (the
# whole process tree, /usr/bin/time, over startup + steps + final eval, divided by the steps),
# wall seconds per step of the whole run and strata's own median step time, each as medians
# over the repeats with the ratio STRATA / OLD.
#
#   OLD=/path/to/old/strata bash bench/contention/run.sh
#   # BUILD=build MODEL=gpt2 SEQ=64 BATCH=4 STEPS=3 RANKS="1 2" LOAD=$(nproc) REPEATS=1
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
OLD="${OLD:-}"
MODEL="${MODEL:-gpt2}"
SEQ="${SEQ:-64}"
BATCH="${BATCH:-4}"
STEPS="${STEPS:-3}"
RANKS="${RANKS:-1 2}"
LOAD="${LOAD:-$(nproc)}"
REPEATS="${REPEATS:-1}"
bench_need_strata contention
[[ -n "$OLD" && -x "$OLD" ]] || {
  echo "bench/contention: OLD=${OLD:-(unset)} is not an executable (OLD=/path/to/old/strata)" >&2
  exit 1
}
bench_scratch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

loaders=()
stop_load() {
  for p in "${loaders[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${loaders[@]}"; do wait "$p" 2>/dev/null || true; done
  loaders=()
}
trap 'stop_load; rm -rf "$OUT"' EXIT
start_load() {
  for _ in $(seq 1 "$LOAD"); do
    bash -c 'while :; do :; done' &
    loaders+=("$!")
  done
}

# one BIN_NAME BIN RANKS LOAD_NAME REPEAT: the job once, its time record and summary in $OUT.
one() {
  local tag="$1_$3_$4_$5"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS /usr/bin/time \
    -f '%U %S %e' -o "$OUT/$tag.time" "$2" train --model "$MODEL" --seq "$SEQ" \
    --batch "$BATCH" --steps "$STEPS" --nproc "$3" --eval-every 0 --eval-batches 1 \
    --sample-tokens 0 --run-dir "$OUT/run_$tag" --json | tail -n 1 > "$OUT/$tag.json"
}

for load in quiet loaded; do
  [[ "$load" == loaded ]] && start_load
  for n in $RANKS; do
    for r in $(seq 1 "$REPEATS"); do
      # Alternate which binary goes first, so neither always runs right after a warm-up.
      if (( r % 2 )); then order="old new"; else order="new old"; fi
      for b in $order; do
        bin="$STRATA"; [[ "$b" == old ]] && bin="$OLD"
        one "$b" "$bin" "$n" "$load" "$r"
      done
      echo "$load, $n rank(s): repeat $r/$REPEATS done (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
  stop_load
done

"$PYTHON" - "$OUT" "$REPEATS" "$STEPS" "$RANKS" "$LOAD" "$MODEL" "$SEQ" "$BATCH" <<'PY'
import json, statistics, sys, datetime, os
out, repeats, steps, ranks, load, model, seq, batch = sys.argv[1:9]
repeats, steps, ranks = int(repeats), int(steps), ranks.split()
info = open("/proc/cpuinfo").read().splitlines()
cpu = next((l.split(":", 1)[1].strip() for l in info if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in info if l.startswith("flags")), [])
shown = [f for f in flags if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "hypervisor")]
print(f"machine: {cpu}, {os.cpu_count()} CPUs, flags {' '.join(shown)}; "
      f"load average {os.getloadavg()[0]:.1f} at the end; {datetime.date.today()}")
print(f"job: strata train --model {model} --seq {seq} --batch {batch} --steps {steps}; "
      f"'loaded' adds {load} busy-loop processes")
def rec(b, n, l, r):
    u, s, e = map(float, open(f"{out}/{b}_{n}_{l}_{r}.time").read().split()[-3:])
    j = json.load(open(f"{out}/{b}_{n}_{l}_{r}.json"))
    return {"cpu": (u + s) / steps, "wall": e / steps, "step": j["median_ms"] / 1e3}
print(f"{'ranks':>5} {'load':>6} | {'CPU s/step old':>14} {'new':>6} {'new/old':>7} | "
      f"{'wall s/step old':>15} {'new':>6} {'new/old':>7} | {'median step old':>15} {'new':>6} "
      f"{'new/old':>7}")
for n in ranks:
    for l in ("quiet", "loaded"):
        row = f"{n:>5} {l:>6}"
        for k, w in (("cpu", 14), ("wall", 15), ("step", 15)):
            o = statistics.median(rec("old", n, l, r)[k] for r in range(1, repeats + 1))
            m = statistics.median(rec("new", n, l, r)[k] for r in range(1, repeats + 1))
            row += f" | {o:>{w}.2f} {m:>6.2f} {m / o:>7.2f}"
        print(row)
PY
