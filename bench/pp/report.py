#!/usr/bin/python3
"""Table of bench/pp/run.sh: per M, strata 1F1B and zero-bubble tokens/s and measured bubble
(median over steps of the mean over stages of 1 - busy / schedule time) against the formula,
and the PyTorch peer's tokens/s."""
import json
import os
import sys

out, ms = sys.argv[1], sys.argv[2].split()
load = lambda name: json.load(open(os.path.join(out, name)))
print("| M | 1F1B bubble measured | formula (P-1)/(M+P-1) | rel. diff | ZB bubble measured | "
      "ZB formula | strata 1F1B tok/s | strata ZB tok/s | PyTorch 1F1B tok/s | 1F1B / PyTorch |")
print("|---|---|---|---|---|---|---|---|---|---|")
for m in ms:
    a, z, p = load(f"1f1b_{m}.json"), load(f"zb_{m}.json"), load(f"peer_{m}.json")
    pa, pz = a["pipeline"], z["pipeline"]
    rel = (pa["bubble_measured"] - pa["bubble_formula"]) / pa["bubble_formula"]
    print(f"| {m} | {pa['bubble_measured']:.3f} | {pa['bubble_formula']:.3f} | {100 * rel:+.0f}% | "
          f"{pz['bubble_measured']:.3f} | {pz['bubble_formula']:.3f} | "
          f"{a['median_tokens_per_s']:.0f} | {z['median_tokens_per_s']:.0f} | "
          f"{p['tokens_per_s']:.0f} | {a['median_tokens_per_s'] / p['tokens_per_s']:.2f}x |")
