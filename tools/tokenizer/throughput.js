// Tokenization throughput of a Node encoder over a corpus, on N worker threads: the peer side
// of bench/data/tokenize.sh. The corpus is cut into documents after every blank line (as
// `strata data prepare --doc-split blank-line` does); worker w encodes the documents in its
// contiguous share. Prints one JSON line: encoder, threads, bytes, tokens, seconds, MB/s.
// Usage: node throughput.js CORPUS js-tiktoken|gpt-3-encoder THREADS
'use strict';
const fs = require('fs');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

function split(text) {
  const docs = [];
  let start = 0;
  for (let at = text.indexOf('\n\n'); at >= 0; at = text.indexOf('\n\n', start)) {
    docs.push(text.slice(start, at + 2));
    start = at + 2;
  }
  if (start < text.length) docs.push(text.slice(start));
  return docs;
}

if (isMainThread) {
  const [corpus, encoder, threadsArg] = process.argv.slice(2);
  const threads = Number(threadsArg || 1);
  const text = fs.readFileSync(corpus, 'utf8');
  const docs = split(text);
  const bytes = Buffer.byteLength(text);
  let done = 0, tokens = 0, ready = 0;
  const workers = [];
  let t0 = 0;
  for (let w = 0; w < threads; ++w) {
    const part = docs.slice(Math.floor(docs.length * w / threads), Math.floor(docs.length * (w + 1) / threads));
    const worker = new Worker(__filename, { workerData: { encoder, part } });
    worker.on('message', (m) => {
      if (m.ready) {
        if (++ready === threads) { t0 = process.hrtime.bigint(); for (const x of workers) x.postMessage('go'); }
        return;
      }
      tokens += m.tokens;
      if (++done === threads) {
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        console.log(JSON.stringify({ encoder, threads, bytes, tokens, seconds: s, mb_per_s: bytes / 1e6 / s }));
        for (const x of workers) x.terminate();
      }
    });
    workers.push(worker);
  }
} else {
  const { encoder, part } = workerData;
  let encode;
  if (encoder === 'js-tiktoken') {
    const enc = require('js-tiktoken').getEncoding('gpt2');
    encode = (s) => enc.encode(s);
  } else {
    encode = require('gpt-3-encoder').encode;
  }
  encode('warm up');  // load the tables before the clock starts
  parentPort.postMessage({ ready: true });
  parentPort.once('message', () => {
    let tokens = 0;
    for (const d of part) tokens += encode(d).length + 1;  // + the document token strata adds
    parentPort.postMessage({ tokens });
  });
}
