"""Latent attention (DeepSeek-V2 MLA) against plain numpy loops written from
DeepSeek-V2's equations (section 2.1), both paths, and its latent cache."""
import numpy as np
import pytest

import kappa
from conftest import rel_err


def rms_norm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope_interleaved(x, positions, base):
    """Rotates pairs (2i, 2i + 1) by position * base^(-2i / d_R)."""
    d = x.shape[1]
    out = x.copy()
    for r, p in enumerate(positions):
        for i in range(d // 2):
            a = p * base ** (-2.0 * i / d)
            x0, x1 = x[r, 2 * i], x[r, 2 * i + 1]
            out[r, 2 * i] = x0 * np.cos(a) - x1 * np.sin(a)
            out[r, 2 * i + 1] = x0 * np.sin(a) + x1 * np.cos(a)
    return out


def numpy_mla(x, w, h, dh, dr, dv, eps=1e-6, base=10000.0, first=0):
    n = x.shape[0]
    pos = np.arange(first, first + n)
    c = rms_norm(x @ w["w_dkv"], w["kv_norm"], eps)
    kr = rope_interleaved(x @ w["w_kr"], pos, base)
    s = 1.0 / np.sqrt(dh + dr)
    outs = []
    for hh in range(h):
        qc = x @ w["w_uq"][:, hh * dh:(hh + 1) * dh]
        qr = rope_interleaved(x @ w["w_qr"][:, hh * dr:(hh + 1) * dr], pos, base)
        kc = c @ w["w_uk"][:, hh * dh:(hh + 1) * dh]
        v = c @ w["w_uv"][:, hh * dv:(hh + 1) * dv]
        o = np.zeros((n, dv))
        for i in range(n):
            sc = np.array([s * (qc[i] @ kc[j] + qr[i] @ kr[j]) for j in range(i + 1)])
            p = np.exp(sc - sc.max())
            p /= p.sum()
            o[i] = p @ v[:i + 1]
        outs.append(o)
    return np.hstack(outs) @ w["w_o"]


def weights(rng, d, h, dh, dr, dv, dc):
    return {
        "w_uq": rng.standard_normal((d, h * dh)) / np.sqrt(d),
        "w_qr": rng.standard_normal((d, h * dr)) / np.sqrt(d),
        "w_dkv": rng.standard_normal((d, dc)) / np.sqrt(d),
        "w_uk": rng.standard_normal((dc, h * dh)) / np.sqrt(dc),
        "w_uv": rng.standard_normal((dc, h * dv)) / np.sqrt(dc),
        "w_kr": rng.standard_normal((d, dr)) / np.sqrt(d),
        "w_o": rng.standard_normal((h * dv, d)) / np.sqrt(h * dv),
        "kv_norm": 1.0 + 0.1 * rng.standard_normal(dc),
    }


@pytest.mark.parametrize("path", ["absorbed", "naive"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_latent_matches_numpy_loops(path, dtype):
    rng = np.random.default_rng(9)
    d, h, dh, dr, dv, dc, n = 16, 3, 4, 4, 5, 6, 7
    w = weights(rng, d, h, dh, dr, dv, dc)
    layer = kappa.LatentAttention(d, h, dh, dr, dc, d_v=dv, path=path, dtype=dtype)
    layer.set_weights(w["w_uq"], w["w_qr"], w["w_dkv"], w["w_uk"], w["w_uv"], w["w_kr"], w["w_o"],
                      kv_norm=w["kv_norm"])
    assert layer.path == path
    x = rng.standard_normal((n, d))
    ref = numpy_mla(x, w, h, dh, dr, dv)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert rel_err(layer.forward(x.astype(dtype)), ref) < tol
    ref3 = numpy_mla(x, w, h, dh, dr, dv, first=3)
    assert rel_err(layer.forward(x.astype(dtype), first_position=3), ref3) < tol
    hw = layer.head_weights(x.astype(dtype))
    assert hw.shape == (h, n, n)
    np.testing.assert_allclose(hw.sum(axis=2), 1.0, rtol=1e-5)
    assert np.all(np.triu(hw, 1) == 0)
    np.testing.assert_allclose(layer.weights["w_uk"], w["w_uk"], rtol=1e-6)


@pytest.mark.parametrize("fmt,bound", [("native", 1e-6), ("bf16", 2e-2), ("f16", 3e-3), ("int8", 5e-2)])
def test_latent_cache_decoding(fmt, bound):
    rng = np.random.default_rng(2)
    layer = kappa.LatentAttention(16, 4, 4, 2, 8, dtype="float32")
    layer.init_random(1)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    full = layer.forward(x)
    cache = layer.make_cache(fmt)
    y = np.vstack([layer.forward_cached(x[:5], cache)] +
                  [layer.forward_cached(x[i:i + 1], cache) for i in range(5, 8)])
    assert cache.length == 8 and cache.format == fmt
    assert np.linalg.norm(y - full) / np.linalg.norm(full) < bound
    # d_c + d_R values per token
    assert cache.bytes_per_token >= (8 + 2) * {"native": 4, "bf16": 2, "f16": 2, "int8": 1}[fmt]


def test_latent_errors():
    layer = kappa.LatentAttention(16, 4, 4, 2, 8)
    with pytest.raises(kappa.ShapeError):
        layer.set_weights(*(np.zeros((3, 3)),) * 7)
    with pytest.raises(ValueError, match="path"):
        kappa.LatentAttention(16, 4, 4, 2, 8, path="fast")
