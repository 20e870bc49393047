#!/usr/bin/python3
"""The PyTorch peer for bench/rlhf: the same GPT as strata (pre-LayerNorm, GELU tanh MLP,
tied embeddings) with a hand-written KV cache, and a minimal PPO iteration over the same four
models (actor, frozen reference, frozen reward model, critic with a value head) doing the
same work as `strata rlhf ppo`: KV-cache sampling, actor/reference log-probs, critic values,
reward at the last token, per-token KL penalty, GAE, whitened advantages, `epochs` passes of
minibatches with the clipped policy loss and the clipped value loss, AdamW + gradient
clipping for actor and critic.

  torch_rlhf.py write --out F.safetensors [--value-head] ...   a random model strata can load
  torch_rlhf.py generate ...      KV-cache generation tokens/s (median of --repeats)
  torch_rlhf.py ppo ...           seconds per PPO iteration (median after a warm-up one)
Prints one JSON line. torch 1.13 (Debian 12): attention written out (no SDPA).
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_gpt import Block as TrainBlock, model_arguments  # noqa: E402  (bench/train's peer: the same layers)


class Block(TrainBlock):
    """bench/train's block with a KV cache in its forward."""

    def forward(self, x, cache=None, pos=0):
        """x (B, T, C). cache: None (full causal pass) or [K, V] (B, NH, S, hs) filled to pos."""
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            cache[0][:, :, pos:pos + T] = k
            cache[1][:, :, pos:pos + T] = v
            k = cache[0][:, :, :pos + T]
            v = cache[1][:, :, :pos + T]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        if T > 1:
            S = k.size(2)
            mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            att = att.masked_fill(~mask, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, seq, vocab, value_head=False):
        super().__init__()
        self.seq, self.vocab = seq, vocab
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.v_head = nn.Linear(dim, 1) if value_head else None
        for n, p in self.named_parameters():
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if "proj.weight" in n else 0.02
                nn.init.normal_(p, std=std)

    def hidden(self, idx, caches=None, pos=0):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T))
        for i, b in enumerate(self.h):
            x = b(x, None if caches is None else caches[i], pos)
        return self.ln_f(x)

    def logits(self, idx, caches=None, pos=0):
        return self.hidden(idx, caches, pos) @ self.wte.weight.t()

    def values(self, idx):
        return self.v_head(self.hidden(idx)).squeeze(-1)


