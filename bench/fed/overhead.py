#!/usr/bin/python3
"""A federated round's overhead beyond local training, per client, for K = 4..16 clients, and
secure aggregation's cost against plain aggregation as a ratio (docs/federated.md).

For each K, `strata fed train` runs plain and --secure-agg jobs interleaved (plain, secure,
plain, secure, ...), every client taking part in every round. Per round, overhead = the
round's wall time at the server minus the slowest client's local training time (both
measured by strata: the server times the round, each client times its own training and
reports it in its message header); the figure is the mean over the job's rounds (the first
round, which includes start-up effects, is skipped), divided by K for "per client".
There is no peer: no federated framework ships with the Debian packages this project uses,
so the comparison is strata's secure aggregation against its own plain aggregation.

  /usr/bin/python3 bench/fed/overhead.py --strata build/strata [--reps 2] [--dim 64]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(strata, k, secure, args):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [strata, "fed", "train", "--clients", str(k), "--per-round", str(k), "--rounds", str(args.rounds),
           "--local-steps", "1", "--local-batch", "4", "--dim", str(args.dim), "--layers", "1",
           "--heads", "2", "--seq", "16", "--data", "synthetic:262144", "--eval-windows", "8",
           "--summary", path]
    if secure:
        cmd.append("--secure-agg")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        s = json.load(f)
    os.unlink(path)
    recs = [r for r in s["per_round_records"] if r["applied"]][1:]
    over = statistics.mean(r["wall_s"] - r["max_local_s"] for r in recs)
    local = statistics.mean(r["max_local_s"] for r in recs)
    wall = statistics.mean(r["wall_s"] for r in recs)
    return over, local, wall, s["bytes_per_client"] / args.rounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--ks", default="4,8,12,16")
    args = ap.parse_args()
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print("CPU: %s, %d cores; load %s" % (cpu, os.cpu_count(), open("/proc/loadavg").read().split()[0:3]))
    print("model: 1 block, dim %d, seq 16; every client in every round; 1 local step of 4 windows" % args.dim)
    print("%4s %12s %12s %16s %16s %9s %12s %12s" % ("K", "plain ms", "secure ms", "plain ms/client",
                                                    "secure ms/client", "ratio", "plain KB/cl", "secure KB/cl"))
    for k in [int(x) for x in args.ks.split(",")]:
        plain, secure = [], []
        for _ in range(args.reps):  # interleaved
            plain.append(run(args.strata, k, False, args))
            secure.append(run(args.strata, k, True, args))
        po = statistics.median(p[0] for p in plain) * 1e3
        so = statistics.median(s[0] for s in secure) * 1e3
        pb = statistics.median(p[3] for p in plain) / 1e3
        sb = statistics.median(s[3] for s in secure) / 1e3
        print("%4d %12.2f %12.2f %16.3f %16.3f %8.2fx %12.1f %12.1f" % (k, po, so, po / k, so / k, so / po, pb, sb))


if __name__ == "__main__":
    main()
