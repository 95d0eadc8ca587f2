#!/usr/bin/python3
"""Golden data for kappa's score biases (include/kappa/attention/bias.hpp).

Run with Debian's interpreter (package python3-torch):
    /usr/bin/python3 tests/reference/make_bias_golden.py
It writes tests/data/attention/bias_golden.txt (named matrices, "name rows
cols" then one row per line, 17 significant digits), read by
tests/attention/bias_test.cpp. Inputs are generated here with a fixed seed
and stored in the same file.

Written from the upstream formulas, not from kappa's code:
  * ALiBi slopes and bias as in Hugging Face BLOOM's build_alibi_tensor
    (modeling_bloom.py): slopes from the closest power of two, the bias
    slope_h * key_position added to the scores of every query row (equal to
    the paper's -m (i - j) up to a per-row constant, which softmax ignores),
    with the causal mask.
  * T5 relative position buckets as in Hugging Face's
    T5Attention._relative_position_bucket and compute_bias (modeling_t5.py):
    relative_position = memory_position - query_position, a learned table
    (num_buckets x n_heads) looked up per bucket, scores = Q K^T + bias
    (T5 does not scale by 1/sqrt(d)).
"""
import math
import os

import torch

torch.manual_seed(20261201)
torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "attention", "bias_golden.txt")
out = []


def put(name, m):
    m = torch.as_tensor(m, dtype=torch.float64)
    if m.dim() == 1:
        m = m.unsqueeze(0)
    out.append(f"{name} {m.shape[0]} {m.shape[1]}")
    for row in m.tolist():
        out.append(" ".join(f"{x:.17g}" for x in row))


# ---- ALiBi (BLOOM's build_alibi_tensor, in float64) ---------------------------
def bloom_slopes(num_heads):
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))))
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))))
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


for h in [1, 2, 3, 5, 6, 8, 12, 16, 20, 40, 112]:
    put(f"alibi.slopes.{h}", bloom_slopes(h))


def softmax_rows(scores, allowed):
    scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(w, nan=0.0)


def causal(n_q, n_kv):
    off = n_kv - n_q
    return torch.arange(n_kv).unsqueeze(0) <= (torch.arange(n_q).unsqueeze(1) + off)


# BLOOM-style attention, 6 heads (not a power of two), 11 keys, d = 4.
H, N, D = 6, 11, 4
slopes = bloom_slopes(H)
for n_q in [N, 3, 1]:
    q = torch.randn(H, n_q, D)
    k = torch.randn(H, N, D)
    v = torch.randn(H, N, 3)
    for h in range(H):
        alibi = slopes[h] * torch.arange(N).unsqueeze(0)  # (1, N_KV): slope * key position
        scores = (q[h] @ k[h].T) / math.sqrt(D) + alibi
        w = softmax_rows(scores, causal(n_q, N))
        put(f"alibi.nq{n_q}.q{h}", q[h])
        put(f"alibi.nq{n_q}.k{h}", k[h])
        put(f"alibi.nq{n_q}.v{h}", v[h])
        put(f"alibi.nq{n_q}.y{h}", w @ v[h])


# ---- T5 relative position buckets (HF's _relative_position_bucket) -----------
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                             max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


rel = torch.arange(-400, 401, dtype=torch.long)
put("t5.relative_positions", rel)
for bidi in [True, False]:
    for nb, md in [(32, 128), (8, 20), (10, 50)]:
        put(f"t5.buckets.{int(bidi)}.{nb}.{md}", relative_position_bucket(rel, bidi, nb, md))
# The float32 logarithm, as in the reference above (torch's .float()), decides
# bucket edges; check a few configurations whose edges are close calls.
rel2 = torch.arange(0, 1500, dtype=torch.long)
for bidi in [True, False]:
    for nb, md in [(32, 128), (64, 1000)]:
        put(f"t5.far.{int(bidi)}.{nb}.{md}",
            relative_position_bucket(rel2 if bidi else -rel2, bidi, nb, md))


def t5_compute_bias(table, n_q, n_kv, bidirectional, nb, md, offset):
    context_position = torch.arange(n_q, dtype=torch.long)[:, None] + offset
    memory_position = torch.arange(n_kv, dtype=torch.long)[None, :]
    relative_position = memory_position - context_position
    buckets = relative_position_bucket(relative_position, bidirectional, nb, md)
    return table[buckets].permute(2, 0, 1)  # (heads, n_q, n_kv)


# T5-style attention: 3 heads, 16 buckets, max distance 10, 24 keys, d = 4.
H, NB, MD, N, D = 3, 16, 10, 24, 4
table = torch.randn(NB, H)
put("t5.table", table)
for name, bidi, n_q in [("enc", True, N), ("dec", False, N), ("dec1", False, 1)]:
    off = N - n_q
    bias = t5_compute_bias(table, n_q, N, bidi, NB, MD, off)
    q = torch.randn(H, n_q, D) * 0.5
    k = torch.randn(H, N, D) * 0.5
    v = torch.randn(H, N, 3)
    allowed = torch.ones(n_q, N, dtype=torch.bool) if bidi else causal(n_q, N)
    for h in range(H):
        w = softmax_rows(q[h] @ k[h].T + bias[h], allowed)
        put(f"t5.{name}.q{h}", q[h])
        put(f"t5.{name}.k{h}", k[h])
        put(f"t5.{name}.v{h}", v[h])
        put(f"t5.{name}.y{h}", w @ v[h])

with open(OUT, "w") as f:
    f.write("# written by tests/reference/make_bias_golden.py\n")
    f.write("\n".join(out) + "\n")
print("wrote", OUT, len(out), "lines")
