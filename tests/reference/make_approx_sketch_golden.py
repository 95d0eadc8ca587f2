#!/usr/bin/python3
"""Golden data for kappa's whole-attention approximations (Nystrom attention,
sequence sketching, sampled attention), computed with numpy (float64) from
the papers' formulas, independently of kappa's code.

Run with Debian's interpreter (package python3-numpy):
    /usr/bin/python3 tests/reference/make_approx_sketch_golden.py
It writes tests/data/approx_sketch/golden.txt ("name rows cols", then one
row per line, 17 significant digits), read by
tests/approx_sketch/approx_sketch_test.cpp. Q, K, V are drawn here (seeded)
and stored in the same file.

The random draws follow the streams specified in kappa's doc comments
(include/kappa/core/random.hpp: splitmix64, uniform in (0, 1], Box-Muller),
re-implemented here with Python integers:
 * Fisher-Yates permutation: for i = n-1 .. 1 swap p[i], p[next_u64() % (i+1)];
 * weighted sampling without replacement: the m largest log(u_j) / w_j;
 * Gaussian sketch: normal() / sqrt(m) row-major; sparse sign: u <= 1/6 ->
   +sqrt(3/m), u > 5/6 -> -sqrt(3/m); random partition: key p[t] in group
   floor(t m / n), means, log group size added to the logits;
 * sampled attention: S draws by inversion of the cumulative proposal.

Cases
  nys_seg_svd     Nystromformer eq. 14 with segment means, m = 4, and
                  numpy.linalg.pinv (rcond = m eps, relative).
  nys_seg_iter    the same with the paper's 6-step iterative pseudo-inverse.
  nys_uniform     m = 5 keys drawn uniformly (seed 11).
  nys_keynorm     m = 5 keys drawn by ||k_j|| (seed 12).
  sk_gauss, sk_sparse, sk_part   sequence sketches, m = 5 (seeds 21, 22, 23).
  samp_bound, samp_uniform       sampled attention, S = 16 (seeds 31, 32),
                  proposals exp(s r ||k_j||) (r = mean ||q_i||) and uniform.
"""
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "approx_sketch")
M64 = (1 << 64) - 1


class Stream:
    def __init__(self, seed):
        self.state = seed & M64
        self.spare = None

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return ((self.next_u64() >> 11) + 1) * 2.0 ** -53

    def normal(self):
        if self.spare is not None:
            s, self.spare = self.spare, None
            return s
        u1, u2 = self.uniform(), self.uniform()
        r, a = math.sqrt(-2.0 * math.log(u1)), 2.0 * math.pi * u2
        self.spare = r * math.sin(a)
        return r * math.cos(a)


def permutation(n, seed):
    g = Stream(seed)
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = g.next_u64() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def weighted_without_replacement(w, m, seed):
    g = Stream(seed)
    keys = [math.log(g.uniform()) / wj if wj > 0 else -math.inf for wj in w]
    order = sorted(range(len(w)), key=lambda j: (-keys[j], j))
    return sorted(order[:m])


def softmax_rows(x):
    x = x - x.max(axis=1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=1, keepdims=True)


def nystrom(q, k, v, qt, kt, pinv):
    s = 1.0 / math.sqrt(q.shape[1])
    f = softmax_rows(s * q @ kt.T)
    a = softmax_rows(s * qt @ kt.T)
    b = softmax_rows(s * qt @ k.T)
    return f @ pinv(a) @ (b @ v)


