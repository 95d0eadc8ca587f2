"""Shared helpers: the repository's test data and references written from the
paper's equations (never from kappa's C++)."""
import os

import numpy as np
import pytest

import kappa

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data")
MODELS = os.path.join(DATA, "models")


def allowed_matrix(n_q, n_kv, mask, offset=None, window=None, lengths=None):
    """Which keys each query sees (True = visible), from the masks' definitions:
    query row i sits at position p = offset + i (default offset N_KV - N_Q)."""
    if mask is None or (isinstance(mask, str) and mask == "none"):
        return np.ones((n_q, n_kv), dtype=bool)
    if not isinstance(mask, str):
        return np.asarray(mask, dtype=bool)
    off = n_kv - n_q if offset is None else offset
    p = off + np.arange(n_q)[:, None]
    j = np.arange(n_kv)[None, :]
    if mask == "causal":
        return j <= p
    if mask == "sliding":
        return (j <= p) & (j > p - window)
    if mask == "padding":
        lens = np.broadcast_to(np.asarray(lengths), (n_q,))
        return j < lens[:, None]
    raise ValueError(mask)


def reference_attention(q, k, v, f, s, allowed, feature_map=None):
    """A = f(s Q K^T) elementwise (or phi(Q) phi(K)^T), masked entries 0;
    Z = diag(A 1); Y = Z^-1 A V; a row with Z = 0 (or no visible key) is 0.
    Computed in float64."""
    q, k, v = (np.asarray(m, dtype=np.float64) for m in (q, k, v))
    if feature_map is not None:
        a = feature_map(q) @ feature_map(k).T
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            a = f(s * (q @ k.T))
    a = np.where(allowed, a, 0.0)
    z = a.sum(axis=1)
    safe = np.where(z != 0, z, 1.0)
    w = np.where((z != 0)[:, None], a / safe[:, None], 0.0)
    return a, z, w, w @ v


def rel_err(x, ref):
    """max |x - ref| over max(1, max |ref|)."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    return float(np.max(np.abs(np.asarray(x, dtype=np.float64) - ref))) / scale if ref.size else 0.0


TOL = {np.float32: 1e-4, np.float64: 1e-10}


@pytest.fixture
def rng():
    return np.random.default_rng(2604)
