// Llama 3's pre-tokenizer pattern applied with JavaScript's own Unicode regex engine: the
// reference tests/data/test_tokenizer.cc holds strata's hand-written scanner to. Prints, per
// file, the number of words and the FNV-1a-64 hash of their byte lengths (little-endian
// uint32). JavaScript has no (?i:...) group, so the contractions are spelled out per case.
// Usage: node llama3_split.js FILE...
'use strict';
const fnv1a64 = require('./fnv');
const fs = require('fs');

const pattern = new RegExp(
  "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 'gu');


for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file, 'utf8');
  const lengths = Array.from(text.matchAll(pattern), (m) => Buffer.byteLength(m[0]));
  const covered = lengths.reduce((a, b) => a + b, 0);
  if (covered !== Buffer.byteLength(text)) throw new Error(`${file}: the words do not cover the text`);
  console.log(JSON.stringify({ file: require('path').basename(file), words: lengths.length, fnv1a64: fnv1a64(lengths) }));
}
