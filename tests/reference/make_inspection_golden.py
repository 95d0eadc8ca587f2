#!/usr/bin/python3
"""Golden hidden states and attention weights of the tiny checkpoints, for
kappa's model inspection (DecoderLM::inspect; tests/transformer/
causal_lm_test.cpp, CausalLmInspect).

What Hugging Face returns with output_hidden_states=True and
output_attentions=True (modeling_gpt2.py, modeling_llama.py,
modeling_mistral.py, modeling_gemma2.py, DeepSeek's modeling_deepseek.py):
  hidden_states: L + 1 tensors (N, d): the input of every decoder layer (the
    embeddings first), then the last layer's output after the final norm;
  attentions: L tensors (H, N, N): each layer's softmax probabilities after
    its mask (causal, or the sliding window), eval mode (no dropout).
The forwards are those of hf_reference.py (written from the upstream model
code, never from kappa), which record both (hf_reference.RECORD); the model
is read from the committed directory's config.json and model.safetensors, so
the goldens describe exactly the files the C++ test loads.

Writes, per model, into tests/data/models/<name>/reference/:
  hidden_states.npy  ((L + 1) N, d) float64, layer-major
  attentions.npy     (L H N, N) float64, layer-major then head

Run from the repository root: /usr/bin/python3 tests/reference/make_inspection_golden.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models")
MODELS = {
    "gpt2": R.gpt2_forward,          # pre-norm LayerNorm, MHA, learned positions
    "llama": R.llama_forward,        # GQA, RoPE
    "mistral": R.llama_forward,      # GQA with a sliding window of 4
    "deepseek_v2": R.deepseek_forward,  # latent attention (MLA)
    "gemma2": R.gemma_forward,       # sandwich norms, soft-capped scores, local/global layers
}


def load(name):
    d = os.path.join(ROOT, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = {k: R.T(v) for k, v in R.read_safetensors(os.path.join(d, "model.safetensors")).items()}
    if cfg["model_type"] == "gpt2":  # the hub's names: no "transformer.", tied head
        W = {(k[len("transformer."):] if k.startswith("transformer.") else k): v
             for k, v in W.items() if not k.endswith("attn.masked_bias") and k != "lm_head.weight"}
    ids = np.load(os.path.join(d, "reference", "input_ids.npy")).tolist()
    return d, cfg, W, ids


def main():
    for name, forward in MODELS.items():
        d, cfg, W, ids = load(name)
        R.RECORD = {"hidden": [], "attn": []}
        logits, hidden, _ = forward(W, cfg, ids)
        rec = R.RECORD
        R.RECORD = None
        hs = rec["hidden"] + [hidden]
        L = len(rec["attn"])
        assert len(hs) == L + 1, (name, len(hs), L)
        ref_logits = np.load(os.path.join(d, "reference", "logits.npy"))
        err = float(np.abs(logits.numpy() - ref_logits).max())
        assert err < 1e-12, (name, err)  # the recording forward is the reference forward
        H, N = rec["attn"][0].shape[0], rec["attn"][0].shape[1]
        h_np = torch.cat(hs, 0).numpy()  # ((L + 1) N, d)
        a_np = torch.cat([a.reshape(H * N, N) for a in rec["attn"]], 0).numpy()  # (L H N, N)
        R.save_npy(os.path.join(d, "reference", "hidden_states.npy"), h_np, np.float64)
        R.save_npy(os.path.join(d, "reference", "attentions.npy"), a_np, np.float64)
        print(f"{name}: L {L}, H {H}, N {N}, d {h_np.shape[1]}; rows sum to 1 within "
              f"{float(np.abs(a_np.sum(1) - 1).max()):.1e}")


if __name__ == "__main__":
    main()
