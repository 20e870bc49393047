#!/usr/bin/env python3
"""Peer for bench_ckpt: the same 4 fp32 states saved with torch.save (synchronous, the
usual PyTorch way) and made durable with fsync, plus the staging copy (tensor.clone) that an
asynchronous saver would pay in the training loop. Prints one JSON line."""
import argparse, json, os, shutil, statistics, tempfile, time

import torch

p = argparse.ArgumentParser()
p.add_argument("--params", type=int, required=True)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--dir", required=True)
a = p.parse_args()
torch.set_num_threads(1)
states = {n: torch.arange(a.params, dtype=torch.float32) % 1000 * 1e-3 + i
          for i, n in enumerate(["params", "exp_avg", "exp_avg_sq", "master"])}
os.makedirs(a.dir, exist_ok=True)
save, copy, load = [], [], []
for rep in range(a.reps):
    t0 = time.perf_counter()
    staged = {k: v.clone() for k, v in states.items()}
    copy.append(time.perf_counter() - t0)
    del staged
    path = os.path.join(a.dir, f"step-{rep}.pt")
    t0 = time.perf_counter()
    with open(path + ".tmp", "wb") as f:
        torch.save(states, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    dfd = os.open(a.dir, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    save.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    torch.load(path)
    load.append(time.perf_counter() - t0)
    if rep:
        os.remove(os.path.join(a.dir, f"step-{rep-1}.pt"))
shutil.rmtree(a.dir)
nbytes = 16 * a.params
print(json.dumps({"params": a.params, "bytes": nbytes, "torch_save_s_median": statistics.median(save),
                  "clone_ms_median": statistics.median(copy) * 1e3,
                  "save_gb_per_s": nbytes / statistics.median(save) / 1e9,
                  "torch_load_s_median": statistics.median(load)}))
