#!/usr/bin/env bash
# DDP against DiLoCo replica groups across a slow link, side by side in one invocation: a
# namespace cluster of HOSTS hosts x 1 rank (tools/netns-cluster; needs root and `ip netns`)
# whose uplinks are shaped to LINK (a token bucket; RATE,DELAY such as 100mbit,10ms adds a delay
# where the kernel has sch_netem), the tcp backend, the same model, data and steps:
#   ddp        every step's gradients all-reduced across the links (one rank per host: the
#              hierarchical all-reduce is the flat one)
#   diloco-H   --replica-groups HOSTS (one group per host) --inner-steps H, for each H in HS
#   stream-H   the same in 2 fragments, merged 1 step later, int4 outer gradients (Streaming
#              DiLoCo), for each H in STREAM_HS
# For each: wall time, final held-out loss, the wall time at which its held-out loss first
# reached DDP's final one (evals every EVAL_EVERY steps, wall time as the sum of the steps'
# ms before it), bytes every rank put across the groups (DDP: its gradient payload,
# 4 bytes per parameter per rank per step; DiLoCo: summary.json's outer.bytes), ratios to DDP.
# OUTER="0.4:0.9 0.7:0.5" runs each DiLoCo and streaming run at each outer lr:momentum pair
# (named -lr<lr>-mu<momentum>; default: the paper's 0.7 and 0.9 alone, unnamed).
# DATA=text prepares ../shared/data/tinyshakespeare.txt with GPT-2's BPE (the product never
# needs these files; a benchmark may read them). Prints the CPU model and flags first.
#
#   bash bench/diloco/slow_link.sh   # LINK=100mbit HOSTS=2 STEPS=60 HS="10 30" DATA=synthetic
#   DATA=text STEPS=300 EVAL_EVERY=50 HS="10 50 100" STREAM_HS=50 bash bench/diloco/slow_link.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
LINK="${LINK:-100mbit}"
HOSTS="${HOSTS:-2}"
STEPS="${STEPS:-60}"
OUTER_STEPS="${OUTER_STEPS:-$STEPS}"  # the DiLoCo and streaming runs' steps (longer: time to DDP's loss)
HS="${HS:-10 30}"
STREAM_HS="${STREAM_HS:-10 30}"
OUTER="${OUTER:-}"
EVAL_EVERY="${EVAL_EVERY:-0}"
DATA="${DATA:-synthetic}"
if [[ $DATA == text ]]; then
  MODEL="${MODEL:---layers 2 --dim 64 --heads 4 --seq 64 --max-seq 64 --vocab 50257 --batch 16}"
else
  MODEL="${MODEL:---layers 2 --dim 128 --heads 4 --seq 64 --max-seq 64 --vocab 256 --batch 16}"
fi
bench_need_strata diloco
bench_scratch
[[ $(id -u) == 0 ]] || { echo "bench/diloco: needs root for tools/netns-cluster" >&2; exit 1; }
name="dl$$"
name=${name:0:8}
cluster="$ROOT/tools/netns-cluster"
trap '"$cluster" down --name "$name" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
"$cluster" up --name "$name" --hosts "$HOSTS" --ranks-per-host 1 --link "$LINK" >/dev/null
state=/tmp/netns-cluster-$name
hosts=$(for ((i = 0; i < HOSTS; i++)); do printf '%s%s-h%d:1' "$([[ $i -gt 0 ]] && echo ,)" "$name" "$i"; done)
data=synthetic
if [[ $DATA == text ]]; then
  shared="$ROOT/../shared/data"
  "$STRATA" data prepare "$shared/tinyshakespeare.txt" --tokenizer "$shared/gpt2-bpe" --val-tokens 16384 \
    -o "$OUT/shakespeare" >/dev/null
  data="$OUT/shakespeare"
fi
"$PYTHON" - <<'PY'
info = open("/proc/cpuinfo").read()
cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
print(f"cpu: {cpu}; {' '.join(f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16') if f in flags)}; {len(open('/proc/cpuinfo').read().split('processor')) - 1} cores")
PY
echo "link: $LINK between $HOSTS namespace hosts x 1 rank, tcp backend; $MODEL; $STEPS steps (DiLoCo $OUTER_STEPS); data $DATA"
common="train $MODEL --data $data --hosts $hosts --rsh-agent $state/rsh-agent --backend tcp \
  --threads 1 --sample-tokens 0 --eval-every $EVAL_EVERY --eval-batches 4 --peak-gflops 100 --timeout 600"
run() {  # run NAME EXTRA...
  local n=$1
  shift
  OMP_NUM_THREADS=1 "$STRATA" $common --run-dir "$OUT/$n" "$@" >"$OUT/$n.log" 2>&1 || { tail -5 "$OUT/$n.log" >&2; exit 1; }
}
run ddp --steps "$STEPS"
names=(ddp)
for pair in ${OUTER:-default}; do
  suffix="" lr_flag=()
  [[ $pair == default ]] || suffix="-lr${pair%%:*}-mu${pair##*:}" lr_flag=(--outer-lr "${pair%%:*}" --outer-momentum "${pair##*:}")
  for h in $HS; do
    run "diloco-$h$suffix" --steps "$OUTER_STEPS" --replica-groups "$HOSTS" --inner-steps "$h" "${lr_flag[@]}"
    names+=("diloco-$h$suffix")
  done
  for h in $STREAM_HS; do
    run "stream-$h$suffix" --steps "$OUTER_STEPS" --replica-groups "$HOSTS" --inner-steps "$h" --fragments 2 --outer-overlap 1 \
      --outer-dtype int4 "${lr_flag[@]}"
    names+=("stream-$h$suffix")
  done
done
"$PYTHON" - "$OUT" "$STEPS" "${names[@]}" <<'PY'
import json, sys
out, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def curve(n):  # [(step, wall s so far, held-out loss)]
    wall, pts = 0.0, []
    for line in open(f"{out}/{n}/metrics.jsonl"):
        j = json.loads(line)
        if "loss" in j and "ms" in j:
            wall += j["ms"] / 1e3
        if "eval_loss" in j:
            pts.append((j["step"], wall, j["eval_loss"]))
    return pts
rows = []
for n in names:
    s = json.load(open(f"{out}/{n}/summary.json"))
    b = s["outer"]["bytes"] if "outer" in s else 4 * s["params"] * s["world"] * steps
    rows.append((n, s["wall_s"], s["eval_loss"], b, curve(n)))
base = rows[0]
target = base[2]
print(f"| run | wall s | held-out loss | vs ddp's | wall s to ddp's final loss | bytes across the links (all ranks' payload) | wall vs ddp | bytes vs ddp |")
print("|---|---|---|---|---|---|---|---|")
for n, w, l, b, pts in rows:
    reach = next((t for _, t, v in pts if v <= target), None)
    print(f"| {n} | {w:.1f} | {l:.4f} | {100 * (l / target - 1):+.1f}% | {'-' if reach is None else f'{reach:.1f}'} "
          f"| {b / 1e6:.1f} MB | {w / base[1]:.3f} | 1/{base[3] / b:.0f} |")
if any(len(r[4]) > 1 for r in rows):
    print()
    print("held-out loss by step (wall s):")
    for n, *_, pts in rows:
        print(f"  {n}: " + ", ".join(f"{st} {v:.3f} ({t:.0f} s)" for st, t, v in pts))
PY
