#!/usr/bin/env python3
"""strata's tcp backend against its mpi backend (and shm for reference), side by side in one run.

Interleaved and repeated --rounds times, `strata bench comm --json` over
  tcp          strata's tcp backend (loopback sockets)
  mpi          strata's mpi backend as OpenMPI runs it on one host: its shared-memory BTL (vader)
  mpi tcp-btl  the same with OMPI_MCA_btl=self,tcp: OpenMPI over loopback TCP, like for like
  shm          strata's shm backend, for reference
The median bus bandwidth per size is printed as a Markdown table with the tcp / mpi ratios,
headed by the CPU model (lscpu) and the load average before and after (the machine may be
shared).

  bench/comm/tcp_vs_mpi.py [--strata build/strata] [--op allreduce] [--min 8] [--max 16M] [--factor 8] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import ROOT, parse_size  # noqa: E402


def rows(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return {j["bytes"]: j for j in map(json.loads, filter(lambda l: l.startswith("{"), out.stdout.splitlines()))}


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--op", default="allreduce")
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="16M")
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    lo, hi = parse_size(a.min), parse_size(a.max)
    impls = {"tcp": ("tcp", {}), "mpi": ("mpi", {}), "mpi tcp-btl": ("mpi", {"OMPI_MCA_btl": "self,tcp"}),
             "shm": ("shm", {})}
    load0 = open("/proc/loadavg").read().split()[:3]
    data = {}
    for rnd in range(a.rounds):
        for name, (backend, extra) in impls.items():
            cmd = [a.strata, "bench", "comm", "--backend", backend, "--nproc", str(a.nproc), "--op", a.op,
                   "-b", str(lo), "-e", str(hi), "-f", str(a.factor), "--iters", str(a.iters),
                   "--warmup", str(a.warmup), "--json"]
            for b, r in rows(cmd, dict(os.environ, **extra)).items():
                data.setdefault((name, b), []).append(r)
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)
    load1 = open("/proc/loadavg").read().split()[:3]

    def med(impl, b, key):
        v = [r[key] for r in data.get((impl, b), [])]
        return statistics.median(v) if v else float("nan")

    print(f"#### {a.op}, {a.nproc} ranks, one host: strata tcp vs mpi (busbw GB/s, median of {a.rounds} rounds)\n")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average {' '.join(load0)} before, "
          f"{' '.join(load1)} after\n")
    print("| size (B) | tcp | mpi (vader) | mpi (tcp BTL) | shm | tcp / mpi vader | tcp / mpi tcp BTL | tcp time (us) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in sorted({b for (_, b) in data}):
        t, m, mt, s = (med(i, b, "busbw") for i in impls)
        r1 = t / m if m > 0 else float("nan")
        r2 = t / mt if mt > 0 else float("nan")
        print(f"| {b} | {t:.3f} | {m:.3f} | {mt:.3f} | {s:.3f} | {r1:.2f}x | {r2:.2f}x | {med('tcp', b, 'time_us'):.1f} |")


if __name__ == "__main__":
    main()
