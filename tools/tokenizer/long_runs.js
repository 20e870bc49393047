// A long pre-token (a run of one byte) checked against reference encoders: the peer side of
// bench/data/tokenize.sh's long-run rows. Reads TEXT and the `strata data prepare` shard of it
// (llm.c .bin, uint16 tokens after the 1024-byte header, the document token first), and prints
// one JSON line: bytes, tokens, and for each reference its seconds and whether its ids equal
// strata's.
//   reference      OpenAI's encoder.py bpe() (find the lowest-rank pair, merge every occurrence
//                  left to right, repeat) over GPT2_DIR's vocab.json + merges.txt: O(n) a round,
//                  a run of one byte takes few rounds, so it reaches megabytes
//   js-tiktoken, gpt-3-encoder (with --peers): both take time quadratic in the run (16 KiB of
//                  'a': js-tiktoken 164 s, gpt-3-encoder 0.5 s; 64 KiB: gpt-3-encoder 27 s), so
//                  the bench gives them a short run
// Usage: node long_runs.js TEXT SHARD GPT2_DIR [--peers]
'use strict';
const fs = require('fs');
const path = require('path');

function seconds(f) {
  const t0 = process.hrtime.bigint();
  const out = f();
  return [out, Number(process.hrtime.bigint() - t0) / 1e9];
}

// GPT-2's bytes_to_unicode(), as encoder.py builds it.
function byteToUnicode() {
  const m = [];
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    m.push(String.fromCodePoint(printable ? b : 256 + n++));
  }
  return m;
}

function referenceEncoder(dir) {
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'vocab.json'), 'utf8'));
  const ranks = new Map();  // a * 2^20 + b -> [rank, merged id]
  const lines = fs.readFileSync(path.join(dir, 'merges.txt'), 'utf8').split('\n');
  let rank = 0;
  for (const line of lines) {
    if (!line || line.startsWith('#version')) continue;
    const [a, b] = line.split(' ');
    const key = vocab[a] * 1048576 + vocab[b];
    if (!ranks.has(key)) ranks.set(key, [rank, vocab[a + b]]);
    ++rank;
  }
  const bytes = byteToUnicode().map((u) => vocab[u]);
  return (buf) => {
    let w = Array.from(buf, (b) => bytes[b]);
    for (;;) {
      let best = null;
      for (let i = 0; i + 1 < w.length; ++i) {
        const m = ranks.get(w[i] * 1048576 + w[i + 1]);
        if (m && (!best || m[0] < best[0])) best = [m[0], m[1], w[i], w[i + 1]];
      }
      if (!best) return w;
      const merged = [];
      for (let i = 0; i < w.length; ++i) {
        if (i + 1 < w.length && w[i] === best[2] && w[i + 1] === best[3]) merged.push(best[1]), ++i;
        else merged.push(w[i]);
      }
      w = merged;
    }
  };
}

function equal(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; ++i) if (a[i] !== b[i]) return false;
  return true;
}

const [textPath, shardPath, gpt2Dir, peers] = process.argv.slice(2);
const text = fs.readFileSync(textPath);
const shard = fs.readFileSync(shardPath);
const count = shard.readInt32LE(8);
const strata = [];
for (let i = 1; i < count; ++i) strata.push(shard.readUInt16LE(1024 + 2 * i));  // after the document token
const out = { bytes: text.length, tokens: strata.length };
const reference = referenceEncoder(gpt2Dir);
const [ref, refS] = seconds(() => reference(text));
out.reference = { seconds: refS, equal: equal(ref, strata) };
if (peers === '--peers') {
  const s = text.toString('latin1');  // one ASCII byte repeated: the same string
  const tiktoken = require('js-tiktoken').getEncoding('gpt2');
  const [a, aS] = seconds(() => tiktoken.encode(s));
  out['js-tiktoken'] = { seconds: aS, equal: equal(Array.from(a), strata) };
  const [b, bS] = seconds(() => require('gpt-3-encoder').encode(s));
  out['gpt-3-encoder'] = { seconds: bS, equal: equal(b, strata) };
}
console.log(JSON.stringify(out));
