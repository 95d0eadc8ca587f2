#!/usr/bin/python3
"""Golden data for kappa's embeddings and positional encodings, computed with
numpy (float64) from the definitions, independently of kappa's code.

Run with Debian's interpreter (package python3-numpy):
    /usr/bin/python3 tests/reference/make_embed_golden.py
It writes tests/data/embed/*.npy, read by tests/embed/golden_test.cpp.

 * rope_*: inputs x drawn here (seeded) and stored beside the outputs.
   RotateHalf is written as Hugging Face's LLaMA does it,
   x * cos + rotate_half(x) * sin with cos = [cos(p theta), cos(p theta)];
   Interleaved as Meta's LLaMA reference does it, multiplying complex
   numbers x_{2i} + i x_{2i+1} by exp(i p theta_i). Neither is kappa's loop.
 * sinusoidal_*: PE(p, 2i) = sin(p / b^(2i/d)), PE(p, 2i+1) = cos(...).
 * seeded_normal_*: the splitmix64 + Box-Muller stream specified in
   include/kappa/embed/random.hpp, re-implemented with Python integers.
"""
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "embed")
rng = np.random.default_rng(20261129)


def save(name, a):
    np.save(os.path.join(OUT, name + ".npy"), np.ascontiguousarray(a, dtype=np.float64))


def theta(d_rot, base):
    return base ** (-np.arange(0, d_rot, 2, dtype=np.float64) / d_rot)


def rope_rotate_half(x, offset, d_rot, base):
    n = x.shape[0]
    pos = np.arange(offset, offset + n, dtype=np.float64)
    ang = np.outer(pos, theta(d_rot, base))               # (n, d_rot/2)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], 1)  # (n, d_rot)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], 1)
    xr = x[:, :d_rot]
    half = d_rot // 2
    rotated = np.concatenate([-xr[:, half:], xr[:, :half]], 1)  # rotate_half
    out = x.copy()
    out[:, :d_rot] = xr * cos + rotated * sin
    return out


def rope_interleaved(x, offset, d_rot, base):
    n = x.shape[0]
    pos = np.arange(offset, offset + n, dtype=np.float64)
    z = x[:, 0:d_rot:2] + 1j * x[:, 1:d_rot:2]
    z = z * np.exp(1j * np.outer(pos, theta(d_rot, base)))
    out = x.copy()
    out[:, 0:d_rot:2] = z.real
    out[:, 1:d_rot:2] = z.imag
    return out


def sinusoidal(n, d, offset, base):
    pe = np.zeros((n, d))
    pos = np.arange(offset, offset + n, dtype=np.float64)[:, None]
    i = np.arange(0, d, 2, dtype=np.float64)
    ang = pos / base ** (i / d)
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang[:, : d // 2])
    return pe


M64 = (1 << 64) - 1


def seeded_normal(rows, cols, seed, stddev):
    state = seed & M64
    def next_u64():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
    def uniform():
        return ((next_u64() >> 11) + 1) * 2.0 ** -53
    vals = []
    while len(vals) < rows * cols:
        u1, u2 = uniform(), uniform()
        r, a = math.sqrt(-2.0 * math.log(u1)), 2.0 * math.pi * u2
        vals += [r * math.cos(a), r * math.sin(a)]
    return stddev * np.array(vals[: rows * cols]).reshape(rows, cols)


def main():
    os.makedirs(OUT, exist_ok=True)
    # RoPE: (name, n, d, d_rot, offset, base)
    for name, n, d, d_rot, offset, base in [("full", 6, 8, 8, 0, 10000.0), ("offset", 5, 8, 8, 37, 10000.0),
                                            ("partial", 4, 10, 6, 3, 500.0), ("long", 3, 64, 64, 100000, 1e6)]:
        x = rng.uniform(-1, 1, (n, d))
        save(f"rope_{name}_x", x)
        save(f"rope_{name}_neox", rope_rotate_half(x, offset, d_rot, base))
        save(f"rope_{name}_gptj", rope_interleaved(x, offset, d_rot, base))
    save("sinusoidal_7x6_off2", sinusoidal(7, 6, 2, 10000.0))
    save("sinusoidal_4x5_off0", sinusoidal(4, 5, 0, 10000.0))
    save("sinusoidal_3x16_off1000_base100", sinusoidal(3, 16, 1000, 100.0))
    save("seeded_normal_4x3_seed42", seeded_normal(4, 3, 42, 1.0))
    save("seeded_normal_3x5_seed7_std002", seeded_normal(3, 5, 7, 0.02))


if __name__ == "__main__":
    main()
