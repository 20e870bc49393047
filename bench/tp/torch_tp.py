#!/usr/bin/python3
"""The PyTorch peer for bench/tp: the GPT of bench/train/torch_gpt.py with Megatron-LM tensor
parallelism written by hand over torch.distributed (gloo), as one would without Megatron:
qkv and fc column-parallel (whole heads per rank), attention and MLP output projections
row-parallel, the tied embedding and the cross-entropy vocab-parallel (max and sum
all-reduced, no full logits), norms and position embedding replicated. The f and g
conjugates are autograd Functions (f: identity forward, all-reduce backward; g: all-reduce
forward, identity backward). No sequence parallelism: gloo in torch 1.13 has no
reduce-scatter, so this is the all-reduce form (compare with strata --no-sp; strata's
default --sp is timed beside it). The same AdamW settings and global-norm clipping (sharded
parameters' squares summed over ranks, replicated ones counted once); median wall time per
optimizer step after a warm-up step on rank 0; one JSON line.

  python3 bench/tp/torch_tp.py --nproc 2 --layers 6 --dim 384 --heads 6 --seq 128 --batch 8
"""
import argparse
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from torch_gpt import adamw, rank_arguments, run_ranks, train_timed  # noqa: E402


class CopyToTP(torch.autograd.Function):  # f
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g


class ReduceFromTP(torch.autograd.Function):  # g
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, v0, vocab):
        # logits (N, Vr) local columns [v0, v0 + Vr); columns >= vocab are padding
        real = max(0, min(logits.size(1), vocab - v0))
        x = logits[:, :real]
        m = x.max(dim=1).values if real > 0 else torch.full((logits.size(0),), -math.inf)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        e = torch.exp(x - m[:, None])
        local = target - v0
        mine = (local >= 0) & (local < real)
        stats = torch.stack([e.sum(dim=1),
                             torch.where(mine, x.gather(1, local.clamp(0, max(real - 1, 0))[:, None])[:, 0],
                                         torch.zeros_like(m))], dim=1)
        dist.all_reduce(stats)
        lse = m + torch.log(stats[:, 0])
        ctx.save_for_backward(e, stats[:, 0], local, mine)
        ctx.shape = logits.shape
        ctx.real = real
        return (lse - stats[:, 1]).mean()

    @staticmethod
    def backward(ctx, g):
        e, s, local, mine = ctx.saved_tensors
        grad = torch.zeros(ctx.shape)
        p = e / s[:, None]
        rows = torch.nonzero(mine)[:, 0]
        p[rows, local[rows]] -= 1.0
        grad[:, :ctx.real] = p * (g / ctx.shape[0])
        return grad, None, None, None


class Block(nn.Module):
    def __init__(self, dim, heads, tp):
        super().__init__()
        self.heads, self.cl = heads // tp, dim // tp
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * self.cl)             # column-parallel
        self.c_proj = nn.Linear(self.cl, dim, bias=False)     # row-parallel
        self.c_proj_bias = nn.Parameter(torch.zeros(dim))     # replicated
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * self.cl)               # column-parallel
        self.mlp_proj = nn.Linear(4 * self.cl, dim, bias=False)
        self.mlp_proj_bias = nn.Parameter(torch.zeros(dim))

    def attn(self, x, mask):
        B, T, _ = x.shape
        q, k, v = self.c_attn(CopyToTP.apply(x)).split(self.cl, dim=2)
        hs = self.cl // self.heads
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.cl)
        return ReduceFromTP.apply(self.c_proj(y)) + self.c_proj_bias

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        h = F.gelu(self.c_fc(CopyToTP.apply(self.ln_2(x))), approximate="tanh")
        return x + ReduceFromTP.apply(self.mlp_proj(h)) + self.mlp_proj_bias


class TPGPT(nn.Module):
    def __init__(self, layers, dim, heads, seq, vocab, tp, rank):
        super().__init__()
        self.v0, self.v1, self.vocab = vocab * rank // tp, vocab * (rank + 1) // tp, vocab
        self.wte = nn.Parameter(torch.empty(self.v1 - self.v0, dim))  # vocab-parallel, tied
        self.wpe = nn.Embedding(seq, dim)
        self.h = nn.ModuleList(Block(dim, heads, tp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if "proj.weight" in name else 0.02
                nn.init.normal_(p, 0.0, std)

    def replicated(self):
        """Parameters every rank holds whole (their squares counted once in the norm)."""
        names = ("wpe", "ln_", "c_proj_bias", "mlp_proj_bias")
        return [p for n, p in self.named_parameters() if any(k in n for k in names)]

    def forward(self, idx, targets):
        B, T = idx.shape
        local = idx - self.v0
        mine = (local >= 0) & (local < self.v1 - self.v0)
        emb = F.embedding(local.clamp(0, self.v1 - self.v0 - 1), self.wte) * mine[..., None]
        x = ReduceFromTP.apply(emb) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = CopyToTP.apply(self.ln_f(x)) @ self.wte.t()  # (B, T, Vr)
        return VocabParallelCE.apply(logits.view(B * T, -1), targets.reshape(-1), self.v0,
                                     self.vocab)


def clip_global_norm(model, max_norm):
    rep = {id(p) for p in model.replicated()}
    shard = sum(p.grad.pow(2).sum() for p in model.parameters() if id(p) not in rep)
    total = torch.stack([shard, sum(p.grad.pow(2).sum() for p in model.parameters()
                                    if id(p) in rep) / dist.get_world_size()])
    dist.all_reduce(total)
    norm = total.sum().sqrt()
    scale = max_norm / (norm + 1e-6)
    if scale < 1:
        for p in model.parameters():
            p.grad.mul_(scale)


def worker(rank, world, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1 + rank)
    model = TPGPT(args.layers, args.dim, args.heads, args.seq, args.vocab, world, rank)
    gen = torch.Generator().manual_seed(1000)  # every tp rank reads the same batch
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=gen)
    step_s, losses = train_timed(model, model, data, adamw(model, args.lr),
                                 lambda: clip_global_norm(model, 1.0))
    dist.barrier()
    if rank == 0:
        queue.put({
            "peer": f"pytorch {torch.__version__} hand-written Megatron TP, gloo",
            "nproc": world,
            "threads": args.threads,
            "local_params": sum(p.numel() for p in model.parameters()),
            "median_ms": step_s * 1e3,
            "tokens_per_s": args.batch * args.seq / step_s,
            "final_loss": losses[-1],
        })
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    rank_arguments(ap, layers=6, dim=384, heads=6, seq=128, steps=10)
    args = ap.parse_args()
    if args.heads % args.nproc:
        sys.exit(f"torch_tp: --heads {args.heads} does not split over {args.nproc} ranks")
    run_ranks(worker, args)


if __name__ == "__main__":
    main()
