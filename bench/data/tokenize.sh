#!/usr/bin/env bash
# Tokenization throughput, side by side in one run: `strata data prepare` (read, encode on
# THREADS threads, write shards: the whole job) against the encoders people use, encoding the
# same documents in memory only:
#   GPT-2 BPE      js-tiktoken (gpt2) and gpt-3-encoder under Node, on THREADS worker threads
#   SentencePiece  spm_encode (one process per thread, each on its share of the lines), with
#                  a model trained by spm_train on the corpus (BPE, SP_VOCAB pieces)
# Each measurement is the median of REPEATS runs, interleaved; output: MB/s and strata's ratio
# to the fastest peer, with the CPU named. ENCODERS=sentencepiece runs only strata's
# SentencePiece and spm_encode (no Node packages needed).
#
# Long pre-tokens (ENCODERS=all or long): a file of LONG_BYTES (8 MiB) of one byte ('a', '=',
# newline) is one pre-token; strata prepares it (one run each, the whole job), and its ids are
# compared with OpenAI's encoder.py bpe() run by tools/tokenizer/long_runs.js. js-tiktoken and
# gpt-3-encoder take time quadratic in a run, so they encode PEER_BYTES (4 KiB) of it, timed
# and compared with strata's ids of the same PEER_BYTES.
#
#   make tokenizer-tools && bash bench/data/tokenize.sh   # CORPUS=../shared/data/tinyshakespeare.txt
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
bench_need_strata data
CORPUS="${CORPUS:-$ROOT/../shared/data/tinyshakespeare.txt}"
GPT2="${GPT2:-$ROOT/../shared/data/gpt2-bpe}"
THREADS="${THREADS:-$(nproc)}"
REPEATS="${REPEATS:-5}"
SP_VOCAB="${SP_VOCAB:-8000}"
ENCODERS="${ENCODERS:-all}"
LONG_BYTES="${LONG_BYTES:-8388608}"
PEER_BYTES="${PEER_BYTES:-4096}"
TOOLS="$ROOT/tools/tokenizer"
[[ "$ENCODERS" == all || "$ENCODERS" == sentencepiece || "$ENCODERS" == long ]] ||
  { echo "bench/data/tokenize: ENCODERS=$ENCODERS (expected all, sentencepiece or long)" >&2; exit 1; }
[[ "$ENCODERS" == sentencepiece || -d "$TOOLS/node_modules/js-tiktoken" ]] ||
  { echo "bench/data/tokenize: run make tokenizer-tools first (or ENCODERS=sentencepiece)" >&2; exit 1; }
[[ "$ENCODERS" == long ]] || command -v spm_encode >/dev/null || { echo "bench/data/tokenize: spm_encode missing (apt install sentencepiece)" >&2; exit 1; }
bench_scratch
BYTES=$(stat -c %s "$CORPUS")

# strata_mbps TOKENIZER: MB/s of one `data prepare` run, from its "done in S s" line.
strata_mbps() {
  rm -rf "$OUT/prep"
  local s
  s=$("$STRATA" data prepare "$CORPUS" --tokenizer "$1" --doc-split blank-line --threads "$THREADS" \
        -o "$OUT/prep" 2>&1 >/dev/null | sed -n 's/.*done in \([0-9.]*\) s.*/\1/p')
  python3 -c "print($BYTES / 1e6 / $s)"
}
node_mbps() {
  node "$TOOLS/throughput.js" "$CORPUS" "$1" "$THREADS" | python3 -c "import json,sys; print(json.load(sys.stdin)['mb_per_s'])"
}
spm_mbps() {
  local t0 t1
  t0=$(date +%s.%N)
  for part in "$OUT"/part.*; do spm_encode --model="$OUT/sp.model" --output_format=id < "$part" > /dev/null & done
  wait
  t1=$(date +%s.%N)
  python3 -c "print($BYTES / 1e6 / ($t1 - $t0))"
}

