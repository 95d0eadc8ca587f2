#!/usr/bin/python3
"""Independent reference pieces for kappa's Transformer models.

Run with Debian's interpreter (python3-torch 1.13, numpy); no transformers,
safetensors or regex package is needed or used.

This module is the *reference*: it was written from the upstream model code's
semantics (Hugging Face transformers modeling_gpt2.py, modeling_llama.py,
modeling_mistral.py, modeling_qwen2.py, modeling_bert.py, modeling_rope_utils.py,
masking_utils.py, modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3.py,
modeling_phi3.py, modeling_gemma2.py, modeling_gemma3.py; DeepSeek's
modeling_deepseek.py of the hub repositories deepseek-ai/DeepSeek-V2-Lite,
DeepSeek-V2 and DeepSeek-V3; torch.nn.Transformer), never from kappa's C++.
Every forward here computes in float64 from the weights exactly as they are
stored (so F16/BF16 files are referenced through their rounded values).

Contents
  * safetensors writer/reader (hand-written format: u64 LE header length, JSON
    header {name: {dtype, shape, data_offsets}, "__metadata__"}, raw LE bytes)
  * F16 / BF16 rounding (round to nearest even)
  * byte-level BPE: GPT-2 bytes_to_unicode, the GPT-2 and Llama-3 pre-split
    regexes implemented by hand over unicodedata categories, merge training,
    rank-based encoding with added-token splitting
  * forwards: gpt2, llama-family (llama / mistral / qwen2 / qwen3 / phi3, rope
    scaling incl. longrope and partial rotary), gemma2 / gemma3_text (gemma_forward),
    deepseek_v2 (MLA), bert (BertForMaskedLM), the original encoder-decoder
  * mixture of experts (issue 26): Mixtral and Qwen2-MoE (inside the llama-family
    forward), DeepSeek-V2 / V2-Lite / V3 (inside the DeepSeek forward); routing
    in route(), the block in moe_block(), which layers are sparse in moe_layer_ids()
  * greedy decoding (uncached) and cached decoding for validation
"""
import json
import math
import os
import struct
import unicodedata

import numpy as np
import torch

DT = torch.float64

# ----------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------

_ST_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2),
              "F64": (np.float64, 8), "I64": (np.int64, 8)}


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_to(a, dtype):
    """The float64 value a weight has once stored as dtype ("F32"/"F16"/"BF16")."""
    a32 = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a32.astype(np.float64)
    if dtype == "F16":
        return a32.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a32)).astype(np.float64)
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtypes=None, metadata=None):
    """tensors: ordered dict name -> numpy array (any float); dtypes: name -> "F32"|"F16"|"BF16"
    (default F32). Returns the number of data bytes."""
    dtypes = dtypes or {}
    header = {"__metadata__": metadata or {"format": "pt"}}
    blobs = []
    off = 0
    for name, arr in tensors.items():
        dt = dtypes.get(name, "F32")
        a = np.asarray(arr)
        if dt == "F32":
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif dt == "F16":
            raw = np.ascontiguousarray(a.astype(np.float32).astype("<f2")).tobytes()
        elif dt == "BF16":
            raw = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
        elif dt == "F64":
            raw = np.ascontiguousarray(a, dtype="<f8").tobytes()
        elif dt == "I64":
            raw = np.ascontiguousarray(a, dtype="<i8").tobytes()
        else:
            raise ValueError(dt)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return off


def write_safetensors_streaming(path, specs, metadata=None):
    """Large files without holding every tensor: specs is a list of
    (name, shape, dtype, make) where make() returns the float32 numpy array;
    tensors are generated and written one at a time, in list order."""
    size = {"F32": 4, "F16": 2, "BF16": 2}
    header = {"__metadata__": metadata or {"format": "pt"}}
    off = 0
    for name, shape, dt, _ in specs:
        n = int(np.prod(shape)) * size[dt]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, dt, make in specs:
            a = np.asarray(make(), dtype=np.float32).reshape(shape)
            if dt == "F32":
                raw = a.astype("<f4").tobytes()
            elif dt == "F16":
                raw = a.astype("<f2").tobytes()
            else:
                raw = f32_to_bf16_bits(a).astype("<u2").tobytes()
            assert len(raw) == header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            f.write(raw)
    return off


