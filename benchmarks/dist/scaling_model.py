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

For a mixture of experts split by whole experts, the weight bytes a rank
reads in a layer include the chosen experts it holds, and the busiest rank
sets the layer's pace: E[max over ranks] is simulated for DeepSeek-V2's
group-limited routing on i.i.d. router logits. Split by columns, every rank
reads k / P experts' worth.

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
import random

GB = 1e9
BF16 = 2


def llama70b():
    # d 8192, 80 layers, 64 heads / 8 kv heads (d_head 128), d_ff 28672, N_T 128256
    d, L, H, Hkv, dh, ff, V = 8192, 80, 64, 8, 128, 28672, 128256
    per_layer = d * H * dh * 2 + d * Hkv * dh * 2 + 3 * d * ff
    split = (per_layer * L + V * d) * BF16
    return dict(name="LLaMA-70B shape, BF16 weights", d=d, L=L, V=V,
                split=split, replicated=V * d * BF16,
                read=lambda P: split / P + V * d * BF16,
                cache_note=f"KV cache: {2 * L * Hkv * dh * BF16 / 1e3:.0f} kB per token over "
                           "all ranks (split with the key/value heads; replicated where P "
                           "exceeds them)")


def expected_max_load(P, n_experts=160, k=6, n_group=8, topk_group=3, samples=4000):
    """E[max over ranks of the chosen experts a rank holds] for one token of
    one layer: router logits i.i.d. normal (routing that balances the
    experts on average, as DeepSeek's training aims for), DeepSeek-V2's
    group-limited greedy selection (the best topk_group of n_group groups by
    their best expert, then the top k in them), experts split in contiguous
    ranges [E r / P, E (r + 1) / P) as kappa::dist splits them."""
    rng = random.Random(7)
    g = n_experts // n_group
    owner = [next(r for r in range(P) if e < (r + 1) * n_experts // P) for e in range(n_experts)]
    total = 0
    for _ in range(samples):
        s = [rng.gauss(0, 1) for _ in range(n_experts)]
        groups = sorted(range(n_group), key=lambda j: -max(s[j * g:(j + 1) * g]))[:topk_group]
        cand = [e for j in groups for e in range(j * g, (j + 1) * g)]
        chosen = sorted(cand, key=lambda e: -s[e])[:k]
        load = [0] * P
        for e in chosen:
            load[owner[e]] += 1
        total += max(load)
    return total / samples


def deepseek_v2():
    # DeepSeek-V2 (236 B parameters, 21 B active): d 5120, 60 layers, 128
    # heads; q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64,
    # v_head 128; layer 0 dense (d_ff 12288), layers 1-59 160 routed experts
    # of width 1536 (top 6, 8 groups, 3 kept) and 2 shared; N_T 102400.
    d, L, H, V = 5120, 60, 128, 102400
    qr, kvr, nope, rope, dv, ff, fe, E, k = 1536, 512, 128, 64, 128, 12288, 1536, 160, 6
    attn_split = qr * H * (nope + rope) + kvr * H * (nope + dv) + H * dv * d
    attn_repl = d * qr + d * (kvr + rope)
    expert = 3 * d * fe
    shared = 2 * expert
    split = (L * (attn_split + shared) - shared + 3 * d * ff + (L - 1) * E * expert + V * d) * BF16
    repl = (L * attn_repl + (L - 1) * d * E + V * d) * BF16
    loads = {}

    def read(P):
        if P not in loads:
            loads[P] = expected_max_load(P)
        dense = (L * attn_split + (L - 1) * shared + 3 * d * ff + V * d) * BF16
        return dense / P + repl + (L - 1) * loads[P] * expert * BF16

    def read_columns(P):  # every expert split by columns: each rank reads k / P experts
        dense = (L * attn_split + (L - 1) * shared + 3 * d * ff + V * d) * BF16
        return (dense + (L - 1) * k * expert * BF16) / P + repl

    return dict(name="DeepSeek-V2 shape (236 B, 21 B active), BF16 weights", d=d, L=L, V=V,
                split=split, replicated=repl, read=read, loads=loads, k=k,
                read_columns=read_columns,
                cache_note=f"Latent cache: {L * (kvr + rope) * BF16 / 1e3:.0f} kB per token, "
                           "replicated on every rank (every head reads the whole latent)")


def step(m, P, link_gbps, alpha, B=100 * GB, f=0.8, read="read"):
    w = m["split"] / P + m["replicated"]
    t_read = m[read](P) / (f * B)
    hops = math.ceil(math.log2(P)) if P > 1 else 0
    link = link_gbps * GB / 8
    t_ar = 2 * m["L"] * hops * (alpha + 4 * m["d"] / link)
    t_bc = hops * alpha + 4 * m["V"] * (P - 1) / P / link
    return w, t_read, t_ar + t_bc


def table(m, machines):
    print(m["name"] + ": " + f"{(m['split'] + m['replicated']) / GB:.0f} GB of weights; "
          "decode tokens/s (communication's share of a step) and weights per rank")
    print()
    head = "| machines | weights per rank | 25 Gb/s, alpha 25 us | 100 Gb/s, alpha 10 us " \
           "| no communication, nothing replicated |"
    if "loads" in m:
        head += " busiest rank's experts per layer | experts by columns, 100 Gb/s |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    total = m["split"] + m["replicated"]
    one = m["read"](1)
    for P in machines:
        cells = []
        for gbps, alpha in ((25, 25e-6), (100, 10e-6)):
            w, tr, tc = step(m, P, gbps, alpha)
            cells.append(f"{1 / (tr + tc):.1f} ({100 * tc / (tr + tc):.0f} %)")
        ideal = P * 0.8 * 100 * GB / one
        row = f"| {P} | {w / GB:.1f} GB | {cells[0]} | {cells[1]} | {ideal:.1f} |"
        if "loads" in m:
            _, tr, tc = step(m, P, 100, 10e-6, read="read_columns")
            row += f" {m['loads'][P]:.2f} of {m['k']} | {1 / (tr + tc):.1f} ({100 * tc / (tr + tc):.0f} %) |"
        print(row)
    print()
    print(m["cache_note"])
    print()


def main():
    table(llama70b(), (1, 2, 4, 8, 16, 32, 64))
    table(deepseek_v2(), (1, 2, 4, 8, 16, 32))


if __name__ == "__main__":
    main()
