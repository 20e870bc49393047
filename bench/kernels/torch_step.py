#!/usr/bin/python3
"""The same GPT as strata (pre-LN, tanh GELU, tied embedding) in PyTorch, timed for
forward+backward (and a full AdamW step) at a fixed batch, to compare with bench_gpt.

  /usr/bin/python3 bench/kernels/torch_step.py --model tiny --batch 8 --threads 2
Prints one JSON line per measurement: tokens/s and model GFLOP/s (6N + 12*L*d*T per token).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"tiny": (4, 256, 4, 256, 256), "small": (6, 384, 6, 256, 256),
           "L12": (12, 768, 12, 256, 256),
           "gpt2": (12, 768, 12, 1024, 50304)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=PRESETS)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--optimizer", action="store_true", help="time full AdamW steps")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help='bf16: forward under torch.autocast("cpu", dtype=torch.bfloat16)')
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    L, C, NH, T, V = PRESETS[a.model]
    model = GPT(L, C, NH, T, V)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, V, (a.batch, T))
    tgt = torch.randint(0, V, (a.batch, T))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        if a.optimizer:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    for _ in range(2):
        step()
    times, cpu = [], []
    for _ in range(a.iters):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    times.sort()
    cpu.sort()
    med = times[len(times) // 2]
    tokens = a.batch * T
    flops = 6 * n_params + 12 * L * C * T
    print(json.dumps({"impl": "torch " + torch.__version__ + (" autocast bf16" if a.autocast == "bf16" else ""),
                      "model": a.model, "batch": a.batch,
                      "threads": a.threads, "optimizer": a.optimizer, "ms": med * 1e3,
                      "cpu_ms": cpu[len(cpu) // 2] * 1e3,
                      "tokens_per_s": tokens / med, "gflops": tokens * flops / med * 1e-9,
                      "params": n_params}))


if __name__ == "__main__":
    main()
