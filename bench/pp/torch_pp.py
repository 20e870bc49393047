#!/usr/bin/python3
"""The PyTorch peer for bench/pp: the GPT of bench/train/torch_gpt.py split into 2 pipeline
stages by hand, as one would without a pipeline library: stage 0 holds the embeddings and the
first half of the blocks, stage 1 the rest, the final norm and the tied head (its own copy of
wte, whose gradient the two stages all-reduce, Megatron's approach). 1F1B over M micro-batches
with torch.distributed point-to-point over gloo (isend for activations and gradients, recv
where the schedule consumes them). The same AdamW settings and global-norm clipping (squares
summed over the stages, wte counted once); median wall time per optimizer step after a warm-up
step on rank 0; one JSON line.

  python3 bench/pp/torch_pp.py --layers 4 --dim 256 --heads 4 --seq 128 --micro-batches 4
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from torch_gpt import Block, adamw, free_port, gpt2_init  # noqa: E402


class Stage(nn.Module):
    def __init__(self, a, first, blocks):
        super().__init__()
        self.first = first
        self.wte = nn.Embedding(a.vocab, a.dim)
        if first:
            self.wpe = nn.Embedding(a.seq, a.dim)
        else:
            self.ln_f = nn.LayerNorm(a.dim)
        self.h = nn.ModuleList(Block(a.dim, a.heads) for _ in range(blocks))
        self.register_buffer("mask", torch.tril(torch.ones(a.seq, a.seq)).view(1, 1, a.seq, a.seq))
        torch.manual_seed(1)
        gpt2_init(self, a.layers)

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.size(1)))
        for block in self.h:
            x = block(x, self.mask)
        return x

    def loss(self, x, y, M):
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)) / M


def one_f_one_b(rank, model, xs, ys, M, shape):
    """Stage 0: one warm-up forward, then forward / backward pairs, then the last backward;
    stage 1: forward and backward of each micro-batch in turn."""
    sends, loss_sum, held = [], 0.0, {}

    def fwd(m):
        nonlocal loss_sum
        if rank == 0:
            out = model(xs[m])
            sends.append(dist.isend(out.detach().contiguous(), 1))
            held[m] = out
        else:
            a = torch.empty(shape)
            dist.recv(a, 0)
            a.requires_grad_()
            loss = model.loss(model(a), ys[m], M)
            loss_sum += loss.item()
            held[m] = (a, loss)

    def bwd(m):
        if rank == 0:
            g = torch.empty(shape)
            dist.recv(g, 1)
            held.pop(m).backward(g)
        else:
            a, loss = held.pop(m)
            loss.backward()
            sends.append(dist.isend(a.grad.contiguous(), 0))

    if rank == 0:
        fwd(0)
        for m in range(M - 1):
            fwd(m + 1)
            bwd(m)
        bwd(M - 1)
    else:
        for m in range(M):
            fwd(m)
            bwd(m)
    for s in sends:
        s.wait()
    return loss_sum


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    half = a.layers // 2 if a.split is None else a.split
    model = Stage(a, rank == 0, half if rank == 0 else a.layers - half)
    opt = adamw(model, 1e-3)
    M, b = a.micro_batches, a.batch // a.micro_batches
    gen = torch.Generator().manual_seed(7)
    data = torch.randint(0, a.vocab, (a.steps, M, b, a.seq + 1), generator=gen)
    shape = (b, a.seq, a.dim)
    times, losses = [], []
    for step in range(a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        xs = [data[step, m, :, :-1].contiguous() for m in range(M)]
        ys = [data[step, m, :, 1:].contiguous() for m in range(M)]
        loss = one_f_one_b(rank, model, xs, ys, M, shape)
        dist.all_reduce(model.wte.weight.grad)  # the tied embedding
        sq = sum(float(p.grad.pow(2).sum()) for n, p in model.named_parameters()
                 if p.grad is not None and (rank == 0 or n != "wte.weight"))
        t = torch.tensor([sq])
        dist.all_reduce(t)
        coef = min(1.0, 1.0 / (math.sqrt(t.item()) + 1e-6))
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    if rank == 0:
        step_s = statistics.median(times[1:] if len(times) > 1 else times)
        out.put({"peer": "pytorch " + torch.__version__ + " hand-written 1F1B (gloo send/recv)",
                 "median_ms": step_s * 1e3, "tokens_per_s": a.batch * a.seq / step_s,
                 "threads": torch.get_num_threads()})
    if rank == 1:
        out.put({"final_loss": losses[-1]})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("layers", 4), ("dim", 256), ("heads", 4), ("seq", 128), ("vocab", 256),
                 ("batch", 8), ("micro-batches", 4), ("steps", 8), ("threads", 1)]:
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--split", type=int, default=None, help="layers on stage 0")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = {}
    for _ in range(2):
        res.update(q.get())
    for p in procs:
        p.join()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