def read_safetensors(path):
    """name -> float64 numpy array (the stored values, widened)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[base + a:base + b]
        dt = info["dtype"]
        if dt == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).astype(np.float64)
        else:
            np_dt = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8"}[dt]
            arr = np.frombuffer(raw, dtype=np_dt).astype(np.float64)
        out[name] = arr.reshape(info["shape"])
    return out


def save_npy(path, arr, dtype):
    np.save(path, np.ascontiguousarray(np.asarray(arr), dtype=dtype))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------
# byte-level BPE
# ----------------------------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode map, in GPT-2's order
    (the order of the first 256 ids of GPT-2's encoder.json)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return list(zip(bs, [chr(c) for c in cs]))  # ordered pairs


BYTE_ORDER = bytes_to_unicode()
BYTE_ENCODER = dict(BYTE_ORDER)
BYTE_DECODER = {v: k for k, v in BYTE_ENCODER.items()}

# Unicode White_Space (what \s means in the Rust/Oniguruma regexes of tokenizers)
_WS = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
          "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def _is_ws(c):
    return c in _WS


def _is_l(c):
    return unicodedata.category(c).startswith("L")


def _is_n(c):
    return unicodedata.category(c).startswith("N")


def _is_other(c):  # [^\s\p{L}\p{N}]
    return not (_is_ws(c) or _is_l(c) or _is_n(c))


_CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def _contraction(text, i, ignore_case):
    if text[i] != "'":
        return 0
    for c in sorted(_CONTRACTIONS, key=len, reverse=True):
        seg = text[i:i + len(c)]
        if (seg.lower() if ignore_case else seg) == c:
            return len(c)
    return 0


def _run(text, j, pred):
    n = len(text)
    while j < n and pred(text[j]):
        j += 1
    return j


def _ws_tail(text, i):
    """\\s+(?!\\S)|\\s+ at i (text[i] is whitespace): end of the match."""
    n = len(text)
    k = _run(text, i, _is_ws)
    if k == n or k - 1 > i:
        return n if k == n else k - 1
    return k  # a single whitespace before a non-space: \s+


def split_gpt2(text):
    """GPT-2's pre-split regex, by hand:
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""
    out = []
    i, n = 0, len(text)
    while i < n:
        m = _contraction(text, i, ignore_case=False)
        if m:
            out.append(text[i:i + m]); i += m; continue
        j = i + 1 if (text[i] == " " and i + 1 < n) else i
        done = False
        for pred in (_is_l, _is_n, _is_other):
            if pred(text[j]):
                k = _run(text, j, pred)
                out.append(text[i:k]); i = k; done = True
                break
        if done:
            continue
        # text[i] is whitespace here
        k = _ws_tail(text, i)
        out.append(text[i:k]); i = k
    return out


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def split_llama3(text):
    """The Llama-3 (cl100k-style) pre-split regex, by hand (LLAMA3_PATTERN)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        m = _contraction(text, i, ignore_case=True)
        if m:
            out.append(text[i:i + m]); i += m; continue
        # [^\r\n\p{L}\p{N}]?\p{L}+
        if _is_l(c):
            k = _run(text, i, _is_l); out.append(text[i:k]); i = k; continue
        if c not in "\r\n" and not _is_n(c) and i + 1 < n and _is_l(text[i + 1]):
            k = _run(text, i + 1, _is_l); out.append(text[i:k]); i = k; continue
        # \p{N}{1,3}
        if _is_n(c):
            k = i
            while k < n and k - i < 3 and _is_n(text[k]):
                k += 1
            out.append(text[i:k]); i = k; continue
        # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        j = i + 1 if (c == " " and i + 1 < n and _is_other(text[i + 1])) else i
        if _is_other(text[j]):
            k = _run(text, j, _is_other)
            k = _run(text, k, lambda ch: ch in "\r\n")
            out.append(text[i:k]); i = k; continue
        # c is whitespace: \s*[\r\n]+
        k = _run(text, i, _is_ws)
        last_nl = max((p for p in range(i, k) if text[p] in "\r\n"), default=-1)
        if last_nl >= 0:
            out.append(text[i:last_nl + 1]); i = last_nl + 1; continue
        k = _ws_tail(text, i)
        out.append(text[i:k]); i = k
    return out


def to_byte_unicode(s):
    return "".join(BYTE_ENCODER[b] for b in s.encode("utf-8"))


def train_merges(text, n_merges, split):
    """Plain BPE training over the byte-unicode pre-tokens of text: repeatedly merge
    the most frequent adjacent pair (ties: the lexicographically smallest pair)."""
    words = {}
    for w in split(text):
        t = tuple(to_byte_unicode(w))
        words[t] = words.get(t, 0) + 1
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1]); i += 2
                else:
                    out.append(w[i]); i += 1
            t = tuple(out)
            new[t] = new.get(t, 0) + c
        words = new
    return merges


class ByteBPE:
    """vocab: the 256 byte tokens in GPT-2 order, then one token per merge, then
    the special (added) tokens."""

    def __init__(self, merges, specials, split, add_bos=None):
        self.merges = list(merges)
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        self.vocab = {}
        for _, ch in BYTE_ORDER:
            self.vocab[ch] = len(self.vocab)
        for a, b in self.merges:
            if a + b not in self.vocab:
                self.vocab[a + b] = len(self.vocab)
        self.specials = list(specials)
        for s in self.specials:
            self.vocab[s] = len(self.vocab)
        self.split = split
        self.add_bos = add_bos  # special token string prepended, or None
        self.inv = {v: k for k, v in self.vocab.items()}

    def __len__(self):
        return len(self.vocab)

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = (parts[i], parts[i + 1]), r
            if best is None:
                break
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    out.append(parts[i] + parts[i + 1]); i += 2
                else:
                    out.append(parts[i]); i += 1
            parts = out
        return parts

    def encode(self, text):
        ids = [self.vocab[self.add_bos]] if self.add_bos else []
        # split out added tokens first (leftmost, longest)
        pieces, i, start = [], 0, 0
        while i < len(text):
            hit = None
            for s in sorted(self.specials, key=len, reverse=True):
                if text.startswith(s, i):
                    hit = s
                    break
            if hit:
                if start < i:
                    pieces.append((False, text[start:i]))
                pieces.append((True, hit))
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            pieces.append((False, text[start:]))
        for special, piece in pieces:
            if special:
                ids.append(self.vocab[piece])
                continue
            for w in self.split(piece):
                for tok in self.bpe(to_byte_unicode(w)):
                    ids.append(self.vocab[tok])
        return ids

    def decode(self, ids):
        out = bytearray()
        for t in ids:
            s = self.inv[t]
            if s in self.specials:
                out += s.encode("utf-8")
            else:
                out += bytes(BYTE_DECODER[c] for c in s)
        return out.decode("utf-8", errors="replace")

    def merges_strings(self):
        return [a + " " + b for a, b in self.merges]


# ----------------------------------------------------------------------------
# common math (float64 torch)
# ----------------------------------------------------------------------------

def T(a):
    return torch.as_tensor(np.asarray(a), dtype=DT)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    # LlamaRMSNorm / DeepseekV2RMSNorm: x * rsqrt(mean(x^2) + eps), then * weight
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_new(x):
    # transformers.activations.NewGELUActivation (GPT-2's "gelu_new"): tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_erf(x):
    # BERT's "gelu": exact erf form
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def softmax_rows(s):
    s = s - s.max(-1, keepdim=True).values
    e = torch.exp(s)
    return e / e.sum(-1, keepdim=True)


# What Hugging Face's output_hidden_states / output_attentions return, recorded
# by the forwards below when RECORD is a dict {"hidden": [], "attn": []}:
# "hidden" gets the residual stream h at the start of every decoder layer (the
# embeddings first), the caller appends the final normed hidden state (HF's
# last entry); "attn" gets each layer's attention probabilities (H, Nq, Nk)
# after the mask and softmax (eval: no dropout).
RECORD = None


def record(kind, t):
    if RECORD is not None:
        RECORD[kind].append(t.clone())


def attend(q, k, v, scale, allowed):
    """q (H, Nq, dk), k (H, Nk, dk), v (H, Nk, dv), allowed (Nq, Nk) bool -> (H, Nq, dv)."""
    s = scale * (q @ k.transpose(-1, -2))
    s = s.masked_fill(~allowed, float("-inf"))
    p = softmax_rows(s)
    record("attn", p)
    return p @ v


def causal_allowed(q_pos, k_pos, sliding_window=None):
    """HF semantics: key j visible to query i iff j <= i and, with a sliding window W,
    j > i - W (masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window).
    So query i sees the W keys i-W+1 .. i (itself included)."""
    qp = torch.as_tensor(q_pos).view(-1, 1)
    kp = torch.as_tensor(k_pos).view(1, -1)
    a = kp <= qp
    if sliding_window is not None:
        a = a & (kp > qp - sliding_window)
    return a


# ----------------------------------------------------------------------------
# GPT-2 (modeling_gpt2.py)
# ----------------------------------------------------------------------------

def gpt2_forward(W, cfg, ids, cache=None):
    """W: HF names (no "transformer." prefix, as the hub files) -> float64 tensors.
    Conv1D weights are (in, out): y = x @ W + b. Returns (logits, hidden, cache)."""
    d, H = cfg["n_embd"], cfg["n_head"]
    hd = d // H
    eps = cfg["layer_norm_epsilon"]
    past = 0 if cache is None else cache["len"]
    ids = torch.as_tensor(ids)
    N = ids.numel()
    pos = torch.arange(past, past + N)
    h = W["wte.weight"][ids] + W["wpe.weight"][pos]
    new_cache = {"len": past + N, "k": [], "v": []}
    for l in range(cfg["n_layer"]):
        record("hidden", h)
        p = f"h.{l}."
        a = layer_norm(h, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, dim=-1)
        q = q.view(N, H, hd).transpose(0, 1)
        k = k.view(N, H, hd).transpose(0, 1)
        v = v.view(N, H, hd).transpose(0, 1)
        if cache is not None:
            k = torch.cat([cache["k"][l], k], dim=1)
            v = torch.cat([cache["v"][l], v], dim=1)
        new_cache["k"].append(k); new_cache["v"].append(v)
        kpos = torch.arange(0, past + N)
        o = attend(q, k, v, 1.0 / math.sqrt(hd), causal_allowed(pos, kpos))
        o = o.transpose(0, 1).reshape(N, d)
        h = h + (o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"])
        m = layer_norm(h, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        h = h + (m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"])
    hidden = layer_norm(h, W["ln_f.weight"], W["ln_f.bias"], eps)
    logits = hidden @ W["wte.weight"].T  # tied lm_head
    return logits, hidden, new_cache


# ----------------------------------------------------------------------------
# RoPE (modeling_rope_utils.py) and the llama family
# ----------------------------------------------------------------------------

def llama_head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_inv_freq(cfg, seq_len):
    """(inv_freq (dim/2,), attention_factor) following transformers' ROPE_INIT_FUNCTIONS
    (modeling_rope_utils.py, v4.45+ where rope dim = config.head_dim if set). Computed
    in float64 (upstream computes inv_freq in float32; the difference is rounding).
    seq_len: the length the rotary embedding is evaluated for ('dynamic' and
    'longrope' use it): max(position_ids) + 1 of the forward = past + N.
    Partial rotary (partial_rotary_factor, Phi-4-mini): the rope dim is
    int(head_dim * partial_rotary_factor); apply_rope rotates only those first dims."""
    base = float(cfg["rope_theta"])
    dim = llama_head_dim(cfg)
    if cfg.get("partial_rotary_factor") is not None:
        dim = int(dim * cfg["partial_rotary_factor"])
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type", "default"))
    idx = torch.arange(0, dim, 2, dtype=DT) / dim
    inv = 1.0 / (base ** idx)
    if rtype == "default":
        return inv, 1.0
    if rtype == "longrope":
        # _compute_longrope_parameters + dynamic_rope_update's longrope_frequency_update:
        #   orig = original_max_position_embeddings (top-level config key, as the Phi-3 /
        #   Phi-4 hub configs; or inside rope_scaling);
        #   factor = rope_scaling["factor"] if given, else max_position_embeddings / orig;
        #   attention_factor = rope_scaling["attention_factor"] if given, else
        #     1 if factor <= 1 else sqrt(1 + ln(factor) / ln(orig)), multiplying cos AND sin
        #     (so only the rotated dims of q and k are scaled), for short and long alike;
        #   ext = long_factor if seq_len > orig else short_factor, seq_len = max(position_ids) + 1
        #     of THIS forward call (a full pass: its length; a cached step: past + N);
        #   inv_freq_i = 1 / (ext_i * base^(2i/dim)).
        orig = cfg.get("original_max_position_embeddings") or rs.get("original_max_position_embeddings")
        factor = rs.get("factor") or cfg["max_position_embeddings"] / orig
        att = rs.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1.0 else math.sqrt(1.0 + math.log(factor) / math.log(orig))
        ext = rs["long_factor"] if seq_len > orig else rs["short_factor"]
        assert len(ext) == dim // 2, (len(ext), dim)
        return inv / torch.as_tensor(ext, dtype=DT), float(att)
    factor = float(rs["factor"])
    if rtype == "linear":
        # position / factor  <=>  inv_freq / factor
        return inv / factor, 1.0
    if rtype == "dynamic":
        # _compute_dynamic_ntk_parameters with seq_len = max(position_ids) + 1 of the
        # current forward (dynamic_rope_update, v4.45+; the older
        # LlamaDynamicNTKScalingRotaryEmbedding used seq_len = kv length: the same
        # number for a full uncached forward). Unchanged while seq_len <= max_pos.
        mpe = cfg["max_position_embeddings"]
        L = seq_len if seq_len > mpe else mpe
        b = base * ((factor * L / mpe) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (b ** idx), 1.0
    if rtype == "llama3":
        low_ff = float(rs["low_freq_factor"]); high_ff = float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        low_wl, high_wl = old / low_ff, old / high_ff
        wl = 2 * math.pi / inv
        out = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = (wl >= high_wl) & (wl <= low_wl)
        return torch.where(medium, smoothed, out), 1.0
    raise ValueError(f"rope type {rtype} not referenced here")


def rope_cos_sin(inv, att, positions):
    f = torch.outer(torch.as_tensor(positions, dtype=DT), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos() * att, emb.sin() * att


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    # x (H, N, dim), cos/sin (N, dim): x*cos + rotate_half(x)*sin (modeling_llama.apply_rotary_pos_emb)
    # Partial rotary (cos/sin narrower than x, modeling_phi3.apply_rotary_pos_emb): the
    # first r = cos.shape[-1] dims are rotated (rotate_half within those r dims: pairs
    # (i, i + r/2)), the remaining dims pass through unchanged.
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    xr = x[..., :r]
    return torch.cat([xr * cos + rotate_half(xr) * sin, x[..., r:]], dim=-1)


def llama_forward(W, cfg, ids, cache=None, trace=None):
    """LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM, and the MoE
    MixtralForCausalLM / Qwen2MoeForCausalLM (same attention; the feed-forward of
    the layers in moe_layer_ids(cfg) is moe_block()); Qwen3ForCausalLM and
    Phi3ForCausalLM.
    nn.Linear weights are (out, in): y = x @ W.T (+ b). Biases on q/k/v when
    attention_bias (llama, qwen3) or always (qwen2, qwen2_moe); o_proj never biased for qwen2.
    Mistral / Mixtral / Phi-3: sliding window when set (Phi-3: every layer,
    config.sliding_window); Qwen2(-MoE) / Qwen3: window only if use_sliding_window.
    Qwen3: q_norm / k_norm (plain RMSNorm, weight (head_dim)) on each head of q and k
    BEFORE RoPE. Phi-3: self_attn.qkv_proj = [q (H hd) ; k (H_kv hd) ; v (H_kv hd)]
    rows, mlp.gate_up_proj = [gate (ff) ; up (ff)] rows (chunk(2): gate first),
    act silu(gate) * up; partial rotary / longrope via rope_inv_freq.
    trace: a list that receives each MoE layer's routing."""
    mt = cfg["model_type"]
    d = cfg["hidden_size"]; H = cfg["num_attention_heads"]; Hkv = cfg["num_key_value_heads"]
    hd = llama_head_dim(cfg); rep = H // Hkv
    eps = cfg["rms_norm_eps"]
    window = None
    if mt in ("mistral", "mixtral"):
        window = cfg.get("sliding_window")
    elif mt == "phi3":
        window = cfg.get("sliding_window")
    elif mt in ("qwen2", "qwen2_moe", "qwen3") and cfg.get("use_sliding_window"):
        raise ValueError("qwen2 / qwen3 sliding window not referenced here")
    past = 0 if cache is None else cache["len"]
    ids = torch.as_tensor(ids)
    N = ids.numel()
    pos = torch.arange(past, past + N)
    inv, att = rope_inv_freq(cfg, past + N)
    cos, sin = rope_cos_sin(inv, att, pos)
    h = W["model.embed_tokens.weight"][ids]
    new_cache = {"len": past + N, "k": [], "v": []}

    def lin(x, name, bias):
        y = x @ W[name + ".weight"].T
        if bias:
            y = y + W[name + ".bias"]
        return y
    qkv_bias = (mt in ("qwen2", "qwen2_moe")) or cfg.get("attention_bias", False)
    o_bias = (mt not in ("qwen2", "qwen2_moe")) and cfg.get("attention_bias", False)
    sparse = moe_layer_ids(cfg)
    for l in range(cfg["num_hidden_layers"]):
        record("hidden", h)
        p = f"model.layers.{l}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps)
        if mt == "phi3":
            qkv = x @ W[p + "self_attn.qkv_proj.weight"].T
            q, k, v = qkv.split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
            q = q.reshape(N, H, hd).transpose(0, 1)
            k = k.reshape(N, Hkv, hd).transpose(0, 1)
            v = v.reshape(N, Hkv, hd).transpose(0, 1)
        else:
            q = lin(x, p + "self_attn.q_proj", qkv_bias).view(N, H, hd).transpose(0, 1)
            k = lin(x, p + "self_attn.k_proj", qkv_bias).view(N, Hkv, hd).transpose(0, 1)
            v = lin(x, p + "self_attn.v_proj", qkv_bias).view(N, Hkv, hd).transpose(0, 1)
        if mt == "qwen3":
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            k = torch.cat([cache["k"][l], k], dim=1)
            v = torch.cat([cache["v"][l], v], dim=1)
        new_cache["k"].append(k); new_cache["v"].append(v)
        # repeat_kv: query head h uses kv head h // rep
        kk = k.repeat_interleave(rep, dim=0)
        vv = v.repeat_interleave(rep, dim=0)
        allowed = causal_allowed(pos, torch.arange(0, past + N), window)
        o = attend(q, kk, vv, hd ** -0.5, allowed)
        o = o.transpose(0, 1).reshape(N, H * hd)
        h = h + lin(o, p + "self_attn.o_proj", o_bias)
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        if l in sparse:
            h = h + moe_block(W, cfg, l, x, trace)
            continue
        if mt == "phi3":
            g, u = (x @ W[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
            h = h + (silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
            continue
        g = lin(x, p + "mlp.gate_proj", cfg.get("mlp_bias", False))
        u = lin(x, p + "mlp.up_proj", cfg.get("mlp_bias", False))
        h = h + lin(silu(g) * u, p + "mlp.down_proj", cfg.get("mlp_bias", False))
    hidden = rms_norm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return hidden @ head.T, hidden, new_cache


# ----------------------------------------------------------------------------
# Gemma 2 / Gemma 3 text (modeling_gemma2.py, modeling_gemma3.py)
# ----------------------------------------------------------------------------

def gemma_rms_norm(x, w, eps):
    # Gemma2RMSNorm / Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight)
    # (upstream in float32, cast back after the multiply; here float64)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def gelu_tanh(x):
    # "gelu_pytorch_tanh" (F.gelu(x, approximate="tanh")): the same formula as gelu_new
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def softcap(x, cap):
    # cap * tanh(x / cap) (attn_logit_softcapping, final_logit_softcapping); None: identity
    return x if cap is None else cap * torch.tanh(x / cap)


def gemma_layer_types(cfg):
    """Per layer "sliding_attention" / "full_attention".
    config.layer_types when present. Otherwise:
      gemma2: sliding iff layer index is EVEN (modeling_gemma2 4.42-4.52:
        `not bool(layer_idx % 2)`; 4.53+: layer_types default
        `"sliding_attention" if bool((i + 1) % 2)`, the same);
      gemma3_text: sliding iff (i + 1) % sliding_window_pattern != 0 (default
        pattern 6: layers 0-4 sliding, 5 global, 6-10 sliding, 11 global, ...)."""
    L = cfg["num_hidden_layers"]
    if cfg.get("layer_types"):
        assert len(cfg["layer_types"]) == L
        return list(cfg["layer_types"])
    if cfg["model_type"] == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    pat = cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(L)]


def gemma_embed_scale(cfg):
    """sqrt(hidden_size) as upstream multiplies it: Gemma2Model builds
    torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype), Gemma3 the float32
    buffer embed_scale cast to the embedding weight's dtype: in a float32 model the
    float32-ROUNDED value (sqrt(32) = 5.656854249... -> 5.65685415267944), in bf16
    the bf16 value. The reference uses the value rounded to the config's torch_dtype."""
    dt = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}[cfg.get("torch_dtype", "float32")]
    return float(round_to(np.array([cfg["hidden_size"] ** 0.5]), dt)[0])


def gemma_rope(cfg, layer_type, seq_len):
    """(inv_freq, attention_factor) of a layer.
    gemma2: one rotary embedding (rope_theta, no scaling) for every layer.
    gemma3_text: global (full_attention) layers: rope_theta with rope_scaling
      (linear factor 8 in Gemma 3 4B+); local (sliding_attention) layers:
      rope_local_base_freq with NO scaling (Gemma3TextModel.rotary_emb_local is a copy
      of the config with rope_theta = rope_local_base_freq, rope_scaling default)."""
    if cfg["model_type"] == "gemma3_text" and layer_type == "sliding_attention":
        return rope_inv_freq(dict(cfg, rope_theta=cfg["rope_local_base_freq"], rope_scaling=None), seq_len)
    if cfg["model_type"] == "gemma2":
        return rope_inv_freq(dict(cfg, rope_scaling=None), seq_len)
    return rope_inv_freq(cfg, seq_len)


def gemma_forward(W, cfg, ids, cache=None):
    """Gemma2ForCausalLM / Gemma3ForCausalLM (model_type gemma3_text).
      h = embed[ids] * gemma_embed_scale(cfg)
      per layer (sandwich norms, all Gemma RMSNorm (1 + w)):
        a = attn(input_layernorm(h));  h = h + post_attention_layernorm(a)
        m = mlp(pre_feedforward_layernorm(h));  h = h + post_feedforward_layernorm(m)
      attn: q/k/v/o_proj (no biases; head_dim explicit), gemma3: q_norm / k_norm
        (Gemma RMSNorm over head_dim, per head) BEFORE RoPE; RoPE per gemma_rope;
        scores = (q k^T) * query_pre_attn_scalar^-0.5, then
        attn_logit_softcapping c: c tanh(scores / c) (AFTER the scaling, BEFORE the mask),
        then the causal mask, sliding layers (gemma_layer_types) also the window:
        key j visible to query i iff i - sliding_window < j <= i; softmax; GQA repeat_kv.
      mlp: down(gelu_tanh(gate(x)) * up(x)) (hidden_activation gelu_pytorch_tanh).
      hidden = norm(h) (Gemma RMSNorm); logits = hidden embed^T (tied: no lm_head
      unless tie_word_embeddings is explicitly false), then final_logit_softcapping.
    Returns (logits, hidden (after the final norm, before the head), cache)."""
    mt = cfg["model_type"]
    assert mt in ("gemma2", "gemma3_text"), mt
    d = cfg["hidden_size"]; H = cfg["num_attention_heads"]; Hkv = cfg["num_key_value_heads"]
    hd = llama_head_dim(cfg); rep = H // Hkv
    eps = cfg["rms_norm_eps"]
    scale = float(cfg["query_pre_attn_scalar"]) ** -0.5
    cap = cfg.get("attn_logit_softcapping")
    types = gemma_layer_types(cfg)
    past = 0 if cache is None else cache["len"]
    ids = torch.as_tensor(ids)
    N = ids.numel()
    pos = torch.arange(past, past + N)
    kpos = torch.arange(0, past + N)
    ropes = {}
    for t in set(types):
        inv, att = gemma_rope(cfg, t, past + N)
        ropes[t] = rope_cos_sin(inv, att, pos)
    masks = {"full_attention": causal_allowed(pos, kpos),
             "sliding_attention": causal_allowed(pos, kpos, cfg["sliding_window"])}
    E = W["model.embed_tokens.weight"]
    h = E[ids] * gemma_embed_scale(cfg)
    new_cache = {"len": past + N, "k": [], "v": []}
    for l in range(cfg["num_hidden_layers"]):
        record("hidden", h)
        p = f"model.layers.{l}."
        a = p + "self_attn."
        x = gemma_rms_norm(h, W[p + "input_layernorm.weight"], eps)
        q = (x @ W[a + "q_proj.weight"].T).view(N, H, hd).transpose(0, 1)
        k = (x @ W[a + "k_proj.weight"].T).view(N, Hkv, hd).transpose(0, 1)
        v = (x @ W[a + "v_proj.weight"].T).view(N, Hkv, hd).transpose(0, 1)
        if mt == "gemma3_text":
            q = gemma_rms_norm(q, W[a + "q_norm.weight"], eps)
            k = gemma_rms_norm(k, W[a + "k_norm.weight"], eps)
        cos, sin = ropes[types[l]]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            k = torch.cat([cache["k"][l], k], dim=1)
            v = torch.cat([cache["v"][l], v], dim=1)
        new_cache["k"].append(k); new_cache["v"].append(v)
        kk = k.repeat_interleave(rep, dim=0)
        vv = v.repeat_interleave(rep, dim=0)
        s = softcap(scale * (q @ kk.transpose(-1, -2)), cap)
        s = s.masked_fill(~masks[types[l]], float("-inf"))
        probs = softmax_rows(s)
        record("attn", probs)
        o = (probs @ vv).transpose(0, 1).reshape(N, H * hd)
        o = o @ W[a + "o_proj.weight"].T
        h = h + gemma_rms_norm(o, W[p + "post_attention_layernorm.weight"], eps)
        x = gemma_rms_norm(h, W[p + "pre_feedforward_layernorm.weight"], eps)
        m = gelu_tanh(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)
        m = m @ W[p + "mlp.down_proj.weight"].T
        h = h + gemma_rms_norm(m, W[p + "post_feedforward_layernorm.weight"], eps)
    hidden = gemma_rms_norm(h, W["model.norm.weight"], eps)
    head = W["lm_head.weight"] if cfg.get("tie_word_embeddings", True) is False else E
    logits = softcap(hidden @ head.T, cfg.get("final_logit_softcapping"))
    return logits, hidden, new_cache


# ----------------------------------------------------------------------------
# DeepSeek-V2 (hub modeling_deepseek.py)
# ----------------------------------------------------------------------------

def yarn_find_correction_dim(num_rot, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rot * 2 * math.pi))) / (2 * math.log(base))


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def deepseek_rope(cfg):
    """(inv_freq, cos_sin_factor, softmax_scale) of DeepseekV2Attention with
    DeepseekV2YarnRotaryEmbedding (modeling_deepseek.py):
      freq_extra = 1 / base^(2i/dim),  freq_inter = freq_extra / factor
      low  = max(floor(cd(beta_fast)), 0), high = min(ceil(cd(beta_slow)), dim-1),
        cd(r) = dim ln(orig_max_pos / (2 pi r)) / (2 ln base)
      ramp_i = clamp((i - low) / (high - low), 0, 1)  (high += 0.001 when equal)
      mask_i = 1 - ramp_i;  inv_freq = freq_inter (1 - mask) + freq_extra mask
      cos/sin multiplied by mscale(factor, mscale) / mscale(factor, mscale_all_dim)
      softmax_scale = q_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2
        where mscale(s, m) = 0.1 m ln s + 1 (1 if s <= 1)."""
    dim = cfg["qk_rope_head_dim"]
    base = float(cfg["rope_theta"])
    q_head_dim = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    scale = q_head_dim ** -0.5
    idx = torch.arange(0, dim, 2, dtype=DT) / dim
    rs = cfg.get("rope_scaling")
    if rs is None:
        return 1.0 / base ** idx, 1.0, scale
    assert rs["type"] == "yarn"
    factor = float(rs["factor"])
    orig = rs.get("original_max_position_embeddings", 4096)
    beta_fast = rs.get("beta_fast", 32); beta_slow = rs.get("beta_slow", 1)
    mscale = rs.get("mscale", 1); mscale_all = rs.get("mscale_all_dim", 0)
    extra = 1.0 / base ** idx
    inter = 1.0 / (factor * base ** idx)
    low = max(math.floor(yarn_find_correction_dim(beta_fast, dim, base, orig)), 0)
    high = min(math.ceil(yarn_find_correction_dim(beta_slow, dim, base, orig)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=DT) - low) / (high - low), 0, 1)
    mask = 1.0 - ramp
    inv = inter * (1 - mask) + extra * mask
    cs = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all)
    if mscale_all:
        m = yarn_get_mscale(factor, mscale_all)
        scale = scale * m * m
    return inv, cs, scale


