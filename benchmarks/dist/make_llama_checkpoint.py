#!/usr/bin/env python3
"""A LLaMA- or DeepSeek-V2-shaped Hugging Face checkpoint with random weights, for timing.

Writes DIR/config.json and DIR/model.safetensors (F32; the safetensors
format written by hand: an 8-byte little-endian header length, the JSON
header, the tensors' bytes). Random N(0, 0.02) weights, seeded: the text is
noise, the speed is a real model's of that shape. Default shape: d 1024,
16 layers, 16 heads over 4 key/value heads, d_ff 2816, vocabulary 32000
(245 M parameters, 0.98 GB). With --deepseek: DeepSeek-V2's layout
(latent attention without the query latent, as V2-Lite: kv_lora_rank 256,
qk_nope 64, qk_rope 32, v_head 64; layer 0 dense, then 32 routed experts of
width 352, top 4, and 2 shared; 8 layers: 359 M parameters, 1.4 GB).

  /usr/bin/python3 benchmarks/dist/make_llama_checkpoint.py build/llama-245m
  /usr/bin/python3 benchmarks/dist/make_llama_checkpoint.py --deepseek build/deepseek-359m
"""
import argparse
import json
import os
import struct

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--deepseek", action="store_true")
    a = ap.parse_args()
    if a.deepseek and a.layers == 16:
        a.layers = 8
    os.makedirs(a.dir, exist_ok=True)
    dh = a.d // a.heads
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": a.d, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "intermediate_size": a.d_ff,
        "vocab_size": a.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if a.deepseek:
        H, nope, rope, dv, kvr, E, fe, ns = a.heads, 64, 32, 64, 256, 32, 352, 2
        config.update({
            "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
            "num_key_value_heads": H, "q_lora_rank": None, "kv_lora_rank": kvr,
            "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": dv,
            "n_routed_experts": E, "num_experts_per_tok": 4, "moe_intermediate_size": fe,
            "n_shared_experts": ns, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "topk_method": "greedy", "n_group": 1, "topk_group": 1, "norm_topk_prob": False,
            "scoring_func": "softmax", "routed_scaling_factor": 1.0, "attention_bias": False,
            "rms_norm_eps": 1e-6})
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shapes = {"model.embed_tokens.weight": (a.vocab, a.d), "model.norm.weight": (a.d,),
              "lm_head.weight": (a.vocab, a.d)}
    for i in range(a.layers if a.deepseek else 0):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (H * (nope + rope), a.d),
            p + "self_attn.kv_a_proj_with_mqa.weight": (kvr + rope, a.d),
            p + "self_attn.kv_a_layernorm.weight": (kvr,),
            p + "self_attn.kv_b_proj.weight": (H * (nope + dv), kvr),
            p + "self_attn.o_proj.weight": (a.d, H * dv),
            p + "input_layernorm.weight": (a.d,),
            p + "post_attention_layernorm.weight": (a.d,),
        })
        if i == 0:
            shapes.update({p + "mlp.gate_proj.weight": (a.d_ff, a.d),
                           p + "mlp.up_proj.weight": (a.d_ff, a.d),
                           p + "mlp.down_proj.weight": (a.d, a.d_ff)})
            continue
        shapes[p + "mlp.gate.weight"] = (E, a.d)
        for x, w in [(f"mlp.experts.{j}.", fe) for j in range(E)] + [("mlp.shared_experts.", fe * ns)]:
            shapes.update({p + x + "gate_proj.weight": (w, a.d), p + x + "up_proj.weight": (w, a.d),
                           p + x + "down_proj.weight": (a.d, w)})
    for i in range(0 if a.deepseek else a.layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (a.heads * dh, a.d),
            p + "self_attn.k_proj.weight": (a.kv_heads * dh, a.d),
            p + "self_attn.v_proj.weight": (a.kv_heads * dh, a.d),
            p + "self_attn.o_proj.weight": (a.d, a.heads * dh),
            p + "mlp.gate_proj.weight": (a.d_ff, a.d),
            p + "mlp.up_proj.weight": (a.d_ff, a.d),
            p + "mlp.down_proj.weight": (a.d, a.d_ff),
            p + "input_layernorm.weight": (a.d,),
            p + "post_attention_layernorm.weight": (a.d,),
        })
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    rng = np.random.default_rng(2024)
    with open(os.path.join(a.dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes.items():
            if name.endswith("norm.weight"):
                x = np.ones(shape, dtype=np.float32)
            else:
                x = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
            f.write(x.tobytes())
    print(f"{a.dir}: {sum(int(np.prod(s)) for s in shapes.values()) / 1e6:.0f} M parameters")


if __name__ == "__main__":
    main()
