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
#   replicas  2 namespace hosts x 2 ranks (tools/netns-cluster, --private-shm, 1 Gbit/s link;
#             needs root and `ip netns`), `--model tiny --zero 1`, alternated rounds of: no
#             copies, --mem-ckpt-every 1, + --mem-ckpt-replicas 1 unpaced
#             (--mem-ckpt-replica-mbps 0), + replicas at the default pace; median / mean step
#             time of steps 2..STEPS and each one's ratio to no copies, replica age and rounds
#   live      one host, 3 ranks, `--recovery live --mem-ckpt-every 1`, no fault: the step time
#             of BASE (another build, e.g. main's, whose update waits for the commit under
#             live recovery) against this build's (three slots, the update waits for the read)
# PARTS picks them (default overhead,recovery).
# Every line of the runs is time-stamped as it arrives (one reader of stdout and stderr).
# Prints the CPU model, the flags and load average, then one table per part.
#
#   bash bench/resilience/mem_ckpt.sh   # BUILD=build NPROC=2 ZERO=1 REPEATS=5 STEPS=30 KILL=18 CKPT=10
#   PARTS=replicas,live BASE=/path/to/main/strata REPEATS=3 bash bench/resilience/mem_ckpt.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
NPROC="${NPROC:-2}"
ZERO="${ZERO:-1}"
REPEATS="${REPEATS:-5}"
STEPS="${STEPS:-30}"
KILL="${KILL:-18}"
CKPT="${CKPT:-10}"
PARTS="${PARTS:-overhead,recovery}"
has_part() { [[ ",$PARTS," == *,$1,* ]]; }
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

machine_line() {
  "$PYTHON" - <<'PY'
import os, datetime
info = open("/proc/cpuinfo").read()
cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
feats = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16") if f in flags)
print(f"machine: {cpu}, {os.cpu_count()} cores ({feats}); load average "
      f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
      f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
PY
}

# steps_table OUT PREFIX MODE...: per mode, the median and mean step time (steps 2..) of its
# runs OUT/PREFIX_<mode>_<r>, every run's steps pooled, and the ratios to the first mode.
steps_table() {
  "$PYTHON" - "$@" <<'PY'
import glob, json, statistics, sys
out, prefix, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = {}
for m in modes:
    ms, mem = [], []
    for d in sorted(glob.glob(f"{out}/{prefix}_{m}_*[0-9]")):
        recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"loss"' in l]
        ms += [r["ms"] for r in recs if r.get("step", 0) >= 2]
        s = json.load(open(f"{d}/summary.json"))
        if "mem_ckpt" in s:
            mem.append(s["mem_ckpt"])
    rows[m] = (statistics.median(ms), statistics.mean(ms), len(ms), mem)
base = rows[modes[0]]
print(f"  {'mode':22} {'median ms':>10} {'mean ms':>9} {'x median':>9} {'x mean':>7} {'steps':>6}  copies (rank 0)")
for m in modes:
    med, mean, n, mem = rows[m]
    extra = ""
    if mem:
        k = mem[0]
        extra = f"waited {statistics.median(x.get('stall_ms_mean', 0) for x in mem):.1f} ms/copy, {k.get('slots', 2)} slots"
        if "replicas_sent" in k:
            ages = [x["replica_age_steps_mean"] for x in mem if "replica_age_steps_mean" in x]
            extra += (f"; replicas sent {sum(x['replicas_sent'] for x in mem)}, kept {sum(x['replicas_kept'] for x in mem)}"
                      f", age mean {statistics.mean(ages) if ages else float('nan'):.1f} "
                      f"max {max(x.get('replica_age_steps_max', 0) for x in mem)} steps, round "
                      f"{statistics.median(x.get('replica_ms_mean', 0) for x in mem):.0f} ms (waiting for gaps "
                      f"{statistics.median(x.get('replica_gap_wait_ms_mean', 0) for x in mem):.0f} ms, "
                      f"{sum(x.get('replica_chunks_sent_without_gap', 0) for x in mem)} chunks without one), pace "
                      f"{k.get('replica_mbps')} MB/s")
    print(f"  {m:22} {med:10.1f} {mean:9.1f} {med / base[0]:9.3f} {mean / base[1]:7.3f} {n:6}  {extra}")
# Where rank 0's CPU went, per trained step (summary.json's cpu_s, by thread; the medians of
# the runs): the compute thread, the copy writer, the replica thread, the process groups'
# progress threads (comm and p2p), and the rest (watchdog, loader, ended threads).
def cpu_of(d):
    s = json.load(open(f"{d}/summary.json"))
    c, n = s.get("cpu_s", {}), max(1, s.get("steps_trained", 1))
    part = {"main": c.get("main", 0), "copy": c.get("mem-ckpt copy", 0), "replica": c.get("mem-ckpt repl", 0),
            "comm": sum(v for k, v in c.items() if k.startswith("comm ")),
            "p2p": sum(v for k, v in c.items() if k.startswith("p2p "))}
    part["other"] = sum(c.values()) - sum(part.values())
    return {k: 1e3 * v / n for k, v in part.items()}
print(f"\n  rank 0's CPU per step (ms)   {'compute':>8} {'copy':>6} {'replica':>8} {'comm':>6} {'p2p':>6} {'other':>6} {'total':>6}")
for m in modes:
    runs = [cpu_of(d) for d in sorted(glob.glob(f"{out}/{prefix}_{m}_*[0-9]"))]
    if not runs or not any(r["main"] for r in runs):
        continue
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"  {m:28} {med['main']:8.1f} {med['copy']:6.1f} {med['replica']:8.1f} {med['comm']:6.1f} "
          f"{med['p2p']:6.1f} {med['other']:6.1f} {sum(med.values()):6.1f}")
    if "RAW" in __import__("os").environ:
        print("   ", json.load(open(sorted(glob.glob(f"{out}/{prefix}_{m}_*[0-9]"))[0] + "/summary.json"))["cpu_s"])
PY
}

