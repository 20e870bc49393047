#!/usr/bin/python3
"""The PyTorch peer for bench/cp: the GPT of bench/train/torch_gpt.py with context parallelism
written by hand over torch.distributed (gloo), as one would without a library: each rank keeps
its zigzag chunks of every sequence (rank r holds chunks r and 2C-1-r of 2C), embeds them at
their global positions and runs norms, MLP and loss on its tokens; attention is ring attention,
an autograd Function that passes key/value blocks around the ring with isend/irecv (the next
block's transfer posted before the current block's compute), merges block results with the
log-sum-exp rule, and in the backward passes the blocks again with a travelling dK/dV
accumulator. Gradients are summed over the ranks with one all-reduce, clipped, and updated
with the same AdamW. Median wall time per optimizer step after a warm-up step; one JSON line.

  python3 bench/cp/torch_cp.py --nproc 2 --layers 2 --dim 128 --heads 4 --seq 4096 --batch 1
"""
import argparse
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from torch_gpt import GPT, Block, adamw, rank_arguments, run_ranks, train_timed  # noqa: E402


def chunk_ids(rank, world):
    return [rank, 2 * world - 1 - rank]


def pairs(rank, owner, world):
    """(query chunk, key chunk, causal) of this rank's chunks against the owner's."""
    for qc, gq in enumerate(chunk_ids(rank, world)):
        for kc, gk in enumerate(chunk_ids(owner, world)):
            if gk <= gq:
                yield qc, kc, gk == gq


def ring(tensor, rank, world, tag):
    """Posts the send of `tensor` to rank+1 and the receive of the next block from rank-1."""
    nxt = torch.empty_like(tensor)
    reqs = [dist.isend(tensor, (rank + 1) % world, tag=tag),
            dist.irecv(nxt, (rank - 1) % world, tag=tag)]
    return nxt, reqs


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, rank, world):
        # q, k, v (B, H, Tl, hs): this rank's two chunks of S rows each
        S, scale = q.size(2) // 2, 1.0 / math.sqrt(q.size(-1))
        mask = torch.ones(S, S).tril() == 0
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:3], -math.inf)
        kv = torch.stack([k, v]).contiguous()
        for step in range(world):
            reqs = []
            if step + 1 < world:
                nxt, reqs = ring(kv, rank, world, 0)
            for qc, kc, causal in pairs(rank, (rank - step) % world, world):
                qs = slice(qc * S, (qc + 1) * S)
                ks = slice(kc * S, (kc + 1) * S)
                s = q[:, :, qs] @ kv[0][:, :, ks].transpose(-2, -1) * scale
                if causal:
                    s = s.masked_fill(mask, -math.inf)
                lb = torch.logsumexp(s, dim=-1)
                ob = torch.exp(s - lb[..., None]) @ kv[1][:, :, ks]
                la = lse[:, :, qs]
                new = torch.logaddexp(la, lb)
                out[:, :, qs] = torch.exp(la - new)[..., None] * out[:, :, qs] + \
                    torch.exp(lb - new)[..., None] * ob
                lse[:, :, qs] = new
            for r in reqs:
                r.wait()
            if reqs:
                kv = nxt
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.rank, ctx.world = rank, world
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        rank, world = ctx.rank, ctx.world
        S, scale = q.size(2) // 2, 1.0 / math.sqrt(q.size(-1))
        mask = torch.ones(S, S).tril() == 0
        dout = dout.contiguous()
        D = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v]).contiguous()
        dkv_own = torch.zeros_like(kv)
        pending = None
        for step in range(world):
            got = None
            if step >= 2:  # the partial dK/dV of this step's block, from the ranks before
                got = torch.empty_like(kv)
                got_req = dist.irecv(got, (rank - 1) % world, tag=2)
            reqs = []
            if step + 1 < world:
                nxt, reqs = ring(kv, rank, world, 1)
            dkv = dkv_own if step == 0 else torch.zeros_like(kv)
            for qc, kc, causal in pairs(rank, (rank - step) % world, world):
                qs = slice(qc * S, (qc + 1) * S)
                ks = slice(kc * S, (kc + 1) * S)
                kb, vb = kv[0][:, :, ks], kv[1][:, :, ks]
                s = q[:, :, qs] @ kb.transpose(-2, -1) * scale
                if causal:
                    s = s.masked_fill(mask, -math.inf)
                p = torch.exp(s - lse[:, :, qs][..., None])
                dkv[1][:, :, ks] += p.transpose(-2, -1) @ dout[:, :, qs]
                ds = p * (dout[:, :, qs] @ vb.transpose(-2, -1) - D[:, :, qs][..., None])
                dq[:, :, qs] += ds @ kb * scale
                dkv[0][:, :, ks] += ds.transpose(-2, -1) @ q[:, :, qs] * scale
            if step > 0:
                if got is not None:
                    got_req.wait()
                    dkv += got
                if pending is not None:
                    pending.wait()
                pending = dist.isend(dkv, (rank + 1) % world, tag=2)
            for r in reqs:
                r.wait()
            if reqs:
                kv = nxt
        if world > 1:
            home = torch.empty_like(kv)
            dist.recv(home, (rank - 1) % world, tag=2)
            dkv_own += home
        if pending is not None:
            pending.wait()
        return dq, dkv_own[0], dkv_own[1], None, None


