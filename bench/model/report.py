#!/usr/bin/python3
"""Summarises bench/model/before_after.sh: per layout, the median over repeats of each run's
median tokens/s before and after, their ratio, and the largest final-loss difference."""
import json
import os
import statistics
import subprocess
import sys

out, repeats, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


def load(side, layout):
    return [json.load(open(os.path.join(out, f"{side}_{layout}_{r}.json")))
            for r in range(1, repeats + 1)]


cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                     capture_output=True, text=True).stdout.strip()
flags = open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split()
isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
print(f"CPU: {cpu} ({os.cpu_count()} cores; {' '.join(isa)})")
print(f"{'layout':8s} {'before tok/s':>13s} {'after tok/s':>12s} {'after/before':>13s} "
      f"{'loss diff':>10s}   per repeat (after/before)")
for layout in layouts:
    old, new = load("old", layout), load("new", layout)
    b = statistics.median(x["median_tokens_per_s"] for x in old)
    a = statistics.median(x["median_tokens_per_s"] for x in new)
    per = [n["median_tokens_per_s"] / o["median_tokens_per_s"] for o, n in zip(old, new)]
    diff = max(abs(o["final_loss"] - n["final_loss"]) for o, n in zip(old, new))
    print(f"{layout:8s} {b:13.0f} {a:12.0f} {a / b:13.3f} {diff:10.2e}   "
          + ", ".join(f"{x:.3f}" for x in per))
