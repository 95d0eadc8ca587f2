#!/usr/bin/python3
"""Golden data for kappa's compression of a grouped-query attention layer into
latent form (kappa/heads/compress.hpp).

Run with Debian's interpreter (package python3-torch):
    /usr/bin/python3 tests/reference/make_compress_golden.py
It writes small float64 .npy files under tests/data/compress/.

Written from the equations, not from kappa's code. The layer is grouped-query
attention (H query heads, H_kv key/value heads, query head h reads kv head
g = h // (H / H_kv)), causal, softmax with s = 1/sqrt(d_h), row-vector
convention (one token per row of X, N x d):

  Q = X W^Q,  K = X W^K,  V = X W^V,   W = [W^K W^V]  (d x H_kv (d_h + d_v))
  O_h = softmax(s Q_h K_g^T + causal) V_g,   Y = [O_1 ... O_H] W^O

Compression at rank r keeps the keys and values of the rank-r factorization:

  weight space:  W_r = U_r S_r V_r^T        (torch.linalg.svd of W, truncated)
  data aware:    W_r = W V_r V_r^T          (V_r: top right singular vectors of X_cal W)

and Y_r is the same attention with K, V taken from X W_r. The latent layout
(W^DKV = U_r S_r or W V_r, [W^UK W^UV] = V_r^T) computes exactly these K, V,
so kappa's compressed layer must reproduce Y_r.

Files: x (N x d), x_cal (N_cal x d), w_q, w_k, w_v, w_o, s_w (singular values
of W, 1 x 22), y (the original), y_r<r> and yd_r<r> for r in RANKS, and dims
[d, H, H_kv, d_h, d_v].
"""
import os
import numpy as np
import torch

torch.manual_seed(11)
torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "compress")
os.makedirs(OUT, exist_ok=True)

D, H, HKV, DH, DV, N, NCAL = 24, 4, 2, 6, 5, 9, 40
NC = HKV * (DH + DV)  # 22 columns of W = [W^K W^V]
RANKS = (4, 8, 16)


def save(name, t):
    np.save(os.path.join(OUT, name + ".npy"), t.detach().numpy().astype(np.float64))


def orthonormal(rows, cols):
    q, _ = torch.linalg.qr(torch.randn(rows, cols))
    return q


def gqa(x, w_q, w_k, w_v, w_o):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    n = x.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    s = DH ** -0.5
    outs = []
    for h in range(H):
        g = h // (H // HKV)
        scores = (s * (q[:, h * DH:(h + 1) * DH] @ k[:, g * DH:(g + 1) * DH].T))
        scores = scores.masked_fill(~causal, float("-inf"))
        outs.append(torch.softmax(scores, -1) @ v[:, g * DV:(g + 1) * DV])
    return torch.cat(outs, 1) @ w_o


# W = [W^K W^V] with singular values decaying like 1/j (so truncation matters).
sigma = 2.0 / torch.arange(1, NC + 1, dtype=torch.float64)
w = orthonormal(D, NC) @ torch.diag(sigma) @ orthonormal(NC, NC).T
w_k, w_v = w[:, :HKV * DH], w[:, HKV * DH:]
w_q = torch.randn(D, H * DH) / D ** 0.5
w_o = torch.randn(H * DV, D) / (H * DV) ** 0.5
x = torch.randn(N, D)
# Calibration inputs with a non-isotropic covariance (as real activations).
x_cal = torch.randn(NCAL, D) @ torch.diag(torch.linspace(2.0, 0.2, D))

save("x", x)
save("x_cal", x_cal)
save("w_q", w_q)
save("w_k", w_k)
save("w_v", w_v)
save("w_o", w_o)
save("s_w", torch.linalg.svdvals(w).reshape(1, -1))
save("y", gqa(x, w_q, w_k, w_v, w_o))
for r in RANKS:
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    w_r = u[:, :r] @ torch.diag(s[:r]) @ vh[:r]
    save(f"y_r{r}", gqa(x, w_q, w_r[:, :HKV * DH], w_r[:, HKV * DH:], w_o))
    _, _, vh_d = torch.linalg.svd(x_cal @ w, full_matrices=False)
    w_d = w @ vh_d[:r].T @ vh_d[:r]
    save(f"yd_r{r}", gqa(x, w_q, w_d[:, :HKV * DH], w_d[:, HKV * DH:], w_o))
np.save(os.path.join(OUT, "dims.npy"), np.array([D, H, HKV, DH, DV], dtype=np.int64).reshape(1, -1))
print("wrote", OUT)
