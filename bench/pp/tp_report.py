#!/usr/bin/python3
"""Table of bench/pp/tp.sh: per layout, tokens/s of each round and against pp 2 with the same
schedule, each stage's parameters and activation bytes, and rank 0's peak memory."""
import json
import os
import sys

out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
load = lambda name, r: json.load(open(os.path.join(out, f"{name}_{r}.json")))
print("| layout | schedule | tok/s per round | vs pp 2 | params per rank (stage 0 / 1) | "
      "activation MB (stage 0 / 1) | peak MiB rank 0 |")
print("|---|---|---|---|---|---|---|")
for name in names:
    layout, sched = name.split("_")
    runs = [load(name, r) for r in range(1, rounds + 1)]
    base = [load(f"pp2_{sched}", r) for r in range(1, rounds + 1)]
    tps = [x["median_tokens_per_s"] for x in runs]
    ratio = [x["median_tokens_per_s"] / b["median_tokens_per_s"] for x, b in zip(runs, base)]
    st = runs[0]["pipeline"]["stages"]
    peak = runs[0]["memory"]["total"]["peak"] / 2**20
    print(f"| {layout} | {sched} | {' / '.join(f'{t:.0f}' for t in tps)} | "
          f"{' / '.join(f'{q:.2f}x' for q in ratio)} | "
          f"{st[0]['params']:,} / {st[1]['params']:,} | "
          f"{st[0]['activation_bytes'] / 1e6:.1f} / {st[1]['activation_bytes'] / 1e6:.1f} | "
          f"{peak:.1f} |")
