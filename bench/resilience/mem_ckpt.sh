#!/usr/bin/env bash
# In-memory checkpoints (--mem-ckpt-every 1) against none, side by side on one machine:
#   overhead  median step time of runs without and with a copy every step, alternated
#             (off, on, off, on, ...) so machine noise hits both alike; the overhead is
#             median(on) / median(off) - 1, with what the step waited for the copy and the
#             writer thread's copy and commit times from summary.json's mem_ckpt
#   recovery  one rank SIGKILLed at step KILL under --max-restarts 1, restarted from disk
#             (--ckpt-every CKPT) and from memory (--mem-ckpt-every 1 --ckpt-every CKPT):
#             detection (the last step record before the failure -> the supervisor's restart
#             line), restart -> first completed step, restart -> back at the step reached
#             before the failure, and steps of work lost (steps done before the failure less
#             the step the restart resumed at)
# Every line of the runs is time-stamped as it arrives (one reader of stdout and stderr).
# Prints the CPU model, the flags and load average, then one table per part.
#
#   bash bench/resilience/mem_ckpt.sh   # BUILD=build NPROC=2 ZERO=1 REPEATS=5 STEPS=30 KILL=18 CKPT=10
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
NPROC="${NPROC:-2}"
ZERO="${ZERO:-1}"
REPEATS="${REPEATS:-5}"
STEPS="${STEPS:-30}"
KILL="${KILL:-18}"
CKPT="${CKPT:-10}"
MODEL="${MODEL:---layers 4 --dim 256 --heads 4 --seq 128 --max-seq 128 --vocab 256 --batch 8}"
bench_need_strata resilience
bench_scratch
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
train_args="train $MODEL --nproc $NPROC --zero $ZERO --steps $STEPS --threads $OMP_NUM_THREADS \
  --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 100 --json --timeout 30"

# stamp FILE: every line of stdin as "seconds<TAB>line" into FILE.
stamp() {
  "$PYTHON" -c '
import sys, time
with open(sys.argv[1], "w") as f:
    for line in sys.stdin:
        f.write(f"{time.monotonic():.6f}\t{line}")
        f.flush()' "$1"
}

for r in $(seq 1 "$REPEATS"); do
  for mode in off on; do
    extra=""
    [[ "$mode" == on ]] && extra="--mem-ckpt-every 1"
    # shellcheck disable=SC2086
    "$STRATA" $train_args --run-dir "$OUT/step_${mode}_$r" $extra > /dev/null 2>&1
  done
  echo "overhead: repeat $r/$REPEATS done" >&2
done
for mode in disk memory; do
  extra="--ckpt-every $CKPT"
  [[ "$mode" == memory ]] && extra="$extra --mem-ckpt-every 1"
  # shellcheck disable=SC2086
  "$STRATA" $train_args --run-dir "$OUT/fail_$mode" $extra --max-restarts 1 \
    --inject kill --inject-rank $((NPROC - 1)) --inject-step "$KILL" 2>&1 | stamp "$OUT/fail_$mode.log"
  echo "recovery: $mode done" >&2
done

"$PYTHON" - "$OUT" "$REPEATS" "$NPROC" "$ZERO" "$KILL" "$CKPT" "$MODEL" <<'PY'
import json, os, statistics, sys, datetime
out, repeats, nproc, zero, kill, ckpt, model = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
info = open("/proc/cpuinfo").read()
cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
print(f"machine: {cpu}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; "
      f"{datetime.date.today()}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
print(f"model: {model}; --nproc {nproc} --zero {zero}")
s = lambda mode, r: json.load(open(f"{out}/step_{mode}_{r}/summary.json"))
off = [s("off", r)["median_ms"] for r in range(1, repeats + 1)]
on = [s("on", r)["median_ms"] for r in range(1, repeats + 1)]
mem = [s("on", r)["mem_ckpt"] for r in range(1, repeats + 1)]
print("\nstep time (median ms of each run, runs alternated)")
print(f"  off  {' '.join(f'{x:7.2f}' for x in off)}   median {statistics.median(off):.2f}")
print(f"  on   {' '.join(f'{x:7.2f}' for x in on)}   median {statistics.median(on):.2f}")
print(f"  overhead {100 * (statistics.median(on) / statistics.median(off) - 1):+.1f}% "
      f"(the step waited {statistics.median(m['stall_ms_mean'] for m in mem):.3f} ms per copy; "
      f"the writer thread copied for {statistics.median(m['copy_ms_mean'] for m in mem):.3f} ms "
      f"and hashed + committed for {statistics.median(m['commit_ms_mean'] for m in mem):.3f} ms; "
      f"{mem[0]['bytes_per_rank'] / 2**20:.1f} MiB per rank in 2 slots)")
print(f"\nrecovery from one rank SIGKILLed at step {kill} (--max-restarts 1, --ckpt-every {ckpt})")
print(f"  {'restart from':12} {'detect s':>9} {'first step s':>13} {'back at step s':>15} {'steps lost':>11}")
for mode in ("disk", "memory"):
    lines = [l.rstrip("\n").split("\t", 1) for l in open(f"{out}/fail_{mode}.log")]
    t_restart = next(float(t) for t, l in lines if "strata launch: restart 1/1" in l)
    steps = []
    for t, l in lines:
        if l.startswith("{"):
            j = json.loads(l)
            if "loss" in j:
                steps.append((float(t), j["step"]))
    before = [(t, st) for t, st in steps if t < t_restart]
    after = [(t, st) for t, st in steps if t > t_restart]
    reached = before[-1][1]
    back = next(t for t, st in after if st >= reached)
    resumed = after[0][1] - 1  # the restart's first step follows the state it loaded
    print(f"  {mode:12} {t_restart - before[-1][0]:9.3f} {after[0][0] - t_restart:13.3f} "
          f"{back - t_restart:15.3f} {reached - resumed:>11}   (resumed at step {resumed})")
PY
