#!/usr/bin/python3
"""PyTorch baseline for kappa's model benchmarks: prefill and decode speed of a
Hugging Face model directory (gpt2 or llama layout) in float32.

    /usr/bin/python3 benchmarks/torch_models.py DIR [DIR ...] [--threads 1 2] [--prompt 128]
                     [--new 64] [--repeats 3] [--prefill-logits last|all]
    /usr/bin/python3 benchmarks/torch_models.py --check tests/data/models/gpt2 tests/data/models/llama

Directories: tests/reference/make_gpt2_small_dir.py and make_llama_1b_dir.py
write full-size ones; the tiny tests/data/models/* work too.

The forward is this file's own (written from transformers' GPT-2 / Llama
semantics, as tests/reference/hf_reference.py, but float32 and with a
preallocated KV cache); it is not Hugging Face's code. Weights of any stored
dtype (F32/F16/BF16, sharded or not) are widened to float32 at load.

Measures, for each thread count T (torch.set_num_threads(T)):
  prefill: one forward over a prompt of --prompt token ids (random, fixed seed)
           into an empty cache; logits of the last row only (--prefill-logits
           all: of every row, as a training-style forward would);
           tokens/s = prompt / seconds
  decode:  after that prefill, --new greedy steps of one token each through
           the KV cache (logits of the one row, argmax); tokens/s = new / seconds
and prints one JSON line per (model, T) with the medians over --repeats runs.
--check instead compares the cached float32 forward with the float64 reference
logits in DIR/reference/logits.npy and prints the largest difference.
"""
import argparse
import json
import math
import mmap
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.mkldnn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_reference as R  # noqa: E402  (only for the RoPE inverse frequencies)


