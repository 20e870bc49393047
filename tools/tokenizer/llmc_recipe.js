// llm.c's Tiny Shakespeare recipe (its dev/data/tinyshakespeare.py), under two independent
// GPT-2 encoders: every blank-line-separated statement is a document that starts with
// <|endoftext|>, and the first 32,768 tokens are the validation split. Prints the token counts
// and the FNV-1a-64 hash of each split's ids (little-endian uint32), the figures
// tests/data/test_prepare.cc holds `strata data prepare` to.
// Usage: node llmc_recipe.js TINYSHAKESPEARE.txt   (after `make tokenizer-tools`)
'use strict';
const fnv1a64 = require('./fnv');
const fs = require('fs');
const gpt3 = require('gpt-3-encoder');
const { getEncoding } = require('js-tiktoken');


const text = fs.readFileSync(process.argv[2], 'utf8');
const marked = '<|endoftext|>' + text.replaceAll('\n\n', '\n\n<|endoftext|>');
// tiktoken with the special token allowed, as llm.c encodes it.
const a = Array.from(getEncoding('gpt2').encode(marked, ['<|endoftext|>']));
// gpt-3-encoder has no special tokens: each document on its own, each after a 50256.
const b = [];
for (const piece of marked.split('<|endoftext|>').slice(1)) b.push(50256, ...gpt3.encode(piece));
if (a.length !== b.length || a.some((x, i) => x !== b[i])) throw new Error('the encoders disagree');
const val = a.slice(0, 32768), train = a.slice(32768);
console.log(JSON.stringify({ documents: a.filter((x) => x === 50256).length, tokens: a.length,
                             val: val.length, val_fnv1a64: fnv1a64(val),
                             train: train.length, train_fnv1a64: fnv1a64(train) }));