class RingBlock(Block):
    """bench/train/torch_gpt.py's block with ring attention; `where` is (rank, world)."""

    def attn(self, x, where):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2).contiguous()
                   for t in (q, k, v))
        y = RingAttention.apply(q, k, v, *where)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class CPGPT(GPT):
    """torch_gpt's GPT (same parameters, same initialisation) on this rank's chunks."""

    def __init__(self, layers, dim, heads, seq, vocab, rank, world):
        super().__init__(layers, dim, heads, seq, vocab)
        del self.mask  # ring attention masks block by block
        for block in self.h:
            block.__class__ = RingBlock
        self.rank, self.world = rank, world

    def local(self, t):
        """This rank's zigzag chunks of (B, T) along T."""
        S = t.size(1) // (2 * self.world)
        return torch.cat([t[:, c * S:(c + 1) * S] for c in chunk_ids(self.rank, self.world)], 1)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = self.local(torch.arange(T)[None, :])[0]
        x = self.wte(self.local(idx)) + self.wpe(pos)
        for block in self.h:
            x = block(x, (self.rank, self.world))
        logits = self.ln_f(x) @ self.wte.weight.t()
        local = F.cross_entropy(logits.view(-1, logits.size(-1)), self.local(targets).reshape(-1),
                                reduction="sum")
        return local / (B * T)  # the global mean's share of this rank's tokens


def reduce_and_clip(model, max_norm):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # each rank's gradients are its tokens' share
    at = 0
    for g in grads:
        g.copy_(flat[at:at + g.numel()].view_as(g))
        at += g.numel()
    norm = flat.norm()
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))


def worker(rank, world, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)  # the same weights on every rank
    model = CPGPT(args.layers, args.dim, args.heads, args.seq, args.vocab, rank, world)
    gen = torch.Generator().manual_seed(1000)  # every cp rank reads the same sequences
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=gen)
    step_s, losses = train_timed(model, model, data, adamw(model, args.lr),
                                 lambda: reduce_and_clip(model, 1.0))
    total = torch.tensor([losses[-1]])
    dist.all_reduce(total)
    if rank == 0:
        queue.put({
            "peer": f"pytorch {torch.__version__} hand-written ring attention (zigzag), gloo",
            "nproc": world,
            "threads": args.threads,
            "median_ms": step_s * 1e3,
            "tokens_per_s": args.batch * args.seq / step_s,
            "final_loss": float(total[0]),
        })
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    rank_arguments(ap, layers=2, dim=128, seq=4096, batch=1, steps=4)
    args = ap.parse_args()
    if args.seq % (2 * args.nproc):
        sys.exit(f"torch_cp: --seq {args.seq} does not split into 2 x {args.nproc} chunks")
    run_ranks(worker, args)


if __name__ == "__main__":
    main()
