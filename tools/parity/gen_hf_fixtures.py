#!/usr/bin/python3
"""Hugging Face parity fixtures (writes tests/model/fixtures/hf/, read by test_parity_hf.cc).

Each fixture is a model directory as transformers' save_pretrained writes one, with random
weights, plus reference.bin: the float64 logits of one fixed batch and the gradient of its
mean token loss for every parameter, computed here by PyTorch models written from the
published architectures (llama_reference.py for LlamaForCausalLM; gpt2_forward below for
GPT2LMHeadModel: pre-LN blocks, Conv1D x @ W + b, tanh GELU, causal attention scaled by
1/sqrt(head size), tied head). strata loads the directory with its importer (what
`train --init-from` runs) and must match within 1e-5 (logits) and 1e-4 (every gradient,
relative to the tensor's largest entry).

The fixtures cover kv-heads = heads, heads/2 and 1, untied and tied heads, Llama 3.1's
rope_scaling ("llama3", llama-rope3), the three dtypes
strata reads (the weights are rounded to the file's dtype first and the reference reads the
file back, so they are exact), one file and two shards with an index, and GPT-2 names
without "transformer." plus the attention-mask buffers of older files.

Usage (from the repository root):
  /usr/bin/python3 tools/parity/gen_hf_fixtures.py --out tests/model/fixtures/hf
reference.bin is gen_reference.py's container (magic STRP): tokens, targets (B, T) int32,
logits (B, T, vocab), grad.NAME under Hugging Face's name and layout (GPT-2 with its
"transformer." prefix); the header has the batch, the loss and the generator's torch version.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_reference import write_container  # noqa: E402
from llama_reference import fixed_batch, llama_forward, random_weights, read_safetensors  # noqa: E402

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
B, T = 2, 16

# name, kv heads, tied, file dtype, shards (seeds 3, 4, 5; GPT-2 6; the scaled Llama 7)
LLAMA = [("llama-kv4", 4, False, "BF16", 1), ("llama-kv2", 2, False, "F16", 2), ("llama-kv1", 1, True, "F32", 1)]
LLAMA_SHAPE = {"layers": 2, "dim": 24, "heads": 4, "ffn": 40, "vocab": 50, "max_seq": 32,
               "rope_theta": 500000.0, "rms_eps": 1e-5}
# Llama 3.1's rope_scaling with an original context short enough that the fixture's head size
# (hs 6, theta 500000: wavelengths 6.3, 498 and 39,500 against 1024/4 and 1024) meets all three
# regimes: kept, blended and divided by the factor.
ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 1024}
GPT2_SHAPE = {"layers": 2, "dim": 16, "heads": 2, "vocab": 50, "max_seq": 32}


def write_safetensors(path, tensors, dtype):
    """tensors: {name: tensor}, stored as `dtype` in name order."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(DTYPES[dtype]).contiguous()
        raw = (t.view(torch.int16) if t.element_size() == 2 else t).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def write_model_dir(out, config, tensors, dtype, shards):
    """config.json and the weights, in one file or `shards` files with an index."""
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
        return
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        write_safetensors(os.path.join(out, file), part, dtype)
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * (4 if dtype == "F32" else 2) for t in tensors.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def read_model_dir(out):
    """{name: tensor} of every weight file in `out`, as the files hold them."""
    tensors = {}
    for file in sorted(os.listdir(out)):
        if file.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(out, file)))
    return tensors


def gpt2_forward(p, cfg, tokens):
    """Logits (B, T, vocab) of GPT2LMHeadModel for HF-named weights p (Conv1D: [in, out])."""
    Bn, Tn = tokens.shape
    C, H = cfg["dim"], cfg["heads"]

    def ln(x, n):
        return F.layer_norm(x, (C,), p[n + ".weight"], p[n + ".bias"], 1e-5)

    def conv1d(x, n):
        return x @ p[n + ".weight"] + p[n + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    h = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:Tn]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for i in range(cfg["layers"]):
        n = f"transformer.h.{i}."
        q, k, v = conv1d(ln(h, n + "ln_1"), n + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(Bn, Tn, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        h = h + conv1d((att @ v).transpose(1, 2).reshape(Bn, Tn, C), n + "attn.c_proj")
        h = h + conv1d(gelu_new(conv1d(ln(h, n + "ln_2"), n + "mlp.c_fc")), n + "mlp.c_proj")
    return ln(h, "transformer.ln_f") @ p["transformer.wte.weight"].T


def gpt2_random_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    C, V, L = cfg["dim"], cfg["vocab"], cfg["layers"]
    normal = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # norms and biases; matrices x10
    p = {"transformer.wte.weight": 10 * normal(V, C), "transformer.wpe.weight": 5 * normal(cfg["max_seq"], C),
         "transformer.ln_f.weight": 1 + 10 * normal(C), "transformer.ln_f.bias": normal(C)}
    for i in range(L):
        n = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[n + ln + ".weight"], p[n + ln + ".bias"] = 1 + 10 * normal(C), normal(C)
        for m, (i_, o) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C),
                           "mlp.c_proj": (4 * C, C)}.items():
            p[n + m + ".weight"], p[n + m + ".bias"] = 10 * normal(i_, o), normal(o)
    return p