has_part overhead && for r in $(seq 1 "$REPEATS"); do
  for mode in off on; do
    extra=""
    [[ "$mode" == on ]] && extra="--mem-ckpt-every 1"
    # shellcheck disable=SC2086
    "$STRATA" $train_args --run-dir "$OUT/step_${mode}_$r" $extra > /dev/null 2>&1
  done
  echo "overhead: repeat $r/$REPEATS done" >&2
done
has_part recovery && for mode in disk memory; do
  extra="--ckpt-every $CKPT"
  [[ "$mode" == memory ]] && extra="$extra --mem-ckpt-every 1"
  # shellcheck disable=SC2086
  "$STRATA" $train_args --run-dir "$OUT/fail_$mode" $extra --max-restarts 1 \
    --inject kill --inject-rank $((NPROC - 1)) --inject-step "$KILL" 2>&1 | stamp "$OUT/fail_$mode.log"
  echo "recovery: $mode done" >&2
done

if has_part overhead && has_part recovery; then
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
      f"{mem[0]['bytes_per_rank'] / 2**20:.1f} MiB per rank in {mem[0].get('slots', 2)} slots)")
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
fi

if has_part replicas; then
  # 2 namespace hosts x 2 ranks on a 1 Gbit/s link, each with its own /dev/shm.
  CLUSTER="${CLUSTER:-slots}"
  tools="$ROOT/tools/netns-cluster"
  "$tools" up --name "$CLUSTER" --hosts 2 --ranks-per-host 2 --private-shm --link 1gbit > /dev/null
  trap '"$tools" down --name "$CLUSTER" > /dev/null 2>&1; rm -rf "$OUT"' EXIT
  state="/tmp/netns-cluster-$CLUSTER"
  rargs="train ${RMODEL:---model tiny --seq 64 --batch 8} --zero 1 --steps $STEPS --threads 1 --sample-tokens 0 \
    --eval-every 0 --eval-batches 1 --peak-gflops 100 --timeout 60 --backend ${BACKEND:-mpi} --hostfile $state/hostfile \
    --rsh-agent $state/rsh-agent"
  declare -A rmode=([none]="" [mem]="--mem-ckpt-every 1"
                    [mem+replicas-unpaced]="--mem-ckpt-every 1 --mem-ckpt-replicas 1 --mem-ckpt-replica-mbps 0"
                    [mem+replicas-paced]="--mem-ckpt-every 1 --mem-ckpt-replicas 1 ${PACE:+--mem-ckpt-replica-mbps $PACE}")
  for r in $(seq 1 "$REPEATS"); do
    for mode in none mem mem+replicas-unpaced mem+replicas-paced; do
      # shellcheck disable=SC2086
      OMPI_MCA_mpi_yield_when_idle=1 STRATA_MPI_FINALIZE_TIMEOUT=3 "$STRATA" $rargs \
        --run-dir "$OUT/repl_${mode}_$r" ${rmode[$mode]} > "$OUT/repl_${mode}_$r.log" 2>&1 ||
        { echo "replicas: $mode run $r failed:" >&2; tail -5 "$OUT/repl_${mode}_$r.log" >&2; }
    done
    echo "replicas: round $r/$REPEATS done" >&2
  done
  machine_line
  echo "replicas: ${RMODEL:---model tiny --seq 64 --batch 8} --zero 1, --backend ${BACKEND:-mpi}, 2 namespace hosts x 2 ranks, 1 Gbit/s, $STEPS steps, $REPEATS alternated rounds${PACE:+, paced at $PACE MB/s}"
  steps_table "$OUT" repl none mem mem+replicas-unpaced mem+replicas-paced
fi

if has_part live; then
  BASE="${BASE:?live: BASE=path of the binary to compare with (e.g. the main branch build)}"
  largs="train --model tiny --seq 64 --batch 12 --zero 1 --nproc 3 --steps $STEPS --threads 1 \
    --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 100 --timeout 60 \
    --mem-ckpt-every 1 --recovery live"
  for r in $(seq 1 "$REPEATS"); do
    for mode in base this; do
      bin="$STRATA"
      [[ "$mode" == base ]] && bin="$BASE"
      # shellcheck disable=SC2086
      "$bin" $largs --run-dir "$OUT/live_${mode}_$r" > "$OUT/live_${mode}_$r.log" 2>&1 ||
        { echo "live: $mode run $r failed:" >&2; tail -5 "$OUT/live_${mode}_$r.log" >&2; }
    done
    echo "live: round $r/$REPEATS done" >&2
  done
  machine_line
  echo "live: --model tiny --zero 1 --nproc 3 --recovery live --mem-ckpt-every 1, $STEPS steps, $REPEATS alternated rounds; base: $BASE"
  steps_table "$OUT" live base this
fi