def new_caches(m, B):
    C, NH = m.wte.weight.size(1), m.h[0].heads
    return [[torch.zeros(B, NH, m.seq, C // NH), torch.zeros(B, NH, m.seq, C // NH)] for _ in m.h]


@torch.no_grad()
def generate(m, prompts, R, temperature):
    B, P = prompts.shape
    caches = new_caches(m, B)
    z = m.logits(prompts, caches, 0)[:, -1]
    out = []
    for i in range(R):
        if temperature == 0:
            tok = z.argmax(-1)
        else:
            tok = torch.multinomial(F.softmax(z / temperature, dim=-1), 1).squeeze(-1)
        out.append(tok)
        if i + 1 < R:
            z = m.logits(tok[:, None], caches, P + i)[:, -1]
    return torch.stack(out, 1)


def write_safetensors(m, path, cfg):
    """strata rlhf's model file: GPT-2 names, F32, architecture in strata_config."""
    names = {"wte.weight": "wte", "wpe.weight": "wpe", "ln_f.weight": "ln_f.weight", "ln_f.bias": "ln_f.bias",
             "v_head.weight": "v_head.weight", "v_head.bias": "v_head.bias"}
    sub = {"ln_1": "ln_1", "c_attn": "attn.c_attn", "c_proj": "attn.c_proj", "ln_2": "ln_2",
           "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}
    tensors = []
    for n, p in m.named_parameters():
        if n.startswith("h."):
            _, l, mod, kind = n.split(".")
            name = f"h.{l}.{sub[mod]}.{kind}"
        else:
            name = names[n]
        t = p.detach().float().contiguous()
        if name == "v_head.weight":
            t = t.view(-1)
        tensors.append((name, t))
    header, at = {"__metadata__": {"format": "pt", "source": "bench", "strata_config": json.dumps(cfg)}}, 0
    for name, t in tensors:
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + n]}
        at += n
    hs = json.dumps(header).encode()
    hs += b" " * ((8 - len(hs) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hs)))
        f.write(hs)
        for _, t in tensors:
            f.write(t.numpy().tobytes())


def logps_of(m, seq, P, temperature):
    z = m.logits(seq)[:, P - 1:-1] / temperature
    return F.log_softmax(z, -1).gather(-1, seq[:, P:, None]).squeeze(-1), z


def gae(rewards, values, gamma, lam):
    adv = torch.zeros_like(rewards)
    last = torch.zeros(rewards.size(0))
    for t in reversed(range(rewards.size(1))):
        nv = values[:, t + 1] if t + 1 < rewards.size(1) else torch.zeros(rewards.size(0))
        delta = rewards[:, t] + gamma * nv - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + values


def ppo_iteration(a, actor, ref, rm, critic, opt_a, opt_c, it):
    G, P, R = a.rollout_batch, a.prompt_len, a.response_len
    prompts = torch.randint(0, a.vocab, (G, P))
    resp = generate(actor, prompts, R, a.temperature)
    seq = torch.cat([prompts, resp], 1)
    with torch.no_grad():
        old, _ = logps_of(actor, seq, P, a.temperature)
        refl, _ = logps_of(ref, seq, P, a.temperature)
        values = critic.values(seq)[:, P - 1:-1]
        score = rm.values(seq)[:, -1]
        rewards = -a.kl_coef * (old - refl)
        rewards[:, -1] += score
        adv, ret = gae(rewards, values, 1.0, 0.95)
        adv = (adv - adv.mean()) / torch.sqrt(adv.var(unbiased=False) + 1e-8)
    for _ in range(a.epochs):
        perm = torch.randperm(G)
        for s in range(0, G, a.minibatch):
            idx = perm[s:s + a.minibatch]
            lp, z = logps_of(actor, seq[idx], P, a.temperature)
            ratio = torch.exp(lp - old[idx])
            pg = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(1 - 0.2, 1 + 0.2)).mean()
            ent = -(F.softmax(z, -1) * F.log_softmax(z, -1)).sum(-1).mean()
            opt_a.zero_grad()
            (pg - a.ent_coef * ent).backward()
            torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
            opt_a.step()
            v = critic.values(seq[idx])[:, P - 1:-1]
            vc = values[idx] + (v - values[idx]).clamp(-0.2, 0.2)
            vl = 0.5 * torch.max((v - ret[idx]) ** 2, (vc - ret[idx]) ** 2).mean()
            opt_c.zero_grad()
            vl.backward()
            torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
            opt_c.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["write", "generate", "ppo"])
    model_arguments(ap)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--response-len", type=int, default=56)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rollout-batch", type=int, default=16)
    ap.add_argument("--minibatch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--kl-coef", type=float, default=0.05)
    ap.add_argument("--ent-coef", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--value-head", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    mk = lambda vh=False: GPT(a.layers, a.dim, a.heads, a.seq, a.vocab, vh)
    if a.mode == "write":
        cfg = {"layers": a.layers, "dim": a.dim, "heads": a.heads, "max_seq": a.seq, "vocab": a.vocab,
               "padded_vocab": a.vocab}
        write_safetensors(mk(a.value_head), a.out, cfg)
        print(json.dumps({"written": a.out}))
        return
    if a.mode == "generate":
        m = mk().eval()
        prompts = torch.randint(0, a.vocab, (a.batch, a.prompt_len))
        generate(m, prompts, 4, a.temperature)  # warm-up
        times, cpu = [], []
        for _ in range(a.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            generate(m, prompts, a.response_len, a.temperature)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        n = a.batch * a.response_len
        print(json.dumps({"tokens_per_s": n / statistics.median(times), "cpu_tokens_per_s": n / statistics.median(cpu)}))
        return
    actor, ref, rm, critic = mk(), mk(), mk(True), mk(True)
    ref.load_state_dict(actor.state_dict())
    critic.load_state_dict(rm.state_dict())
    for p in list(ref.parameters()) + list(rm.parameters()):
        p.requires_grad_(False)
    opt_a = torch.optim.AdamW(actor.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    opt_c = torch.optim.AdamW(critic.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    times, cpu = [], []
    for it in range(a.iterations + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        ppo_iteration(a, actor, ref, rm, critic, opt_a, opt_c, it)
        if it > 0:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print(json.dumps({"iteration_s": statistics.median(times), "iteration_cpu_s": statistics.median(cpu)}))


if __name__ == "__main__":
    main()
