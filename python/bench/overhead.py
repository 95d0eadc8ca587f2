#!/usr/bin/env python3
"""Call overhead of kappa.attention against the same C++ call timed in C++.

kappa._bench_attention(q, k, v, reps) runs exactly what kappa.attention runs
(same inputs, a fresh Y and workspace per call) `reps` times inside the module
and returns each call's seconds, so both sides come from one process and the
ratio does not depend on the machine's speed. Rounds alternate the two sides;
the report gives medians over all calls.

    python3 python/bench/overhead.py [--threads 1] [--rounds 5]
"""
import argparse
import statistics
import time

import numpy as np

import kappa


def python_side(q, k, v, reps, mask):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        kappa.attention(q, k, v, mask=mask)
        out.append(time.perf_counter() - t0)
    return out


def measure(n, d, dtype, reps, rounds, mask):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)).astype(dtype) for _ in range(3))
    kappa.attention(q, k, v, mask=mask)  # warm up
    py, cpp = [], []
    for _ in range(rounds):
        cpp += kappa._bench_attention(q, k, v, reps, "softmax", mask)
        py += python_side(q, k, v, reps, mask)
    return statistics.median(py), statistics.median(cpp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    threads = kappa.set_num_threads(args.threads)
    print(f"kappa {kappa.__version__}, {threads} thread(s), OpenMP: {kappa.has_openmp()}")
    print(f"{'shape':>22} {'dtype':>8} {'mask':>7} {'Python (median)':>16} {'C++ (median)':>14} "
          f"{'overhead':>10} {'ratio':>7}")
    cases = [(16, 64, 20000), (256, 64, 400), (4096, 128, 3)]
    for n, d, reps in cases:
        for dtype in (np.float32, np.float64):
            for mask in (None, "causal"):
                r = reps if n < 4096 else (3 if dtype == np.float32 else 2)
                py, cpp = measure(n, d, dtype, r, args.rounds, mask)
                unit, f = ("us", 1e6) if py < 1e-3 else ("ms", 1e3)
                print(f"{f'N={n}, d={d}':>22} {np.dtype(dtype).name:>8} {str(mask):>7} "
                      f"{py * f:13.2f} {unit} {cpp * f:11.2f} {unit} {(py - cpp) * 1e6:8.2f}us "
                      f"{py / cpp:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
