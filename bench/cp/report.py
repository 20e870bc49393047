#!/usr/bin/python3
"""Summarises bench/cp/run.sh: median tokens/s of each configuration, ratios to the peer and to
cp 1, the per-rank attention time (max / mean) under zigzag and contiguous chunking, the ring
bytes against the formula, and how much of the ring's transfer time the trace shows hidden
behind the block computations."""
import glob
import json
import os
import statistics
import sys

out, repeats = sys.argv[1], int(sys.argv[2])


def load(kind):
    return [json.load(open(os.path.join(out, f"{kind}_{r}.json"))) for r in range(1, repeats + 1)]


def med(runs, key="median_tokens_per_s"):
    return statistics.median(r[key] for r in runs)


ring, uly, cont, one, peer = (load(k) for k in ("ring", "uly", "cont", "one", "peer"))
t = {"cp 2 ring zigzag": med(ring), "cp 2 ring contiguous": med(cont), "cp 2 ulysses": med(uly),
     "cp 1 (one process, 2 threads)": med(one), "peer ring cp 2": med(peer, "tokens_per_s")}
for k, v in t.items():
    print(f"{k:32s} {v:10.0f} tokens/s")
p = t["peer ring cp 2"]
print(f"ring zigzag / peer {t['cp 2 ring zigzag'] / p:.2f}x, ulysses / peer "
      f"{t['cp 2 ulysses'] / p:.2f}x, ring / cp 1 {t['cp 2 ring zigzag'] / t['cp 1 (one process, 2 threads)']:.2f}x, "
      f"ulysses / cp 1 {t['cp 2 ulysses'] / t['cp 1 (one process, 2 threads)']:.2f}x")
print("within repeats, ring / peer: " + ", ".join(
    f"{a['median_tokens_per_s'] / b['tokens_per_s']:.2f}x" for a, b in zip(ring, peer)))
for name, runs in (("zigzag", ring), ("contiguous", cont), ("ulysses", uly)):
    for kind, key in (("wall", "attention"), ("thread CPU", "attention_cpu")):
        bal = [r["context_parallel"][key + "_max_over_mean"] for r in runs]
        per = [r["context_parallel"][key + "_ms_per_rank"] for r in runs]
        print(f"attention {kind} time max/mean over ranks, {name}: " +
              ", ".join(f"{b:.3f}" for b in bal) + "  (ms per rank: " +
              "; ".join(", ".join(f"{x:.0f}" for x in p) for p in per) + ")")

rows = [json.loads(l) for l in open(os.path.join(out, "ring_1", "metrics.jsonl")) if '"cp_bytes"' in l]
if rows:
    r = rows[-1]
    print(f"ring bytes per step (rank 0): measured {r['cp_bytes']}, formula {r['cp_bytes_formula']}; "
          f"per layer forward {r['cp_bytes_per_layer_fwd']}, backward {r['cp_bytes_per_layer_bwd']}")
rows = [json.loads(l) for l in open(os.path.join(out, "uly_1", "metrics.jsonl")) if '"cp_bytes"' in l]
if rows:
    r = rows[-1]
    print(f"ulysses bytes per step (rank 0): measured {r['cp_bytes']}, formula {r['cp_bytes_formula']}")

# The ring's transfers on rank 0 of the traced run: each "cp ring ... kv transfer" span runs
# from the post of a step's send/receive to their end and encloses that step's block
# computations; the "ring ... wait" spans are the part the computations did not hide.
trace = os.path.join(out, "trace", "trace-rank0.json")
if os.path.exists(trace):
    ev = json.load(open(trace))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    span = lambda pred: sum(e["dur"] for e in ev if e.get("ph") == "X" and pred(str(e.get("name", ""))))
    total = span(lambda n: n.startswith("cp ring") and "transfer" in n)
    wait = span(lambda n: n.startswith("ring ") and " wait " in n)
    compute = span(lambda n: n.startswith("ring ") and " step " in n)
    if total > 0:
        print(f"ring transfers (trace, rank 0): {total / 1e3:.1f} ms from post to completion, "
              f"{wait / 1e3:.1f} ms exposed (waited for after the block compute, "
              f"{100 * (1 - wait / total):.0f}% hidden); ring-step compute {compute / 1e3:.1f} ms")
    else:
        print("trace: no ring transfers found")
