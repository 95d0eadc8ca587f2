#!/usr/bin/python3
"""Whole-model speed, kappa beside PyTorch on the same machine, in one run.

    /usr/bin/python3 benchmarks/compare_models.py [--bench build/bench/benchmarks/bench_models]
                     [--gpt2-dir DIR] [--large] [--llama-dir DIR] [--repeats 3]

Runs bench_models (kappa, float32, random weights in memory; KAPPA_BENCH_LARGE=1
with --large) and benchmarks/torch_models.py (PyTorch's CPU float32 forward with
a KV cache) on directories of the same shapes (made on first use by
tests/reference/make_gpt2_small_dir.py and make_llama_1b_dir.py), then prints
prefill and decode tokens/s at 1 and 2 threads with the ratio kappa / PyTorch,
and decode's weight bytes per second as a fraction of memcpy's in the same
kappa run. Quote the ratios, not the bare rates: machines differ.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def kappa_run(bench, large, repeats):
    env = dict(os.environ)
    if large:
        env["KAPPA_BENCH_LARGE"] = "1"
    out = subprocess.run(
        [bench, "--benchmark_format=json", f"--benchmark_repetitions={repeats}",
         "--benchmark_report_aggregates_only=true", "--benchmark_min_time=1"],
        env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        # decode benchmarks run on manual time (each step paired with a read)
        name = b["run_name"].replace("/real_time", "").replace("/manual_time", "")
        rows[name] = b
    return rows


def torch_run(dirs, repeats):
    """PyTorch's best of its two CPU paths per phase: Debian's torch 1.13 runs
    matmul on reference BLAS (slow prefill) while its oneDNN path prefills
    ~10x faster but decodes slower; each phase is compared with the faster."""
    best = {}
    for backend in ("blas", "mkldnn"):
        out = subprocess.run([sys.executable, os.path.join(HERE, "torch_models.py"), *dirs,
                              "--threads", "1", "2", "--repeats", str(repeats), "--backend", backend],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            key = (row["model"], row["threads"])
            if key not in best:
                best[key] = row
            else:
                for phase in ("prefill_tokens_per_s", "decode_tokens_per_s"):
                    best[key][phase] = max(best[key][phase], row[phase])
    return list(best.values())


def ensure(dirpath, maker, extra):
    if not os.path.exists(os.path.join(dirpath, "config.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", maker), dirpath, *extra],
                       check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "benchmarks", "bench_models"))
    ap.add_argument("--gpt2-dir", default="/tmp/kappa-gpt2-small")
    ap.add_argument("--llama-dir", default="/tmp/kappa-llama-1b")
    ap.add_argument("--large", action="store_true", help="also the ~1B LLaMA-shaped model")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    ensure(a.gpt2_dir, "make_gpt2_small_dir.py", [])
    dirs = [a.gpt2_dir]
    if a.large:
        ensure(a.llama_dir, "make_llama_1b_dir.py", [])
        dirs.append(a.llama_dir)
    k = kappa_run(a.bench, a.large, a.repeats)
    t = torch_run(dirs, a.repeats)
    names = {a.gpt2_dir: "Gpt2Small", a.llama_dir: "Llama1B"}
    print(f"{'model':10} {'thr':>3} {'phase':8} {'kappa tok/s':>12} {'torch tok/s':>12} {'ratio':>6} {'GB/s':>6} {'/memcpy':>8}")
    for row in t:
        d = a.gpt2_dir if row["model"] == os.path.basename(os.path.normpath(a.gpt2_dir)) else a.llama_dir
        m, thr = names[d], row["threads"]
        copy = k.get(f"BM_Ceiling_Copy_Gpt2Weights/{thr}", {}).get("GB/s")
        for phase, key in (("prefill", "prefill_tokens_per_s"), ("decode", "decode_tokens_per_s")):
            kb = k.get(f"BM_Model_{phase.capitalize()}_{m}/{thr}")
            if kb is None:
                continue
            ratio = kb["tokens/s"] / row[key]
            gbs = kb.get("GB/s")
            frac = f"{gbs / copy:8.2f}" if (gbs and copy) else " " * 8
            print(f"{m:10} {thr:>3} {phase:8} {kb['tokens/s']:12.1f} {row[key]:12.1f} {ratio:6.2f} "
                  f"{(gbs or 0):6.1f} {frac}")
        kb = k.get(f"BM_Model_Decode_{m}_<kappa::Bf16Weights>/{thr}")
        if kb is not None:
            print(f"{m + '-bf16':10} {thr:>3} {'decode':8} {kb['tokens/s']:12.1f} {row['decode_tokens_per_s']:12.1f} "
                  f"{kb['tokens/s'] / row['decode_tokens_per_s']:6.2f} {kb['GB/s']:6.1f} "
                  f"{(kb['GB/s'] / copy if copy else 0):8.2f}")


if __name__ == "__main__":
    main()
