#!/usr/bin/env python3
"""Collectives across hosts: strata's hierarchical and flat algorithms and OpenMPI's own
(MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather), side by side in one run, on a namespace test cluster (tools/netns-cluster)
of 2 hosts x 2 ranks whose host uplinks are shaped with tc.

For each round and op (--ops, default all-reduce, reduce-scatter, all-gather), interleaved
(all through mpirun with the cluster's rsh agent):
  hierarchical  `strata bench comm --json` with STRATA_HIER=hierarchical
  flat          the same with STRATA_HIER=flat (one MPI non-blocking collective, 4 ranks)
  automatic     the same with the default choice (hierarchical from STRATA_HIER_MIN_BYTES)
  OpenMPI       bench/comm/mpi_peer.c: the blocking collective (tuned) over the 4 ranks
The median bus bandwidth per size is printed as a Markdown table with the ratios and
the all-reduce targets: hierarchical >= 1.5x flat at >= 1 MiB; automatic >= 1x OpenMPI at
every size.
Every run sets OMPI_MCA_mpi_yield_when_idle=1 (ranks outnumber the cores here).

  bench/multihost/compare.py [--strata build/strata] [--link 1gbit] [--max 16M] [--rounds 3]
Needs root (the cluster); removes the cluster at the end, also after a failure.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "comm"))
from compare import parse_size, rows  # noqa: E402

CLUSTER = os.path.join(ROOT, "tools", "netns-cluster")
NAME = "smhbench"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--link", default="1gbit", help="RATE or RATE,DELAY of each host's uplink")
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="16M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ops", default="allreduce,reducescatter,allgather")
    ap.add_argument("--in-place", action="store_true",
                    help="strata's all-reduce in place (send == recv; OpenMPI's stays out of place)")
    a = ap.parse_args()
    strata = os.path.abspath(a.strata)
    tmp = tempfile.mkdtemp(prefix="strata-bench-multihost-")
    peer = os.path.join(tmp, "mpi_peer")
    subprocess.run(["mpicc", "-O2", "-o", peer, os.path.join(ROOT, "bench", "comm", "mpi_peer.c")],
                   check=True)
    subprocess.run([CLUSTER, "up", "--name", NAME, "--hosts", str(a.hosts), "--ranks-per-host",
                    str(a.ranks_per_host), "--link", a.link], check=True)
    try:
        state = f"/tmp/netns-cluster-{NAME}"
        launch = [strata, "launch", "--backend", "mpi", "--hostfile", f"{state}/hostfile",
                  "--rsh-agent", f"{state}/rsh-agent", "--no-prefix", "--timeout", "300", "--"]
        lo, hi = parse_size(a.min), parse_size(a.max)
        sizes = [str(lo), str(hi), str(a.factor)]
        reps = [str(a.iters), str(a.warmup)]

        def impls(op):
            bench = [strata, "bench", "comm", "--backend", "mpi", "--op", op, "-b", sizes[0], "-e",
                     sizes[1], "-f", sizes[2], "--iters", reps[0], "--warmup", reps[1], "--json"]
            if a.in_place and op == "allreduce":
                bench.append("--in-place")
            return {"hierarchical": ("hierarchical", bench), "flat": ("flat", bench),
                    "automatic": ("automatic", bench),
                    "OpenMPI": (None, [peer, op] + sizes + reps)}
        # 4 ranks busy-polling on 2 shared cores starve each other; every implementation
        # yields the CPU while it waits (OpenMPI's knob; strata's waits back off anyway).
        os.environ["OMPI_MCA_mpi_yield_when_idle"] = "1"
        data = {}
        for rnd in range(a.rounds):
            for op in a.ops.split(","):
                for impl, (algo, cmd) in impls(op).items():
                    if algo:
                        os.environ["STRATA_HIER"] = algo
                    else:
                        os.environ.pop("STRATA_HIER", None)
                    for b, r in rows(launch + cmd).items():
                        data.setdefault((impl, op, b), []).append(r)
            print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        subprocess.run([CLUSTER, "down", "--name", NAME])
        shutil.rmtree(tmp, ignore_errors=True)

    def med(impl, op, b, key="busbw"):
        v = [r[key] for r in data.get((impl, op, b), [])]
        return statistics.median(v) if v else float("nan")

    n = a.hosts * a.ranks_per_host
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True,
                         text=True).stdout.strip()
    misses = []
    for op in a.ops.split(","):
        place = " (strata in place)" if a.in_place and op == "allreduce" else ""
        print(f"\n#### {op}{place}, {a.hosts} hosts x {a.ranks_per_host} ranks, uplink {a.link} "
              f"(busbw GB/s, median of {a.rounds} rounds; {cpu}, {os.cpu_count()} CPUs)\n")
        print("| size (B) | hierarchical | flat | automatic | OpenMPI | hier / flat | auto / OpenMPI "
              "| hier time (us) | OpenMPI time (us) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for b in sorted({b for (_, o, b) in data if o == op}):
            h, f, au, o = (med(i, op, b) for i in ("hierarchical", "flat", "automatic", "OpenMPI"))
            hf = h / f if f > 0 else float("nan")
            ao = au / o if o > 0 else float("nan")
            print(f"| {b} | {h:.4f} | {f:.4f} | {au:.4f} | {o:.4f} | {hf:.2f}x | {ao:.2f}x | "
                  f"{med('hierarchical', op, b, 'time_us'):.1f} | "
                  f"{med('OpenMPI', op, b, 'time_us'):.1f} |")
            if op == "allreduce" and b >= 1 << 20 and hf < 1.5:
                misses.append(f"{b} B: hierarchical {hf:.2f}x flat < 1.5x")
            if op == "allreduce" and ao < 1.0:
                misses.append(f"{b} B: automatic {ao:.2f}x OpenMPI < 1x")
    print(f"\nranks: {n}; all-reduce targets: " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))


if __name__ == "__main__":
    main()
