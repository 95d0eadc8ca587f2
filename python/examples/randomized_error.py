#!/usr/bin/env python3
"""Randomized approximations of softmax attention: relative error of Y against
the cost of a call, for each method as its size m grows (kappa.compare_to_exact:
the approximation and the exact attention timed in the same process).

The inputs are the real queries, keys and values of layer 1, head 0 of the
small trained GPT-2 in tests/data/models/gpt2-trained (its hidden state through
the layer's own projections would need the typed API; here the head's Q, K, V
are taken from kappa.Model.inspect's hidden states and the checkpoint's
c_attn weights), or, with --seeded, Gaussian inputs.

    python3 python/examples/randomized_error.py out.png [--seeded] [--n 512]
"""
import argparse
import json
import os
import struct
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kappa  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "tests", "data", "models", "gpt2-trained")


def read_safetensors(path, names):
    """The named float tensors of a .safetensors file (F32 or F16), as float64."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            info = header[name]
            start, end = info["data_offsets"]
            f.seek(base + start)
            dt = {"F32": np.float32, "F16": np.float16, "F64": np.float64}[info["dtype"]]
            out[name] = np.frombuffer(f.read(end - start), dtype=dt).reshape(info["shape"]).astype(np.float64)
        return out


def model_inputs(n, layer=1, head=0):
    lm = kappa.Model.load(MODEL)
    tok = lm.tokenizer
    text = ("And I saw a new heaven and a new earth: for the first heaven and the first earth "
            "were passed away; and there was no more sea. ") * 40
    ids = tok.encode(text)[: min(n, lm.context_length or n)]
    hs = lm.inspect(ids, attentions=False)["hidden_states"][layer]  # X_layer (N, d)
    w = read_safetensors(os.path.join(MODEL, "model.safetensors"),
                         [f"h.{layer}.ln_1.weight", f"h.{layer}.ln_1.bias",
                          f"h.{layer}.attn.c_attn.weight", f"h.{layer}.attn.c_attn.bias"])
    x = hs.astype(np.float64)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    x = (x - mu) / np.sqrt(var + 1e-5) * w[f"h.{layer}.ln_1.weight"] + w[f"h.{layer}.ln_1.bias"]
    qkv = x @ w[f"h.{layer}.attn.c_attn.weight"] + w[f"h.{layer}.attn.c_attn.bias"]
    d = qkv.shape[1] // 3
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    dh = d // cfg["n_head"]
    cols = slice(head * dh, (head + 1) * dh)
    q, k, v = qkv[:, :d][:, cols], qkv[:, d:2 * d][:, cols], qkv[:, 2 * d:][:, cols]
    return [np.ascontiguousarray(m, dtype=np.float32) for m in (q, k, v)], f"gpt2-trained layer {layer} head {head}, N = {len(ids)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("png")
    ap.add_argument("--seeded", action="store_true", help="Gaussian inputs instead of the model's")
    ap.add_argument("--n", type=int, default=512)
    args = ap.parse_args()
    if args.seeded:
        rng = np.random.default_rng(1)
        (q, k, v), label = [rng.standard_normal((args.n, 64)).astype(np.float32) for _ in range(3)], f"Gaussian, N = {args.n}, d = 64"
    else:
        (q, k, v), label = model_inputs(args.n)
    n = q.shape[0]
    methods = {
        "nystrom": [m for m in (8, 16, 32, 64, 128, 256, n) if m <= n],
        "sampled": [16, 32, 64, 128, 256, 512],
        "sketch": [m for m in (8, 32, 128, n) if m <= n],
        "positive_random_features": [16, 64, 256, 512],
    }
    variants = {"sketch": "partition"}
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    exact_s = None
    print(f"{'method':>28} {'m':>5} {'error':>10} {'ms':>8} {'speedup':>8}")
    for method, sizes in methods.items():
        pts = []
        for m in sizes:
            r = kappa.compare_to_exact(q, k, v, method, m, seed=1, variant=variants.get(method, ""),
                                       runs=3, weights=False, memory=False)
            pts.append((r["approx_seconds"] * 1e3, r["output_error"]))
            exact_s = r["exact_seconds"]
            print(f"{method:>28} {m:>5} {r['output_error']:10.3g} {r['approx_seconds'] * 1e3:8.3f} {r['speedup']:8.2f}")
        t, e = zip(*pts)
        ax.loglog(t, e, "o-", label=method)
    ax.axvline(exact_s * 1e3, color="k", ls="--", label="exact attention")
    ax.set_xlabel("time per call (ms)")
    ax.set_ylabel("relative error of Y, ||Y~ - Y||_F / ||Y||_F")
    ax.set_title(f"Randomized attention: error against cost ({label})", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(args.png, dpi=120)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
