#!/usr/bin/env bash
# DDP against DiLoCo replica groups across a slow link, side by side in one invocation: a
# namespace cluster of 2 hosts x 1 rank (tools/netns-cluster; needs root and `ip netns`) whose
# uplinks are shaped to LINK (default 100mbit, a token bucket; RATE,DELAY such as 100mbit,10ms
# adds a delay where the kernel has sch_netem), the tcp backend, the same model, data and steps:
#   ddp        every step's gradients all-reduced across the link
#   diloco-H   --replica-groups 2 (one group per host) --inner-steps H, for each H in HS
#   stream-H   the same in 2 fragments, merged 1 step later, int4 outer gradients (Streaming
#              DiLoCo), for each H in STREAM_HS
# For each: wall time of the run, final held-out loss, bytes every rank put across the groups
# (DDP: 4 bytes per parameter per rank per step; DiLoCo: summary.json's outer.bytes), and the
# ratios to DDP. Prints the CPU model and flags first.
#
#   bash bench/diloco/slow_link.sh   # LINK=100mbit STEPS=60 HS="10 30" MODEL="..."
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
LINK="${LINK:-100mbit}"
STEPS="${STEPS:-60}"
HS="${HS:-10 30}"
STREAM_HS="${STREAM_HS:-10 30}"
MODEL="${MODEL:---layers 2 --dim 128 --heads 4 --seq 64 --max-seq 64 --vocab 256 --batch 16}"
bench_need_strata diloco
bench_scratch
[[ $(id -u) == 0 ]] || { echo "bench/diloco: needs root for tools/netns-cluster" >&2; exit 1; }
name="dl$$"
name=${name:0:8}
cluster="$ROOT/tools/netns-cluster"
trap '"$cluster" down --name "$name" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$cluster" up --name "$name" --hosts 2 --ranks-per-host 1 --link "$LINK" >/dev/null
state=/tmp/netns-cluster-$name
hosts="$name-h0:1,$name-h1:1"
"$PYTHON" - <<'PY'
info = open("/proc/cpuinfo").read()
cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
print(f"cpu: {cpu}; {' '.join(f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16') if f in flags)}; {len(open('/proc/cpuinfo').read().split('processor')) - 1} cores")
PY
echo "link: $LINK between 2 namespace hosts x 1 rank, tcp backend; $MODEL; $STEPS steps; synthetic data"
common="train $MODEL --steps $STEPS --hosts $hosts --rsh-agent $state/rsh-agent --backend tcp --threads 1 \
  --sample-tokens 0 --eval-every 0 --eval-batches 4 --peak-gflops 100 --timeout 120"
run() {  # run NAME EXTRA...
  local n=$1
  shift
  OMP_NUM_THREADS=1 "$STRATA" $common --run-dir "$OUT/$n" "$@" >"$OUT/$n.log" 2>&1 || { tail -5 "$OUT/$n.log" >&2; exit 1; }
}
run ddp
for h in $HS; do run "diloco-$h" --replica-groups 2 --inner-steps "$h"; done
for h in $STREAM_HS; do
  run "stream-$h" --replica-groups 2 --inner-steps "$h" --fragments 2 --outer-overlap 1 --outer-dtype int4
done
"$PYTHON" - "$OUT" "$STEPS" ddp $(for h in $HS; do echo "diloco-$h"; done) $(for h in $STREAM_HS; do echo "stream-$h"; done) <<'PY'
import json, sys
out, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = []
for n in names:
    s = json.load(open(f"{out}/{n}/summary.json"))
    b = s["outer"]["bytes"] if "outer" in s else 4 * s["params"] * s["world"] * steps
    rows.append((n, s["wall_s"], s["eval_loss"], b))
base = rows[0]
print(f"| run | wall s | held-out loss | bytes across the link (all ranks' payload) | wall vs ddp | bytes vs ddp |")
print("|---|---|---|---|---|---|")
for n, w, l, b in rows:
    print(f"| {n} | {w:.1f} | {l:.4f} | {b / 1e6:.1f} MB | {w / base[1]:.3f} | 1/{base[3] / b:.0f} |")
PY