def deepseek_deinterleave(x):
    # q.view(..., d // 2, 2).transpose(-1, -2).reshape(..., d): [x0 x2 x4 ... x1 x3 x5 ...]
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(*x.shape[:-1], d)


def deepseek_forward(W, cfg, ids, cache=None, trace=None):
    """DeepseekV2ForCausalLM / DeepseekV3ForCausalLM. Dense MLP (intermediate_size)
    in the layers outside moe_layer_ids(cfg), moe_block() in the others. The
    cache (validation only) keeps the per-head keys/values, as the upstream eager
    code does. V3's attention and YaRN rope are V2's (hub modeling_deepseek.py of
    DeepSeek-V3: same MLA, same de-interleave of the rope dims, same
    softmax_scale * mscale(factor, mscale_all_dim)^2). Only the first
    num_hidden_layers layers run: V3's multi-token-prediction layer
    (model.layers.{num_hidden_layers}.*) is not part of the causal LM forward.
    trace: a list that receives each MoE layer's routing."""
    d = cfg["hidden_size"]; H = cfg["num_attention_heads"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    dc = cfg["kv_lora_rank"]
    eps = cfg["rms_norm_eps"]
    past = 0 if cache is None else cache["len"]
    ids = torch.as_tensor(ids)
    N = ids.numel()
    pos = torch.arange(past, past + N)
    inv, cs, scale = deepseek_rope(cfg)
    cos, sin = rope_cos_sin(inv, cs, pos)
    h = W["model.embed_tokens.weight"][ids]
    new_cache = {"len": past + N, "k": [], "v": []}
    sparse = moe_layer_ids(cfg)
    for l in range(cfg["num_hidden_layers"]):
        record("hidden", h)
        p = f"model.layers.{l}."
        a = p + "self_attn."
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps)
        if cfg.get("q_lora_rank") is None:
            q = x @ W[a + "q_proj.weight"].T
        else:
            cq = rms_norm(x @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], eps)
            q = cq @ W[a + "q_b_proj.weight"].T
        q = q.view(N, H, dn + dr).transpose(0, 1)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        ckv = x @ W[a + "kv_a_proj_with_mqa.weight"].T
        c, k_pe = ckv[:, :dc], ckv[:, dc:]
        k_pe = k_pe.view(1, N, dr)
        kv = (rms_norm(c, W[a + "kv_a_layernorm.weight"], eps) @ W[a + "kv_b_proj.weight"].T)
        kv = kv.view(N, H, dn + dv).transpose(0, 1)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        q_pe = apply_rope(deepseek_deinterleave(q_pe), cos, sin)
        k_pe = apply_rope(deepseek_deinterleave(k_pe), cos, sin)
        qs = torch.cat([q_nope, q_pe], dim=-1)
        ks = torch.cat([k_nope, k_pe.expand(H, N, dr)], dim=-1)
        if cache is not None:
            ks = torch.cat([cache["k"][l], ks], dim=1)
            v = torch.cat([cache["v"][l], v], dim=1)
        new_cache["k"].append(ks); new_cache["v"].append(v)
        o = attend(qs, ks, v, scale, causal_allowed(pos, torch.arange(0, past + N)))
        o = o.transpose(0, 1).reshape(N, H * dv)
        h = h + o @ W[a + "o_proj.weight"].T
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        if l in sparse:
            h = h + moe_block(W, cfg, l, x, trace)
            continue
        g = x @ W[p + "mlp.gate_proj.weight"].T
        u = x @ W[p + "mlp.up_proj.weight"].T
        h = h + (silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    hidden = rms_norm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return hidden @ head.T, hidden, new_cache


# ----------------------------------------------------------------------------
# Mixture of experts (issue 26): Mixtral (modeling_mixtral.py), Qwen2-MoE
# (modeling_qwen2_moe.py), DeepSeek-V2 / V2-Lite / V3 (hub modeling_deepseek.py,
# MoEGate + DeepseekV2MoE / DeepseekV3MoE)
# ----------------------------------------------------------------------------

def moe_layer_ids(cfg):
    """The set of layers whose feed-forward is a MoE block; the others are dense.
      mixtral:   every layer.
      qwen2_moe: i not in mlp_only_layers and num_experts > 0 and (i + 1) % decoder_sparse_step == 0
                 (Qwen2MoeDecoderLayer); dense layers use mlp.{gate,up,down}_proj of intermediate_size.
      deepseek:  n_routed_experts is not None and i >= first_k_dense_replace and
                 i % moe_layer_freq == 0 (DeepseekV2DecoderLayer / DeepseekV3DecoderLayer);
                 dense layers use intermediate_size.
      others:    none."""
    mt = cfg["model_type"]
    L = cfg["num_hidden_layers"]
    if mt == "mixtral":
        return set(range(L))
    if mt == "qwen2_moe":
        only = set(cfg.get("mlp_only_layers") or [])
        step = cfg.get("decoder_sparse_step", 1)
        return {i for i in range(L) if i not in only and cfg["num_experts"] > 0 and (i + 1) % step == 0}
    if mt in ("deepseek_v2", "deepseek_v3"):
        if cfg.get("n_routed_experts") is None:
            return set()
        return {i for i in range(L) if i >= cfg.get("first_k_dense_replace", 0) and i % cfg.get("moe_layer_freq", 1) == 0}
    return set()


def topk_gap(s, k):
    """Per row: the k-th largest value minus the (k+1)-th (inf when k == width): how far
    the top-k choice over s is from a tie (a float32 implementation chooses the same
    experts when this is well above its rounding)."""
    if k >= s.shape[-1]:
        return torch.full((s.shape[0],), float("inf"), dtype=DT)
    v = torch.sort(s, dim=-1, descending=True).values
    return v[:, k - 1] - v[:, k]


def route(cfg, logits, bias=None, mask_value=0.0):
    """Router of one MoE layer. logits (N, E) = x @ gate.weight^T (no bias; the
    router is computed in float64 here, float32 upstream).
    Returns (idx (N, k) long, weights (N, k), info) where info holds the choice
    gaps ("gap": min over tokens of topk_gap of the selection scores, and of the
    group scores where groups are chosen; for softmax scores measured on their
    logarithm, i.e. in router-logit units, as their rounding is relative; for
    sigmoid scores on the scores themselves) and the intermediate tensors.

    mixtral (MixtralSparseMoeBlock): p = softmax(logits) over ALL experts, top-k of p,
      w = p_topk / sum(p_topk) (always renormalised).
    qwen2_moe (Qwen2MoeSparseMoeBlock): the same, renormalised only if norm_topk_prob.
    deepseek_v2 (MoEGate): scores = softmax(logits) (scoring_func "softmax"; upstream
      float32);
      topk_method "greedy": top-k of scores;
      "group_limited_greedy": experts in n_group consecutive groups of E / n_group;
        group score = MAX of the group's scores; keep the topk_group best groups;
        the other groups' scores are masked to 0.0 (masked_fill(~mask, 0.0)); top-k
        of the masked scores;
      w = scores at the chosen experts; if top_k > 1 and norm_topk_prob:
        w / (sum w + 1e-20), else w * routed_scaling_factor (the factor is applied
        ONLY when not renormalising).
      (transformers' own DeepseekV2 port multiplies by routed_scaling_factor always and
      ignores norm_topk_prob; with norm_topk_prob false, as in every V2 config here
      and on the hub, both give the same.)
    deepseek_v3 (MoEGate, topk_method "noaux_tc", scoring_func "sigmoid"):
      scores = sigmoid(logits); choice = scores + e_score_correction_bias;
      group score = SUM OF THE TOP-2 of choice within each group; keep the topk_group
      best groups, the others' choice masked to 0.0 (the hub code and transformers'
      DeepseekV3 use masked_fill(..., 0.0); vLLM / SGLang kernels use -inf: they
      differ only when a kept expert's choice is <= 0, checked not to happen in the
      test models; mask_value selects the variant);
      idx = top-k of the masked choice; w = scores (WITHOUT the bias) at idx;
      if top_k > 1 and norm_topk_prob: w / (sum w + 1e-20); then ALWAYS
      w * routed_scaling_factor."""
    mt = cfg["model_type"]
    N, E = logits.shape
    k = cfg["num_experts_per_tok"]
    info = {}
    if mt in ("mixtral", "qwen2_moe"):
        p = softmax_rows(logits)
        w, idx = torch.topk(p, k, dim=-1)
        if mt == "mixtral" or cfg.get("norm_topk_prob", False):
            w = w / w.sum(-1, keepdim=True)
        info["gap"] = float(topk_gap(torch.log(p), k).min())
        info["scores"] = p
        return idx, w, info
    if mt not in ("deepseek_v2", "deepseek_v3"):
        raise ValueError(mt)
    sf = cfg.get("scoring_func", "softmax")
    if sf == "softmax":
        scores = softmax_rows(logits)
    elif sf == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        raise ValueError(sf)
    method = cfg.get("topk_method", "greedy")
    gaps = []
    space = torch.log if sf == "softmax" else (lambda t: t)
    if method == "greedy":
        choice = scores
    elif method in ("group_limited_greedy", "noaux_tc"):
        G, TG = cfg["n_group"], cfg["topk_group"]
        if method == "noaux_tc":
            full = scores + bias.view(1, E)
            grp = torch.topk(full.view(N, G, E // G), 2, dim=-1).values.sum(-1)
        else:
            full = scores
            grp = full.view(N, G, E // G).max(-1).values
        gaps.append(float(topk_gap(space(grp), TG).min()))
        keep_g = torch.zeros(N, G, dtype=torch.bool)
        keep_g.scatter_(1, torch.topk(grp, TG, dim=-1).indices, True)
        keep = keep_g.repeat_interleave(E // G, dim=1)
        choice = full.masked_fill(~keep, mask_value)
        info["groups_kept"] = keep_g
        info["group_scores"] = grp
    else:
        raise ValueError(method)
    idx = torch.topk(choice, k, dim=-1).indices
    gaps.append(float(topk_gap(space(choice), k).min()))
    w = scores.gather(1, idx)
    rsf = float(cfg.get("routed_scaling_factor", 1.0))
    renorm = k > 1 and cfg.get("norm_topk_prob", False)
    if renorm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    if mt == "deepseek_v3" or not renorm:
        w = w * rsf
    info["gap"] = min(gaps)
    info["scores"] = scores
    info["choice"] = choice
    return idx, w, info


def swiglu_mlp(W, prefix, x, names=("gate_proj", "up_proj", "down_proj")):
    """down(silu(gate(x)) * up(x)) with nn.Linear (out, in) weights, no biases."""
    g = x @ W[prefix + names[0] + ".weight"].T
    u = x @ W[prefix + names[1] + ".weight"].T
    return (silu(g) * u) @ W[prefix + names[2] + ".weight"].T


def moe_block(W, cfg, layer, x, trace=None):
    """The feed-forward of a sparse layer, x (N, d) the post-attention-normed input.
    mixtral:   block_sparse_moe.gate (E, d); experts.{j}.w1 (gate), w3 (up), w2 (down);
               y = sum_k w_k expert_k(x); no shared expert.
    qwen2_moe: mlp.gate (E, d); mlp.experts.{j}.{gate,up,down}_proj (moe_intermediate_size);
               y = routed + sigmoid(x @ shared_expert_gate^T) (shared_expert_gate (1, d), a
               scalar per token) * shared_expert(x) (shared_expert_intermediate_size).
    deepseek:  mlp.gate (E, d) [+ mlp.gate.e_score_correction_bias (E) for V3];
               mlp.experts.{j}.*; y = routed + shared_experts(x) (width
               moe_intermediate_size * n_shared_experts, no gate) when n_shared_experts.
    Every token is processed by each of its k experts (no capacity limit, no dropping)."""
    mt = cfg["model_type"]
    if mt == "mixtral":
        base = f"model.layers.{layer}.block_sparse_moe."
        E = cfg["num_local_experts"]
        names = ("w1", "w3", "w2")
    else:
        base = f"model.layers.{layer}.mlp."
        E = cfg["num_experts"] if mt == "qwen2_moe" else cfg["n_routed_experts"]
        names = ("gate_proj", "up_proj", "down_proj")
    logits = x @ W[base + "gate.weight"].T
    bias = W[base + "gate.e_score_correction_bias"] if cfg.get("topk_method") == "noaux_tc" else None
    idx, w, info = route(cfg, logits, bias)
    y = torch.zeros_like(x)
    for j in range(E):
        tok, slot = torch.nonzero(idx == j, as_tuple=True)
        if tok.numel() == 0:
            continue
        y.index_add_(0, tok, w[tok, slot].unsqueeze(-1) * swiglu_mlp(W, f"{base}experts.{j}.", x[tok], names))
    if mt == "qwen2_moe":
        sg = torch.sigmoid(x @ W[base + "shared_expert_gate.weight"].T)  # (N, 1)
        y = y + sg * swiglu_mlp(W, base + "shared_expert.", x)
    elif mt in ("deepseek_v2", "deepseek_v3") and cfg.get("n_shared_experts"):
        y = y + swiglu_mlp(W, base + "shared_experts.", x)
    if trace is not None:
        trace.append(dict(info, layer=layer, idx=idx, w=w, logits=logits, bias=bias))
    return y


# ----------------------------------------------------------------------------
# BERT (modeling_bert.py, BertForMaskedLM)
# ----------------------------------------------------------------------------

def bert_forward(W, cfg, ids, token_type_ids):
    """Post-norm encoder, no attention mask (all tokens real). Returns
    (mlm_logits, last_hidden_state)."""
    d = cfg["hidden_size"]; H = cfg["num_attention_heads"]; hd = d // H
    eps = cfg["layer_norm_eps"]
    ids = torch.as_tensor(ids); tt = torch.as_tensor(token_type_ids)
    N = ids.numel()
    e = "bert.embeddings."
    h = W[e + "word_embeddings.weight"][ids] + W[e + "position_embeddings.weight"][torch.arange(N)] \
        + W[e + "token_type_embeddings.weight"][tt]
    h = layer_norm(h, W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"], eps)

    def lin(x, name):
        return x @ W[name + ".weight"].T + W[name + ".bias"]
    allowed = torch.ones(N, N, dtype=torch.bool)
    for l in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{l}."
        q = lin(h, p + "attention.self.query").view(N, H, hd).transpose(0, 1)
        k = lin(h, p + "attention.self.key").view(N, H, hd).transpose(0, 1)
        v = lin(h, p + "attention.self.value").view(N, H, hd).transpose(0, 1)
        o = attend(q, k, v, 1.0 / math.sqrt(hd), allowed).transpose(0, 1).reshape(N, d)
        a = layer_norm(lin(o, p + "attention.output.dense") + h,
                       W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"], eps)
        m = gelu_erf(lin(a, p + "intermediate.dense"))
        h = layer_norm(lin(m, p + "output.dense") + a,
                       W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
    t = "cls.predictions.transform."
    z = gelu_erf(lin(h, t + "dense"))
    z = layer_norm(z, W[t + "LayerNorm.weight"], W[t + "LayerNorm.bias"], eps)
    logits = z @ W[e + "word_embeddings.weight"].T + W["cls.predictions.bias"]
    return logits, h


# ----------------------------------------------------------------------------
# The original encoder-decoder (hand-written; checked against torch.nn.Transformer)
# ----------------------------------------------------------------------------

def sinusoidal(n, d, base=10000.0):
    pos = torch.arange(n, dtype=DT).view(-1, 1)
    i = torch.arange(0, d, 2, dtype=DT)
    ang = pos / base ** (i / d)
    pe = torch.zeros(n, d, dtype=DT)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang)
    return pe


def mha_torch_layout(W, p, xq, xkv, H, allowed):
    """nn.MultiheadAttention with in_proj_weight (3d, d) = [W_q; W_k; W_v], y = x W^T + b."""
    d = xq.shape[-1]; hd = d // H
    w = W[p + "in_proj_weight"]; b = W[p + "in_proj_bias"]
    q = xq @ w[:d].T + b[:d]
    k = xkv @ w[d:2 * d].T + b[d:2 * d]
    v = xkv @ w[2 * d:].T + b[2 * d:]
    Nq, Nk = xq.shape[0], xkv.shape[0]
    q = q.view(Nq, H, hd).transpose(0, 1)
    k = k.view(Nk, H, hd).transpose(0, 1)
    v = v.view(Nk, H, hd).transpose(0, 1)
    o = attend(q, k, v, 1.0 / math.sqrt(hd), allowed).transpose(0, 1).reshape(Nq, d)
    return o @ W[p + "out_proj.weight"].T + W[p + "out_proj.bias"]


def encdec_forward(W, cfg, src, tgt):
    """Post-norm (norm_first=False) encoder-decoder with ReLU FFN, the final
    encoder/decoder LayerNorms nn.Transformer adds, embeddings * sqrt(d) +
    sinusoidal positions. Returns (logits, decoder_out, memory)."""
    d = cfg["d_model"]; H = cfg["nhead"]; eps = cfg["layer_norm_eps"]
    src = torch.as_tensor(src); tgt = torch.as_tensor(tgt)
    Ns, Nt = src.numel(), tgt.numel()

    def lin(x, name):
        return x @ W[name + ".weight"].T + W[name + ".bias"]

    def ln(x, name):
        return layer_norm(x, W[name + ".weight"], W[name + ".bias"], eps)
    x = W["src_embed.weight"][src] * math.sqrt(d) + sinusoidal(Ns, d)
    full_s = torch.ones(Ns, Ns, dtype=torch.bool)
    for l in range(cfg["num_encoder_layers"]):
        p = f"transformer.encoder.layers.{l}."
        x = ln(x + mha_torch_layout(W, p + "self_attn.", x, x, H, full_s), p + "norm1")
        x = ln(x + lin(torch.relu(lin(x, p + "linear1")), p + "linear2"), p + "norm2")
    mem = ln(x, "transformer.encoder.norm")
    y = W["tgt_embed.weight"][tgt] * math.sqrt(d) + sinusoidal(Nt, d)
    causal = causal_allowed(torch.arange(Nt), torch.arange(Nt))
    cross = torch.ones(Nt, Ns, dtype=torch.bool)
    for l in range(cfg["num_decoder_layers"]):
        p = f"transformer.decoder.layers.{l}."
        y = ln(y + mha_torch_layout(W, p + "self_attn.", y, y, H, causal), p + "norm1")
        y = ln(y + mha_torch_layout(W, p + "multihead_attn.", y, mem, H, cross), p + "norm2")
        y = ln(y + lin(torch.relu(lin(y, p + "linear1")), p + "linear2"), p + "norm3")
    out = ln(y, "transformer.decoder.norm")
    return lin(out, "generator"), out, mem


# ----------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------

def greedy(forward, W, cfg, ids, n_new):
    """Uncached greedy loop: argmax of the last logits, append, rerun on the whole
    sequence. Returns (new ids, min top-1/top-2 margin seen, the (n_new, V) logits
    rows each token was chosen from)."""
    seq = list(int(i) for i in ids)
    out, rows, margin = [], [], float("inf")
    for _ in range(n_new):
        logits = forward(W, cfg, seq)[0][-1]
        rows.append(logits)
        top2 = torch.topk(logits, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(torch.argmax(logits))
        out.append(nxt); seq.append(nxt)
    return out, margin, torch.stack(rows)


def cached_logits(forward, W, cfg, ids, split):
    """Prefill ids[:split] then feed the rest one token at a time through the cache;
    returns the stacked logits for every position (to compare with one full pass)."""
    logits, _, cache = forward(W, cfg, ids[:split])
    rows = [logits]
    for t in ids[split:]:
        lg, _, cache = forward(W, cfg, [t], cache)
        rows.append(lg)
    return torch.cat(rows, dim=0)