def load_weights(d):
    """name -> float32 torch tensor, from model.safetensors or the sharded index."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    W = {}
    for fn in files:
        with open(os.path.join(d, fn), "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            n = struct.unpack("<Q", mm[:8])[0]
            header = json.loads(mm[8:8 + n].decode("utf-8"))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                a, b = info["data_offsets"]
                dt = info["dtype"]
                buf = np.frombuffer(mm, dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[dt],
                                    count=(b - a) // (2 if dt != "F32" else 4), offset=base + a)
                if dt == "BF16":
                    arr = (buf.astype(np.uint32) << 16).view(np.float32)
                else:
                    arr = buf.astype(np.float32)
                W[name] = torch.from_numpy(arr.reshape(info["shape"]))
            del buf
            mm.close()
    return W


class Proj:
    """y = x W (+ b) with W stored (in, out). backend "blas": torch.matmul (the BLAS
    torch was built with; Debian's python3-torch 1.13 uses the system libblas,
    netlib by default); backend "mkldnn": oneDNN's inner product for inputs of
    >= 8 rows (prefill), torch.matmul for fewer (decode: oneDNN is slow there)
    - keeps a second copy of the weight."""

    def __init__(self, w_in_out, bias, backend):
        self.w = w_in_out.contiguous()
        self.b = bias
        self.mk = None
        if backend == "mkldnn":
            lin = torch.nn.Linear(self.w.shape[0], self.w.shape[1], bias=bias is not None)
            with torch.no_grad():
                lin.weight.copy_(self.w.t())
                if bias is not None:
                    lin.bias.copy_(bias)
            self.mk = torch.utils.mkldnn.to_mkldnn(lin)

    def __call__(self, x):
        if self.mk is not None and x.shape[0] >= 8:
            return self.mk(x.to_mkldnn()).to_dense()
        if self.b is not None:
            return torch.addmm(self.b, x, self.w)
        return torch.matmul(x, self.w)


class Model:
    def __init__(self, d, backend="blas"):
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = json.load(f)
        W = load_weights(d)
        self.W = W
        self.type = self.cfg["model_type"]
        self.backend = backend
        c = self.cfg
        P = {}
        if self.type == "gpt2":
            # files saved from GPT2LMHeadModel's full state dict: "transformer." prefix, masked_bias, lm_head
            W = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in W.items()
                 if not k.endswith("attn.masked_bias") and k != "lm_head.weight"}
            self.W = W
            self.d, self.H, self.L = c["n_embd"], c["n_head"], c["n_layer"]
            self.Hkv, self.hd = self.H, self.d // self.H
            self.V = c["vocab_size"]
            for l in range(self.L):
                pre = f"h.{l}."
                for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):  # Conv1D: already (in, out)
                    P[pre + n] = Proj(W.pop(pre + n + ".weight"), W.pop(pre + n + ".bias"), backend)
                W.pop(pre + "attn.bias", None)
            P["head"] = Proj(W["wte.weight"].t(), None, backend)
        elif self.type in ("llama", "mistral", "qwen2"):
            self.d, self.H, self.L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
            self.Hkv = c["num_key_value_heads"]
            self.hd = R.llama_head_dim(c)
            self.V = c["vocab_size"]
            if self.type == "mistral" and c.get("sliding_window") is not None:
                raise SystemExit("sliding window not benchmarked here")
            qkv_bias = self.type == "qwen2" or c.get("attention_bias", False)
            o_bias = self.type != "qwen2" and c.get("attention_bias", False)
            for l in range(self.L):
                a = f"model.layers.{l}.self_attn."
                m = f"model.layers.{l}.mlp."
                names = ("q_proj", "k_proj", "v_proj")
                # fused [q | k | v] and [gate | up]: one GEMM each
                P[a + "qkv"] = Proj(torch.cat([W.pop(a + n + ".weight") for n in names]).t(),
                                    torch.cat([W.pop(a + n + ".bias") for n in names]) if qkv_bias else None, backend)
                P[a + "o"] = Proj(W.pop(a + "o_proj.weight").t(), W.pop(a + "o_proj.bias") if o_bias else None, backend)
                P[m + "gate_up"] = Proj(torch.cat([W.pop(m + "gate_proj.weight"), W.pop(m + "up_proj.weight")]).t(),
                                        None, backend)
                P[m + "down"] = Proj(W.pop(m + "down_proj.weight").t(), None, backend)
            head = W["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else W.pop("lm_head.weight")
            P["head"] = Proj(head.t(), None, backend)
        else:
            raise SystemExit(f"model_type {self.type} not benchmarked here")
        self.P = P

    # -- cache --------------------------------------------------------------
    def new_cache(self, max_len):
        z = lambda: torch.zeros(self.Hkv, max_len, self.hd)  # noqa: E731
        return {"len": 0, "k": [z() for _ in range(self.L)], "v": [z() for _ in range(self.L)]}

    def _attend(self, q, l, k_new, v_new, cache):
        """q (H, N, hd), k_new/v_new (Hkv, N, hd): appended to the cache, causal attention."""
        N = q.shape[1]
        p = cache["len"]
        T = p + N
        cache["k"][l][:, p:T] = k_new
        cache["v"][l][:, p:T] = v_new
        K = cache["k"][l][:, :T]
        Vv = cache["v"][l][:, :T]
        rep = self.H // self.Hkv
        qg = q.reshape(self.Hkv, rep * N, self.hd)  # head h = g * rep + r
        s = torch.matmul(qg * (1.0 / math.sqrt(self.hd)), K.transpose(1, 2))  # (Hkv, rep N, T)
        if N > 1:
            i = torch.arange(p, T).view(-1, 1)
            j = torch.arange(T).view(1, -1)
            mask = (j > i).repeat(rep, 1)
            s = s.masked_fill(mask, float("-inf"))
        w = torch.softmax(s, dim=-1)
        o = torch.matmul(w, Vv)  # (Hkv, rep N, hd)
        return o.reshape(self.H, N, self.hd).transpose(0, 1).reshape(N, self.H * self.hd)

    # -- forwards -----------------------------------------------------------
    def forward(self, ids, cache, all_logits=False):
        if self.type == "gpt2":
            h = self._gpt2(ids, cache)
        else:
            h = self._llama(ids, cache)
        cache["len"] += len(ids)
        if not all_logits:
            h = h[-1:]
        return self.P["head"](h)

    def _gpt2(self, ids, cache):
        W, P, c = self.W, self.P, self.cfg
        eps = c["layer_norm_epsilon"]
        N, p = len(ids), cache["len"]
        ids = torch.as_tensor(ids)
        h = W["wte.weight"][ids] + W["wpe.weight"][p:p + N]
        for l in range(self.L):
            pre = f"h.{l}."
            a = F.layer_norm(h, (self.d,), W[pre + "ln_1.weight"], W[pre + "ln_1.bias"], eps)
            q, k, v = P[pre + "attn.c_attn"](a).split(self.d, dim=1)
            sh = lambda t: t.reshape(N, self.H, self.hd).transpose(0, 1)  # noqa: E731
            o = self._attend(sh(q), l, sh(k), sh(v), cache)
            h = h + P[pre + "attn.c_proj"](o)
            m = F.layer_norm(h, (self.d,), W[pre + "ln_2.weight"], W[pre + "ln_2.bias"], eps)
            h = h + P[pre + "mlp.c_proj"](F.gelu(P[pre + "mlp.c_fc"](m), approximate="tanh"))
        return F.layer_norm(h, (self.d,), W["ln_f.weight"], W["ln_f.bias"], eps)

    def _rope(self, p, N):
        """cos/sin rows of positions p .. p+N-1; a table up to the cache length is
        built once (dynamic NTK depends on the length, so it is rebuilt per call)."""
        rs = self.cfg.get("rope_scaling") or {}
        if rs.get("rope_type", rs.get("type")) == "dynamic":
            inv, att = R.rope_inv_freq(self.cfg, p + N)
            cos, sin = R.rope_cos_sin(inv, att, torch.arange(p, p + N))
            return cos.float(), sin.float()
        if getattr(self, "_rope_len", 0) < p + N:
            n = max(p + N, 256)
            inv, att = R.rope_inv_freq(self.cfg, n)
            cos, sin = R.rope_cos_sin(inv, att, torch.arange(n))
            self._rope_cs, self._rope_len = (cos.float(), sin.float()), n
        return self._rope_cs[0][p:p + N], self._rope_cs[1][p:p + N]

    def _llama(self, ids, cache):
        W, P, c = self.W, self.P, self.cfg
        eps = c["rms_norm_eps"]
        N, p = len(ids), cache["len"]
        cos, sin = self._rope(p, N)
        half = self.hd // 2

        def rope(x):  # x (heads, N, hd): x cos + rotate_half(x) sin
            x1, x2 = x[..., :half], x[..., half:]
            return x * cos + torch.cat([-x2, x1], dim=-1) * sin

        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        h = W["model.embed_tokens.weight"][torch.as_tensor(ids)]
        qd, kd = self.H * self.hd, self.Hkv * self.hd
        ffn = c["intermediate_size"]
        for l in range(self.L):
            pre = f"model.layers.{l}."
            x = rms(h, W[pre + "input_layernorm.weight"])
            qkv = P[pre + "self_attn.qkv"](x)
            q = qkv[:, :qd].reshape(N, self.H, self.hd).transpose(0, 1)
            k = qkv[:, qd:qd + kd].reshape(N, self.Hkv, self.hd).transpose(0, 1)
            v = qkv[:, qd + kd:].reshape(N, self.Hkv, self.hd).transpose(0, 1)
            o = self._attend(rope(q), l, rope(k), v, cache)
            h = h + P[pre + "self_attn.o"](o)
            x = rms(h, W[pre + "post_attention_layernorm.weight"])
            gu = P[pre + "mlp.gate_up"](x)
            h = h + P[pre + "mlp.down"](F.silu(gu[:, :ffn]) * gu[:, ffn:])
        return rms(h, W["model.norm.weight"])


def check(d, backend):
    """Cached float32 forward vs the float64 reference (a full uncached forward for
    dynamic NTK, whose frequencies change with the length by design)."""
    m = Model(d, backend)
    ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
    ref = np.load(os.path.join(d, "reference", "logits.npy"))
    rs = m.cfg.get("rope_scaling") or {}
    split = len(ids) if rs.get("rope_type", rs.get("type")) == "dynamic" else 8
    with torch.no_grad():
        cache = m.new_cache(len(ids))
        rows = [m.forward(ids[:split], cache, all_logits=True)]
        for t in ids[split:]:
            rows.append(m.forward([t], cache))
    got = torch.cat(rows).double().numpy()
    err = float(np.abs(got - ref).max())
    print(json.dumps({"check": os.path.basename(os.path.normpath(d)), "backend": backend,
                      "max_abs_vs_float64_reference": err,
                      "max_abs_logit": float(np.abs(ref).max())}))
    return err


def bench(d, threads, prompt, new, repeats, all_logits, backend):
    m = Model(d, backend)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, m.V, (prompt,), generator=g).tolist()
    for T in threads:
        torch.set_num_threads(T)
        pre_t, dec_t = [], []
        with torch.no_grad():
            for r in range(repeats + 1):  # the first run warms up and is not counted
                cache = m.new_cache(prompt + new)
                t0 = time.perf_counter()
                logits = m.forward(ids, cache, all_logits=all_logits)
                t1 = time.perf_counter()
                nxt = int(torch.argmax(logits[-1]))
                for _ in range(new):
                    nxt = int(torch.argmax(m.forward([nxt], cache)[-1]))
                t2 = time.perf_counter()
                if r:
                    pre_t.append(t1 - t0)
                    dec_t.append(t2 - t1)
        print(json.dumps({
            "model": os.path.basename(os.path.normpath(d)), "model_type": m.type, "threads": T,
            "layers": m.L, "d": m.d, "heads": m.H, "kv_heads": m.Hkv, "vocab": m.V,
            "dtype": "float32", "backend": backend, "prompt_tokens": prompt, "new_tokens": new, "prefill_logits": "all" if all_logits else "last",
            "prefill_tokens_per_s": prompt / statistics.median(pre_t),
            "decode_tokens_per_s": new / statistics.median(dec_t),
            "prefill_s_median": statistics.median(pre_t), "decode_s_median": statistics.median(dec_t),
            "repeats": repeats, "torch": torch.__version__}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill-logits", choices=["last", "all"], default="last")
    ap.add_argument("--backend", choices=["blas", "mkldnn"], default="blas",
                    help="projections through torch.matmul (default) or oneDNN for prefill (see Proj)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for d in a.dirs:
        if a.check:
            check(d, a.backend)
        else:
            bench(d, a.threads, a.prompt, a.new, a.repeats, a.prefill_logits == "all", a.backend)


if __name__ == "__main__":
    main()
