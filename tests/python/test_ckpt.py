"""strata.ckpt over real checkpoints of the built binary, one per layout: every tensor read
equals what `strata ckpt export --safetensors` writes for it, byte for byte; reads cost the
tensor's bytes; the listing equals `strata ckpt ls`; bad input raises and touches nothing.
Run by ctest with PYTHONPATH=<build>/python and STRATA=<build>/strata."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import strata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt"))
from check_safetensors import read_raw as read_safetensors  # noqa: E402 (the format's own reader)

STRATA = os.environ["STRATA"]
TINY = ["--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16", "--vocab", "256", "--data", "synthetic",
        "--batch", "8", "--steps", "2", "--ckpt-every", "2", "--sample-tokens", "0", "--eval-batches", "1"]
# name -> extra train flags, and the layout `strata ckpt ls` must report (world, tp, dp, pp, ep, zero, precision).
LAYOUTS = {
    "one": ([], (1, 1, 1, 1, 1, 0, "fp32")),
    "dp2_zero1": (["--nproc", "2", "--zero", "1"], (2, 1, 2, 1, 1, 1, "fp32")),
    "zero3": (["--nproc", "2", "--zero", "3"], (2, 1, 2, 1, 1, 3, "fp32")),
    "tp2": (["--nproc", "2", "--tp", "2"], (2, 2, 1, 1, 1, 0, "fp32")),
    "pp2": (["--nproc", "2", "--pp", "2"], (2, 1, 1, 2, 1, 0, "fp32")),
    "ep2": (["--nproc", "2", "--experts", "2", "--ep", "2"], (2, 1, 2, 1, 2, 0, "fp32")),
    "bf16": (["--nproc", "2", "--zero", "1", "--precision", "bf16"], (2, 1, 2, 1, 1, 1, "bf16")),
}


def strata_cli(*args, check=True):
    return subprocess.run([STRATA, *args], check=check, capture_output=True, text=True)


def tree_digest(root):
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            p = os.path.join(d, f)
            h.update(p.encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


class Layouts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = {}
        for name, (flags, _) in LAYOUTS.items():
            out = os.path.join(cls.tmp.name, name)
            strata_cli("train", *TINY, *flags, "--run-dir", out)
            cls.runs[name] = out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def exported(self, run, dtype=None):
        path = os.path.join(self.tmp.name, f"{os.path.basename(run)}-{dtype}.safetensors")
        strata_cli("ckpt", "export", run, "--safetensors", path, *(["--dtype", dtype] if dtype else []))
        return read_safetensors(path)

    def test_every_tensor_equals_the_export(self):
        for name, run in self.runs.items():
            with self.subTest(layout=name):
                ref, meta = self.exported(run)
                c = strata.ckpt.Checkpoint(run)
                table = c.tensors()
                self.assertEqual(set(table), set(ref))
                if name == "ep2":
                    self.assertIn("h.0.mlp.experts.1.c_fc.weight", table)
                for tensor, (dtype, shape, data) in ref.items():
                    a = c.read(tensor)
                    self.assertEqual(a.shape, shape, tensor)
                    self.assertEqual(table[tensor]["shape"], shape)
                    self.assertEqual(dtype, "F32")
                    self.assertEqual(a.tobytes(), data, f"{name}: {tensor}")
                self.assertEqual(meta["state"], c._c.model_state())

    def test_bf16_reads_equal_the_bf16_export(self):
        for name in ("bf16", "tp2", "zero3"):
            with self.subTest(layout=name):
                ref, _ = self.exported(self.runs[name], "BF16")
                for tensor, (dtype, shape, data) in ref.items():
                    self.assertEqual(dtype, "BF16")
                    raw = strata.ckpt.read(self.runs[name], tensor, dtype="bfloat16")
                    self.assertEqual(raw.dtype, np.uint16)
                    self.assertEqual(raw.tobytes(), data, tensor)
                t = strata.ckpt.read_torch(self.runs[name], "h.1.mlp.c_fc.weight", dtype="bfloat16")
                import torch
                self.assertEqual(t.dtype, torch.bfloat16)
                self.assertEqual(t.view(torch.int16).numpy().tobytes(), ref["h.1.mlp.c_fc.weight"][2])

    def test_a_read_costs_the_tensors_bytes(self):
        for name in ("zero3", "tp2", "pp2"):
            with self.subTest(layout=name):
                c = strata.ckpt.Checkpoint(self.runs[name])
                a = c.read("h.1.attn.c_attn.weight")
                self.assertEqual(c.bytes_read, a.nbytes)
                b = c.read("ln_f.bias")
                self.assertEqual(c.bytes_read, a.nbytes + b.nbytes)

    def test_optimizer_moments(self):
        for name in ("one", "zero3", "tp2"):
            with self.subTest(layout=name):
                c = strata.ckpt.Checkpoint(self.runs[name])
                self.assertEqual(set(c.states()), {"params", "exp_avg", "exp_avg_sq"})
                w = c.read("h.0.mlp.c_fc.weight")
                m = c.read("h.0.mlp.c_fc.weight", kind="exp_avg")
                v = c.read("h.0.mlp.c_fc.weight", kind="exp_avg_sq")
                self.assertEqual(m.shape, w.shape)
                self.assertTrue((v >= 0).all() and (v > 0).any())
                self.assertTrue(np.abs(m).max() > 0)
                self.assertFalse(np.array_equal(m, w))
        # The moments of one tensor agree across layouts up to the reductions' order: the
        # same two steps on the same data.
        one = strata.ckpt.read(self.runs["one"], "h.0.mlp.c_fc.weight", kind="exp_avg_sq")
        tp2 = strata.ckpt.read(self.runs["tp2"], "h.0.mlp.c_fc.weight", kind="exp_avg_sq")
        np.testing.assert_allclose(tp2, one, rtol=1e-3, atol=1e-12)

    def test_list_equals_ckpt_ls(self):
        for name, run in self.runs.items():
            with self.subTest(layout=name):
                (entry,) = strata.ckpt.list(run)
                world, tp, dp, pp, ep, zero, precision = LAYOUTS[name][1]
                self.assertEqual((entry["world"], entry["tp"], entry["dp"], entry["pp"], entry["ep"], entry["zero"],
                                  entry["precision"]), (world, tp, dp, pp, ep, zero, precision))
                self.assertEqual((entry["step"], entry["status"], entry["latest"], entry["cp"]), (2, "ok", True, 1))
                row = strata_cli("ckpt", "ls", run).stdout.splitlines()[2].split()
                # STEP DIR SIZE(2 words) SHARDS WORLD TP DP PP CP EP ZERO PREC FMT STATUS
                self.assertEqual(row[0], str(entry["step"]))
                self.assertEqual(row[1], entry["name"])
                self.assertEqual([int(x) for x in row[4:12]], [entry["shards"], entry["world"], entry["tp"], entry["dp"],
                                                              entry["pp"], entry["cp"], entry["ep"], entry["zero"]])
                self.assertEqual(row[12], entry["precision"])
                self.assertEqual(entry["bytes"], sum(os.path.getsize(os.path.join(entry["dir"], f))
                                                     for f in os.listdir(entry["dir"])))
                # The run, its ckpt/ and the step directory name the same checkpoint.
                self.assertEqual(strata.ckpt.list(os.path.join(run, "ckpt"))[0]["dir"], entry["dir"])
                self.assertEqual(strata.ckpt.list(entry["dir"])[0]["step"], 2)


class BadInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.run_dir = os.path.join(cls.tmp.name, "run")
        strata_cli("train", *TINY, "--nproc", "2", "--zero", "1", "--run-dir", cls.run_dir)
        cls.step = os.path.join(cls.run_dir, "ckpt", "step-000002")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def damaged_copy(self, how):
        d = os.path.join(self.tmp.name, how)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.step, d)
        shard = os.path.join(d, sorted(f for f in os.listdir(d) if f.startswith("shard-"))[-1])
        if how == "truncated":
            os.truncate(shard, os.path.getsize(shard) // 2)
        elif how == "flipped":  # a byte of the last 'params' piece of that shard
            with open(os.path.join(d, "manifest.json")) as f:
                entry = [s for s in json.load(f)["shards"] if s["file"] == os.path.basename(shard)][0]
            piece = [p for p in entry["pieces"] if p["state"] == "params"][-1]
            with open(shard, "r+b") as f:
                f.seek(piece["offset"] + piece["bytes"] // 2)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 0x40]))
        elif how == "missing":
            os.remove(shard)
        return d, os.path.basename(shard)

    def test_not_a_checkpoint(self):
        with self.assertRaisesRegex(FileNotFoundError, "no such file or directory"):
            strata.ckpt.read(os.path.join(self.tmp.name, "nope"), "wte")
        empty = os.path.join(self.tmp.name, "empty")
        os.makedirs(empty, exist_ok=True)
        for call in (strata.ckpt.list, strata.ckpt.tensors, lambda p: strata.ckpt.read(p, "wte")):
            with self.assertRaisesRegex(ValueError, "no checkpoints here"):
                call(empty)
        with self.assertRaisesRegex(ValueError, "manifest"):
            d = os.path.join(self.tmp.name, "step-000009")
            os.makedirs(d, exist_ok=True)
            strata.ckpt.tensors(d)

    def test_unknown_tensor_state_and_dtype(self):
        with self.assertRaisesRegex(ValueError, r"no tensor 'h\.7\.attn' \(it has 28: wte, wpe"):
            strata.ckpt.read(self.run_dir, "h.7.attn")
        with self.assertRaisesRegex(ValueError, "state 'momentum' was not saved .saved: params, exp_avg, exp_avg_sq"):
            strata.ckpt.read(self.run_dir, "wte", kind="momentum")
        with self.assertRaisesRegex(ValueError, "dtype 'int8'"):
            strata.ckpt.read(self.run_dir, "wte", dtype="int8")

    def test_damaged_shards_raise_and_nothing_is_touched(self):
        for how, pattern in (("truncated", "size|bytes|truncated"), ("flipped", "checksum"), ("missing", "missing|no such|cannot open|does not exist")):
            with self.subTest(damage=how):
                d, shard = self.damaged_copy(how)
                before = tree_digest(d)
                c = strata.ckpt.Checkpoint(d) if how == "flipped" else None
                with self.assertRaises(ValueError) as e:
                    for name in strata.ckpt.tensors(self.step):
                        (c or strata.ckpt.Checkpoint(d)).read(name)
                self.assertIn(shard, str(e.exception))
                self.assertRegex(str(e.exception), pattern)
                self.assertNotIn("\n", str(e.exception))
                self.assertEqual(tree_digest(d), before)
        self.assertEqual(strata.ckpt.list(self.run_dir)[0]["status"], "ok")


if __name__ == "__main__":
    unittest.main()
