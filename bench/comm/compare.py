#!/usr/bin/env python3
"""strata's communicator against OpenMPI, side by side in one run (2 ranks by default).

For each op, interleaved and repeated --rounds times:
  strata shm      `strata bench comm --backend shm --json`
  strata mpi      `strata bench comm --backend mpi --json` (strata's API over OpenMPI)
  OpenMPI         mpi_peer.c, a minimal program calling OpenMPI's own collectives
The median bus bandwidth per size is printed as a Markdown table with the shm/OpenMPI
ratio, followed by the single-core memcpy bandwidth (the physical limit), cross-memory
attach against memcpy (why the shm backend stages through shared memory by default) and
the targets:
  all-reduce busbw >= 2x OpenMPI at every size >= 16 MiB, >= 1x from 1 KiB;
  8-byte all-reduce latency <= OpenMPI's; reduce-scatter, all-gather >= 1x from 1 KiB.

  bench/comm/compare.py [--strata build/strata] [--nproc 2] [--max 256M] [--rounds 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def rows(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    res = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            res[j["bytes"]] = j
    return res


def build(tmp):
    mpicc = shutil.which("mpicc")
    if not mpicc:
        sys.exit("mpicc not found (install libopenmpi-dev)")
    peer = os.path.join(tmp, "mpi_peer")
    subprocess.run([mpicc, "-O2", "-o", peer, os.path.join(HERE, "mpi_peer.c")], check=True)
    memcpy = os.path.join(tmp, "memcpy_bw")
    subprocess.run(["cc", "-O2", "-o", memcpy, os.path.join(HERE, "memcpy_bw.c")], check=True)
    cma = os.path.join(tmp, "cma_bw")
    subprocess.run(["cc", "-O2", "-o", cma, os.path.join(HERE, "cma_bw.c")], check=True)
    return peer, memcpy, cma


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ops", default="allreduce,reducescatter,allgather,alltoall")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata-bench-comm-")
    peer, memcpy, cma = build(tmp)
    lo, hi = parse_size(a.min), parse_size(a.max)
    mpirun = ["mpirun", "-n", str(a.nproc), "--oversubscribe"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    impls = ["shm", "mpi", "openmpi"]
    data = {}  # (impl, op, bytes) -> [rows]
    memcpy_gbs = []
    for rnd in range(a.rounds):
        memcpy_gbs.append(float(subprocess.run([memcpy], capture_output=True, text=True).stdout))
        for op in a.ops.split(","):
            for impl in impls:
                if impl == "openmpi":
                    cmd = mpirun + [peer, op, str(lo), str(hi), "2", str(a.iters), str(a.warmup)]
                else:
                    cmd = [a.strata, "bench", "comm", "--backend", impl, "--nproc", str(a.nproc),
                           "--op", op, "-b", str(lo), "-e", str(hi), "-f", "2", "--iters",
                           str(a.iters), "--warmup", str(a.warmup), "--json"]
                for b, r in rows(cmd).items():
                    data.setdefault((impl, op, b), []).append(r)
            print(f"round {rnd + 1}/{a.rounds}: {op} done", file=sys.stderr)

    def med(impl, op, b, key):
        v = [r[key] for r in data.get((impl, op, b), [])]
        return statistics.median(v) if v else float("nan")

    misses = []
    for op in a.ops.split(","):
        sizes = sorted({b for (i, o, b) in data if o == op})
        print(f"\n#### {op} ({a.nproc} ranks, busbw GB/s, median of {a.rounds} rounds)\n")
        print("| size (B) | strata shm | strata mpi | OpenMPI | shm / OpenMPI | shm time (us) | OpenMPI time (us) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for b in sizes:
            s, m, o = (med(i, op, b, "busbw") for i in impls)
            ts, to = med("shm", op, b, "time_us"), med("openmpi", op, b, "time_us")
            ratio = s / o if o > 0 else float("nan")
            print(f"| {b} | {s:.3f} | {m:.3f} | {o:.3f} | {ratio:.2f}x | {ts:.2f} | {to:.2f} |")
            need = 2.0 if (op == "allreduce" and b >= 16 << 20) else 1.0 if b >= 1024 else None
            if op in ("allreduce", "reducescatter", "allgather") and need and ratio < need:
                misses.append(f"{op} {b} B: {ratio:.2f}x < {need}x")
            if op == "allreduce" and b == min(sizes) and ts > to:
                misses.append(f"allreduce latency at {b} B: {ts:.2f} us > OpenMPI {to:.2f} us")
    print(f"\nsingle-core memcpy bandwidth: {max(memcpy_gbs):.2f} GB/s "
          f"(per round: {', '.join(f'{x:.2f}' for x in memcpy_gbs)})")
    print("targets: " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))
    cma_out = subprocess.run([cma], capture_output=True, text=True).stdout.split("\n")
    for line in filter(None, cma_out):
        b, _, m, _, c = line.split()
        print(f"one core, {int(b) >> 20} MiB: memcpy {m} GB/s, cross-memory attach "
              f"(process_vm_readv) {c} GB/s")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