def reference(out, forward, weights, vocab, header):
    """Writes out/reference.bin: logits and gradients of the mean token loss, in float64."""
    params = {n: t.to(torch.float64).requires_grad_(True) for n, t in weights.items()}
    tokens, targets = fixed_batch(B, T, vocab)
    logits = forward(params, tokens)
    loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    header = dict(header, batch=B, seq=T, loss=loss.item(),
                  generator="tools/parity/gen_hf_fixtures.py (float64, torch " + torch.__version__ + ")")
    tensors = [("tokens", tokens), ("targets", targets), ("logits", logits)]
    tensors += [(f"grad.{n}", params[n].grad) for n in sorted(params)]
    write_container(os.path.join(out, "reference.bin"), header, tensors)
    return loss.item()


def llama_fixture(root, name, kv, tied, dtype, shards, seed, rope_scaling=None):
    s = LLAMA_SHAPE
    cfg = dict(s, kv_heads=kv, tie_embeddings=tied, rope_scaling=rope_scaling)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["dim"],
              "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
              "num_key_value_heads": kv, "hidden_act": "silu", "max_position_embeddings": s["max_seq"],
              "rms_norm_eps": s["rms_eps"], "rope_theta": s["rope_theta"], "rope_scaling": rope_scaling,
              "attention_bias": False, "mlp_bias": False, "vocab_size": s["vocab"], "tie_word_embeddings": tied,
              "torch_dtype": TORCH_DTYPE[dtype], "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}
    out = os.path.join(root, name)
    # std 0.2 rather than 0.02: attention far from uniform and logits of order 1, so that a
    # wrong rotation or grouping shows in the logits, not only at the 1e-6 level.
    weights = {n: t * 10 if t.dim() == 2 else t for n, t in random_weights(cfg, seed).items()}
    write_model_dir(out, config, weights, dtype, shards)
    weights = read_model_dir(out)  # the values the file holds, after rounding to its dtype
    return reference(out, lambda p, tokens: llama_forward(p, cfg, tokens), weights, s["vocab"], {"config": config})


def gpt2_fixture(root, seed):
    s = GPT2_SHAPE
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": s["dim"], "n_layer": s["layers"],
              "n_head": s["heads"], "n_positions": s["max_seq"], "n_ctx": s["max_seq"], "n_inner": None,
              "vocab_size": s["vocab"], "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
              "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "scale_attn_weights": True,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    weights = gpt2_random_weights(s, seed)
    # As Hugging Face's own gpt2 files: no "transformer." prefix, a causal-mask buffer per layer.
    files = {n[len("transformer."):]: t for n, t in weights.items()}
    for i in range(s["layers"]):
        files[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, s["max_seq"], s["max_seq"]))
    out = os.path.join(root, "gpt2")
    write_model_dir(out, config, files, "BF16", 1)
    read = read_model_dir(out)
    weights = {"transformer." + n: t for n, t in read.items() if not n.endswith(".attn.bias")}
    return reference(out, lambda p, tokens: gpt2_forward(p, s, tokens), weights, s["vocab"], {"config": config})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to (re)write, e.g. tests/model/fixtures/hf")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    for i, (name, kv, tied, dtype, shards) in enumerate(LLAMA):
        loss = llama_fixture(a.out, name, kv, tied, dtype, shards, a.seed + i)
        print(f"wrote {a.out}/{name}: kv heads {kv}, {'tied' if tied else 'untied'}, {dtype}, "
              f"{shards} file(s); loss {loss:.6f}")
    loss = gpt2_fixture(a.out, a.seed + len(LLAMA))
    print(f"wrote {a.out}/gpt2: BF16, HF's own naming; loss {loss:.6f}")
    loss = llama_fixture(a.out, "llama-rope3", 2, False, "F32", 1, a.seed + len(LLAMA) + 1, ROPE_SCALING)
    print(f"wrote {a.out}/llama-rope3: kv heads 2, rope_scaling llama3, F32; loss {loss:.6f}")


if __name__ == "__main__":
    main()
