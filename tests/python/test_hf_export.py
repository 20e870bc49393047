"""The Hugging Face GPT-2 and Llama exports (`strata ckpt export --hf` and strata.ckpt.export_hf)
against strata itself (the Llama: tools/parity/llama_reference.py reads it, class
HuggingFaceLlama below). GPT-2: a GPT-2 forward written here from the published architecture (pre-LN blocks,
Conv1D x @ W + b, tanh GELU, causal attention with 1/sqrt(head dim), tied head) reads the
exported files by Hugging Face's names and must give the held-out loss strata's final eval
reported for the same tokens, within 1e-5. The held-out split is one file of known windows
(a data directory of llm.c shards whose val_ shard holds exactly two windows), so the loss is
fixed whatever order the eval takes them in. Run by ctest with PYTHONPATH=<build>/python and
STRATA=<build>/strata."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import strata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt"))
from check_safetensors import read_raw as read_safetensors  # noqa: E402 (the format's own reader)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "parity"))
from gen_hf_fixtures import gpt2_forward  # noqa: E402 (the PyTorch references of tools/parity)
from llama_reference import llama_forward, read_safetensors as read_llama  # noqa: E402

STRATA = os.environ["STRATA"]
SEQ, VOCAB, LAYERS, DIM, HEADS = 16, 200, 2, 32, 2  # vocab 200: wte has 56 padding rows


def write_tokens(path, tokens):
    """An llm.c version-1 token file: 256 int32 header words (magic, version, count), uint16s."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def gpt2_loss(weights, config, windows):
    """Mean next-token cross-entropy of GPT2LMHeadModel (tools/parity/gen_hf_fixtures.py's
    PyTorch GPT-2, written from the published architecture) built from HF-named tensors."""
    assert config["layer_norm_epsilon"] == 1e-5  # the reference's
    W = {k: torch.from_numpy(v).double() for k, v in weights.items()}
    cfg = {"dim": config["n_embd"], "heads": config["n_head"], "layers": config["n_layer"]}
    x, y = windows_xy(windows)
    logits = gpt2_forward(W, cfg, x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def windows_xy(windows):
    """Inputs and next-token targets (B, T) of held-out windows of T + 1 tokens."""
    return torch.tensor([w[:-1] for w in windows]), torch.tensor([w[1:] for w in windows])


def held_out_data(root, seed):
    """A data directory of llm.c shards whose val_ shard holds exactly two windows; returns it
    and the windows."""
    data = os.path.join(root, "data")
    os.makedirs(data)
    rng = np.random.default_rng(seed)
    write_tokens(os.path.join(data, "shard_train_000.bin"), rng.integers(0, VOCAB, 4000))
    val = rng.integers(0, VOCAB, 2 * SEQ + 1).tolist()
    write_tokens(os.path.join(data, "shard_val_000.bin"), val)
    return data, [val[0:SEQ + 1], val[SEQ:2 * SEQ + 1]]


def load_hf(out):
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    tensors, _ = read_safetensors(os.path.join(out, "model.safetensors"))
    weights = {}
    for name, (dtype, shape, data) in tensors.items():
        assert dtype == "F32", dtype
        weights[name] = np.frombuffer(data, dtype="<f4").reshape(shape).copy()
    return config, weights


class TrainedRun(unittest.TestCase):
    """A run of MODEL_ARGS trained 5 steps on held_out_data(SEED) and saved at its end."""
    MODEL_ARGS, SEED = [], 0

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        data, cls.windows = held_out_data(cls.tmp.name, cls.SEED)
        cls.run_dir = os.path.join(cls.tmp.name, "run")
        subprocess.run([STRATA, "train"] + cls.MODEL_ARGS +
                       ["--seq", str(SEQ), "--max-seq", "32", "--vocab", str(VOCAB), "--data", data,
                        "--batch", "4", "--steps", "5", "--lr", "3e-3", "--ckpt-every", "5", "--eval-every", "0",
                        "--eval-batches", "1", "--sample-tokens", "0", "--run-dir", cls.run_dir],
                       check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def export_cli(self, name):
        """`strata ckpt export RUN --hf DIR`; returns DIR and its stdout."""
        out = os.path.join(self.tmp.name, name)
        r = subprocess.run([STRATA, "ckpt", "export", self.run_dir, "--hf", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out, r.stdout


class HuggingFaceGPT2(TrainedRun):
    MODEL_ARGS, SEED = ["--layers", str(LAYERS), "--dim", str(DIM), "--heads", str(HEADS)], 7

    def test_cli_export_loads_by_hf_names_and_gives_strata_loss(self):
        out, _ = self.export_cli("hf-cli")
        config, weights = load_hf(out)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors"])
        for key, want in (("model_type", "gpt2"), ("architectures", ["GPT2LMHeadModel"]), ("n_embd", DIM),
                          ("n_layer", LAYERS), ("n_head", HEADS), ("n_positions", 32), ("n_ctx", 32),
                          ("vocab_size", VOCAB), ("layer_norm_epsilon", 1e-5), ("activation_function", "gelu_new"),
                          ("tie_word_embeddings", True), ("torch_dtype", "float32")):
            self.assertEqual(config[key], want, key)
        names = {"transformer.wte.weight": (VOCAB, DIM), "transformer.wpe.weight": (32, DIM),
                 "transformer.ln_f.weight": (DIM,), "transformer.ln_f.bias": (DIM,)}
        for i in range(LAYERS):
            p = f"transformer.h.{i}."
            names.update({p + "ln_1.weight": (DIM,), p + "ln_1.bias": (DIM,), p + "ln_2.weight": (DIM,),
                          p + "ln_2.bias": (DIM,), p + "attn.c_attn.weight": (DIM, 3 * DIM),
                          p + "attn.c_attn.bias": (3 * DIM,), p + "attn.c_proj.weight": (DIM, DIM),
                          p + "attn.c_proj.bias": (DIM,), p + "mlp.c_fc.weight": (DIM, 4 * DIM),
                          p + "mlp.c_fc.bias": (4 * DIM,), p + "mlp.c_proj.weight": (4 * DIM, DIM),
                          p + "mlp.c_proj.bias": (DIM,)})
        self.assertEqual({k: v.shape for k, v in weights.items()}, names)
        # Conv1D is strata's [out, in] transposed; wte is strata's without the padding rows.
        np.testing.assert_array_equal(weights["transformer.h.1.mlp.c_fc.weight"],
                                      strata.ckpt.read(self.run_dir, "h.1.mlp.c_fc.weight").T)
        np.testing.assert_array_equal(weights["transformer.wte.weight"], strata.ckpt.read(self.run_dir, "wte")[:VOCAB])

        summary = strata.run(self.run_dir).summary
        self.assertEqual(summary["eval_sequences"], 2)
        ours = gpt2_loss(weights, config, self.windows)
        self.assertLess(abs(ours - summary["eval_loss"]), 1e-5, (ours, summary["eval_loss"]))
        print(f"held-out loss: strata {summary['eval_loss']:.9f}, GPT-2 from the export {ours:.9f}")
        # Not a coincidence of untrained weights: the loss moved off ln(vocab).
        self.assertGreater(abs(ours - math.log(VOCAB)), 1e-3)

    def test_python_export_equals_cli_and_replaces_an_earlier_one(self):
        cli = os.path.join(self.tmp.name, "hf-cli2")
        subprocess.run([STRATA, "ckpt", "export", self.run_dir, "--hf", cli], check=True, capture_output=True)
        out = os.path.join(self.tmp.name, "hf-py")
        for _ in range(2):  # the second replaces the first
            r = strata.ckpt.export_hf(self.run_dir, out)
        self.assertEqual((r["tensors"], r["state"]), (4 + 12 * LAYERS, "params"))
        for f in ("config.json", "model.safetensors"):
            with open(os.path.join(cli, f), "rb") as a, open(os.path.join(out, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)
        strata.ckpt.export_hf(self.run_dir, os.path.join(self.tmp.name, "hf-bf16"), dtype="bfloat16")
        with open(os.path.join(self.tmp.name, "hf-bf16", "config.json")) as f:
            self.assertEqual(json.load(f)["torch_dtype"], "bfloat16")
        tensors, _ = read_safetensors(os.path.join(self.tmp.name, "hf-bf16", "model.safetensors"))
        self.assertEqual({d for d, _, _ in tensors.values()}, {"BF16"})

    def test_refusals_touch_nothing(self):
        other = os.path.join(self.tmp.name, "busy")
        os.makedirs(other)
        with open(os.path.join(other, "notes.txt"), "w") as f:
            f.write("mine")
        with self.assertRaisesRegex(ValueError, "out_dir .*busy: holds 'notes.txt'"):
            strata.ckpt.export_hf(self.run_dir, other)
        self.assertEqual(os.listdir(other), ["notes.txt"])
        r = subprocess.run([STRATA, "ckpt", "export", self.run_dir, "--hf", other], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("--hf", r.stderr)
        # A mixture of experts has no GPT-2 form.
        moe = os.path.join(self.tmp.name, "moe")
        subprocess.run([STRATA, "train", "--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16", "--vocab", "256",
                        "--data", "synthetic", "--batch", "8", "--steps", "1", "--ckpt-every", "1", "--experts", "2",
                        "--sample-tokens", "0", "--eval-batches", "1", "--run-dir", moe], check=True, capture_output=True)
        dest = os.path.join(self.tmp.name, "moe-hf")
        with self.assertRaisesRegex(ValueError, "MoE blocks .*no mixture-of-experts"):
            strata.ckpt.export_hf(moe, dest)
        r = subprocess.run([STRATA, "ckpt", "export", moe, "--hf", dest], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("MoE blocks", r.stderr)
        self.assertFalse(os.path.exists(dest))
        self.assertEqual([f for f in os.listdir(self.tmp.name) if f.startswith("moe-hf.tmp-export")], [])


class HuggingFaceLlama(TrainedRun):
    """The LlamaForCausalLM export, read by tools/parity/llama_reference.py (a PyTorch Llama
    written from the published architecture) with the shapes of the exported config.json: the
    held-out loss strata's final eval reported, within 1e-5, for a run of grouped-query heads
    trained on 2 tensor-parallel ranks."""
    MODEL_ARGS = ["--arch", "llama", "--layers", "2", "--dim", "32", "--heads", "4", "--kv-heads", "2", "--ffn",
                  "48", "--rope-theta", "500000", "--nproc", "2", "--tp", "2"]
    SEED = 11

    def test_export_gives_strata_loss_in_the_reference_llama(self):
        out, stdout = self.export_cli("hf")
        self.assertIn("LlamaForCausalLM", stdout)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        for key, want in (("model_type", "llama"), ("architectures", ["LlamaForCausalLM"]), ("hidden_size", 32),
                          ("num_hidden_layers", 2), ("num_attention_heads", 4), ("num_key_value_heads", 2),
                          ("intermediate_size", 48), ("vocab_size", VOCAB), ("max_position_embeddings", 32),
                          ("rope_theta", 500000.0), ("rms_norm_eps", 1e-5), ("tie_word_embeddings", False),
                          ("hidden_act", "silu"), ("rope_scaling", None), ("torch_dtype", "float32")):
            self.assertEqual(config[key], want, key)
        weights = read_llama(os.path.join(out, "model.safetensors"))
        self.assertEqual(weights["model.embed_tokens.weight"].shape, (VOCAB, 32))
        self.assertEqual(weights["lm_head.weight"].shape, (VOCAB, 32))
        self.assertEqual(weights["model.layers.1.self_attn.k_proj.weight"].shape, (16, 32))
        cfg = {"dim": config["hidden_size"], "layers": config["num_hidden_layers"],
               "heads": config["num_attention_heads"], "kv_heads": config["num_key_value_heads"],
               "rms_eps": config["rms_norm_eps"], "rope_theta": config["rope_theta"],
               "tie_embeddings": config["tie_word_embeddings"]}
        params = {k: v.double() for k, v in weights.items()}
        x, y = windows_xy(self.windows)
        logits = llama_forward(params, cfg, x)
        ours = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()
        summary = strata.run(self.run_dir).summary
        self.assertEqual(summary["eval_sequences"], 2)
        self.assertLess(abs(ours - summary["eval_loss"]), 1e-5, (ours, summary["eval_loss"]))
        print(f"held-out loss: strata {summary['eval_loss']:.9f}, reference Llama from the export {ours:.9f}")
        self.assertGreater(abs(ours - math.log(VOCAB)), 1e-3)


if __name__ == "__main__":
    unittest.main()
