"""Index generation per epoch: strata.data.Sampler against torch's DistributedSampler, side by
side in one run (PyTorch from Debian). Each side builds one rank's list of indices for an
epoch (what __iter__ does before yielding), shuffled, median of REPEATS.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/sampler.py [N] [WORLD] [REPEATS]
"""
import os
import platform
import statistics
import sys
import time

import torch
from torch.utils.data import DistributedSampler

from strata.data import Sampler


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def timed(make):
    t0 = time.perf_counter()
    out = make()
    return time.perf_counter() - t0, len(out)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10**8
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(os.cpu_count())
    ours, theirs = [], []
    for r in range(repeats):
        s = Sampler(Sized(n), world, 0, shuffle=True, seed=r)
        d = DistributedSampler(Sized(n), world, 0, shuffle=True, seed=r)
        t, k1 = timed(lambda: s.indices().tolist())
        ours.append(t)
        t, k2 = timed(lambda: list(iter(d)))
        theirs.append(t)
        assert k1 == k2
    cpu = [l for l in open("/proc/cpuinfo") if l.startswith("model name")][0].split(":")[1].strip()
    flags = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in open("/proc/cpuinfo").read()]
    print(f"epoch index generation, N={n}, world {world}, rank 0 ({n // world} indices), median of {repeats}; "
          f"{cpu} ({', '.join(flags)}), {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"load {os.getloadavg()[0]:.1f}")
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"strata.data.Sampler   {a:8.3f} s")
    print(f"DistributedSampler    {b:8.3f} s")
    print(f"strata / torch        {a / b:8.3f}x (lower is faster)")


if __name__ == "__main__":
    main()
