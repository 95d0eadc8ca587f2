"""The randomized approximations of softmax attention and compare_to_exact,
against a numpy softmax reference."""
import numpy as np
import pytest

import kappa
from conftest import reference_attention


def inputs(n=128, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, 8)))


def exact(q, k, v):
    n = q.shape[0]
    return reference_attention(q, k, v, np.exp, 1 / np.sqrt(q.shape[1]), np.ones((n, k.shape[0]), bool))[3]


def err(y, y_ref):
    return np.linalg.norm(y - y_ref) / np.linalg.norm(y_ref)


def test_exact_limits():
    q, k, v = inputs()
    y = exact(q, k, v)
    # Nystrom with m = N landmarks (segment means of one row: the rows) is exact,
    # and so is the random partition sketch with m = N.
    assert err(kappa.approximate_attention(q, k, v, "nystrom", 128), y) < 1e-8
    assert err(kappa.approximate_attention(q, k, v, "sketch", 128, variant="partition"), y) < 1e-8
    assert err(kappa.approximate_attention(q, k, v, "nystrom", 8), y) > 1e-3


@pytest.mark.parametrize("method,variant", [("nystrom", ""), ("sampled", ""),
                                            ("positive_random_features", "")])
def test_error_decreases_with_m(method, variant):
    q, k, v = inputs(n=256, d=8, seed=3)
    q, k = 0.5 * q, 0.5 * k
    y = exact(q, k, v)
    e = [np.mean([err(kappa.approximate_attention(q, k, v, method, m, seed=s, variant=variant), y)
                  for s in range(4)]) for m in (8, 128)]
    assert e[1] < 0.7 * e[0], e


def test_compare_to_exact_reports_error_and_cost():
    q, k, v = inputs(n=256, d=16, seed=5)
    r = kappa.compare_to_exact(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                               "nystrom", 32, runs=2)
    y32 = kappa.approximate_attention(q.astype(np.float32), k.astype(np.float32),
                                      v.astype(np.float32), "nystrom", 32)
    assert abs(r["output_error"] - err(y32.astype(np.float64), exact(q, k, v))) < 1e-3
    assert r["approx_seconds"] > 0 and r["exact_seconds"] > 0 and r["runs"] == 2
    assert np.isnan(r["weights_error"])
    r2 = kappa.compare_to_exact(q, k, v, "positive_random_features", 64, seed=1, runs=1)
    assert 0 < r2["weights_error"] < 10 and 0 < r2["output_error"] < 10


def test_approximation_errors():
    q, k, v = inputs(n=16)
    with pytest.raises(ValueError, match="exceeds"):
        kappa.approximate_attention(q, k, v, "sketch", 32)
    with pytest.raises(ValueError, match="unknown approximation"):
        kappa.approximate_attention(q, k, v, "performer", 8)
    with pytest.raises(kappa.RangeError):
        kappa.compare_to_exact(q, k, v, "nystrom", 4, runs=0)
