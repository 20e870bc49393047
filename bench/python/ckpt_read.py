"""Reading one tensor from a checkpoint with strata.ckpt, against the bytes it holds: a NumPy
copy of the same number of bytes (memory copy bandwidth, measured in the same run) and a load
of the whole checkpoint (every state of every tensor, through the same reader, and the shard
files read raw). Page cache warm (the run just wrote the files). Median of REPEATS.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/ckpt_read.py build/strata WORKDIR [REPEATS]

Trains a 25M-parameter model (8 layers, dim 512) for one step on 2 processes with ZeRO-3, so
every tensor is cut across both ranks' shard files, then reads h.3.mlp.c_fc.weight (2048 x 512).
"""
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import strata

TENSOR = "h.3.mlp.c_fc.weight"


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu():
    name = flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                have = set(line.split(":", 1)[1].split())
                flags = ", ".join(x for x in ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if x in have)
    return f"{name} ({os.cpu_count()} CPUs; {flags or 'no avx512'})"


def main():
    strata_bin, work = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    run = os.path.join(work, "bench-run")
    if not os.path.isdir(os.path.join(run, "ckpt")):
        subprocess.run([strata_bin, "train", "--nproc", "2", "--zero", "3", "--layers", "8", "--dim", "512",
                        "--heads", "8", "--seq", "64", "--max-seq", "64", "--batch", "2", "--steps", "1",
                        "--ckpt-every", "1", "--sample-tokens", "0", "--eval-batches", "1", "--run-dir", run],
                       check=True, capture_output=True)
    (entry,) = strata.ckpt.list(run)
    ckpt = strata.ckpt.Checkpoint(run)
    table = ckpt.tensors()
    states = list(ckpt.states())
    tensor_bytes = int(np.prod(table[TENSOR]["shape"])) * 4

    one = median_time(lambda: ckpt.read(TENSOR), repeats)  # manifest parsed once, shards open
    cold = median_time(lambda: strata.ckpt.read(run, TENSOR), repeats)  # opens the checkpoint each time
    src = np.random.default_rng(0).random(tensor_bytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copy = median_time(lambda: np.copyto(dst, src), repeats * 5)
    big_src = np.ones(64 * 2**20, dtype=np.float32)  # 256 MiB: past every cache, DRAM bandwidth
    big_dst = np.empty_like(big_src)
    big = median_time(lambda: np.copyto(big_dst, big_src), 3)

    def whole():
        c = strata.ckpt.Checkpoint(run)
        for s in states:
            for name in table:
                c.read(name, kind=s)
        return c.bytes_read

    whole_s = median_time(whole, max(1, repeats // 2))
    whole_bytes = whole()
    shards = [os.path.join(entry["dir"], f) for f in os.listdir(entry["dir"]) if f.startswith("shard-")]

    def raw():
        for p in shards:
            with open(p, "rb") as f:
                f.read()

    raw_s = median_time(raw, max(1, repeats // 2))
    mib = 2**20
    print(f"checkpoint: {entry['dir']}, {entry['bytes'] / mib:.1f} MiB in {entry['shards']} shards "
          f"(world {entry['world']}, ZeRO {entry['zero']}), {len(table)} tensors x {len(states)} states")
    print(f"tensor {TENSOR} {table[TENSOR]['shape']}: {tensor_bytes / mib:.2f} MiB")
    print(f"  strata.ckpt Checkpoint.read         {one * 1e3:8.3f} ms  {tensor_bytes / one / 1e9:6.2f} GB/s"
          f"  ({ckpt.bytes_read // (repeats * tensor_bytes)} x the tensor's bytes read per call)")
    print(f"  strata.ckpt.read (opens each time)  {cold * 1e3:8.3f} ms")
    print(f"  numpy copy of the same bytes        {copy * 1e3:8.3f} ms  {tensor_bytes / copy / 1e9:6.2f} GB/s"
          f"  -> read / copy = {one / copy:.2f}x")
    print(f"  numpy copy of 256 MiB (DRAM)        {big * 1e3:8.1f} ms  {big_src.nbytes / big / 1e9:6.2f} GB/s"
          f"  -> the tensor at that rate {tensor_bytes / (big_src.nbytes / big) * 1e3:.3f} ms")
    print(f"  whole checkpoint through the reader {whole_s * 1e3:8.1f} ms  ({whole_bytes / mib:.1f} MiB)"
          f"  -> {whole_s / one:.0f}x one tensor")
    print(f"  shard files read raw                {raw_s * 1e3:8.1f} ms")
    print(f"cpu: {cpu()}; python {platform.python_version()}, numpy {np.__version__}; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
