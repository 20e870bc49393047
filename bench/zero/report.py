#!/usr/bin/python3
"""Prints bench/zero/run.sh's table from its output folder: tokens/s per engine (median over
repeats of each run's median step), the ratios against the targets, and the share of
gradient communication hidden behind compute read from the Chrome traces.

Overlap (same definitions as src/parallel/overlap.h): per rank, C = union of communication
spans whose name starts with "allreduce " or "reducescatter" (gradient collectives; cat
"comm"), K = union of spans with cat "compute"; hidden share = |C ∩ K| / |C|, summed over
ranks.
"""
import datetime
import glob
import json
import os
import statistics
import sys


def merge(iv):
    out = []
    for b, e in sorted(x for x in iv if x[1] > x[0]):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def intersect(a, b):
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap(folder):
    comm_total = hidden_total = 0.0
    files = 0
    for path in glob.glob(os.path.join(folder, "**", "*.json"), recursive=True):
        try:
            doc = json.load(open(path))
        except (ValueError, OSError):
            continue
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            continue
        files += 1
        comm, compute = [], []
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            iv = (e["ts"], e["ts"] + e.get("dur", 0))
            if e.get("cat") == "comm" and e["name"].startswith(("allreduce ", "reducescatter")):
                comm.append(iv)
            elif e.get("cat") == "compute":
                compute.append(iv)
        c, k = merge(comm), merge(compute)
        comm_total += sum(e - b for b, e in c)
        hidden_total += intersect(c, k)
    return (hidden_total / comm_total if comm_total else float("nan")), files


def main():
    out, repeats, threads, bucket, precision = sys.argv[1:6]
    repeats = int(repeats)
    load = lambda name: [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, repeats + 1)]
    z0, ddp, one, z3 = load("z0"), load("ddp"), load("one"), load("z3")
    tps = lambda runs, key="median_tokens_per_s": statistics.median(x[key] for x in runs)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; {datetime.date.today()}; {ddp[0]['peer']}")
    print(f"model tiny, seq 256, global batch 8, 2 ranks x {threads} thread(s), bucket {bucket} MiB, "
          f"{precision}, {repeats} interleaved repeats")
    print(f"{'repeat':>6} {'z0 tok/s':>9} {'DDP tok/s':>10} {'1-rank tok/s':>13} {'z3 tok/s':>9}")
    for r in range(repeats):
        print(f"{r + 1:>6} {z0[r]['median_tokens_per_s']:>9.0f} {ddp[r]['tokens_per_s']:>10.0f} "
              f"{one[r]['median_tokens_per_s']:>13.0f} {z3[r]['median_tokens_per_s']:>9.0f}")
    s0, d, s1, s3 = tps(z0), tps(ddp, "tokens_per_s"), tps(one), tps(z3)
    print(f"stage 0 vs DDP:        {s0:.0f} / {d:.0f} tok/s = {s0 / d:.2f}x   (target >= 1.3x)")
    print(f"weak scaling:          {s0:.0f} / (2 x {s1:.0f}) = {100 * s0 / (2 * s1):.1f}%   "
          f"(target >= 90%)")
    print(f"stage 3 / stage 0 time: {s0 / s3:.3f}x   (target <= 1.15x)")
    for z in (0, 3):
        share, files = overlap(f"{out}/trace_z{z}")
        print(f"stage {z}: gradient communication hidden behind compute {100 * share:.1f}% "
              f"({files} trace files; target >= 80%)")


if __name__ == "__main__":
    main()
