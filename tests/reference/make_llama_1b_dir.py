#!/usr/bin/python3
"""A full-size Llama-3.2-1B-shaped model directory with random weights, in the
Hugging Face layout of that repository.

    /usr/bin/python3 tests/reference/make_llama_1b_dir.py OUT_DIR [--dtype BF16|F32|F16] [--seed S] [--layers L]

Shape (Llama 3.2 1B): 16 layers, hidden 2048, 32 heads, 8 kv heads, head_dim 64,
ffn 8192, rope_theta 500000 with rope_scaling llama3 (factor 32, low 1, high 4,
original 8192), max_position_embeddings 131072, tied embeddings, rms_norm_eps 1e-5.

Vocabulary: 32000 rows instead of 128256 (a choice: the embedding stays 0.26 GB
in float32 instead of 1.05 GB, so the benchmark measures the transformer body
rather than a huge tied lm_head; the layers are exactly Llama 3.2 1B's).
The tokenizer is the tiny byte-level BPE of tests/data/models/llama (298 ids:
256 bytes, 40 merges, <|begin_of_text|> = 296, <|end_of_text|> = 297); ids
298..31999 exist in the weights but not in the tokenizer.

Weights: normal(0, 0.02), norm weights 1; stored BF16 by default (as the hub's
model.safetensors), 1.04 B parameters = 2.1 GB (F32: 4.2 GB). Generated one
tensor at a time: ~1 GB of memory at most.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402
import make_models as M  # noqa: E402


def config(layers, dtype):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 296,
        "eos_token_id": 297,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype],
        "transformers_version": "4.45.0.dev0",
        "use_cache": True,
        "vocab_size": 32000,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", default="BF16", choices=["BF16", "F32", "F16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=16, help="fewer layers, for a quick test only")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = config(a.layers, a.dtype)
    os.makedirs(a.out_dir, exist_ok=True)
    R.write_json(os.path.join(a.out_dir, "config.json"), cfg)
    R.write_json(os.path.join(a.out_dir, "generation_config.json"), {
        "bos_token_id": 296, "do_sample": True, "eos_token_id": 297, "temperature": 0.6, "top_p": 0.9,
        "transformers_version": "4.45.0.dev0"})
    bpe = M.family_bpe("llama")
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(M.tokenizer_json(bpe, "split", bos="<|begin_of_text|>"), f, ensure_ascii=False)
    R.write_json(os.path.join(a.out_dir, "tokenizer_config.json"), {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<|begin_of_text|>",
        "clean_up_tokenization_spaces": True, "eos_token": "<|end_of_text|>", "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast"})

    g = torch.Generator().manual_seed(a.seed)
    d, H, Hkv, hd, ffn, V = 2048, 32, 8, 64, 8192, 32000

    def normal(shape):
        return lambda: (torch.randn(*shape, generator=g) * 0.02).numpy()

    def ones(n):
        return lambda: np.ones((n,), np.float32)
    specs = [("model.embed_tokens.weight", (V, d), normal((V, d)))]
    for l in range(a.layers):
        p = f"model.layers.{l}."
        specs += [
            (p + "input_layernorm.weight", (d,), ones(d)),
            (p + "mlp.down_proj.weight", (d, ffn), normal((d, ffn))),
            (p + "mlp.gate_proj.weight", (ffn, d), normal((ffn, d))),
            (p + "mlp.up_proj.weight", (ffn, d), normal((ffn, d))),
            (p + "post_attention_layernorm.weight", (d,), ones(d)),
            (p + "self_attn.k_proj.weight", (Hkv * hd, d), normal((Hkv * hd, d))),
            (p + "self_attn.o_proj.weight", (d, H * hd), normal((d, H * hd))),
            (p + "self_attn.q_proj.weight", (H * hd, d), normal((H * hd, d))),
            (p + "self_attn.v_proj.weight", (Hkv * hd, d), normal((Hkv * hd, d))),
        ]
    specs.append(("model.norm.weight", (d,), ones(d)))
    n = R.write_safetensors_streaming(os.path.join(a.out_dir, "model.safetensors"),
                                      [(nm, sh, a.dtype, mk) for nm, sh, mk in specs])
    print(json.dumps({"out_dir": a.out_dir, "data_bytes": n, "tensors": len(specs)}))


if __name__ == "__main__":
    main()
