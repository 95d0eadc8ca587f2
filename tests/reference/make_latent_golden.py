#!/usr/bin/python3
"""Golden data for kappa's multi-head latent attention (DeepSeek-V2, MLA).

Run with Debian's interpreter (package python3-torch):
    /usr/bin/python3 tests/reference/make_latent_golden.py
It writes small float64 .npy files under tests/data/latent/.

Written from the equations of the DeepSeek-V2 paper (arXiv 2405.04434,
section 2.1), row-vector convention, one token per row of X (N x d):

  c_Q   = RMSNorm(X W^DQ)                          (N, d_cq)   [with query compression]
  Q^C_h = c_Q W^UQ_h,  Q^R_h = RoPE(c_Q W^QR_h)    (N, d_h), (N, d_R)
          [without: Q^C_h = X W^Q_h, Q^R_h = RoPE(X W^QR_h)]
  c_KV  = RMSNorm(X W^DKV)                         (N, d_c)
  K^C_h = c_KV W^UK_h,  V_h = c_KV W^UV_h          (N, d_h), (N, d_v)
  k^R   = RoPE(X W^KR)                             (N, d_R), shared by all heads
  S_h   = s ([Q^C_h, Q^R_h] [K^C_h, k^R]^T),  s = 1/sqrt(d_h + d_R)
  O_h   = softmax(S_h + causal) V_h
  Y     = [O_1 ... O_H] W^O                         (N, d)

Token i sits at position offset + i (offset = 3 here, as when decoding after
3 earlier tokens whose cache is not part of the case); RoPE is the
rotate-half convention (GPT-NeoX/LLaMA) with base 10000 on the d_R-wide
decoupled parts. RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g, eps = 1e-6.

The Hugging Face DeepSeek-V2 layout of the same weights is written too
(nn.Linear weights are out x in, used as x W^T):
  q_a_proj (d_cq, d), q_a_layernorm (d_cq), q_b_proj (H (d_h + d_R), d_cq)
  [or q_proj (H (d_h + d_R), d)], kv_a_proj_with_mqa (d_c + d_R, d),
  kv_a_layernorm (d_c), kv_b_proj (H (d_h + d_v), d_c), o_proj (d, H d_v);
  per head, q rows are [nope | rope] and kv_b rows are [k_nope | v].
"""
import os
import numpy as np
import torch

torch.manual_seed(5)
torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "latent")
os.makedirs(OUT, exist_ok=True)

D, H, DH, DR, DV, DC, DCQ = 16, 4, 8, 4, 6, 10, 12
N, OFFSET, EPS, BASE = 7, 3, 1e-6, 10000.0


def save(name, t):
    np.save(os.path.join(OUT, name + ".npy"), t.detach().numpy().astype(np.float64))


def rms_norm(x, g):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * g


def rope(x, first):
    """Rotate-half RoPE: pairs (j, j + d/2), angle (first + i) * BASE^(-2j/d)."""
    n, d = x.shape
    half = d // 2
    inv = BASE ** (-torch.arange(half, dtype=torch.float64) * 2.0 / d)
    ang = (first + torch.arange(n, dtype=torch.float64)).unsqueeze(1) * inv.unsqueeze(0)
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[:, :half], x[:, half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=1)


def mla(x, w, compressed):
    if compressed:
        c_q = rms_norm(x @ w["w_dq"], w["q_norm"])
        q_c, q_r = c_q @ w["w_uq"], c_q @ w["w_qr"]
    else:
        q_c, q_r = x @ w["w_q"], x @ w["w_qr_x"]
    c_kv = rms_norm(x @ w["w_dkv"], w["kv_norm"])
    k_r = rope(x @ w["w_kr"], OFFSET)
    n = x.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    s = (DH + DR) ** -0.5
    outs = []
    for h in range(H):
        qh = torch.cat([q_c[:, h * DH:(h + 1) * DH], rope(q_r[:, h * DR:(h + 1) * DR], OFFSET)], 1)
        kh = torch.cat([c_kv @ w["w_uk"][:, h * DH:(h + 1) * DH], k_r], 1)
        vh = c_kv @ w["w_uv"][:, h * DV:(h + 1) * DV]
        scores = (s * (qh @ kh.T)).masked_fill(~causal, float("-inf"))
        outs.append(torch.softmax(scores, -1) @ vh)
    return torch.cat(outs, 1) @ w["w_o"], c_kv, k_r


w = {
    "w_dq": torch.randn(D, DCQ) / D ** 0.5,
    "q_norm": 1 + 0.1 * torch.randn(DCQ),
    "w_uq": torch.randn(DCQ, H * DH) / DCQ ** 0.5,
    "w_qr": torch.randn(DCQ, H * DR) / DCQ ** 0.5,
    "w_q": torch.randn(D, H * DH) / D ** 0.5,
    "w_qr_x": torch.randn(D, H * DR) / D ** 0.5,
    "w_dkv": torch.randn(D, DC) / D ** 0.5,
    "kv_norm": 1 + 0.1 * torch.randn(DC),
    "w_uk": torch.randn(DC, H * DH) / DC ** 0.5,
    "w_uv": torch.randn(DC, H * DV) / DC ** 0.5,
    "w_kr": torch.randn(D, DR) / D ** 0.5,
    "w_o": torch.randn(H * DV, D) / (H * DV) ** 0.5,
}
x = torch.randn(N, D)

y_c, c_kv, k_r = mla(x, w, True)
y_x, _, _ = mla(x, w, False)

save("x", x)
for k, v in w.items():
    save(k, v.reshape(1, -1) if v.dim() == 1 else v)
save("y_compressed_q", y_c)
save("y_plain_q", y_x)
save("c_kv", c_kv)
save("k_rope", k_r)
np.save(os.path.join(OUT, "dims.npy"),
        np.array([D, H, DH, DR, DV, DC, DCQ, N, OFFSET], dtype=np.int64).reshape(1, -1))


# Hugging Face DeepSeek-V2 layout of the same weights.
def per_head_rows(a, b, da, db):
    """Interleave per head: rows [a_h (da) | b_h (db)] for h = 0..H-1."""
    parts = []
    for h in range(H):
        parts += [a[h * da:(h + 1) * da], b[h * db:(h + 1) * db]]
    return torch.cat(parts, 0)


save("hf_q_a_proj", w["w_dq"].T)
save("hf_q_a_layernorm", w["q_norm"].reshape(1, -1))
save("hf_q_b_proj", per_head_rows(w["w_uq"].T, w["w_qr"].T, DH, DR))
save("hf_q_proj", per_head_rows(w["w_q"].T, w["w_qr_x"].T, DH, DR))
save("hf_kv_a_proj_with_mqa", torch.cat([w["w_dkv"].T, w["w_kr"].T], 0))
save("hf_kv_a_layernorm", w["kv_norm"].reshape(1, -1))
save("hf_kv_b_proj", per_head_rows(w["w_uk"].T, w["w_uv"].T, DH, DV))
save("hf_o_proj", w["w_o"].T)
print("wrote", OUT)
