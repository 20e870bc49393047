// Writes the reference token ids of a text under GPT-2's BPE, from two independent encoders
// (gpt-3-encoder and js-tiktoken's "gpt2"), after checking that they agree token for token.
// Usage: node gpt2_fixture.js TEXT OUT_PREFIX [FULL_PREFIX_BYTES]
//   OUT_PREFIX.json: {count, fnv1a64 of the ids as little-endian uint32, full: ids of the
//   first FULL_PREFIX_BYTES bytes of the text (default 4096)}.
// Install the encoders with `make tokenizer-tools` (npm install in this folder).
'use strict';
const fnv1a64 = require('./fnv');
const fs = require('fs');
const path = require('path');
const gpt3 = require('gpt-3-encoder');
const { getEncoding } = require('js-tiktoken');


function encodeBoth(text) {
  const a = gpt3.encode(text);
  const b = Array.from(getEncoding('gpt2').encode(text));
  if (a.length !== b.length) throw new Error(`encoders disagree on the count: ${a.length} vs ${b.length}`);
  for (let i = 0; i < a.length; ++i)
    if (a[i] !== b[i]) throw new Error(`encoders disagree at token ${i}: ${a[i]} vs ${b[i]}`);
  return a;
}

const [textPath, outPrefix, fullBytesArg] = process.argv.slice(2);
if (!textPath || !outPrefix) {
  console.error('usage: node gpt2_fixture.js TEXT OUT_PREFIX [FULL_PREFIX_BYTES]');
  process.exit(2);
}
const text = fs.readFileSync(textPath, 'utf8');
const fullBytes = Number(fullBytesArg || 4096);
const ids = encodeBoth(text);
const prefix = encodeBoth(text.slice(0, fullBytes));
const out = { source: path.basename(textPath), bytes: Buffer.byteLength(text), count: ids.length,
              fnv1a64: fnv1a64(ids), prefix_chars: fullBytes, prefix_ids: prefix };
fs.writeFileSync(outPrefix + '.json', JSON.stringify(out) + '\n');
console.log(`${textPath}: ${ids.length} tokens, fnv1a64 ${out.fnv1a64}; both encoders agree`);
