#!/usr/bin/python3
"""PyTorch reference Llama, written from the published architecture, for parity with strata.

The oracle for strata's Llama blocks: Touvron et al. 2023 (Llama 2) / Hugging Face's
LlamaForCausalLM, written out here by hand. Per layer, pre-norm:
  x = x + o_proj(attention(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
  x = x + down_proj(silu(gate_proj(rms(x))) * up_proj(rms(x)))
then a final RMSNorm and an untied lm_head (or the embedding when tied). RMSNorm:
x / sqrt(mean(x^2) + eps) * w. RoPE in Hugging Face's layout (rotate_half: column i of a
head pairs with column i + hs/2, angle pos * theta^(-2i/hs)). Grouped-query attention:
query head h reads KV head h // (heads / kv_heads) (Hugging Face's repeat_kv). No biases.

Weights come in LlamaForCausalLM's names and [out, in] layout from a safetensors file
(read here without the safetensors package: an 8-byte little-endian header length, a JSON
header of {name: {dtype, shape, data_offsets}}, then the data):
  model.embed_tokens.weight (V, C)      model.layers.L.input_layernorm.weight (C)
  model.layers.L.self_attn.{q,k,v,o}_proj.weight  q (NH hs, C), k/v (NKV hs, C), o (C, NH hs)
  model.layers.L.post_attention_layernorm.weight (C)
  model.layers.L.mlp.{gate,up}_proj.weight (F, C), down_proj.weight (C, F)
  model.norm.weight (C)                 lm_head.weight (V, C)

Usage (from the repository root):
  /usr/bin/python3 tools/parity/llama_reference.py --random-weights W.safetensors --layers 2 \\
      --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 64       # writes random weights
  /usr/bin/python3 tools/parity/llama_reference.py --weights W.safetensors --out REF.bin \\
      --heads 4 --kv-heads 2                                    # logits and gradients
The output is the container gen_reference.py writes (magic STRP): tokens, targets, logits,
and grad.NAME of the mean token loss for every parameter NAME, computed in float64.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_reference import write_container  # noqa: E402

SAFETENSORS_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8),
                      "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


def read_safetensors(path):
    """{name: tensor} from a safetensors file, with its header checked against the data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SystemExit(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise SystemExit(f"{path}: header length {hlen} runs past the file's {len(blob)} bytes")
    header = json.loads(blob[8:8 + hlen])
    data = blob[8 + hlen:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in SAFETENSORS_DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']}, not supported")
        dtype, size = SAFETENSORS_DTYPES[t["dtype"]]
        begin, end = t["data_offsets"]
        if end - begin != size * math.prod(t["shape"]) or end > len(data):
            raise SystemExit(f"{path}: tensor {name} offsets [{begin}, {end}) do not fit shape "
                             f"{t['shape']} in a {len(data)}-byte data section")
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).view(t["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """tensors: {name: float32 tensor}, written in name order."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        raw = tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def config_from_weights(p, heads, kv_heads, rope_theta=10000.0, rms_eps=1e-5):
    """The shapes the weights imply, with the head counts (not recoverable from shapes)."""
    V, C = p["model.embed_tokens.weight"].shape
    layers = 1 + max(int(n.split(".")[2]) for n in p if n.startswith("model.layers."))
    return {"vocab": V, "dim": C, "layers": layers, "heads": heads, "kv_heads": kv_heads,
            "ffn": p["model.layers.0.mlp.gate_proj.weight"].shape[0], "rope_theta": rope_theta,
            "rms_eps": rms_eps, "tie_embeddings": "lm_head.weight" not in p}


def random_weights(cfg, seed):
    """Random weights in LlamaForCausalLM's names (normal, std 0.02; norms around 1)."""
    g = torch.Generator().manual_seed(seed)
    C, F_, V, hs = cfg["dim"], cfg["ffn"], cfg["vocab"], cfg["dim"] // cfg["heads"]
    kv = cfg["kv_heads"] * hs
    normal = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32) * 0.02
    norm = lambda: 1.0 + 0.1 * torch.randn(C, generator=g, dtype=torch.float32)
    p = {"model.embed_tokens.weight": normal(V, C), "model.norm.weight": norm()}
    if not cfg["tie_embeddings"]:
        p["lm_head.weight"] = normal(V, C)
    for l in range(cfg["layers"]):
        pre = f"model.layers.{l}."
        p.update({pre + "input_layernorm.weight": norm(),
                  pre + "self_attn.q_proj.weight": normal(C, C),
                  pre + "self_attn.k_proj.weight": normal(kv, C),
                  pre + "self_attn.v_proj.weight": normal(kv, C),
                  pre + "self_attn.o_proj.weight": normal(C, C),
                  pre + "post_attention_layernorm.weight": norm(),
                  pre + "mlp.gate_proj.weight": normal(F_, C),
                  pre + "mlp.up_proj.weight": normal(F_, C),
                  pre + "mlp.down_proj.weight": normal(C, F_)})
    return p


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def llama3_scaled(inv_freq, scaling):
    """Llama 3.1's rope_scaling (rope_type "llama3"), as its published config describes it:
    wavelengths 2 pi / f shorter than original / high_freq_factor are kept, those longer than
    original / low_freq_factor divided by factor, and those between interpolated by
    a = (original / wavelength - low) / (high - low): (1 - a) f / factor + a f."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    a = (original / wavelength - low) / (high - low)
    mid = (1 - a) * inv_freq / factor + a * inv_freq
    out = torch.where(wavelength > original / low, inv_freq / factor, mid)
    return torch.where(wavelength < original / high, inv_freq, out)


def rope_cos_sin(positions, hs, theta, dtype, scaling=None):
    """cos, sin (B, T, hs) for positions (B, T): angle pos * theta^(-2i/hs) (llama3-scaled when
    `scaling` is given), repeated over the two halves of a head (rotate_half's layout).
    Computed in float64."""
    inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    if scaling:
        inv_freq = llama3_scaled(inv_freq, scaling)
    angle = positions.to(torch.float64)[..., None] * inv_freq
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x (B, heads, T, hs); cos, sin (B, T, hs)."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def attention(q, k, v):
    """Causal softmax attention; q (B, NH, T, hs), k and v (B, NKV, T, hs), NKV | NH."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


def llama_forward(p, cfg, tokens, positions=None, attend=attention):
    """Logits (B, T, V) for tokens (B, T); positions (B, T) default 0 .. T-1."""
    B, T = tokens.shape
    C, NH, NKV = cfg["dim"], cfg["heads"], cfg["kv_heads"]
    if NH % NKV:
        raise SystemExit(f"--kv-heads {NKV} does not divide --heads {NH}")
    hs, eps = C // NH, cfg["rms_eps"]
    if positions is None:
        positions = torch.arange(T).expand(B, T)
    x = p["model.embed_tokens.weight"][tokens]
    cos, sin = rope_cos_sin(positions, hs, cfg["rope_theta"], x.dtype, cfg.get("rope_scaling"))
    for l in range(cfg["layers"]):
        w = lambda n: p[f"model.layers.{l}.{n}.weight"]
        y = rms_norm(x, w("input_layernorm"), eps)
        q = (y @ w("self_attn.q_proj").T).view(B, T, NH, hs).transpose(1, 2)
        k = (y @ w("self_attn.k_proj").T).view(B, T, NKV, hs).transpose(1, 2)
        v = (y @ w("self_attn.v_proj").T).view(B, T, NKV, hs).transpose(1, 2)
        y = attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        x = x + y.transpose(1, 2).reshape(B, T, C) @ w("self_attn.o_proj").T
        y = rms_norm(x, w("post_attention_layernorm"), eps)
        x = x + (F.silu(y @ w("mlp.gate_proj").T) * (y @ w("mlp.up_proj").T)) @ w("mlp.down_proj").T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def fixed_batch(B, T, V, seed=1234):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def logits_and_grads(weights, cfg, tokens, targets):
    """float64 logits and the gradient of the mean token loss for every parameter."""
    params = {n: t.to(torch.float64).requires_grad_(True) for n, t in weights.items()}
    logits = llama_forward(params, cfg, tokens)
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))
    loss.backward()
    return logits, loss, {n: params[n].grad for n in params}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", help="safetensors file in LlamaForCausalLM names")
    ap.add_argument("--random-weights", help="write random weights to this safetensors file")
    ap.add_argument("--out", help="where --weights' logits and gradients go")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--tie-embeddings", action="store_true")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    kv_heads = a.kv_heads or a.heads
    if a.random_weights:
        cfg = {"vocab": a.vocab, "dim": a.dim, "layers": a.layers, "heads": a.heads,
               "kv_heads": kv_heads, "ffn": a.ffn, "tie_embeddings": a.tie_embeddings}
        write_safetensors(a.random_weights, random_weights(cfg, a.seed))
        print(f"wrote {a.random_weights}")
    if a.weights:
        if not a.out:
            raise SystemExit("--weights needs --out")
        weights = read_safetensors(a.weights)
        cfg = config_from_weights(weights, a.heads, kv_heads, a.rope_theta, a.rms_eps)
        tokens, targets = fixed_batch(a.batch, a.seq, cfg["vocab"])
        logits, loss, grads = logits_and_grads(weights, cfg, tokens, targets)
        header = {"config": cfg, "batch": a.batch, "seq": a.seq, "loss": loss.item(),
                  "generator": "tools/parity/llama_reference.py (float64, torch " +
                               torch.__version__ + ")"}
        tensors = [("tokens", tokens), ("targets", targets), ("logits", logits)]
        tensors += [(f"grad.{n}", grads[n]) for n in sorted(grads)]
        write_container(a.out, header, tensors)
        print(f"wrote {a.out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
