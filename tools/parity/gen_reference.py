#!/usr/bin/python3
"""PyTorch reference for strata's GPT (writes tests/model/fixtures/parity_small.bin).

The model is written out here by hand, mirroring strata's maths: pre-LayerNorm blocks,
causal softmax attention, tanh GELU, tied input/output embedding, softmax only over the real
vocabulary. It loads the initial parameters that strata itself produced (parity_export),
runs everything in float64, and stores, for one fixed batch with some zero-weight tokens:
  loss_sum (sum of weight * token loss, strata's forward contract), logits, the gradient of
  loss_sum / sum(weights) for every parameter, and the losses of 10 AdamW steps
  (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings only, global-norm
  clipping at 1.0, fixed lr) on that batch.

Usage (from the repository root, after building parity_export):
  /usr/bin/python3 tools/parity/gen_reference.py --exporter BUILD/tools/parity_export \
      --out tests/model/fixtures/parity_small.bin
"""
import argparse
import json
import math
import os
import struct
import subprocess
import tempfile

import torch
import torch.nn.functional as F

MAGIC = b"STRP"
VERSION = 1


def read_container(path):
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:4] != MAGIC:
        raise SystemExit(f"{path}: bad magic")
    version, hlen = struct.unpack("<IQ", blob[4:16])
    if version != VERSION:
        raise SystemExit(f"{path}: version {version}, expected {VERSION}")
    header = json.loads(blob[16:16 + hlen])
    data = blob[16 + hlen:]
    return header, data


def write_container(path, header, tensors):
    """tensors: list of (name, tensor); dtype f32 or i32 from the tensor."""
    entries, chunks, offset = [], [], 0
    for name, t in tensors:
        t = t.detach().contiguous()
        if t.dtype in (torch.float32, torch.float64):
            raw, dtype = t.to(torch.float32).numpy().tobytes(), "f32"
        elif t.dtype in (torch.int32, torch.int64):
            raw, dtype = t.to(torch.int32).numpy().tobytes(), "i32"
        else:
            raise ValueError(t.dtype)
        entries.append({"name": name, "dtype": dtype, "shape": list(t.shape), "offset": offset})
        chunks.append(raw)
        offset += len(raw)
    header = dict(header, tensors=entries)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<IQ", VERSION, len(text)) + text)
        for c in chunks:
            f.write(c)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def gpt_forward(p, cfg, tokens):
    """Logits (B, T, padded_vocab) for tokens (B, T)."""
    B, T = tokens.shape
    C, NH, L = cfg["dim"], cfg["heads"], cfg["layers"]
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = lambda n: p[f"h.{l}.{n}"]
        y = layer_norm(x, h("ln_1.weight"), h("ln_1.bias"))
        qkv = y @ h("attn.c_attn.weight").T + h("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ h("attn.c_proj.weight").T + h("attn.c_proj.bias")
        y = layer_norm(x, h("ln_2.weight"), h("ln_2.bias"))
        y = F.gelu(y @ h("mlp.c_fc.weight").T + h("mlp.c_fc.bias"), approximate="tanh")
        x = x + y @ h("mlp.c_proj.weight").T + h("mlp.c_proj.bias")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte"].T


def weighted_loss_sum(logits, targets, weights, vocab):
    per_token = F.cross_entropy(logits[..., :vocab].reshape(-1, vocab), targets.reshape(-1),
                                reduction="none")
    return (per_token * weights.reshape(-1)).sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exporter", required=True, help="path of the built parity_export")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)

    with tempfile.TemporaryDirectory() as tmp:
        init_path = os.path.join(tmp, "init.bin")
        subprocess.run([a.exporter, "--layers", str(a.layers), "--dim", str(a.dim), "--heads",
                        str(a.heads), "--seq", str(a.seq), "--vocab", str(a.vocab), "--seed",
                        str(a.seed), "--out", init_path], check=True)
        header, data = read_container(init_path)
    cfg = header["config"]
    init = {}
    for t in header["tensors"]:
        n = math.prod(t["shape"])
        buf = bytearray(data[t["offset"]:t["offset"] + 4 * n])
        init[t["name"]] = torch.frombuffer(buf, dtype=torch.float32).view(t["shape"]).clone()
    names = [t["name"] for t in header["tensors"]]

    B, T, V = a.batch, cfg["seq"], cfg["vocab"]
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    weights = torch.ones(B, T)
    weights[0, -5:] = 0.0   # a padded tail
    weights[1, 3] = 0.0     # and a single masked token
    weights[1, 10] = 0.5    # a fractional weight

    params = {n: init[n].to(torch.float64).requires_grad_(True) for n in names}
    logits = gpt_forward(params, cfg, tokens)
    loss_sum = weighted_loss_sum(logits, targets, weights, V)
    (loss_sum / weights.sum()).backward()
    grads = [(f"grad.{n}", params[n].grad) for n in names]

    # 10 AdamW steps from the same initial parameters, on the same batch.
    decay = [params[n] for n in names if init[n].dim() == 2]
    no_decay = [params[n] for n in names if init[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step_losses, step_norms = [], []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        mean = weighted_loss_sum(gpt_forward(params, cfg, tokens), targets, weights, V) / weights.sum()
        mean.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        step_losses.append(mean.item())
        step_norms.append(norm.item())

    header = {"config": cfg, "seed": a.seed, "batch": B, "lr": a.lr, "betas": [0.9, 0.95],
              "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0,
              "loss_sum": loss_sum.item(), "weight_sum": weights.sum().item(),
              "step_losses": step_losses, "step_grad_norms": step_norms,
              "generator": "tools/parity/gen_reference.py (float64, torch " + torch.__version__ + ")"}
    tensors = [("tokens", tokens), ("targets", targets), ("weights", weights),
               ("logits", logits)] + [(f"param.{n}", init[n]) for n in names] + grads
    write_container(a.out, header, tensors)
    print(f"wrote {a.out}: loss {loss_sum.item() / weights.sum().item():.6f}, "
          f"10-step losses {step_losses[0]:.5f} .. {step_losses[-1]:.5f}")


if __name__ == "__main__":
    main()
