#!/usr/bin/python3
"""Attention speed, kappa beside PyTorch on the same shapes, in one run.

    /usr/bin/python3 benchmarks/compare_attention.py [--build build/bench] [--long]
                     [--repeats 3] [--threads 1 2]

Runs kappa's benchmark binaries (built by `cmake --build --preset bench`) on the
cases below, then the same shapes in PyTorch (Debian's python3-torch, float32 on
the CPU, torch.set_num_threads(T)), and prints per case and thread count:
kappa's rate, PyTorch's rate, their ratio, and kappa's rate over its ceiling
measured in the same kappa binary (the FMA peak, BM_FmaPeak, for the
compute-bound cases; a plain read of the same bytes for decode). Quote the ratios, not
the bare rates: machines of one kind differ by 2x in FMA peak.

Cases (PyTorch written as a user would, without fused kernels, which torch 1.13
does not have on the CPU):
  prefill      one head, N = 4096, d = 128: softmax(s Q K^T) V, GFLOP/s
  decode       32 query heads x 128 over a cache of 32k tokens (MHA), one new
               token: GB/s of K and V read per step
  decode KV    one LLaMA-3-70B layer's cache (8 kv heads x 128, 32k tokens),
               stored in float and in BF16 (PyTorch: bfloat16 tensors), GB/s
  long (--long) one head, N_Q = 512 and 4096 queries against N_KV = 4k .. 128k
               keys (the prompt chunk over a long cache; PyTorch materializes
               N_Q x N_KV scores, kappa's tiled path does not), GFLOP/s

The PyTorch BLAS in use is printed first (Debian's torch calls the system's
libblas.so.3: reference BLAS unless OpenBLAS is installed), since it decides
PyTorch's prefill rate.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# kappa side: (binary, benchmark name regex with {n}/{t} holes, rate counter,
#              ceiling name regex, ceiling counter)
PREFILL = ("bench_attention", r"BM_Attention_Softmax/N:{n}/d:128/threads:{t}/", "GFLOP/s",
           r"BM_FmaPeak/threads:{t}/", "GFLOP/s")
DECODE = ("bench_heads", r"BM_DecodeAttention/0/{n}/{t}/", "GB/s",
          r"BM_MemoryRead/0/{n}/{t}/", "GB/s")
LONG = ("bench_attention", r"BM_LongContext_Tiled/NQ:{nq}/NKV:{n}/threads:{t}/", "GFLOP/s",
        r"BM_FmaPeak/threads:{t}/", "GFLOP/s")
# One LLaMA-3-70B layer's KV cache (8 kv heads of 128), one query head per kv
# head, in float and in BF16 storage (PyTorch: bfloat16 tensors).
DECODE_F32 = ("bench_cache", r"BM_KvDecode<cache::Native>/{n}/{t}/1/", "GB/s",
              r"BM_PlainRead<cache::Native>/{n}/{t}/0/", "GB/s")
DECODE_BF16 = ("bench_cache", r"BM_KvDecode<cache::BF16>/{n}/{t}/1/", "GB/s",
               r"BM_PlainRead<cache::BF16>/{n}/{t}/0/", "GB/s")


def kappa_run(build, binary, patterns, repeats, env_extra=None):
    """Runs `binary` on the benchmarks matching any of `patterns`; returns
    {run_name: median row}."""
    exe = os.path.join(build, "benchmarks", binary)
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build it with `cmake --preset bench && cmake --build --preset bench`")
    env = dict(os.environ, **(env_extra or {}))
    filt = "|".join(p.rstrip("/") for p in patterns)
    out = subprocess.run([exe, "--benchmark_format=json", f"--benchmark_filter={filt}",
                          f"--benchmark_repetitions={repeats}", "--benchmark_report_aggregates_only=true"],
                         env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        # One repetition reports no aggregates: its single row is the median.
        if b.get("aggregate_name") == "median" or (repeats == 1 and b.get("run_type") == "iteration"):
            rows[b["run_name"] + "/"] = b
    return rows


def find(rows, pattern):
    rx = re.compile(pattern)
    for name, row in rows.items():
        if rx.match(name):
            return row
    return None


def median_seconds(fn, repeats, min_time=0.5):
    """Median over `repeats` of the mean time of fn() over >= min_time s."""
    fn()  # warm up (first touch, BLAS setup)
    meds = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            el = time.perf_counter() - t0
            if el >= min_time:
                break
        meds.append(el / n)
    meds.sort()
    return meds[len(meds) // 2]


def torch_prefill(torch, nq, nkv, d, repeats):
    g = torch.Generator().manual_seed(0)
    q = torch.rand(nq, d, generator=g) * 2 - 1
    k = torch.rand(nkv, d, generator=g) * 2 - 1
    v = torch.rand(nkv, d, generator=g) * 2 - 1
    s = 1.0 / d ** 0.5

    def f():
        a = torch.softmax(torch.mm(q * s, k.t()), dim=-1)
        return torch.mm(a, v)

    sec = median_seconds(f, repeats)
    return 4.0 * nq * nkv * d / sec * 1e-9  # GFLOP/s


def torch_decode(torch, heads, length, d, repeats, dtype=None):
    g = torch.Generator().manual_seed(0)
    dtype = dtype or torch.float32
    q = (torch.rand(heads, 1, d, generator=g) * 2 - 1).to(dtype)
    k = (torch.rand(heads, length, d, generator=g) * 2 - 1).to(dtype)
    v = (torch.rand(heads, length, d, generator=g) * 2 - 1).to(dtype)
    s = 1.0 / d ** 0.5

    def f():
        a = torch.softmax(torch.bmm(q * s, k.transpose(1, 2)), dim=-1)  # (H, 1, L)
        return torch.bmm(a, v)

    sec = median_seconds(f, repeats)
    return 2.0 * heads * length * d * k.element_size() / sec * 1e-9  # GB/s of K and V


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--long", action="store_true", help="also the long-context cases (minutes)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args()

    import torch

    blas = [l.strip() for l in torch.__config__.show().splitlines() if "BLAS" in l]
    print(f"PyTorch {torch.__version__}; {'; '.join(blas) or 'BLAS: unknown'}")

    cases = [("prefill N=4096 d=128", PREFILL, {"n": 4096}, "GFLOP/s",
              lambda: torch_prefill(torch, 4096, 4096, 128, a.repeats)),
             ("decode MHA 32x128, 32k", DECODE, {"n": 32768}, "GB/s",
              lambda: torch_decode(torch, 32, 32768, 128, a.repeats)),
             ("decode KV 8x128 f32, 32k", DECODE_F32, {"n": 32768}, "GB/s",
              lambda: torch_decode(torch, 8, 32768, 128, a.repeats)),
             ("decode KV 8x128 bf16, 32k", DECODE_BF16, {"n": 32768}, "GB/s",
              lambda: torch_decode(torch, 8, 32768, 128, a.repeats, torch.bfloat16))]
    if a.long:
        for nq in (512, 4096):
            for nkv in (4096, 16384, 32768, 65536, 131072):
                cases.append((f"long N_Q={nq} N_KV={nkv // 1024}k", LONG, {"n": nkv, "nq": nq}, "GFLOP/s",
                              (lambda nq=nq, nkv=nkv: torch_prefill(torch, nq, nkv, 128, a.repeats))))

    # kappa: one run per binary over every pattern it serves.
    per_binary = {}
    for _, spec, holes, _, _ in cases:
        for t in a.threads:
            per_binary.setdefault(spec[0], []).extend(
                [spec[1].format(t=t, **holes), spec[3].format(t=t, **holes)])
    env = {"KAPPA_BENCH_LARGE": "1"} if a.long else {}
    krows = {}
    for binary, pats in per_binary.items():
        krows.update(kappa_run(a.build, binary, pats, a.repeats, env))

    print(f"{'case':28} {'thr':>3} {'unit':>7} {'kappa':>8} {'torch':>8} {'k/torch':>8} {'k/ceiling':>9}")
    for label, spec, holes, unit, tfn in cases:
        for t in a.threads:
            torch.set_num_threads(t)
            kr = find(krows, spec[1].format(t=t, **holes))
            cr = find(krows, spec[3].format(t=t, **holes))
            tr = tfn()
            kv = kr[spec[2]] if kr else float("nan")
            cv = cr[spec[4]] if cr else float("nan")
            print(f"{label:28} {t:>3} {unit:>7} {kv:8.1f} {tr:8.1f} {kv / tr:8.2f} {kv / cv:9.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
