"""strata.ckpt: a run's checkpoints from Python, of any layout, read offline.

    strata.ckpt.list("runs/demo")                  # what `strata ckpt ls` shows, as dicts
    strata.ckpt.tensors("runs/demo")               # {name: {"shape": (..), "dtype": ..}}
    w = strata.ckpt.read("runs/demo", "h.0.attn.c_attn.weight")   # the global tensor
    m = strata.ckpt.read(step_dir, "wte", kind="exp_avg")         # an optimizer moment
    strata.ckpt.export_hf("runs/demo", "gpt2-hf")  # GPT2LMHeadModel.from_pretrained("gpt2-hf")

A path is a run directory, its ckpt/ directory or one step-* directory; a run or ckpt
directory means its newest committed checkpoint (also one newer than the step `latest`
names, as `train --resume auto` takes it).
Tensors are the model's global tensors, whatever layout saved them (tensor-parallel slices,
ZeRO 1-3 flat shards, pipeline stages, expert-parallel experts): a read opens only the
shards that hold the tensor and reads only its byte ranges, verifying the checksummed blocks
they touch. Bad input raises FileNotFoundError (no such path) or ValueError (not a
checkpoint, no such tensor or state, a damaged or missing shard), naming the problem.
"""
import os

import numpy as np

from . import _strata

_DTYPES = {None: "", "float32": "f32", "f32": "f32", "bfloat16": "bf16", "bf16": "bf16"}
_NAMES = {"f32": "float32", "bf16": "bfloat16"}


def _path(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    return path


def _dtype_key(dtype):
    if dtype is np.float32 or dtype == np.dtype(np.float32):
        return "f32"
    try:
        return _DTYPES[str(dtype) if dtype is not None else None]
    except KeyError:
        raise ValueError(f"dtype {dtype!r}: expected float32 or bfloat16") from None


def listing(path):
    """The whole listing: {root, latest, latest_error, checkpoints, incomplete}."""
    return _strata.ckpt_list(_path(path))


def list(path):  # noqa: A001 (the name the CLI uses: `strata ckpt ls`)
    """The checkpoints `path` names, newest first, as dicts: step, dir, name, bytes, shards,
    world, tp, dp, pp, cp, ep, zero, precision, version, status ("ok" or "damaged"),
    problem (why damaged, else None), latest (whether `latest` names it)."""
    return listing(path)["checkpoints"]


class Checkpoint:
    """One checkpoint opened once (its manifest parsed once, its shard files kept open), for
    several reads. Not for concurrent use: one per thread."""

    def __init__(self, path):
        self._c = _strata.Checkpoint(_path(path))

    @property
    def dir(self):
        return self._c.dir

    @property
    def step(self):
        return self._c.step

    @property
    def bytes_read(self):
        """Bytes read from shard files so far (the tensors' bytes, in the saved dtype)."""
        return self._c.bytes_read

    def states(self):
        """{state: dtype} of what was saved: params (or master), exp_avg, exp_avg_sq."""
        return {name: _NAMES.get(d, d) for name, d in self._c.states()}

    def tensors(self, kind=None):
        """{name: {"shape": tuple, "dtype": the state's saved dtype}} in table order."""
        states = self.states()
        kind = kind or self._c.model_state()
        if kind not in states:
            raise ValueError(f"{self.dir}: state '{kind}' was not saved (saved: {', '.join(states)})")
        return {name: {"shape": shape, "dtype": states[kind]} for name, shape in self._c.tensors()}

    def read(self, name, dtype=None, kind=None, as_torch=False):
        """The global tensor `name` of state `kind` (default: the model's weights, the fp32
        master copy when saved, else params) as a NumPy array, or a torch tensor with
        as_torch=True. dtype None keeps the saved one; float32 or bfloat16 converts. NumPy has
        no bfloat16: a bf16 result is float32 (exact) unless dtype="bfloat16" is asked for,
        which returns the raw bit patterns as uint16; torch gets torch.bfloat16."""
        key = _dtype_key(dtype)
        if not key and not as_torch:  # NumPy has no bfloat16: a bf16 state is read widened
            key = "f32"
        raw = self._c.read(name, kind or "", key)
        if as_torch:
            import torch

            if raw.dtype == np.uint16:  # torch reads no uint16 array; the bits are the same
                return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
            return torch.from_numpy(raw)
        return raw


def tensors(path, kind=None):
    return Checkpoint(path).tensors(kind)


def read(path, name, dtype=None, kind=None, as_torch=False):
    return Checkpoint(path).read(name, dtype=dtype, kind=kind, as_torch=as_torch)


def read_torch(path, name, dtype=None, kind=None):
    return read(path, name, dtype=dtype, kind=kind, as_torch=True)


def export_hf(path, out_dir, dtype=None):
    """Writes a Hugging Face directory (config.json, model.safetensors) that
    transformers' GPT2LMHeadModel or LlamaForCausalLM (as the checkpoint's architecture)
    .from_pretrained(out_dir) loads; the twin of `strata ckpt export --hf DIR`. MoE checkpoints
    have no such equivalent (ValueError). Returns {source_dir, state, arch, tensors, bytes,
    out_dir}."""
    key = _dtype_key(dtype)
    return _strata.ckpt_export_hf(_path(path), os.fspath(out_dir), key.upper())


__all__ = ["list", "listing", "tensors", "read", "read_torch", "export_hf", "Checkpoint"]
