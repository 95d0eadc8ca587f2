#!/usr/bin/python3
"""Golden safetensors files for tests/io/safetensors_test.cpp.

Run with Debian's interpreter (numpy only; there is no safetensors package):
    /usr/bin/python3 tests/reference/make_safetensors_golden.py
The bytes are written by hand from the format's definition (8-byte
little-endian header length N, N bytes of JSON header, data section), so the
files do not depend on kappa's writer. Output, under tests/data/io/:

  safetensors/golden.safetensors   one file, header padded to 8 bytes, tensors
                                   ordered by element size (as Hugging Face
                                   writes them), so every tensor is aligned:
      f32     F32  [3, 4]  0, -0, 1, -2.5, max, min normal, min subnormal,
                           inf, -inf, nan, 1/3, -1e-3
      f64     F64  [2, 4]  0, -0, 1, max, min normal, min subnormal, inf, nan
      f16     F16  [3, 5]  bit patterns: +-0, smallest and largest
                           subnormal, smallest normal, 1, -2, max 65504,
                           +-inf, quiet NaN, NaN with payload, 1/3, 2^-14 +
                           one ulp, -65504
      bf16    BF16 [2, 5]  bit patterns: +-0, smallest subnormal, smallest
                           normal, 1, -2, max, +-inf, NaN
      vector  F32  [5]     read as 1 x 5
      scalar  F64  []      read as 1 x 1
      rank3   F32  [2, 3, 4]  read as 2 x 12
      empty   F32  [0, 3]  no bytes
      ids     I64  [4]     integers (not readable as float)
      mask    BOOL [3]
      __metadata__ {"format": "pt", "source": "kappa golden"}
    and expected_<name>.npy: the float64 value of every element of the float
    tensors, decoded by numpy (float16) or by the bf16 definition (the high
    16 bits of a float32).
  safetensors/unaligned.safetensors  one F32 [2, 3] tensor behind an unpadded
                                   57-byte header: the data starts at byte 65.
  safetensors_single/model.safetensors   a model directory with one file.
  safetensors_sharded/               a model directory with two shards and
                                   model.safetensors.index.json. Values of
                                   tensor t are 0.25 * i - 1 (i = 0, 1, ...),
                                   exact in every dtype used.
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "io")

BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "BOOL": 1}


def safetensors_bytes(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes) in data order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, raw in tensors:
        count = int(np.prod(shape)) if shape else 1
        assert len(raw) == count * BYTES[dtype], name
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, _, raw in tensors)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def bf16_value(bits):
    return np.array([b << 16 for b in bits], dtype="<u4").view("<f4").astype(np.float64)


def main():
    out = os.path.join(ROOT, "safetensors")
    f32 = np.array([0.0, -0.0, 1.0, -2.5, np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                    np.float32(2.0) ** -149, np.inf, -np.inf, np.nan, np.float32(1) / np.float32(3),
                    -1e-3], dtype="<f4").reshape(3, 4)
    f64 = np.array([0.0, -0.0, 1.0, np.finfo(np.float64).max, np.finfo(np.float64).tiny,
                    5e-324, np.inf, np.nan], dtype="<f8").reshape(2, 4)
    f16_bits = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0xC000, 0x7BFF, 0x7C00,
                         0xFC00, 0x7E00, 0x7D55, 0x3555, 0x0401, 0xFBFF], dtype="<u2").reshape(3, 5)
    bf16_bits = np.array([0x0000, 0x8000, 0x0001, 0x0080, 0x3F80, 0xC000, 0x7F7F, 0x7F80, 0xFF80,
                          0x7FC0], dtype="<u2").reshape(2, 5)
    vector = np.array([1.5, -0.5, 0.25, 8.0, -16.0], dtype="<f4")
    scalar = np.array(3.141592653589793, dtype="<f8")
    rank3 = (np.arange(24, dtype="<f4") * 0.5 - 3).reshape(2, 3, 4)
    ids = np.array([0, -1, 2**40, -(2**62)], dtype="<i8")
    mask = np.array([1, 0, 1], dtype="u1")

    tensors = [  # ordered by element size, as Hugging Face writes them
        ("f64", "F64", [2, 4], f64.tobytes()),
        ("ids", "I64", [4], ids.tobytes()),
        ("scalar", "F64", [], scalar.tobytes()),
        ("empty", "F32", [0, 3], b""),
        ("f32", "F32", [3, 4], f32.tobytes()),
        ("rank3", "F32", [2, 3, 4], rank3.tobytes()),
        ("vector", "F32", [5], vector.tobytes()),
        ("bf16", "BF16", [2, 5], bf16_bits.tobytes()),
        ("f16", "F16", [3, 5], f16_bits.tobytes()),
        ("mask", "BOOL", [3], mask.tobytes()),
    ]
    write(os.path.join(out, "golden.safetensors"),
          safetensors_bytes(tensors, {"format": "pt", "source": "kappa golden"}))
    expected = {
        "f32": f32.astype(np.float64),
        "f64": f64,
        "f16": f16_bits.view("<f2").astype(np.float64),
        "bf16": bf16_value(bf16_bits.ravel()).reshape(2, 5),
        "vector": vector.astype(np.float64).reshape(1, 5),
        "scalar": scalar.reshape(1, 1),
        "rank3": rank3.astype(np.float64).reshape(2, 12),
    }
    for name, a in expected.items():
        np.save(os.path.join(out, "expected_" + name + ".npy"), np.ascontiguousarray(a))

    # Unaligned: a 57-byte header, so the F32 data begins at byte 65.
    raw = np.arange(6, dtype="<f4").tobytes()
    text = b'{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}'
    assert (8 + len(text)) % 4 != 0
    write(os.path.join(out, "unaligned.safetensors"), struct.pack("<Q", len(text)) + text + raw)

    def ramp(n, dtype):
        v = np.arange(n, dtype=np.float64) * 0.25 - 1
        if dtype == "F32":
            return v.astype("<f4").tobytes()
        if dtype == "F16":
            return v.astype("<f2").tobytes()
        if dtype == "BF16":
            return (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        return v.astype("<f8").tobytes()

    # A single-file model directory.
    single = [("model.embed_tokens.weight", "F32", [6, 4], ramp(24, "F32")),
              ("model.norm.weight", "F32", [4], ramp(4, "F32"))]
    write(os.path.join(ROOT, "safetensors_single", "model.safetensors"),
          safetensors_bytes(single, {"format": "pt"}))

    # A sharded model directory: two shards and the index.
    shard1 = [("model.embed_tokens.weight", "F32", [6, 4], ramp(24, "F32")),
              ("model.layers.0.mlp.up_proj.weight", "BF16", [8, 4], ramp(32, "BF16"))]
    shard2 = [("lm_head.weight", "F32", [6, 4], ramp(24, "F32")),
              ("model.layers.1.mlp.up_proj.weight", "F16", [8, 4], ramp(32, "F16")),
              ("model.unlisted", "F32", [2], ramp(2, "F32"))]  # not in the index
    sharded = os.path.join(ROOT, "safetensors_sharded")
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    write(os.path.join(sharded, names[0]), safetensors_bytes(shard1, {"format": "pt"}))
    write(os.path.join(sharded, names[1]), safetensors_bytes(shard2, {"format": "pt"}))
    weight_map = {t[0]: names[0] for t in shard1}
    weight_map.update({t[0]: names[1] for t in shard2 if t[0] != "model.unlisted"})
    index = {"metadata": {"total_size": 24 * 4 + 32 * 2 + 24 * 4 + 32 * 2}, "weight_map": weight_map}
    write(os.path.join(sharded, "model.safetensors.index.json"),
          (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())


if __name__ == "__main__":
    main()
