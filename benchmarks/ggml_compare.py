#!/usr/bin/env python3
"""The alternating runs and the ratio table of benchmarks/ggml_compare.sh.

Run by the shell script, which builds llama-bench and exports the settings
(LLAMA_BENCH, PROMPT, GEN, THREADS, REPS, ROUNDS, KAPPA_GENERATE, KAPPA_BENCH,
KAPPA_PROMPT, OUT, KEEP_BUSY); the arguments are the GGUF files. See the script's --help.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time

ENV = os.environ
LLAMA_BENCH = ENV["LLAMA_BENCH"]
OURS = ENV.get("KAPPA_GENERATE", "")
PROMPT, GEN, REPS, ROUNDS = (int(ENV[k]) for k in ("PROMPT", "GEN", "REPS", "ROUNDS"))
THREADS = [int(t) for t in ENV["THREADS"].split(",") if t]
KEEP_BUSY = ENV.get("KEEP_BUSY", "0") == "1"
OURS_BENCH = ENV.get("KAPPA_BENCH", "0") == "1"
BUSY_CORES = 0.25  # other processes' CPU use above which a run is left out

# generate's summary line on stderr
OUR_LINE = re.compile(r"prompt: (\d+) tokens \| prefill: ([\d.]+) tokens/s \| "
                      r"decode: ([\d.]+) tokens/s \((\d+) tokens\)")


def cpu_seconds_busy():
    """All CPU time of the machine so far except idle and iowait, in seconds."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def timed(cmd):
    """Runs cmd under /usr/bin/time -v: (stdout, stderr, peak RSS in bytes,
    other processes' cores during the run, wall seconds)."""
    c0, t0 = cpu_seconds_busy(), time.time()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    wall = time.time() - t0
    busy = cpu_seconds_busy() - c0

    def field(name):
        m = re.search(name + r": ([\d.]+)", r.stderr)
        return float(m.group(1)) if m else 0.0

    own = field(r"User time \(seconds\)") + field(r"System time \(seconds\)")
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {r.returncode}:\n{r.stderr[-2000:]}")
    return r.stdout, r.stderr, field(r"Maximum resident set size \(kbytes\)") * 1024, \
        max(0.0, (busy - own) / wall), wall


def run_llama(model, t):
    out, _, rss, others, wall = timed([LLAMA_BENCH, "-m", model, "-p", str(PROMPT), "-n", str(GEN),
                                      "-t", str(t), "-r", str(REPS), "-o", "json"])
    res = {"tool": "llama.cpp", "rss": rss, "others_cores": others, "wall": wall}
    for row in json.loads(out):
        res["pp" if row["n_prompt"] > 0 else "tg"] = row["avg_ts"]
    return res


# generate --bench's table rows: | prefill | tokens | median | min | max |
BENCH_ROW = re.compile(r"\| (prefill|decode) +\| +(\d+) +\| +([\d.]+) +\|")


def run_ours(model, t):
    if OURS_BENCH:  # llama-bench's protocol: a warm-up pass, then REPS runs
        out, err, rss, others, wall = timed([OURS, "--model", model, "--threads", str(t), "--bench",
                                          "--bench-prompt", str(PROMPT), "--bench-gen", str(GEN),
                                          "--reps", str(REPS)])
        rows = {m.group(1): m for m in BENCH_ROW.finditer(out + err)}
        if set(rows) != {"prefill", "decode"}:
            raise RuntimeError("no table from generate --bench:\n" + err[-2000:])
        return {"tool": "kappa", "rss": rss, "others_cores": others, "wall": wall,
                "prompt_tokens": int(rows["prefill"].group(2)), "pp": float(rows["prefill"].group(3)),
                "tg": float(rows["decode"].group(3)), "tg_tokens": int(rows["decode"].group(2))}
    _, err, rss, others, wall = timed([OURS, "--model", model, "--greedy", "--threads", str(t),
                                      "--max-new-tokens", str(GEN), "--prompt", ENV["KAPPA_PROMPT"]])
    m = OUR_LINE.search(err)
    if not m:
        raise RuntimeError("no summary line from generate:\n" + err[-2000:])
    return {"tool": "kappa", "rss": rss, "others_cores": others, "wall": wall,
            "prompt_tokens": int(m.group(1)), "pp": float(m.group(2)), "tg": float(m.group(3)),
            "tg_tokens": int(m.group(4))}


def main(models):
    results = []
    with open(ENV["OUT"], "a") as log:
        for rnd in range(ROUNDS):
            for fi, model in enumerate(models):
                for t in THREADS:
                    order = [run_llama] + ([run_ours] if OURS else [])
                    if (rnd + fi + t) % 2 == 1:
                        order.reverse()
                    for fn in order:
                        res = fn(model, t)
                        res.update(file=os.path.basename(model), threads=t, round=rnd,
                                   utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                        log.write(json.dumps(res) + "\n")
                        log.flush()
                        results.append(res)
                        print(f"round {rnd + 1}/{ROUNDS} {res['file']} t={t} {res['tool']}: "
                              f"pp {res['pp']:.1f} tg {res['tg']:.2f} tokens/s "
                              f"(others {res['others_cores']:.2f} cores)", file=sys.stderr)
    table(models, results)


def table(models, results):
    print(f"\nmedians over {ROUNDS} rounds; pp = prompt processing ({PROMPT} tokens), "
          f"tg = generation ({GEN} tokens), tokens/s; ratio = kappa / llama.cpp")
    print("| file | threads | runs kept | llama.cpp pp | kappa pp | ratio | llama.cpp tg | kappa tg "
          "| ratio | peak RSS llama.cpp / kappa |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        name = os.path.basename(model)
        for t in THREADS:
            cell = {}
            for tool in ("llama.cpp", "kappa"):
                rows = [r for r in results if r["file"] == name and r["threads"] == t
                        and r["tool"] == tool]
                kept = [r for r in rows if KEEP_BUSY or r["others_cores"] < BUSY_CORES]
                cell[tool] = (rows, kept)
            (l_all, l), (k_all, k) = cell["llama.cpp"], cell["kappa"]

            def med(rows, key):
                return statistics.median(r[key] for r in rows) if rows else float("nan")

            def rss(rows):
                return max(r["rss"] for r in rows) / 1e9 if rows else float("nan")

            lpp, ltg, kpp, ktg = med(l, "pp"), med(l, "tg"), med(k, "pp"), med(k, "tg")
            prompt_note = ""
            if k and any(r["prompt_tokens"] != PROMPT for r in k):
                prompt_note = f" (our prompt: {k[0]['prompt_tokens']} tokens)"
            if OURS:
                print(f"| {name}{prompt_note} | {t} | {len(l)}/{len(l_all)}, {len(k)}/{len(k_all)} "
                      f"| {lpp:.1f} | {kpp:.1f} | {kpp / lpp:.2f} | {ltg:.2f} | {ktg:.2f} "
                      f"| {ktg / ltg:.2f} | {rss(l_all):.2f} / {rss(k_all):.2f} GB |")
            else:
                print(f"| {name} | {t} | {len(l)}/{len(l_all)} | {lpp:.1f} | - | - | {ltg:.2f} "
                      f"| - | - | {rss(l_all):.2f} GB / - |")


if __name__ == "__main__":
    main(sys.argv[1:])
