#!/usr/bin/python3
"""The PyTorch peer for bench/recompute: bench/train/torch_gpt.py's GPT (strata's model: pre-
LayerNorm, GELU tanh MLP, tied embeddings, GPT-2 init, the same AdamW and clipping), trained
with no checkpointing or with torch.utils.checkpoint around every block (full recomputation:
a block keeps its input, its forward runs again before its backward). Prints one JSON line:
the median step, tokens/s, and the bytes autograd holds for the backward at the end of one
forward (saved tensors, each storage once, parameters and the causal mask excluded).

torch.utils.checkpoint is used in its reentrant form, the default of torch 1.13 (Debian 12);
the saved-tensor hooks see its saved block inputs. Attention is torch_gpt.py's explicit
masked softmax (torch 1.13 has no scaled_dot_product_attention), so without checkpointing
each block keeps its B x heads x T x T probabilities, which strata's flash-style attention
never keeps.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_gpt import GPT, adamw, model_arguments, train_timed  # noqa: E402


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in the backward (torch.utils.checkpoint)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, mask):
        return checkpoint(self.block, x, mask)


def saved_bytes(model, x, y):
    """Bytes of the tensors autograd saves during one forward (each storage once), excluding
    the parameters and buffers."""
    skip = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
    seen = {}

    def pack(t):
        ptr = t.storage().data_ptr()
        if ptr not in skip:
            seen[ptr] = t.storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x, y)
    total = sum(seen.values())
    loss.backward()  # frees what the forward saved
    model.zero_grad(set_to_none=True)
    return total


def main():
    ap = argparse.ArgumentParser()
    model_arguments(ap)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--checkpoint", choices=["none", "full"], default="none")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab)
    if args.checkpoint == "full":
        model.h = nn.ModuleList(Checkpointed(b) for b in model.h)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1))
    kept = saved_bytes(model, data[0, :, :-1].contiguous(), data[0, :, 1:].contiguous())
    step_s, losses = train_timed(model, model, data, adamw(model, args.lr),
                                 lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    print(json.dumps({
        "peer": "pytorch " + torch.__version__,
        "checkpoint": args.checkpoint,
        "threads": torch.get_num_threads(),
        "median_ms": step_s * 1e3,
        "tokens_per_s": args.batch * args.seq / step_s,
        "saved_bytes": kept,
        "final_loss": losses[-1],
    }))


if __name__ == "__main__":
    main()
