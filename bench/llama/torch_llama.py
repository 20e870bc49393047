#!/usr/bin/python3
"""The PyTorch peer for bench/llama: a Llama of the same shape as strata's --arch llama
(pre-RMSNorm, rotary embeddings in Hugging Face's rotate_half layout, grouped-query attention,
SwiGLU MLP, no biases, untied lm_head, N(0, 0.02) init), the same AdamW settings and
gradient clipping as bench/train/torch_gpt.py, timed the same way (median wall time per
optimizer step after a warm-up step). One process, or --nproc N ranks under
DistributedDataParallel (gloo). Prints one JSON line.

Its fastest settings on Debian's torch 1.13: bf16 under torch.autocast("cpu"), the rotary
cos/sin tables computed once, K and V expanded to the query heads with repeat_interleave (as
Hugging Face's repeat_kv), and the explicit masked softmax (1.13 has no
scaled_dot_product_attention).

  python3 bench/llama/torch_llama.py --layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 768 \\
      --vocab 256 --seq 256 --batch 8 --steps 6 --threads 2 [--autocast bf16] [--nproc 2]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_gpt import adamw, free_port, train_timed  # noqa: E402  (same optimizer and loop)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.hs = heads, kv_heads, dim // heads
        self.input_layernorm = RMSNorm(dim, eps)
        self.q_proj = nn.Linear(dim, heads * self.hs, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hs, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hs, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def attn(self, x, cos, sin, mask):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, layers, dim, heads, kv_heads, ffn, seq, vocab, theta=10000.0, eps=1e-5):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, ffn, eps) for _ in range(layers))
        self.norm = RMSNorm(dim, eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        hs = dim // heads
        inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)))
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for block in self.layers:
            x = block(x, cos, sin, self.mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def build(args):
    torch.manual_seed(1)
    return Llama(args.layers, args.dim, args.heads, args.kv_heads, args.ffn, args.seq, args.vocab)


def run(model, forward, args, rank=0, world=1):
    gen = torch.Generator().manual_seed(1000 + rank)
    data = torch.randint(0, args.vocab, (args.steps, args.batch // world, args.seq + 1), generator=gen)
    return train_timed(model, forward, data, adamw(model, args.lr),
                       lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))


def result(model, args, step_s, losses, world):
    return {
        "peer": f"pytorch {torch.__version__}" + (" autocast bf16" if args.autocast == "bf16" else "") +
                (f" DDP gloo x{world}" if world > 1 else ""),
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "nproc": world,
        "median_ms": step_s * 1e3,
        "tokens_per_s": args.batch * args.seq / step_s,
        "final_loss": losses[-1],
    }


def autocast_forward(module, bf16):
    def forward(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return module(x, y)
    return forward


def worker(rank, world, args, port, queue):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = build(args)
    ddp = DDP(model, bucket_cap_mb=4)
    step_s, losses = run(model, autocast_forward(ddp, args.autocast == "bf16"), args, rank, world)
    dist.barrier()
    if rank == 0:
        queue.put(result(model, args, step_s, losses, world))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    for k, d in (("layers", 4), ("dim", 256), ("heads", 4), ("kv-heads", 2), ("ffn", 768),
                 ("seq", 256), ("vocab", 256), ("batch", 8), ("steps", 6), ("threads", 2),
                 ("nproc", 1)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    args = ap.parse_args()
    if args.nproc > 1:
        import torch.multiprocessing as mp
        queue = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(worker, args=(args.nproc, args, free_port(), queue), nprocs=args.nproc,
                           join=True, start_method="spawn")
        print(json.dumps(queue.get()))
        return
    torch.set_num_threads(args.threads)
    model = build(args)
    step_s, losses = run(model, autocast_forward(model, args.autocast == "bf16"), args)
    print(json.dumps(result(model, args, step_s, losses, 1)))


if __name__ == "__main__":
    main()
