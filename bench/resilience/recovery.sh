#!/usr/bin/env bash
# Measured recovery, one scenario per fault, restart from disk (--ckpt-every), from
# in-memory copies (--mem-ckpt-every 1), and live recovery (--recovery shrink|live) side by
# side: detection, first step after the fault, steps of work lost, back at the step
# reached, back to full speed (recovery.py says how each is read from the run's own
# time-stamped output).
#   kill   one rank of 2 SIGKILLed
#   stop   one rank of 2 SIGSTOPped until the communication watchdog (--timeout) fires
#   hang   one rank of 2 hangs (--inject hang) until the watchdog fires
#   replica  rank 1 of tp 2 x dp 2 SIGKILLed (one host): shrink and live lose its whole
#          data-parallel replica, and live brings a replica of replacements back
#   host   a whole namespace host lost: 2 hosts x 2 ranks, over MPI, and over strata's tcp
#          backend for shrink and live (needs root, `ip netns`, mpirun: tools/netns-cluster;
#          left out with a note when they are missing); mode `replicas`
#          (--mem-ckpt-replicas 1) runs in this scenario only
#
#   bash bench/resilience/recovery.sh   # BUILD=build SCENARIOS=kill,stop,host MODES=disk,memory,shrink,live REPEATS=3 STEPS=30 FAULT=18 CKPT=10
#   KEEP=DIR keeps the run directories and logs in DIR
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata resilience
SCENARIOS="${SCENARIOS:-kill,stop,host}"
if [[ ",$SCENARIOS," == *,host,* ]] && { [[ $(id -u) != 0 ]] || ! ip netns list >/dev/null 2>&1 || ! command -v mpirun >/dev/null; }; then
  echo "bench/resilience: the host scenario needs root, ip netns and mpirun; left out" >&2
  SCENARIOS="$(echo ",$SCENARIOS," | sed 's/,host,/,/; s/^,//; s/,$//')"
fi
if [[ -n "${KEEP:-}" ]]; then OUT="$KEEP"; mkdir -p "$OUT"; else bench_scratch; fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$PYTHON" "$(dirname "$0")/recovery.py" --strata "$STRATA" --root "$ROOT" --out "$OUT" \
  --scenarios "$SCENARIOS" --modes "${MODES:-disk,memory,shrink,live}" --repeats "${REPEATS:-3}" --steps "${STEPS:-30}" \
  --fault-step "${FAULT:-18}" --ckpt-every "${CKPT:-10}" --timeout "${TIMEOUT:-3}" \
  ${MODEL:+--model "$MODEL"}
