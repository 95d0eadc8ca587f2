#!/usr/bin/env python3
"""Goldens of torch.nn.MultiheadAttention for the Python bindings' tests.

Writes tests/data/python/torch_mha.npz: random weights, biases and inputs
(float64) and PyTorch's outputs and averaged/per-head attention weights for
self-attention without a mask, with a causal mask, with key padding, and
cross-attention. python/tests/test_heads.py compares kappa with these
(and with live torch when it is importable), so the suite needs no torch.

Run with Debian's interpreter (python3-torch, numpy):
    /usr/bin/python3 tests/reference/make_python_goldens.py
Deterministic (seeded numpy draws; torch only computes, in float64).
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "python", "torch_mha.npz")


def torch_mha(w, x_q, x_kv, attn_mask=None, key_padding_mask=None):
    e, h = w["embed_dim"], w["num_heads"]
    mha = torch.nn.MultiheadAttention(e, h, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(w["in_proj_weight"]))
        mha.in_proj_bias.copy_(torch.from_numpy(w["in_proj_bias"]))
        mha.out_proj.weight.copy_(torch.from_numpy(w["out_proj_weight"]))
        mha.out_proj.bias.copy_(torch.from_numpy(w["out_proj_bias"]))
        y, a = mha(torch.from_numpy(x_q)[None], torch.from_numpy(x_kv)[None],
                   torch.from_numpy(x_kv)[None],
                   attn_mask=None if attn_mask is None else torch.from_numpy(attn_mask),
                   key_padding_mask=None if key_padding_mask is None
                   else torch.from_numpy(key_padding_mask)[None],
                   need_weights=True, average_attn_weights=False)
    return y[0].numpy(), a[0].numpy()


def make(seed=30):
    rng = np.random.default_rng(seed)
    e, h, n, n_kv, pad = 16, 4, 7, 5, 3
    w = {
        "embed_dim": e,
        "num_heads": h,
        "in_proj_weight": rng.standard_normal((3 * e, e)) / np.sqrt(e),
        "in_proj_bias": 0.1 * rng.standard_normal(3 * e),
        "out_proj_weight": rng.standard_normal((e, e)) / np.sqrt(e),
        "out_proj_bias": 0.1 * rng.standard_normal(e),
    }
    x = rng.standard_normal((n, e))
    x_kv = rng.standard_normal((n_kv, e))
    causal = np.triu(np.ones((n, n), dtype=bool), 1)  # True = not allowed (torch)
    padding = np.arange(n) >= pad                      # keys pad.. are padding
    out = dict(w)
    out["x"], out["x_kv"], out["pad"] = x, x_kv, np.int64(pad)
    out["y_none"], out["a_none"] = torch_mha(w, x, x)
    out["y_causal"], out["a_causal"] = torch_mha(w, x, x, attn_mask=causal)
    out["y_padding"], out["a_padding"] = torch_mha(w, x, x, key_padding_mask=padding)
    out["y_cross"], out["a_cross"] = torch_mha(w, x, x_kv)
    return out


def main():
    torch.set_num_threads(1)
    out = make()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    np.savez(OUT, **{k: np.asarray(v) for k, v in out.items()})
    print("wrote", os.path.relpath(OUT), f"({os.path.getsize(OUT)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
