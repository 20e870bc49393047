#!/usr/bin/python3
"""PyTorch reference for strata's Muon (writes tests/parallel/fixtures/muon_reference.bin).

Written from the published algorithm (Jordan et al. 2024, "Muon: An optimizer for hidden
layers"; Liu et al. 2025, "Muon is Scalable for LLM Training"), not from strata's code:
  momentum  m <- mu m + g;  u = g + mu m (Nesterov)
  Newton-Schulz, quintic, 5 steps, (a, b, c) = (3.4445, -4.7750, 2.0315), on the wide
  orientation: X = u / (||u||_F + 1e-7); A = X X^T; B = b A + c A A; X = a X + B X
  update    p <- p (1 - lr wd) - lr * 0.2 * sqrt(max(rows, cols)) * X
with g = grad_scale * grad. Everything in float64. Stores, for three matrices (wide, tall,
square): the initial parameters, three steps' gradients, the parameters after each step,
and the Newton-Schulz output of the first step's u on its own.

Usage (from the repository root):
  /usr/bin/python3 tools/parity/gen_muon_reference.py --out tests/parallel/fixtures/muon_reference.bin
"""
import argparse
import json
import math
import struct

import torch

A, B, C = 3.4445, -4.7750, 2.0315
MU, LR, WD, SCALE, GRAD_SCALE, STEPS = 0.95, 0.02, 0.1, 0.2, 0.5, 5
SHAPES = [(16, 24), (24, 16), (12, 12)]


def newton_schulz(g, steps=STEPS):
    x = g.clone()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        a = x @ x.T
        b = B * a + C * a @ a
        x = A * x + b @ x
    return x.T if tall else x


def write_container(path, tensors):
    entries, chunks, offset = [], [], 0
    for name, t in tensors:
        raw = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        entries.append({"name": name, "dtype": "f32", "shape": list(t.shape), "offset": offset})
        chunks.append(raw)
        offset += len(raw)
    header = {"mu": MU, "lr": LR, "weight_decay": WD, "lr_scale": SCALE, "grad_scale": GRAD_SCALE,
              "ns_steps": STEPS, "tensors": entries}
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(b"STRP" + struct.pack("<IQ", 1, len(text)) + text)
        for c in chunks:
            f.write(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(1234)
    out = []
    for i, (r, c) in enumerate(SHAPES):
        # Values exactly representable in float32, so strata starts from the same numbers.
        p = (torch.randn(r, c, generator=gen) * 0.1).to(torch.float32).to(torch.float64)
        out.append((f"m{i}.p0", p))
        m = torch.zeros(r, c, dtype=torch.float64)
        for t in range(3):
            grad = torch.randn(r, c, generator=gen).to(torch.float32).to(torch.float64)
            out.append((f"m{i}.g{t}", grad))
            g = GRAD_SCALE * grad
            m = MU * m + g
            u = g + MU * m
            o = newton_schulz(u)
            if t == 0:
                out.append((f"m{i}.u0", u))
                out.append((f"m{i}.ns0", o))
            p = p * (1 - LR * WD) - LR * SCALE * math.sqrt(max(r, c)) * o
            out.append((f"m{i}.p{t + 1}", p))
    write_container(args.out, out)


if __name__ == "__main__":
    main()
