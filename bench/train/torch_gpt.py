#!/usr/bin/python3
"""The PyTorch peer for bench/train: the same GPT as strata (pre-LayerNorm, GELU tanh MLP,
tied embeddings, GPT-2 init), the same AdamW settings and gradient clipping, timed the same
way (median wall time per optimizer step after a warm-up step). Prints one JSON line.

Debian 12 ships torch 1.13, which has no scaled_dot_product_attention: attention is the
explicit masked-softmax form (what nanoGPT falls back to on such versions).
"""
import argparse
import json
import math
import socket
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def attn(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def gpt2_init(module, layers):
    """GPT-2 initialisation: biases 0, norms 1, N(0, 0.02), residual projections
    N(0, 0.02 / sqrt(2 L))."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif "ln" in name:
            nn.init.ones_(p)
        else:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        gpt2_init(self, layers)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output embedding
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def adamw(model, lr):
    """AdamW as strata sets it: weight decay on matrices and embeddings only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)


def train_timed(model, forward, data, opt, clip):
    """One optimizer step per data[step] (B, T+1): forward(x, y) gives the loss, clip() runs
    between backward and the update. Returns the median seconds per step after the first
    (warm-up) step, and the losses."""
    times, losses = [], []
    for step in range(data.size(0)):
        t0 = time.perf_counter()
        x, y = data[step, :, :-1].contiguous(), data[step, :, 1:].contiguous()
        opt.zero_grad(set_to_none=True)
        loss = forward(x, y)
        loss.backward()
        clip()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:] if len(times) > 1 else times), losses



# ---- shared by the multi-rank peers (bench/zero, bench/tp, bench/cp) ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_arguments(ap, **defaults):
    """The GPT's shape and the batch in sequences, as every peer takes them."""
    d = dict(layers=4, dim=256, heads=4, seq=256, vocab=256, batch=8)
    d.update(defaults)
    for k in ("layers", "dim", "heads", "seq", "vocab", "batch"):
        ap.add_argument("--" + k, type=int, default=d[k])


def rank_arguments(ap, **defaults):
    """The flags every multi-rank peer takes: ranks, the GPT's shape, the global batch in
    sequences, steps, intra-op threads per rank and the learning rate."""
    ap.add_argument("--nproc", type=int, default=defaults.pop("nproc", 2))
    steps = defaults.pop("steps", 20)
    model_arguments(ap, **defaults)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--lr", type=float, default=1e-3)


def run_ranks(worker, args):
    """Runs worker(rank, nproc, args, port, queue) on args.nproc spawned ranks and prints the
    result rank 0 puts on the queue, as one JSON line."""
    import torch.multiprocessing as mp
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(worker, args=(args.nproc, args, free_port(), queue), nprocs=args.nproc,
                       join=True, start_method="spawn")
    print(json.dumps(queue.get()))

def main():
    ap = argparse.ArgumentParser()
    model_arguments(ap)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help='bf16: forward under torch.autocast("cpu", dtype=torch.bfloat16)')
    args = ap.parse_args()
    bf16 = args.autocast == "bf16"

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1))
    def forward(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(x, y)

    step_s, losses = train_timed(model, forward, data, adamw(model, args.lr),
                                 lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    print(json.dumps({
        "peer": "pytorch " + torch.__version__ + (" autocast bf16" if bf16 else ""),
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "median_ms": step_s * 1e3,
        "tokens_per_s": args.batch * args.seq / step_s,
        "final_loss": losses[-1],
    }))


if __name__ == "__main__":
    main()
