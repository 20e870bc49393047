"""strata.ckpt and strata.plan as docs/python.md shows them, on a tiny run of the built binary.

    PYTHONPATH=build/python /usr/bin/python3 docs/examples/ckpt_plan.py build/strata WORKDIR

Trains a 2-layer model on 2 processes with tensor parallelism (each rank saves half of every
split matrix), lists its checkpoints, reads a global tensor and its optimizer moment, exports
a Hugging Face GPT-2 directory, and asks the planner about a cluster; each step checks what it
prints against an independent source (the CLI's own output).
"""
import json
import os
import subprocess
import sys

import numpy as np

import strata

strata_bin, work = sys.argv[1], sys.argv[2]
run = os.path.join(work, "run")
subprocess.run([strata_bin, "train", "--nproc", "2", "--tp", "2", "--layers", "2", "--dim", "32", "--heads", "2",
                "--seq", "16", "--data", "synthetic", "--batch", "8", "--steps", "4", "--ckpt-every", "2",
                "--sample-tokens", "0", "--eval-batches", "1", "--run-dir", run], check=True, capture_output=True)

# --- strata.ckpt ---------------------------------------------------------------------------
for c in strata.ckpt.list(run):  # newest first, as `strata ckpt ls` prints them
    print(c["name"], c["step"], c["status"], f"tp {c['tp']} dp {c['dp']} zero {c['zero']}", c["bytes"], "bytes")

table = strata.ckpt.tensors(run)  # the newest checkpoint's global tensors
print(len(table), "tensors;", "h.0.attn.c_attn.weight", table["h.0.attn.c_attn.weight"])

w = strata.ckpt.read(run, "h.0.attn.c_attn.weight")  # both tp ranks' rows, assembled
m = strata.ckpt.read(run, "h.0.attn.c_attn.weight", kind="exp_avg")  # Adam's first moment
t = strata.ckpt.read_torch(run, "wte")  # a torch tensor
print(w.shape, w.dtype, m.shape, tuple(t.shape), t.dtype)

ckpt = strata.ckpt.Checkpoint(os.path.join(run, "ckpt", "step-000002"))  # one checkpoint, many reads
q = ckpt.read("h.1.mlp.c_fc.weight")
print("read", ckpt.bytes_read, "bytes for a tensor of", q.nbytes)

out = os.path.join(work, "gpt2-hf")
r = strata.ckpt.export_hf(run, out)  # transformers.GPT2LMHeadModel.from_pretrained(out)
print(sorted(os.listdir(out)), r["tensors"], "tensors")

# The same tensor as `strata ckpt export --safetensors` writes it.
st = os.path.join(work, "model.safetensors")
subprocess.run([strata_bin, "ckpt", "export", run, "--safetensors", st], check=True, capture_output=True)
with open(st, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    entry = json.loads(f.read(n))["h.0.attn.c_attn.weight"]
    f.seek(8 + n + entry["data_offsets"][0])
    assert np.frombuffer(f.read(w.nbytes), dtype="<f4").reshape(w.shape).tobytes() == w.tobytes()

# --- strata.plan ---------------------------------------------------------------------------
plan = strata.plan.search(model="llama2-7b", gpus=16, gpu="a100-80g", tokens="2T")
best = plan["best"]
print("best layout", {k: best["layout"][k] for k in ("tp", "pp", "dp", "zero", "micro_batch")},
      f"MFU {best['mfu']:.3f}, {plan['compute']['days_to_train']:.1f} days")
mem = strata.plan.memory(model="llama2-7b", gpus=16, gpu="a100-80g", tp=2, pp=1, dp=8, zero=1, micro_batch=2,
                         recompute="selective")
print(f"tp 2 x dp 8, ZeRO 1: {mem['total'] / 2**30:.1f} GiB of {mem['usable'] / 2**30:.1f} GiB per GPU")
for c in strata.plan.communication(model="llama2-7b", gpus=16, gpu="a100-80g", tp=2, pp=1, dp=8, zero=1,
                                   micro_batch=2, recompute="selective"):
    print(f"  {c['dim']:<4} {c['collective']:<15} group {c['group']:<2} {c['bytes_per_call'] / 2**20:8.1f} MiB"
          f" x {c['calls_per_step']:g}")
cli = json.loads(subprocess.run([strata_bin, "plan", "--model", "llama2-7b", "--gpus", "16", "--gpu", "a100-80g",
                                 "--tokens", "2T", "--json"], capture_output=True, text=True, check=True).stdout)
assert cli == plan, "strata.plan differs from strata plan --json"
print("strata.plan equals strata plan --json")