# long_run NAME CHAR: one row of the long pre-token table.
long_run() {
  local name=$1 char=$2 n s
  for n in "$LONG_BYTES" "$PEER_BYTES"; do
    head -c "$n" /dev/zero | tr '\0' "$char" > "$OUT/run_$n.txt"
    rm -rf "$OUT/run_$n"
    s=$("$STRATA" data prepare "$OUT/run_$n.txt" --tokenizer "$GPT2" -o "$OUT/run_$n" 2>&1 >/dev/null |
          sed -n 's/.*done in \([0-9.]*\) s.*/\1/p')
    echo "$s" > "$OUT/run_$n.s"
  done
  node "$TOOLS/long_runs.js" "$OUT/run_$LONG_BYTES.txt" "$OUT/run_$LONG_BYTES/train_000000.bin" "$GPT2" \
    > "$OUT/long.json"
  node "$TOOLS/long_runs.js" "$OUT/run_$PEER_BYTES.txt" "$OUT/run_$PEER_BYTES/train_000000.bin" "$GPT2" --peers \
    > "$OUT/peer.json"
  python3 - "$name" "$(cat "$OUT/run_$LONG_BYTES.s")" "$(cat "$OUT/run_$PEER_BYTES.s")" "$OUT/long.json" "$OUT/peer.json" <<'PY'
import json, sys
name, long_s, peer_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
L, P = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
yes = lambda r: "equal" if r["equal"] else "DIFFERENT"
print(f"{name:<8}{L['bytes']:>9} B  strata {long_s:7.2f} s ({L['bytes'] / 1e6 / long_s:5.2f} MB/s) {L['tokens']:>8} ids, "
      f"encoder.py bpe() {L['reference']['seconds']:6.2f} s: {yes(L['reference'])} | {P['bytes']} B: strata {peer_s:.3f} s, "
      f"js-tiktoken {P['js-tiktoken']['seconds']:.2f} s {yes(P['js-tiktoken'])}, "
      f"gpt-3-encoder {P['gpt-3-encoder']['seconds']:.2f} s {yes(P['gpt-3-encoder'])}")
PY
}

if [[ "$ENCODERS" != sentencepiece ]]; then
  echo "long pre-tokens: $((LONG_BYTES / 1048576)) MiB of one byte (peers: $PEER_BYTES B of it); $(lscpu | sed -n 's/^Model name: *//p')"
  long_run a a
  long_run '=' '='
  long_run newline '\n'
fi
[[ "$ENCODERS" == long ]] && exit 0

spm_train --input="$CORPUS" --model_prefix="$OUT/sp" --vocab_size="$SP_VOCAB" --model_type=bpe \
  --minloglevel=2 > /dev/null 2>&1
split -n "l/$THREADS" "$CORPUS" "$OUT/part."
for r in $(seq 1 "$REPEATS"); do
  if [[ "$ENCODERS" == all ]]; then
    echo "strata_bpe $(strata_mbps "$GPT2")" >> "$OUT/runs"
    echo "js-tiktoken $(node_mbps js-tiktoken)" >> "$OUT/runs"
    echo "gpt-3-encoder $(node_mbps gpt-3-encoder)" >> "$OUT/runs"
  fi
  echo "strata_sp $(strata_mbps "$OUT/sp.model")" >> "$OUT/runs"
  echo "spm_encode $(spm_mbps)" >> "$OUT/runs"
  echo "repeat $r/$REPEATS done" >&2
done

python3 - "$OUT/runs" "$BYTES" "$THREADS" <<'PY'
import collections, statistics, subprocess, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, v = line.split()
    runs[name].append(float(v))
med = {k: statistics.median(v) for k, v in runs.items()}
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
flags = open('/proc/cpuinfo').read()
feat = [f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_tile') if ' ' + f + ' ' in flags]
load = open('/proc/loadavg').read().split()[0]
print(f"tokenization, {int(sys.argv[2]) / 1e6:.2f} MB corpus, {sys.argv[3]} thread(s), median of {len(runs['strata_sp'])}; "
      f"{cpu} ({', '.join(feat)}), load {load}")
print(f"{'encoder':<16}{'MB/s':>8}")
for k in ('strata_bpe', 'js-tiktoken', 'gpt-3-encoder', 'strata_sp', 'spm_encode'):
    if k in med:
        print(f"{k:<16}{med[k]:>8.2f}")
if 'strata_bpe' in med:
    bpe_peer = max(med['js-tiktoken'], med['gpt-3-encoder'])
    print(f"GPT-2 BPE: strata / fastest peer = {med['strata_bpe'] / bpe_peer:.2f}x")
print(f"SentencePiece: strata / spm_encode = {med['strata_sp'] / med['spm_encode']:.2f}x")
PY
