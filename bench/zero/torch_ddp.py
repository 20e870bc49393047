#!/usr/bin/python3
"""The PyTorch peer for bench/zero: the GPT of bench/train/torch_gpt.py trained with
DistributedDataParallel on N local processes (gloo backend), the global batch split evenly
across ranks, the same AdamW settings and gradient clipping, `--threads` intra-op threads per
rank. Times the median wall time per optimizer step after a warm-up step on rank 0 (DDP's
all-reduce keeps ranks in step) and prints one JSON line.

  python3 bench/zero/torch_ddp.py --nproc 2 --batch 8 --threads 1 --bucket-mb 4
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_gpt import GPT, adamw, rank_arguments, run_ranks, train_timed  # noqa: E402  (same model and loop)


def worker(rank, world, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    per_rank = args.batch // world
    gen = torch.Generator().manual_seed(1000 + rank)
    data = torch.randint(0, args.vocab, (args.steps, per_rank, args.seq + 1), generator=gen)
    step_s, losses = train_timed(model, ddp, data, adamw(model, args.lr),
                                 lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    dist.barrier()
    if rank == 0:
        queue.put({
            "peer": f"pytorch {torch.__version__} DDP gloo",
            "nproc": world,
            "threads": args.threads,
            "bucket_mb": args.bucket_mb,
            "params": sum(p.numel() for p in model.parameters()),
            "median_ms": step_s * 1e3,
            "tokens_per_s": args.batch * args.seq / step_s,
            "final_loss": losses[-1],
        })
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    rank_arguments(ap)
    ap.add_argument("--bucket-mb", type=float, default=4)
    args = ap.parse_args()
    if args.batch % args.nproc:
        sys.exit(f"torch_ddp: --batch {args.batch} does not split over {args.nproc} ranks")
    run_ranks(worker, args)


if __name__ == "__main__":
    main()
