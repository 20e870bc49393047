#!/usr/bin/env bash
# Every side-by-side benchmark, one after the other (`make bench`). Each prints its own table;
# docs/ records the figures with date, machine and load. Run on an otherwise idle machine:
# the peers (PyTorch, OpenMPI) run interleaved with strata, so noise hits both, but a busy
# machine still widens the spread.
#
#   bash bench/run_all.sh          # BUILD=build; each script's own variables apply
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export BUILD="${BUILD:-$ROOT/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
section() { printf '\n== %s (%s, load %s)\n' "$1" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

section "single-process training vs PyTorch (docs/training.md)"
bash "$ROOT/bench/train/run.sh"
section "data parallelism and ZeRO vs PyTorch DDP (docs/zero.md)"
bash "$ROOT/bench/zero/run.sh"
section "loader vs the training rate (docs/data.md)"
bash "$ROOT/bench/data/run.sh"
section "checkpoints: stall, write, recovery (docs/checkpoints.md)"
bash "$ROOT/bench/ckpt/run.sh"
section "in-memory checkpoints: overhead and a kill (docs/checkpoints.md)"
bash "$ROOT/bench/resilience/mem_ckpt.sh"
section "recovery per fault, from disk and from memory (docs/checkpoints.md)"
bash "$ROOT/bench/resilience/recovery.sh"
section "collectives vs OpenMPI (docs/comm.md)"
/usr/bin/python3 "$ROOT/bench/comm/compare.py" --strata "$BUILD/strata"
section "kernels and one training step vs PyTorch (docs/kernels.md)"
/usr/bin/python3 "$ROOT/bench/kernels/compare_torch.py" --build "$BUILD" --threads 1 --rounds 3
section "federated round overhead, secure aggregation vs plain (docs/federated.md)"
bash "$ROOT/bench/fed/run.sh"
section "RLHF: KV-cache generation and a PPO iteration vs PyTorch (docs/rlhf.md)"
bash "$ROOT/bench/rlhf/run.sh"
section "pipeline parallelism: bubble vs formula, 1F1B vs PyTorch (docs/pipeline.md)"
bash "$ROOT/bench/pp/run.sh"
section "pipeline x tensor parallel: pp 2 x tp 2 vs pp 2, tokens/s and memory (docs/pipeline.md)"
bash "$ROOT/bench/pp/tp.sh"
section "activation recomputation vs PyTorch's torch.utils.checkpoint (docs/recompute.md)"
bash "$ROOT/bench/recompute/torch.sh"
section "scaling study and the calibrated planner (docs/report.md)"
bash "$ROOT/bench/scaling/run.sh"
section "context parallelism: ring and Ulysses vs PyTorch ring attention (docs/context_parallel.md)"
bash "$ROOT/bench/cp/run.sh"
section "long context under one activation budget per rank (docs/context_parallel.md)"
bash "$ROOT/bench/cp/long_context.sh"
if [[ -n "${OLD:-}" ]]; then
  section "CPU and wall per step under a competing load, OLD=$OLD vs this build (docs/training.md)"
  bash "$ROOT/bench/contention/run.sh"
else
  section "contention: skipped (OLD=/path/to/an/older/strata runs it side by side with this build)"
fi