def segment_means(x, m):
    n = x.shape[0]
    return np.stack([x[l * n // m:(l + 1) * n // m].mean(axis=0) for l in range(m)])


def pinv_svd(a):
    return np.linalg.pinv(a, rcond=a.shape[0] * np.finfo(np.float64).eps)


def pinv_iter(a, steps=6):
    # Nystromformer's iteration (Razavi et al. 2014).
    i = np.eye(a.shape[0])
    z = a.T / (np.abs(a).sum(axis=0).max() * np.abs(a).sum(axis=1).max())
    for _ in range(steps):
        az = a @ z
        z = 0.25 * z @ (13 * i - az @ (15 * i - az @ (7 * i - az)))
    return z


def sketch(n, m, seed, kind):
    g = Stream(seed)
    s = np.zeros((m, n))
    if kind == "gauss":
        for c in range(m):
            for j in range(n):
                s[c, j] = g.normal() / math.sqrt(m)
    elif kind == "sparse":
        a = math.sqrt(3.0 / m)
        for c in range(m):
            for j in range(n):
                u = g.uniform()
                s[c, j] = a if u <= 1 / 6 else (-a if u > 5 / 6 else 0.0)
    else:
        p = permutation(n, seed)
        for t in range(n):
            s[t * m // n, p[t]] = 1.0
    return s


def sketched(q, k, v, m, seed, kind):
    s = 1.0 / math.sqrt(q.shape[1])
    sk = sketch(k.shape[0], m, seed, kind)
    if kind != "part":
        return softmax_rows(s * q @ (sk @ k).T) @ (sk @ v)
    # Clustered attention: group means, each group weighted by its size.
    sizes = sk.sum(axis=1)
    kbar, vbar = (sk @ k) / sizes[:, None], (sk @ v) / sizes[:, None]
    return softmax_rows(s * q @ kbar.T + np.log(sizes)) @ vbar


def sampled(q, k, v, samples, seed, proposal):
    s = 1.0 / math.sqrt(q.shape[1])
    n = k.shape[0]
    if proposal == "uniform":
        w = np.ones(n)
    else:
        r = np.linalg.norm(q, axis=1).mean()
        lw = s * r * np.linalg.norm(k, axis=1)
        w = np.exp(lw - lw.max())
    cdf = np.cumsum(w)
    p = w / cdf[-1]
    g = Stream(seed)
    draws = [min(int(np.searchsorted(cdf, g.uniform() * cdf[-1], side="left")), n - 1)
             for _ in range(samples)]
    # n^_i = (1/S) sum_t a_ij v_j / p_j, z^_i = (1/S) sum_t a_ij / p_j, y^ = n^ / z^.
    a = np.exp(s * q @ k[draws].T) / p[draws] / samples
    return (a @ v[draws]) / a.sum(axis=1, keepdims=True)


def main():
    rng = np.random.default_rng(20261201)
    n, d, dv = 12, 4, 3
    q = rng.standard_normal((n, d))
    k = rng.standard_normal((n, d))
    v = rng.standard_normal((n, dv))
    out = {"q": q, "k": k, "v": v}
    out["nys_seg_svd"] = nystrom(q, k, v, segment_means(q, 4), segment_means(k, 4), pinv_svd)
    out["nys_seg_iter"] = nystrom(q, k, v, segment_means(q, 4), segment_means(k, 4), pinv_iter)
    idx = sorted(permutation(n, 11)[:5])
    out["nys_uniform"] = nystrom(q, k, v, q[idx], k[idx], pinv_svd)
    idx = weighted_without_replacement(list(np.linalg.norm(k, axis=1)), 5, 12)
    out["nys_keynorm"] = nystrom(q, k, v, q[idx], k[idx], pinv_svd)
    out["sk_gauss"] = sketched(q, k, v, 5, 21, "gauss")
    out["sk_sparse"] = sketched(q, k, v, 5, 22, "sparse")
    out["sk_part"] = sketched(q, k, v, 5, 23, "part")
    out["samp_bound"] = sampled(q, k, v, 16, 31, "bound")
    out["samp_uniform"] = sampled(q, k, v, 16, 32, "uniform")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "golden.txt"), "w") as f:
        f.write("# written by tests/reference/make_approx_sketch_golden.py\n")
        for name, a in out.items():
            f.write(f"{name} {a.shape[0]} {a.shape[1]}\n")
            for row in a:
                f.write(" ".join(f"{x:.17g}" for x in row) + "\n")


if __name__ == "__main__":
    main()
