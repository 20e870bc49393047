#!/usr/bin/python3
"""Summarises bench/tp/run.sh: median tokens/s of each configuration, ratios, activation
memory per rank, tp bytes per step, and the tp communication share read from the trace."""
import json
import os
import statistics
import subprocess
import sys

out, repeats, threads, model, seq, batch = sys.argv[1:7]
repeats = int(repeats)


def load(kind):
    return [json.load(open(os.path.join(out, f"{kind}_{r}.json"))) for r in range(1, repeats + 1)]


def med(runs, key):
    return statistics.median(float(x[key]) for x in runs)


tp, nosp, dp, peer = load("tp"), load("nosp"), load("dp"), load("peer")
t = {"tp 2 (sp)": med(tp, "median_tokens_per_s"), "tp 2 (no sp)": med(nosp, "median_tokens_per_s"),
     "dp 2 (zero 0)": med(dp, "median_tokens_per_s"), "peer tp 2": med(peer, "tokens_per_s")}
cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                     capture_output=True, text=True).stdout.strip()
print(f"CPU: {cpu}; model {model}, seq {seq}, global batch {batch}, 2 ranks x {threads} thread(s)")
for k, v in t.items():
    print(f"  {k:14s} {v:9.0f} tok/s   (per repeat: "
          + ", ".join(f"{x:.0f}" for x in
                      ([r['median_tokens_per_s'] for r in {'tp 2 (sp)': tp, 'tp 2 (no sp)': nosp,
                                                           'dp 2 (zero 0)': dp}[k]]
                       if k != "peer tp 2" else [r['tokens_per_s'] for r in peer])) + ")")
# Repeats run back to back (tp, peer, no sp, dp), so a ratio within one repeat shares its
# machine load; the median of those ratios is printed beside the ratio of the medians.
def per_repeat(a, b, ka="median_tokens_per_s", kb="median_tokens_per_s"):
    r = [float(x[ka]) / float(y[kb]) for x, y in zip(a, b)]
    return f"per repeat {', '.join(f'{v:.2f}' for v in r)}; median {statistics.median(r):.2f}x"


print(f"within repeats: tp sp / peer {per_repeat(tp, peer, kb='tokens_per_s')}")
print(f"within repeats: tp no sp / peer {per_repeat(nosp, peer, kb='tokens_per_s')}")
print(f"within repeats: tp sp / dp {per_repeat(tp, dp)}")
print(f"strata tp 2 (sp) / peer:    {t['tp 2 (sp)'] / t['peer tp 2']:.2f}x")
print(f"strata tp 2 (no sp) / peer: {t['tp 2 (no sp)'] / t['peer tp 2']:.2f}x")
print(f"strata tp 2 (sp) / dp 2:    {t['tp 2 (sp)'] / t['dp 2 (zero 0)']:.2f}x")
def act(runs):  # peak activation bytes of rank 0's process (model buffers + engine scratch)
    return runs[0]["memory"]["activations"]["peak"]


bytes_tp = tp[0]["tensor_parallel"]["ranks"][0]["tp_bytes_per_step"]
bytes_nosp = nosp[0]["tensor_parallel"]["ranks"][0]["tp_bytes_per_step"]
print(f"peak activation memory per rank: tp 2 sp {act(tp) / 2**20:.1f} MiB, tp 2 no sp "
      f"{act(nosp) / 2**20:.1f} MiB, dp 2 {act(dp) / 2**20:.1f} MiB (batch {int(batch) // 2} "
      f"sequences per rank; tp ranks hold all {batch})")
print(f"tp payload per step: sp {bytes_tp / 2**20:.1f} MiB, no sp {bytes_nosp / 2**20:.1f} MiB")

# Trace: time in tp collectives (their own track, "comm tp(dp=0)") over the step spans.
ev = json.load(open(os.path.join(out, "trace", "trace-rank0.json")))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
steps = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "step"][1:]
t0 = min(e["ts"] for e in steps) if steps else 0
comm = sum(e["dur"] for e in ev if e.get("ph") == "X" and e.get("cat") == "comm"
           and "tp(" in e.get("name", "") and e["ts"] >= t0)
step_us = sum(e["dur"] for e in steps)
if step_us:
    print(f"tp communication share of step time (rank 0 trace, steps 2..): "
          f"{100 * comm / step_us:.1f}% ({comm / 1e3:.0f} of {step_us / 1e3:.0f} ms)")
