#!/usr/bin/python3
"""Table of bench/pp/run.sh: per M, strata 1F1B and zero-bubble measured bubble (median over
steps of the mean over stages of 1 - busy / schedule time) against the formula and the
planner's bubble for the run (and the same model replayed with each step's measured stage
compute), the share of the schedule spent waiting on messages already
sent (transport), the bubble over each stage's own time (first action to last send, how
binaries before the schedule-wide time measured it) and an older binary's 1F1B bubble
when BEFORE was given, and tokens/s against
the PyTorch peer when it ran."""
import json
import os
import sys

out, ms = sys.argv[1], sys.argv[2].split()


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else None


def rel(x, ref):
    return f"{100 * (x - ref) / ref:+.0f}%"


print("| M | 1F1B bubble measured | formula (P-1)/(M+P-1) | vs formula | planned | replayed | "
      "transport share | own windows | before (own windows) | ZB measured | ZB formula | ZB planned | 1F1B tok/s | "
      "ZB tok/s | PyTorch tok/s | 1F1B / PyTorch |")
print("|" + "---|" * 16)
for m in ms:
    a, z, p, b = load(f"1f1b_{m}.json"), load(f"zb_{m}.json"), load(f"peer_{m}.json"), load(f"before_{m}.json")
    pa, pz = a["pipeline"], z["pipeline"]
    ma, fa, qa = pa["bubble_measured"], pa["bubble_formula"], pa["bubble_planned"]
    before = f"{b['pipeline']['bubble_measured']:.3f}" if b else "-"
    peer = f"{p['tokens_per_s']:.0f}" if p else "-"
    ratio = f"{a['median_tokens_per_s'] / p['tokens_per_s']:.2f}x" if p else "-"
    print(f"| {m} | {ma:.3f} | {fa:.3f} | {rel(ma, fa)} | {qa:.3f} | {pa['bubble_replayed']:.3f} | "
          f"{pa['transfer_wait_share']:.3f} | {pa['bubble_measured_own_windows']:.3f} | {before} | "
          f"{pz['bubble_measured']:.3f} | "
          f"{pz['bubble_formula']:.3f} | {pz['bubble_planned']:.3f} | "
          f"{a['median_tokens_per_s']:.0f} | {z['median_tokens_per_s']:.0f} | {peer} | {ratio} |")
