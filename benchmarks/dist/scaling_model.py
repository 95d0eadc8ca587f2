#!/usr/bin/env python3
"""Tokens/s and memory per rank of tensor-parallel decoding on P machines.

A model of kappa::dist's decode step, from what kappa measures and stated
assumptions (benchmarks/README.md, "Across machines"):

  step time = weight bytes per rank / (fraction f of the machine's read
              bandwidth B)                                  -- reading weights
            + 2 L allreduces of d float32 (one after W^O, one after W_down)
              each ceil(log2 P) (alpha + 4 d / link)        -- recursive doubling
            + one allgather of the logits row (the head is split by vocabulary),
              ceil(log2 P) steps moving 4 N_T / P bytes doubling each step

Measured on this repository's machine (2 ranks x 1 thread against 1 process
x 2 threads, a 246 M-parameter LLaMA shape): the allreduce payload is
2 d floats per token and layer, as the formula says, and the 2-rank decode
reaches 1.06-1.10 of the single process (the head split by vocabulary). Assumed: B = 100 GB/s per machine (a
server's memory), f = 0.8 (kappa's whole-model decode on one machine of
ours reaches 0.72 of a plain read on one thread), alpha = 25 us per message
over TCP at 25 Gb/s and 10 us at 100 Gb/s (MPI over Ethernet, not RDMA).

  /usr/bin/python3 benchmarks/dist/scaling_model.py
"""
import math

GB = 1e9


def llama70b():
    # d 8192, 80 layers, 64 heads / 8 kv heads (d_head 128), d_ff 28672, N_T 128256
    d, L, H, Hkv, dh, ff, V = 8192, 80, 64, 8, 128, 28672, 128256
    per_layer = d * H * dh * 2 + d * Hkv * dh * 2 + 3 * d * ff
    return dict(name="LLaMA-70B shape, BF16 weights", d=d, L=L, V=V,
                split=per_layer * L * 2 + V * d * 2, replicated=V * d * 2,
                kv_per_token=2 * L * Hkv * dh * 2)


def step(m, P, link_gbps, alpha, B=100 * GB, f=0.8):
    w = m["split"] / P + m["replicated"]
    t_read = w / (f * B)
    hops = math.ceil(math.log2(P)) if P > 1 else 0
    link = link_gbps * GB / 8
    t_ar = 2 * m["L"] * hops * (alpha + 4 * m["d"] / link)
    t_bc = hops * alpha + 4 * m["V"] * (P - 1) / P / link
    return w, t_read, t_ar + t_bc


def main():
    m = llama70b()
    print(m["name"] + ": " + f"{(m['split'] + m['replicated']) / GB:.0f} GB of weights; "
          "decode tokens/s (communication's share of a step) and weights per rank")
    print()
    print("| machines | weights per rank | 25 Gb/s, alpha 25 us | 100 Gb/s, alpha 10 us "
          "| no communication, nothing replicated |")
    print("|---|---|---|---|---|")
    total = m["split"] + m["replicated"]
    for P in (1, 2, 4, 8, 16, 32, 64):
        cells = []
        for gbps, alpha in ((25, 25e-6), (100, 10e-6)):
            w, tr, tc = step(m, P, gbps, alpha)
            cells.append(f"{1 / (tr + tc):.1f} ({100 * tc / (tr + tc):.0f} %)")
        ideal = P * 0.8 * 100 * GB / total
        print(f"| {P} | {w / GB:.1f} GB | {cells[0]} | {cells[1]} | {ideal:.1f} |")
    print()
    print(f"KV cache: {m['kv_per_token'] / 1e3:.0f} kB per token over all ranks "
          "(split with the key/value heads; replicated where P exceeds them)")


if __name__ == "__main__":
    main()
