#!/usr/bin/env bash
# Node-limited routing across a shaped link, side by side in one invocation (docs/moe.md): a
# namespace cluster of 2 hosts x RANKS ranks (tools/netns-cluster; needs root and `ip netns`)
# whose uplinks are shaped to LINK, the tcp backend, expert parallelism over every rank (the
# experts in 2 groups, one per host: --route-groups 2), the same model, data and steps, run
#   free      each token's top-k among every expert
#   limit-1   --route-max-groups 1: each token's top-k inside its best group (one host)
# interleaved REPEATS times. Prints per run the all-to-all bytes per step (every rank's
# payload, and the part that crossed to the other host: metrics.jsonl's ep_bytes and
# ep_bytes_off_host, the mean over the steps after the first), the median step time and the
# final loss, then the ratios limit-1 / free.
#
#   bash bench/moe/node_limited.sh   # LINK=1gbit RANKS=1 STEPS=30 REPEATS=2
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
LINK="${LINK:-1gbit}"
RANKS="${RANKS:-1}"
STEPS="${STEPS:-30}"
REPEATS="${REPEATS:-2}"
MODEL="${MODEL:---layers 2 --dim 256 --heads 4 --seq 64 --max-seq 64 --vocab 256 --batch 16 --experts 16 --top-k 4 --expert-ffn 256 --dropless --aux-loss-coef 0 --router-bias-update-rate 1e-3 --router-score sigmoid}"
bench_need_strata moe
bench_scratch
[[ $(id -u) == 0 ]] || { echo "bench/moe: node_limited.sh needs root for tools/netns-cluster" >&2; exit 1; }
name="nl$$"
name=${name:0:8}
cluster="$ROOT/tools/netns-cluster"
trap '"$cluster" down --name "$name" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$cluster" up --name "$name" --hosts 2 --ranks-per-host "$RANKS" --link "$LINK" >/dev/null
state=/tmp/netns-cluster-$name
hosts="$name-h0:$RANKS,$name-h1:$RANKS"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')$(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "link: $LINK between 2 namespace hosts x $RANKS rank(s), tcp backend, --ep $((2 * RANKS)); $MODEL; $STEPS steps"
common="train $MODEL --data synthetic --steps $STEPS --hosts $hosts --rsh-agent $state/rsh-agent --backend tcp \
  --ep $((2 * RANKS)) --route-groups 2 --threads 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 \
  --peak-gflops 100 --timeout 600"
run() {  # run NAME EXTRA...
  local n=$1
  shift
  OMP_NUM_THREADS=1 "$STRATA" $common --run-dir "$OUT/$n" "$@" >"$OUT/$n.log" 2>&1 || { tail -5 "$OUT/$n.log" >&2; exit 1; }
}
for r in $(seq 1 "$REPEATS"); do
  run "free_$r" --route-max-groups 2
  run "limit-1_$r" --route-max-groups 1
done
"$PYTHON" - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def stats(n):
    recs = [json.loads(l) for l in open(f"{out}/{n}/metrics.jsonl")]
    recs = [r for r in recs if "loss" in r][1:]
    return (statistics.mean(r["ep_bytes"] for r in recs), statistics.mean(r["ep_bytes_off_host"] for r in recs),
            statistics.median(r["ms"] for r in recs), recs[-1]["loss"])
rows = {}
for name in ("free", "limit-1"):
    runs = [stats(f"{name}_{r}") for r in range(1, repeats + 1)]
    rows[name] = [statistics.median(x[i] for x in runs) for i in range(4)]
print("| routing | all-to-all bytes per step | of which to the other host | median step ms | final loss |")
print("|---|---|---|---|---|")
for name, (b, off, ms, loss) in rows.items():
    print(f"| {name} | {b / 1e6:.2f} MB | {off / 1e6:.2f} MB | {ms:.1f} | {loss:.4f} |")
f, l = rows["free"], rows["limit-1"]
print(f"\nlimit-1 / free: bytes {l[0] / f[0]:.3f}, off-host bytes {l[1] / f[1]:.3f}, step time {l[2] / f[2]:.3f}")
PY
