"""kappa.attention / attention_details for every kernel and mask against numpy
references written from the paper's equations: A = f(s Q K^T) elementwise
(masked entries 0), Z = diag(A 1), Y = Z^-1 A V, fully masked rows zero."""
import numpy as np
import pytest

import kappa
from conftest import TOL, allowed_matrix, reference_attention, rel_err

N_Q, N_KV, D, D_V = 6, 9, 5, 3


def elu1(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


# name, kappa keyword arguments, f, default scale s(d), feature map
KERNELS = [
    ("softmax", {}, np.exp, lambda d: 1 / np.sqrt(d), None),
    ("softmax", {"scale": 0.3}, np.exp, lambda d: 0.3, None),
    ("linear", {}, lambda x: x, lambda d: 1.0, None),
    ("relu", {}, lambda x: np.maximum(x, 0), lambda d: 1 / np.sqrt(d), None),
    ("polynomial", {"degree": 3, "c": 0.5}, lambda x: (x + 0.5) ** 3, lambda d: 1 / np.sqrt(d), None),
    ("polynomial", {"degree": 2}, lambda x: x ** 2, lambda d: 1 / np.sqrt(d), None),
    ("softcapped", {"cap": 2.0}, lambda x: np.exp(2.0 * np.tanh(x / 2.0)), lambda d: 1 / np.sqrt(d), None),
    ("elu+1", {}, None, None, elu1),
]

# mask, kappa keyword arguments
MASKS = [
    (None, {}),
    ("none", {}),
    ("causal", {}),
    ("causal", {"offset": 0}),
    ("sliding", {"window": 3}),
    ("sliding", {"window": 2, "offset": 1}),
    ("padding", {"lengths": 4}),
    ("padding", {"lengths": [0, 1, 9, 4, 4, 2]}),  # row 0 sees no key
    ("boolean", {}),
]


def inputs(rng, dtype):
    q = rng.standard_normal((N_Q, D)).astype(dtype)
    k = rng.standard_normal((N_KV, D)).astype(dtype)
    v = rng.standard_normal((N_KV, D_V)).astype(dtype)
    return q, k, v


def bool_mask(rng):
    m = rng.random((N_Q, N_KV)) < 0.5
    m[2, :] = False  # a fully masked row
    return m


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask,mkw", MASKS, ids=lambda x: str(x))
@pytest.mark.parametrize("name,kw,f,s,phi", KERNELS, ids=lambda x: str(x) if isinstance(x, str) else "")
def test_every_kernel_and_mask(rng, dtype, mask, mkw, name, kw, f, s, phi):
    q, k, v = inputs(rng, dtype)
    kmask = bool_mask(rng) if mask == "boolean" else mask
    allowed = allowed_matrix(N_Q, N_KV, kmask, **mkw)
    scale = kw.get("scale", s(D) if s else None)
    a_ref, z_ref, w_ref, y_ref = reference_attention(q, k, v, f, scale, allowed, feature_map=phi)

    y = kappa.attention(q, k, v, kernel=name, mask=kmask, **kw, **mkw)
    assert y.dtype == dtype and y.shape == (N_Q, D_V)
    assert rel_err(y, y_ref) < TOL[dtype]

    d = kappa.attention_details(q, k, v, kernel=name, mask=kmask, **kw, **mkw)
    for arr in (d.scores, d.normalizer, d.weights, d.output, d.row_shift):
        assert arr.dtype == dtype
    assert rel_err(d.Y, y_ref) < TOL[dtype]
    assert rel_err(d.weights, w_ref) < TOL[dtype]
    # Softmax reports A and Z times exp(-m_i) (m_i: the row maximum): undo it.
    shift = np.exp(d.row_shift.astype(np.float64))
    if name == "softmax":
        assert np.any(d.row_shift != 0)
    else:
        assert np.all(d.row_shift == 0)
    a = d.A.astype(np.float64) * shift[:, None]
    z = d.Z.astype(np.float64) * shift
    assert rel_err(a / max(1, np.abs(a_ref).max()), a_ref / max(1, np.abs(a_ref).max())) < TOL[dtype] * 10
    assert rel_err(z / max(1, np.abs(z_ref).max()), z_ref / max(1, np.abs(z_ref).max())) < TOL[dtype] * 10
    # Rows that see no key are zero rows, never NaN.
    empty = ~allowed.any(axis=1)
    assert np.all(np.isfinite(y))
    assert np.all(y[empty] == 0) and np.all(d.weights[empty] == 0)


def test_rows_of_weights_sum_to_one_and_causal_is_lower_triangular(rng):
    q, k, v = (rng.standard_normal((8, 4)) for _ in range(3))
    d = kappa.attention_details(q, k, v, mask="causal")
    np.testing.assert_allclose(d.weights.sum(axis=1), 1.0, rtol=1e-13)
    assert np.all(np.triu(d.weights, 1) == 0)
    assert np.all(d.weights[np.tril_indices(8)] > 0)


def test_linear_kernel_zero_normalizer_gives_zero_row():
    q = np.array([[1.0, 0.0]])
    k = np.array([[1.0, 0.0], [-1.0, 0.0]])  # A = [1, -1]: Z = 0
    v = np.array([[1.0], [2.0]])
    d = kappa.attention_details(q, k, v, kernel="linear")
    assert d.Z[0] == 0 and np.all(d.weights == 0) and np.all(d.Y == 0)


def test_large_logits_do_not_overflow():
    q = np.full((2, 4), 100.0)
    k = np.full((3, 4), 100.0)
    v = np.arange(6.0).reshape(3, 2)
    y = kappa.attention(q, k, v)
    np.testing.assert_allclose(y, np.tile(v.mean(axis=0), (2, 1)), rtol=1e-12)


def test_mixed_dtypes_promote_to_float64(rng):
    q, k, v = inputs(rng, np.float32)
    assert kappa.attention(q, k.astype(np.float64), v).dtype == np.float64
    assert kappa.attention(q.tolist(), k.tolist(), v.tolist()).dtype == np.float64


def test_callable_kernel_matches_softmax(rng):
    q, k, v = inputs(rng, np.float64)
    calls = []

    def f(x):
        calls.append(x.shape)
        return np.exp(x)

    y = kappa.attention(q, k, v, kernel=f, mask="causal")
    assert calls, "the callable was not called"
    np.testing.assert_allclose(y, kappa.attention(q, k, v, mask="causal"), rtol=1e-12)
    d = kappa.attention_details(q, k, v, kernel=lambda x: x ** 2, scale=0.5)
    _, _, w_ref, y_ref = reference_attention(q, k, v, lambda x: x ** 2, 0.5,
                                             np.ones((N_Q, N_KV), bool))
    assert rel_err(d.weights, w_ref) < 1e-12 and rel_err(d.Y, y_ref) < 1e-12


def test_callable_kernel_errors_propagate(rng):
    q, k, v = inputs(rng, np.float32)

    def bad(x):
        raise ZeroDivisionError("from the kernel")

    with pytest.raises(ZeroDivisionError, match="from the kernel"):
        kappa.attention(q, k, v, kernel=bad)
    with pytest.raises(kappa.ShapeError, match="elementwise"):
        kappa.attention(q, k, v, kernel=lambda x: x[:1])


def test_random_features_converge_to_softmax(rng):
    n, d = 64, 8
    q = 0.5 * rng.standard_normal((n, d))
    k = 0.5 * rng.standard_normal((n, d))
    v = rng.standard_normal((n, 4))
    _, _, _, y_exact = reference_attention(q, k, v, np.exp, 1 / np.sqrt(d), np.ones((n, n), bool))

    def err(m):
        errs = []
        for seed in range(8):
            y = kappa.attention(q, k, v, kernel="positive_random_features", features=m, seed=seed)
            errs.append(np.linalg.norm(y - y_exact) / np.linalg.norm(y_exact))
        return np.mean(errs)

    e_small, e_large = err(8), err(512)
    assert e_large < 0.5 * e_small and e_large < 0.1
    # The linear-time path gives the same Y as the quadratic one.
    y_quad = kappa.attention(q, k, v, kernel="prf", features=64, seed=3)
    y_lin = kappa.linear_attention(q, k, v, kernel="positive_random_features", features=64, seed=3)
    np.testing.assert_allclose(y_lin, y_quad, rtol=1e-10, atol=1e-12)
    y_lin_c = kappa.linear_attention(q, k, v, kernel="elu+1", mask="causal")
    _, _, _, y_ref = reference_attention(q, k, v, None, None, np.tril(np.ones((n, n), bool)),
                                         feature_map=lambda x: np.where(x > 0, x + 1, np.exp(np.minimum(x, 0))))
    assert rel_err(y_lin_c, y_ref) < 1e-10
    y_trig = kappa.attention(q, k, v, kernel="trigonometric_random_features", features=512, seed=1)
    assert np.linalg.norm(y_trig - y_exact) / np.linalg.norm(y_exact) < 0.5


def test_bad_names_and_parameters():
    q = np.zeros((2, 2))
    with pytest.raises(ValueError, match="unknown kernel 'softmx'"):
        kappa.attention(q, q, q, kernel="softmx")
    with pytest.raises(ValueError, match="unknown mask"):
        kappa.attention(q, q, q, mask="diagonal")
    with pytest.raises(ValueError, match="window"):
        kappa.attention(q, q, q, mask="sliding")
    with pytest.raises(ValueError, match="SlidingWindowMask window must be >= 1"):
        kappa.attention(q, q, q, mask="sliding", window=0)
    with pytest.raises(ValueError, match="degree must be >= 1"):
        kappa.attention(q, q, q, kernel="polynomial", degree=0)
    with pytest.raises(TypeError):
        kappa.attention(q, q, q, kernel=3)
