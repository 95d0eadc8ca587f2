#!/usr/bin/python3
"""Golden data for kappa's multi-head / grouped-query attention, by PyTorch.

Run with Debian's interpreter (package python3-torch):
    /usr/bin/python3 tests/reference/make_heads_golden.py
It writes small float64 .npy files under tests/data/heads/, read by
tests/heads/golden_test.cpp through kappa::io::read_npy_matrix. Seeds are
fixed, so rerunning reproduces the committed files bit for bit.

Cases
  mha_*    torch.nn.MultiheadAttention (embed 16, 4 heads, biases,
           batch_first): self-attention without a mask (out_nomask), with a
           causal mask (out_causal), per-head weights of the causal case
           (weights_causal, heads stacked: (H N) x N), and cross-attention
           queries xq against keys/values xkv (out_cross).
  gqa_*    LLaMA-style grouped-query attention written here as Hugging Face
           does it: bias-free q_proj/k_proj/v_proj/o_proj (nn.Linear,
           weight out x in), heads split with view(N, H, d_head), K and V
           physically repeated to H heads (repeat_kv), causal softmax
           attention, no rotary embedding. 8 query heads, 2 kv heads.
  mqa_*    the same with 1 kv head (multi-query).
  gqa_rope_*  the GQA case with d_head 8 and Hugging Face's rotary embedding
           (rotate_half: channel i paired with i + d_head/2, base 10000,
           positions 0..N-1) applied to q and k before repeat_kv.
"""
import os

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "heads")


def save(name, t):
    a = t.detach().cpu().numpy().astype(np.float64)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    np.save(os.path.join(OUT, name + ".npy"), np.ascontiguousarray(a))


def causal_bool_mask(n):
    """True where a query may NOT look (nn.MultiheadAttention's convention)."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def torch_mha_cases():
    torch.manual_seed(4)
    e, h, n = 16, 4, 7
    mha = torch.nn.MultiheadAttention(e, h, bias=True, batch_first=True)
    # nn.MultiheadAttention zero-initializes its biases: make them non-zero.
    with torch.no_grad():
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    mha.eval()
    x = torch.randn(1, n, e)
    with torch.no_grad():
        out_nomask, _ = mha(x, x, x, need_weights=False)
        out_causal, w_causal = mha(x, x, x, attn_mask=causal_bool_mask(n), need_weights=True,
                                   average_attn_weights=False)
        xq = torch.randn(1, 5, e)
        xkv = torch.randn(1, 9, e)
        out_cross, _ = mha(xq, xkv, xkv, need_weights=False)
    save("mha_x", x[0])
    save("mha_in_proj_weight", mha.in_proj_weight)
    save("mha_in_proj_bias", mha.in_proj_bias)
    save("mha_out_proj_weight", mha.out_proj.weight)
    save("mha_out_proj_bias", mha.out_proj.bias)
    save("mha_out_nomask", out_nomask[0])
    save("mha_out_causal", out_causal[0])
    save("mha_weights_causal", w_causal[0].reshape(h * n, n))
    save("mha_xq", xq[0])
    save("mha_xkv", xkv[0])
    save("mha_out_cross", out_cross[0])


def repeat_kv(t, n_rep):
    """(H_kv, N, d) -> (H_kv n_rep, N, d), kv head g repeated for its group."""
    h_kv, n, d = t.shape
    return t[:, None, :, :].expand(h_kv, n_rep, n, d).reshape(h_kv * n_rep, n, d)


def rotate_half(t):
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def hf_rope(t, base=10000.0):
    """t: (heads, N, d). Rotary embedding as Hugging Face LLaMA applies it."""
    d = t.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    pos = torch.arange(t.shape[1], dtype=torch.float64)
    freqs = pos[:, None] * inv_freq[None, :]        # (N, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)         # (N, d)
    return t * emb.cos() + rotate_half(t) * emb.sin()


def llama_style_case(prefix, n_kv_heads, seed, d_head=4, rope=False):
    torch.manual_seed(seed)
    d_model, h, n = 32, 8, 6
    q_proj = torch.nn.Linear(d_model, h * d_head, bias=False)
    k_proj = torch.nn.Linear(d_model, n_kv_heads * d_head, bias=False)
    v_proj = torch.nn.Linear(d_model, n_kv_heads * d_head, bias=False)
    o_proj = torch.nn.Linear(h * d_head, d_model, bias=False)
    x = torch.randn(n, d_model)
    with torch.no_grad():
        q = q_proj(x).view(n, h, d_head).transpose(0, 1)            # (H, N, d)
        k = k_proj(x).view(n, n_kv_heads, d_head).transpose(0, 1)   # (H_kv, N, d)
        v = v_proj(x).view(n, n_kv_heads, d_head).transpose(0, 1)
        if rope:
            q = hf_rope(q)
            k = hf_rope(k)
        k = repeat_kv(k, h // n_kv_heads)
        v = repeat_kv(v, h // n_kv_heads)
        scores = (q @ k.transpose(1, 2)) / (d_head ** 0.5)
        scores = scores.masked_fill(causal_bool_mask(n), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        y = (probs @ v).transpose(0, 1).reshape(n, h * d_head)
        out = o_proj(y)
    save(prefix + "_x", x)
    save(prefix + "_q_proj", q_proj.weight)
    save(prefix + "_k_proj", k_proj.weight)
    save(prefix + "_v_proj", v_proj.weight)
    save(prefix + "_o_proj", o_proj.weight)
    save(prefix + "_out_causal", out)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch_mha_cases()
    llama_style_case("gqa", 2, 5)
    llama_style_case("mqa", 1, 6)
    llama_style_case("gqa_rope", 2, 8, d_head=8, rope=True)
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
