#!/usr/bin/env python3
"""Loads a safetensors file written by `strata ckpt export` with the Hugging Face
`safetensors` package when installed, else with a reader written here from the format's
definition on top of torch (or numpy). Prints each tensor's name, dtype, shape and sum, and
exits non-zero if the file does not load. Not run by ctest (it needs Python packages):

    /usr/bin/python3 tests/ckpt/check_safetensors.py model.safetensors
"""
import json
import struct
import sys


def read_raw(path):
    """{name: (dtype, shape, bytes)} and the metadata, by the format's definition: an 8-byte
    little-endian header length, the JSON header, then each tensor's bytes at its
    data_offsets (relative to the end of the header)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    return {name: (e["dtype"], tuple(e["shape"]), data[e["data_offsets"][0]:e["data_offsets"][1]])
            for name, e in header.items()}, meta


def load_plain(path):
    raw, meta = read_raw(path)
    out = {}
    try:
        import torch
        dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
        for name, (dtype, shape, data) in raw.items():
            out[name] = torch.frombuffer(bytearray(data), dtype=dtypes[dtype]).reshape(shape).float()
    except ImportError:
        import numpy as np
        for name, (dtype, shape, data) in raw.items():
            if dtype == "F32":
                a = np.frombuffer(data, dtype="<f4")
            else:  # BF16: the high half of an fp32
                a = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            out[name] = a.reshape(shape)
    return out, meta


def main():
    path = sys.argv[1]
    try:
        from safetensors.torch import load_file
        tensors, meta, how = load_file(path), {}, "safetensors package"
    except ImportError:
        tensors, meta, how = *load_plain(path), "plain reader"
    print(f"{path}: {len(tensors)} tensors via {how} {meta}")
    for name, t in tensors.items():
        print(f"  {name:36s} {str(tuple(t.shape)):18s} sum={float(t.sum()):.6g}")


if __name__ == "__main__":
    main()
