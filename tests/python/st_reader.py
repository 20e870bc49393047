"""A safetensors reader for the tests, written from the format's definition: an 8-byte
little-endian header length, the JSON header, then the tensors' bytes at their data_offsets.
Returns {name: (dtype, shape, bytes)} and the metadata."""
import json
import struct


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[begin:end])
    return out, meta
