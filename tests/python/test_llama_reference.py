"""Self-consistency of tools/parity/llama_reference.py, the PyTorch Llama that strata's Llama
blocks will be checked against: safetensors round trip, RoPE's identities, GQA against a plain
multi-head attention written here, and its gradients against torch.autograd.gradcheck."""
import math
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "parity"))
import llama_reference as ref  # noqa: E402


def tiny(heads=4, kv_heads=2, tie=False, layers=2):
    return {"vocab": 11, "dim": 16, "layers": layers, "heads": heads, "kv_heads": kv_heads,
            "ffn": 24, "rope_theta": 10000.0, "rms_eps": 1e-5, "tie_embeddings": tie}


def plain_mha(q, k, v):
    """Per head, an explicit loop over query rows: softmax over keys 0..t."""
    B, NH, T, hs = q.shape
    out = torch.zeros_like(q)
    for t in range(T):
        s = torch.einsum("bhd,bhsd->bhs", q[:, :, t], k[:, :, :t + 1]) / math.sqrt(hs)
        out[:, :, t] = torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v[:, :, :t + 1])
    return out


class LlamaReference(unittest.TestCase):
    def setUp(self):
        torch.set_default_dtype(torch.float64)

    def weights(self, cfg, seed=3):
        return {n: t.to(torch.float64) for n, t in ref.random_weights(cfg, seed).items()}

    def test_safetensors_round_trip_and_bad_files(self):
        p = ref.random_weights(tiny(), 5)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.safetensors")
            ref.write_safetensors(path, p)
            back = ref.read_safetensors(path)
            self.assertEqual(sorted(back), sorted(p))
            for n in p:
                self.assertTrue(torch.equal(back[n], p[n]), n)
            cfg = ref.config_from_weights(back, 4, 2)
            self.assertEqual((cfg["layers"], cfg["ffn"], cfg["vocab"], cfg["tie_embeddings"]),
                             (2, 24, 11, False))
            with open(path, "rb") as f:
                blob = f.read()
            with open(path, "wb") as f:
                f.write(blob[:-4])  # a truncated data section
            with self.assertRaises(SystemExit):
                ref.read_safetensors(path)

    def test_rope_at_position_zero_is_the_identity(self):
        x = torch.randn(2, 3, 5, 8)
        cos, sin = ref.rope_cos_sin(torch.zeros(2, 5, dtype=torch.long), 8, 10000.0, x.dtype)
        self.assertTrue(torch.equal(ref.apply_rope(x, cos, sin), x))

    def test_rope_score_depends_only_on_the_position_difference(self):
        q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
        rot = lambda x, p: ref.apply_rope(x, *ref.rope_cos_sin(torch.tensor([[p]]), 16, 1e4, x.dtype))
        for delta in (0, 5, 40):
            scores = [(rot(q, p) * rot(k, p - delta)).sum().item() for p in (40, 100, 3000)]
            for s in scores:
                self.assertAlmostEqual(s, scores[0], places=9)

    def test_rotate_half_is_the_interleaved_layout_permuted(self):
        # Meta's layout turns pairs (2i, 2i+1); with the columns permuted to (evens | odds)
        # it is rotate_half's (i, i + hs/2): the permutation HF folds into q/k weights.
        hs, pos = 8, torch.tensor([[7]])
        x = torch.randn(1, 1, 1, hs)
        inv = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        a = 7 * inv
        xr, xi = x[..., 0::2], x[..., 1::2]
        meta = torch.stack([xr * a.cos() - xi * a.sin(), xr * a.sin() + xi * a.cos()], -1).flatten(-2)
        perm = torch.cat([torch.arange(0, hs, 2), torch.arange(1, hs, 2)])
        hf = ref.apply_rope(x[..., perm], *ref.rope_cos_sin(pos, hs, 10000.0, x.dtype))
        self.assertTrue(torch.allclose(hf, meta[..., perm], atol=1e-12))

    def test_gqa_with_all_heads_is_plain_multi_head_attention(self):
        q, k, v = (torch.randn(2, 4, 9, 8) for _ in range(3))
        self.assertTrue(torch.allclose(ref.attention(q, k, v), plain_mha(q, k, v), atol=1e-12))
        # and a model with kv_heads = heads runs the same through either attention
        cfg, tokens = tiny(kv_heads=4), torch.randint(0, 11, (2, 7))
        p = self.weights(cfg)
        a = ref.llama_forward(p, cfg, tokens)
        b = ref.llama_forward(p, cfg, tokens, attend=plain_mha)
        self.assertTrue(torch.allclose(a, b, atol=1e-10))

    def test_gqa_is_mha_with_repeated_kv_heads(self):
        # kv_heads = 1 and 2 equal full multi-head attention whose k/v projections repeat the
        # shared heads: the weights, not the attention, carry the grouping.
        tokens = torch.randint(0, 11, (2, 7))
        for kv in (2, 1):
            cfg = tiny(kv_heads=kv)
            p = self.weights(cfg)
            full = dict(p)
            hs, group = 4, 4 // kv
            for l in range(cfg["layers"]):
                for n in ("k_proj", "v_proj"):
                    name = f"model.layers.{l}.self_attn.{n}.weight"
                    full[name] = p[name].view(kv, hs, 16).repeat_interleave(group, 0).reshape(16, 16)
            a = ref.llama_forward(p, cfg, tokens)
            b = ref.llama_forward(full, dict(cfg, kv_heads=4), tokens, attend=plain_mha)
            self.assertTrue(torch.allclose(a, b, atol=1e-10), f"kv_heads {kv}")

    def test_gradients_match_gradcheck_in_float64(self):
        for kv, tie in ((2, False), (1, True)):
            cfg = tiny(heads=2, kv_heads=kv, tie=tie, layers=1)
            cfg.update(dim=8, ffn=6, vocab=5)
            p = self.weights(cfg)
            names = sorted(p)
            tokens, targets = ref.fixed_batch(2, 4, cfg["vocab"])

            def loss(*tensors):
                logits = ref.llama_forward(dict(zip(names, tensors)), cfg, tokens)
                return F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))

            inputs = tuple(p[n].clone().requires_grad_(True) for n in names)
            self.assertTrue(torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-7))
            # logits_and_grads reports the same gradients under the same names
            _, _, grads = ref.logits_and_grads(p, cfg, tokens, targets)
            auto = torch.autograd.grad(loss(*inputs), inputs)
            for n, g in zip(names, auto):
                self.assertTrue(torch.allclose(grads[n], g, atol=1e-14), n)

    def test_kv_heads_that_do_not_divide_are_refused(self):
        cfg = tiny(heads=4, kv_heads=3)
        with self.assertRaises(SystemExit):
            ref.llama_forward(self.weights(tiny()), cfg, torch.zeros(1, 2, dtype=torch.long))


if __name__ == "__main__":
    unittest.main()
