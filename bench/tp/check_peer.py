#!/usr/bin/python3
"""Checks the PyTorch tensor-parallel peer (bench/tp/torch_tp.py) against the one-process
torch GPT (bench/train/torch_gpt.py): the full model's weights are sliced into 2 tp ranks
Megatron-style; the loss and the gradients of a column-parallel weight, the vocab-parallel
embedding and a replicated norm must match. Prints one tuple per rank:
(rank, full loss, tp loss, max |dW c_fc|, max |d wte|, max |d ln_f|).

  /usr/bin/python3 bench/tp/check_peer.py
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
for sub in ("tp", "train", "zero"):
    sys.path.insert(0, os.path.join(HERE, "..", sub))
from torch_ddp import free_port  # noqa: E402
from torch_gpt import GPT  # noqa: E402
from torch_tp import TPGPT  # noqa: E402

L, D, H, S, V = 2, 64, 4, 16, 64
def worker(rank, world, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1); full = GPT(L, D, H, S, V)
    tp = TPGPT(L, D, H, S, V, world, rank)
    cl = D // world
    with torch.no_grad():
        v0, v1 = tp.v0, tp.v1
        tp.wte.copy_(full.wte.weight[v0:v1]); tp.wpe.weight.copy_(full.wpe.weight)
        tp.ln_f.load_state_dict(full.ln_f.state_dict())
        for b, f in zip(tp.h, full.h):
            b.ln_1.load_state_dict(f.ln_1.state_dict()); b.ln_2.load_state_dict(f.ln_2.state_dict())
            rows = torch.cat([torch.arange(k * D + rank * cl, k * D + (rank + 1) * cl) for k in range(3)])
            b.c_attn.weight.copy_(f.c_attn.weight[rows]); b.c_attn.bias.copy_(f.c_attn.bias[rows])
            b.c_proj.weight.copy_(f.c_proj.weight[:, rank * cl:(rank + 1) * cl]); b.c_proj_bias.copy_(f.c_proj.bias)
            r4 = slice(rank * 4 * cl, (rank + 1) * 4 * cl)
            b.c_fc.weight.copy_(f.c_fc.weight[r4]); b.c_fc.bias.copy_(f.c_fc.bias[r4])
            b.mlp_proj.weight.copy_(f.mlp_proj.weight[:, r4]); b.mlp_proj_bias.copy_(f.mlp_proj.bias)
    g = torch.Generator().manual_seed(3); d = torch.randint(0, V, (4, S + 1), generator=g)
    x, y = d[:, :-1], d[:, 1:]
    lf = full(x, y); lf.backward(); lt = tp(x, y); lt.backward()
    gw = full.h[0].c_fc.weight.grad[rank * 4 * cl:(rank + 1) * 4 * cl]
    ge = full.wte.weight.grad[tp.v0:tp.v1]
    q.put((rank, float(lf), float(lt), float((gw - tp.h[0].c_fc.weight.grad).abs().max()),
           float((ge - tp.wte.grad).abs().max()), float((full.ln_f.weight.grad - tp.ln_f.weight.grad).abs().max())))
if __name__ == "__main__":
    ctx = mp.get_context("spawn"); q = ctx.SimpleQueue()
    mp.start_processes(worker, args=(2, free_port(), q), nprocs=2, join=True, start_method="spawn")
    print(q.get()); print(q.get())
