"""Multi-head / grouped-query attention against torch.nn.MultiheadAttention
(committed goldens from tests/reference/make_python_goldens.py, and live torch
when it is importable) and against plain numpy loops; the KV cache in every
storage format."""
import os

import numpy as np
import pytest

import kappa
from conftest import DATA, rel_err

GOLDEN = np.load(os.path.join(DATA, "python", "torch_mha.npz"))

try:  # live torch is an extra check, never a replacement for the goldens
    import torch
except ImportError:  # pragma: no cover - CI machines without torch
    torch = None


def torch_layer(dtype=np.float64):
    g = GOLDEN
    e, h = int(g["embed_dim"]), int(g["num_heads"])
    layer = kappa.MultiHeadAttention(e, h, dtype=dtype)
    layer.set_weights_from_torch_mha(g["in_proj_weight"], g["out_proj_weight"],
                                     g["in_proj_bias"], g["out_proj_bias"])
    return layer


CASES = [("none", None, {}), ("causal", "causal", {}), ("padding", "padding", {"lengths": None})]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case,mask,kw", CASES)
def test_mha_matches_torch_goldens(dtype, case, mask, kw):
    g = GOLDEN
    layer = torch_layer(dtype)
    x = g["x"].astype(dtype)
    if "lengths" in kw:
        kw = {"lengths": int(g["pad"])}
    y = layer.forward(x, mask, **kw)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert rel_err(y, g["y_" + case]) < tol
    w = layer.head_weights(x, mask=mask, **kw)
    assert w.shape == g["a_" + case].shape
    assert rel_err(w, g["a_" + case]) < tol


def test_mha_cross_matches_torch_goldens():
    g = GOLDEN
    layer = torch_layer()
    assert rel_err(layer.forward_cross(g["x"], g["x_kv"]), g["y_cross"]) < 1e-12
    assert rel_err(layer.head_weights(g["x"], g["x_kv"]), g["a_cross"]) < 1e-12


@pytest.mark.skipif(torch is None, reason="live torch not importable; the goldens above ran")
def test_mha_matches_live_torch():
    rng = np.random.default_rng(7)
    e, h, n = 24, 3, 10
    mha = torch.nn.MultiheadAttention(e, h, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * 0.3))
    x = rng.standard_normal((n, e))
    causal = np.triu(np.ones((n, n), bool), 1)
    with torch.no_grad():
        y_ref, a_ref = mha(*(torch.from_numpy(x)[None],) * 3, attn_mask=torch.from_numpy(causal),
                           average_attn_weights=False)
    layer = kappa.MultiHeadAttention(e, h, dtype="float64")
    layer.set_weights_from_torch_mha(mha.in_proj_weight.detach().numpy(),
                                     mha.out_proj.weight.detach().numpy(),
                                     mha.in_proj_bias.detach().numpy(),
                                     mha.out_proj.bias.detach().numpy())
    assert rel_err(layer.forward(x, "causal"), y_ref[0].numpy()) < 1e-12
    assert rel_err(layer.head_weights(x, mask="causal"), a_ref[0].numpy()) < 1e-12


def numpy_gqa(x, w_q, w_k, w_v, w_o, h, h_kv, d_head, causal):
    """Plain loops over heads and rows: head h uses kv head h // (H / H_kv)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    n = x.shape[0]
    heads = []
    for hh in range(h):
        g = hh // (h // h_kv)
        qh = q[:, hh * d_head:(hh + 1) * d_head]
        kh = k[:, g * d_head:(g + 1) * d_head]
        vh = v[:, g * d_head:(g + 1) * d_head]
        yh = np.zeros((n, d_head))
        for i in range(n):
            keys = range(i + 1) if causal else range(n)
            s = np.array([qh[i] @ kh[j] / np.sqrt(d_head) for j in keys])
            a = np.exp(s - s.max())
            for t, j in enumerate(keys):
                yh[i] += a[t] / a.sum() * vh[j]
        heads.append(yh)
    return np.hstack(heads) @ w_o


@pytest.mark.parametrize("h_kv", [4, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_matches_numpy_loops(h_kv, causal):
    rng = np.random.default_rng(h_kv)
    d, h, dh, n = 12, 4, 3, 6
    w_q, w_k, w_v = (rng.standard_normal((d, c)) for c in (h * dh, h_kv * dh, h_kv * dh))
    w_o = rng.standard_normal((h * dh, d))
    x = rng.standard_normal((n, d))
    layer = kappa.GroupedQueryAttention(d, h, d_head=dh, n_kv_heads=h_kv, dtype=np.float64)
    assert layer.n_kv_heads == h_kv
    layer.set_weights(w_q, w_k, w_v, w_o)
    np.testing.assert_array_equal(layer.w_k, w_k)
    y = layer.forward(x, "causal" if causal else None)
    assert rel_err(y, numpy_gqa(x, w_q, w_k, w_v, w_o, h, h_kv, dh, causal)) < 1e-12


BOUNDS = {"native": 1e-5, "bf16": 2e-2, "f16": 3e-3, "int8": 5e-2}


@pytest.mark.parametrize("fmt", ["native", "bf16", "f16", "int8"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kv_cache_decoding_equals_full_pass(fmt, dtype):
    rng = np.random.default_rng(11)
    d, n = 32, 9
    layer = kappa.MultiHeadAttention(d, 4, n_kv_heads=2, dtype=dtype)
    layer.init_random(5)
    x = rng.standard_normal((n, d)).astype(dtype)
    full = layer.forward(x, "causal")
    cache = layer.make_cache(fmt)
    assert cache.format == fmt and len(cache) == 0
    parts = [layer.forward_cached(x[:4], cache)]
    for i in range(4, n):
        parts.append(layer.forward_cached(x[i:i + 1], cache))
    y = np.vstack(parts)
    assert cache.length == n
    tol = BOUNDS[fmt] if fmt != "native" else (1e-5 if dtype == np.float32 else 1e-12)
    err = np.linalg.norm(y - full) / np.linalg.norm(full)
    assert err < tol, err
    if fmt == "native":
        assert err < 1e-5
    else:
        assert err > 0  # a compressed format is not exact (the test can tell)
    k0 = cache.keys(0)
    assert k0.shape == (n, layer.d_head)
    np.testing.assert_allclose(k0, (x @ layer.w_k)[:, :layer.d_head], rtol=BOUNDS[fmt] * 4,
                               atol=BOUNDS[fmt] * 4 * np.abs(k0).max())
    expected_bytes = {"native": np.dtype(dtype).itemsize, "bf16": 2, "f16": 2, "int8": 1}[fmt]
    assert cache.bytes_per_token >= 2 * 2 * layer.d_head * expected_bytes
    cache.truncate(3)
    assert cache.length == 3
    cache.reset()
    assert cache.length == 0


def test_heads_errors():
    layer = kappa.MultiHeadAttention(8, 2)
    with pytest.raises(kappa.ShapeError, match="w_q"):
        layer.set_weights(np.zeros((8, 7)), np.zeros((8, 8)), np.zeros((8, 8)), np.zeros((8, 8)))
    with pytest.raises(ValueError, match="does not divide"):
        kappa.GroupedQueryAttention(8, 4, n_kv_heads=3)
    with pytest.raises(ValueError, match="dtype"):
        layer.forward_cached(np.zeros((1, 8), np.float32),
                             kappa.MultiHeadAttention(8, 2, dtype="float64").make_cache())
    with pytest.raises(ValueError, match="unknown cache format"):
        layer.make_cache("q4")
