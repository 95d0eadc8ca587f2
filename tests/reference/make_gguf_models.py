#!/usr/bin/python3
"""Converts tiny models of tests/data/models (safetensors) to GGUF with llama.cpp's own converter.

Writes tests/data/models/llama-gguf/llama-f32.gguf, llama-q8_0.gguf (from
tests/data/models/llama), qwen2-f32.gguf, gpt2-f32.gguf, mistral-f32.gguf and
llama3-f32.gguf (from those directories and llama3-scaled), see
tests/data/models/llama-gguf/README.md; and spm-bpe_llama-vocab.gguf, the
vocabulary alone of tests/data/tokenize/sentencepiece/bpe_llama.model (SentencePiece
style: tokenizer.ggml.model "llama"); and llama-256-f32.gguf (from
tests/data/models/llama-256, whose every row length is a multiple of 256) with
llama-256-q4_k_m.gguf, llama-256-q8_0.gguf and llama-256-q4_0.gguf made from it by
llama.cpp's own `llama-quantize` (built from the same commit: $LLAMA_QUANTIZE, or
built in the temporary clone); and <dir>-f32.gguf for the directories of
HF_CHECKED (mixtral, qwen3, deepseek_v2-lite, deepseek_v2-moe, deepseek_v2,
gemma2, gemma3_text, phi3: MoE, QK-norm, MLA, Gemma, Phi-3), each through the
class the converter picks for its config.json (conversion.get_model_class),
its metadata and layer-0 / global tensors printed (describe) and every
Hugging Face tensor checked bit-exact in it after undoing the converter's
transformations (check_against_hf), so its reference is the directory's own
reference/logits.npy; and mixtral-q8_0.gguf, mixtral-f32.gguf through
llama-quantize Q8_0 (ffn_down_exps, rows of 16, gets the fallback F16), with
reference/mixtral-{f32,q8_0}_logits.npy: the merged ffn_{gate,up,down}_exps
split back into experts.X.w1 / w3 / w2, the router ffn_gate_inp, and
hf_reference's Mixtral forward. Never run by the build or the tests.

    KAPPA_GGUF_ONLY=mixtral,qwen3 LLAMA_CPP_DIR=<existing clone> /usr/bin/python3 tests/reference/make_gguf_models.py

    /usr/bin/python3 tests/reference/make_gguf_models.py
    LLAMA_QUANTIZE=/path/to/build/bin/llama-quantize /usr/bin/python3 tests/reference/make_gguf_models.py

The converter and gguf-py are llama.cpp's, taken at run time from the git bundle
that the npm package node-llama-cpp@3.22.1 ships (llama/gitRelease.bundle) and
cloned into a temporary directory (never into our tree). It runs unmodified:
convert_hf_to_gguf.py's own model class LlamaModel writes the metadata, maps
the tensor names (gguf.get_tensor_name_map), permutes the rows of W^Q and W^K
(LlamaModel.permute, for ggml's interleaved RoPE) and quantizes (gguf-py's
quants.py for Q8_0), exactly as `convert_hf_to_gguf.py --outtype f32|q8_0`
would. Two things differ, because the `transformers` package is not
installable here:
  * `transformers` is a stub module: AutoConfig.from_pretrained raises, so the
    converter falls back to reading config.json itself (its own code path);
    AutoTokenizer.from_pretrained returns the vocabulary of tokenizer.json
    (vocab, added tokens and their flags: the attributes get_vocab_base reads).
  * gpt2: the causal-mask buffers h.N.attn.bias, which GPT2Model means to drop
    but in this snapshot hands to the name map (which raises), are dropped
    by filter_tensors first.
  * Debian's torch 1.13 has no float8 dtypes: placeholders stand in for the
    two names the converter's dtype tables list (no tensor here is float8).
  * get_vocab_base_pre (the hash of the real tokenizer's ids for a test
    string) is replaced by the answer "llama-bpe": tokenizer.json's pre-split
    regex is Llama 3's, which llama.cpp calls "llama-bpe". set_vocab goes
    straight to _set_vocab_gpt2, the branch LlamaModel.set_vocab reaches for a
    tokenizer.json without tokenizer.model.
Then the reference logits of each file: the tensors read back with gguf-py's
GGUFReader and dequantized with gguf-py's quants.dequantize (llama.cpp's numpy
definition of the block formats), the converter's row permutation of W^Q / W^K
inverted (permute's reshape / swapaxes run backwards), and the float64 PyTorch
forward of tests/reference/hf_reference.py (the same independent forward as
tests/data/models/<model>/reference) on the input ids of
that directory: reference/<name>-<type>_logits.npy. The F32 files'
must equal <model>/reference/logits.npy (asserted < 1e-12, up to
float64 rounding of the f32-stored epsilon).

The quantized files' references are computed the same way (gguf-py's numpy
Q4_K / Q6_K / Q8_0 / Q4_0 dequantization); their error against the F32 model's
logits is printed, every tensor's relative error against the F32 file's is
asserted within its format's bound (WEIGHT_ERROR_BOUND), and the logits error
nonzero and below half the logits' scale.

Needs npm (the registry), git, cmake and a C++ compiler (unless $LLAMA_QUANTIZE),
and Debian's python3 with numpy, python3-torch and
python3-tqdm, python3-sentencepiece.
"""
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

PKG = "node-llama-cpp@3.22.1"
HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "data" / "models"
SRC = MODELS / "llama"
OUT = MODELS / "llama-gguf"
# (source directory, output name, outtypes): llama, and qwen2 (q/k/v biases,
# tied head, no W^Q / W^K permutation: llama.cpp rotates qwen2 in the NEOX
# layout, which is Hugging Face's rotate_half), and gpt2 (GPT2Model: Conv1D
# weights transposed to (out, in), c_attn as attn_qkv, tied head)
# mistral: MistralForCausalLM through LlamaModel (general.architecture llama),
# explicit head_dim 16 != d / H (attention.key_length); llama.cpp writes no
# sliding window for it, so its reference is the forward without the window
# (equal to mistral/reference's first sliding_window rows).
# llama-256: llama/'s layout at d 256, ffn 512, head_dim 64 (every reduction
# dimension a multiple of 256, as Q4_K / Q6_K need), converted to F32 and then
# quantized by llama.cpp's own llama-quantize (QUANTIZE below).
JOBS = (("llama", "llama", ("f32", "q8_0")), ("qwen2", "qwen2", ("f32",)),
        ("gpt2", "gpt2", ("f32",)), ("mistral", "mistral", ("f32",)),
        ("llama3-scaled", "llama3", ("f32",)), ("llama-256", "llama-256", ("f32",)))
# Mixture-of-experts, QK-norm and MLA models (directory = output name), converted
# to F32 by the class convert_hf_to_gguf.py itself picks for config.json's
# architecture (conversion.get_model_class); their check is not a new forward
# but that every GGUF tensor reproduces the Hugging Face tensors bit-exactly
# after undoing the converter's (documented) transformations (check_against_hf),
# so each directory's own reference/logits.npy is the file's reference.
# Not convertible: qwen2_moe (and qwen2_moe-norm) have mlp_only_layers [1], a dense
# layer (mlp.gate_proj/up_proj/down_proj); llama.cpp's QWEN2MOE architecture has
# no dense FFN tensors (gguf MODEL_TENSORS[QWEN2MOE]), so Qwen2MoeModel fails with
# "Can not map tensor 'model.layers.1.mlp.down_proj.weight'".
HF_CHECKED = ("mixtral", "qwen3", "deepseek_v2-lite", "deepseek_v2-moe", "deepseek_v2",
              "gemma2", "gemma3_text", "phi3")
# output name -> converter class key, where the name is not one
ARCH = {"llama-256": "llama"}
# output name -> llama-quantize types applied to <name>-f32.gguf, written as
# <name>-<type lowercased>.gguf. mixtral (d 32, expert width 16): llama-quantize
# gives ffn_down_exps (rows of 16, not a multiple of Q8_0's block of 32) its
# fallback F16, keeps the router ffn_gate_inp and the norms F32, the rest Q8_0.
QUANTIZE = {"llama-256": ("Q4_K_M", "Q8_0", "Q4_0"), "mixtral": ("Q8_0",)}


def fetch_llama_cpp(work: Path) -> Path:
    subprocess.run(["npm", "pack", "--silent", PKG], cwd=work, check=True, stdout=subprocess.DEVNULL)
    tgz = next(work.glob("node-llama-cpp-*.tgz"))
    subprocess.run(["tar", "xzf", tgz.name, "package/llama/gitRelease.bundle"], cwd=work, check=True)
    repo = work / "llama.cpp"
    subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", str(work / "package/llama/gitRelease.bundle"), str(repo)],
                   check=True)
    return repo


def llama_quantize(repo: Path) -> Path:
    """llama.cpp's llama-quantize at the bundle's commit: $LLAMA_QUANTIZE if set
    (a binary built from the same commit, e.g. by benchmarks/ggml_compare.sh, whose
    build directory holds bin/llama-quantize), else built here in the temporary
    clone (CPU only, Release; about 6 minutes on 2 cores)."""
    if os.environ.get("LLAMA_QUANTIZE"):
        return Path(os.environ["LLAMA_QUANTIZE"])
    build = repo / "build"
    subprocess.run(["cmake", "-S", str(repo), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
                    # as benchmarks/ggml_compare.sh: AMX traps where the
                    # hypervisor has not enabled it (quantizing uses no AMX)
                    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target",
                    "llama-quantize"], check=True, stdout=subprocess.DEVNULL)
    return build / "bin" / "llama-quantize"


def quantize(binary: Path, name: str, qtypes, out_dir: Path) -> None:
    """`llama-quantize <name>-f32.gguf <name>-<type>.gguf <TYPE>` for each type, then
    the ggml type of every tensor of each result (README's table)."""
    import gguf

    for q in qtypes:
        dst = out_dir / f"{name}-{q.lower()}.gguf"
        r = subprocess.run([str(binary), str(out_dir / f"{name}-f32.gguf"), str(dst), q, "1"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            raise SystemExit(f"llama-quantize {q} failed")
        # llama-quantize falls back to another type for a row length that is not
        # a multiple of the block; say which types each tensor got.
        print(f"{dst.name}: {dst.stat().st_size} bytes")
        for t in gguf.GGUFReader(dst).tensors:
            print(f"  {t.name:28s} {t.tensor_type.name:6s} ne {[int(x) for x in t.shape]}")


def stub_transformers() -> None:
    """The two names the converter imports from transformers (see the docstring)."""
    mod = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise RuntimeError("transformers is not installed; read config.json")

    class _Added:
        def __init__(self, t):
            self.content, self.special, self.normalized = t["content"], t["special"], t["normalized"]

    class _Tokenizer:
        def __init__(self, d: Path):
            j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
            self.vocab = dict(j["model"]["vocab"])
            self._added = {t["id"]: _Added(t) for t in j["added_tokens"]}
            for i, t in self._added.items():
                self.vocab[t.content] = i
            self.added_tokens_decoder = self._added

        def get_added_vocab(self):
            return {t.content: i for i, t in self._added.items()}

        # An added special token encodes to its id and decodes back to itself.
        def encode(self, text, add_special_tokens=False):
            return [self.vocab[text]]

        def decode(self, ids):
            inv = {i: t for t, i in self.vocab.items()}
            return "".join(inv[i] for i in ids)

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(d, **kwargs):
            return _Tokenizer(Path(d))

    mod.AutoConfig = AutoConfig
    mod.AutoTokenizer = AutoTokenizer
    sys.modules["transformers"] = mod


def convert(src: Path, arch: str, outtype: str, out: Path) -> None:
    import torch
    import gguf

    # Debian's torch 1.13 predates the float8 dtypes the converter lists in
    # its dtype tables; no tensor here is float8, so placeholders suffice.
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, "torch." + name + " (absent)")
    from conversion.llama import LlamaModel
    from conversion.qwen import Qwen2Model
    from conversion.gpt2 import GPT2Model

    if arch in HF_CHECKED:  # the class convert_hf_to_gguf.py picks for config.json's architecture
        from conversion import get_model_class
        hf_arch = json.loads((src / "config.json").read_text())["architectures"][0]
        base = get_model_class(hf_arch)
    else:
        base = {"llama": LlamaModel, "mistral": LlamaModel, "llama3": LlamaModel, "spm": LlamaModel,
                "qwen2": Qwen2Model, "gpt2": GPT2Model}[arch]

    class Converter(base):
        model_arch = base.model_arch

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if arch.startswith("deepseek_v2"):
                # deepseek_v2/ (dense) spells its absent MoE keys as null
                # (n_routed_experts, n_shared_experts, num_experts_per_tok);
                # DeepseekV2Model reads hparams.get("n_shared_experts", 0) and
                # would write None. Dropping the null keys = a config without them.
                self.hparams = {k: v for k, v in self.hparams.items() if v is not None}

        def set_vocab(self):
            if arch == "spm":  # LlamaModel.set_vocab: tokenizer.model -> _set_vocab_sentencepiece
                return super().set_vocab()
            self._set_vocab_gpt2()

        @classmethod
        def filter_tensors(cls, item):
            # GPT2Model.modify_tensors means to drop GPT-2's causal-mask
            # buffers ("we don't need these") but in this snapshot passes them
            # on to the name map, which fails: drop them before it.
            if arch == "gpt2" and item[0].endswith((".attn.bias", ".attn.masked_bias")):
                return None
            return super().filter_tensors(item)

        def get_vocab_base_pre(self, tokenizer):
            # tokenizer.json's split regex: Llama 3's (llama/), Qwen2's
            # (qwen2/), GPT-2's ByteLevel one (gpt2/)
            if arch in HF_CHECKED:  # every one's pre_tokenizer equals llama/'s (Llama 3's regex)
                return "qwen2" if arch.startswith("qwen") else "llama-bpe"
            return {"llama": "llama-bpe", "mistral": "llama-bpe", "llama3": "llama-bpe",
                    "qwen2": "qwen2", "gpt2": "gpt-2"}[arch]

    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype]
    with torch.inference_mode():
        m = Converter(src, ftype, out, is_big_endian=False, use_temp_file=False, eager=True,
                      metadata_override=None, model_name="kappa-tiny-" + arch, split_max_tensors=0,
                      split_max_size=0, dry_run=False, small_first_shard=False,
                      remote_hf_model_id=None)
        if arch == "spm":
            m.write_vocab()
        else:
            m.write()


def hf_weights_from_gguf(path: Path, cfg: dict, arch: str) -> dict:
    """HF name -> float64 torch tensor, as hf_reference.llama_forward takes them.
    mixtral: the router block_sparse_moe.gate is ffn_gate_inp; expert X's
    w1 / w3 / w2 are slice X (numpy [n_expert, out, in]) of the merged
    ffn_gate_exps / ffn_up_exps / ffn_down_exps, each dequantized whole."""
    import numpy as np
    import torch
    import gguf

    H, Hkv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    n_layer = cfg.get("num_hidden_layers")
    if arch == "gpt2":
        names = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            names += [p + x + y for x in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                          "mlp.c_proj") for y in (".weight", ".bias")]
        n_layer = cfg["n_layer"]
    else:
        names = ["model.embed_tokens.weight", "model.norm.weight"]
    if arch != "gpt2" and not cfg.get("tie_word_embeddings"):
        names.append("lm_head.weight")
    for i in range(0 if arch == "gpt2" else n_layer):
        p = f"model.layers.{i}."
        names += [p + x for x in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                  "mlp.down_proj.weight")]
        if arch == "mixtral":  # no dense FFN: the router, then the experts (below)
            names = names[:-3] + [p + "block_sparse_moe.gate.weight"]
        if arch == "qwen2":
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
    model_arch = {"llama": gguf.MODEL_ARCH.LLAMA, "mistral": gguf.MODEL_ARCH.LLAMA,
                  "llama3": gguf.MODEL_ARCH.LLAMA, "mixtral": gguf.MODEL_ARCH.LLAMA,
                  "qwen2": gguf.MODEL_ARCH.QWEN2, "gpt2": gguf.MODEL_ARCH.GPT2}[arch]
    tmap = gguf.get_tensor_name_map(model_arch, n_layer)
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    W = {}
    for hf in names:
        g = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        t = by_name[g]
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        a = a.reshape([int(x) for x in reversed(list(t.shape))]) if a.ndim != len(t.shape) else a
        if arch in ("llama", "mistral", "llama3", "mixtral") and hf.endswith(("q_proj.weight", "k_proj.weight")):
            n = H if "q_proj" in hf else Hkv
            # inverse of LlamaModel.permute: reshape(n, D/2, 2, in), swap back, reshape
            a = a.reshape(n, a.shape[0] // n // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        if arch == "gpt2" and hf.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            a = a.T  # GPT2Model.modify_tensors transposed the Conv1D (in, out) weights
        W[hf] = torch.from_numpy(np.ascontiguousarray(a))
    if arch == "mixtral":
        for i in range(n_layer):
            for wid in ("w1", "w3", "w2"):  # gate, up, down
                t = by_name[tmap.get_name(f"layers.{i}.feed_forward.experts.{wid}.weight",
                                          try_suffixes=(".weight",))]
                a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
                a = a.reshape([int(x) for x in reversed(list(t.shape))])  # [n_expert, out, in]
                assert a.shape[0] == cfg["num_local_experts"], (t.name, a.shape)
                for x in range(a.shape[0]):
                    W[f"model.layers.{i}.block_sparse_moe.experts.{x}.{wid}.weight"] = \
                        torch.from_numpy(np.ascontiguousarray(a[x]))
    return W


# Relative Frobenius error |dequantize(W) - W| / |W| a format leaves on a
# Gaussian matrix, with margin (measured on llama-256: Q8_0 0.0054, Q6_K 0.018,
# Q4_K 0.071, Q4_0 0.086).
# F16: llama-quantize's fallback for a row length no 32-block fits (mixtral's
# ffn_down_exps, rows of 16); half-precision rounding, relative 2^-11 at most.
WEIGHT_ERROR_BOUND = {"Q8_0": 0.01, "Q6_K": 0.03, "Q4_K": 0.1, "Q4_0": 0.12, "F16": 0.001, "F32": 0.0}


def weight_errors(path: Path, f32_path: Path) -> dict:
    """name -> (ggml type, relative Frobenius error of the dequantized tensor
    against the F32 file's), each asserted within the type's bound."""
    import numpy as np
    import gguf

    ref = {t.name: np.asarray(t.data, dtype=np.float64) for t in gguf.GGUFReader(f32_path).tensors}
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(ref[t.name].shape)
        rel = float(np.linalg.norm(a - ref[t.name]) / np.linalg.norm(ref[t.name]))
        assert rel <= WEIGHT_ERROR_BOUND[t.tensor_type.name], (t.name, t.tensor_type.name, rel)
        out[t.name] = (t.tensor_type.name, rel)
    return out


def gguf_rope_factors(path: Path):
    import numpy as np
    import gguf

    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == "rope_freqs.weight")
    return np.asarray(t.data, dtype=np.float64).reshape(-1)


def reference_logits(src: Path, arch: str, name: str, outtypes, out_dir: Path) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import hf_reference as R

    cfg = json.loads((src / "config.json").read_text())
    ids = [int(x) for x in np.load(src / "reference" / "input_ids.npy").reshape(-1)]
    ref = np.load(src / "reference" / "logits.npy")
    (out_dir / "reference").mkdir(exist_ok=True)
    torch.set_num_threads(1)
    for outtype in outtypes:
        W = hf_weights_from_gguf(out_dir / f"{name}-{outtype}.gguf", cfg, ARCH.get(arch, arch))
        forward = R.gpt2_forward if arch == "gpt2" else R.llama_forward
        rows = len(ids)
        if arch == "mistral":  # llama.cpp: no window; rows < window are unaffected by it
            rows = cfg["sliding_window"]
            cfg = dict(cfg, sliding_window=None)
        inv_freq = R.rope_inv_freq
        tol = 1e-12
        if arch == "llama3":
            # The converter's generate_extra_tensors stores Llama 3's rule as one
            # factor per frequency (rope_freqs.weight, computed in float32); ggml's
            # rope divides each frequency theta^(-2i/d) by its factor. That, with
            # the file's factors, replaces the rule; the HF reference (float64
            # rule) agrees to float32 rounding of the factors.
            ff = gguf_rope_factors(out_dir / f"{name}-{outtype}.gguf")

            def with_factors(c, seq_len):
                inv, _ = inv_freq(dict(c, rope_scaling=None), seq_len)
                return inv / torch.from_numpy(ff).to(inv.dtype), 1.0

            R.rope_inv_freq = with_factors
            tol = 1e-5
        try:
            logits = forward(W, cfg, ids)[0].numpy()
        finally:
            R.rope_inv_freq = inv_freq
        diff = logits[:rows] - ref[:rows]
        err = float(np.abs(diff).max())
        scale = float(np.abs(ref[:rows]).max())
        top1 = int((logits[:rows].argmax(1) == ref[:rows].argmax(1)).sum())
        print(f"{name}-{outtype}: max |logits - {src.name}/reference/logits| = {err:.3g}",
              f"(first {rows} rows; {err / scale:.3g} of max |logits| {scale:.4g};",
              f"RMS {float(np.sqrt((diff ** 2).mean())):.3g}) top-1 agreement {top1} / {rows}")
        if outtype == "f32":
            assert err < tol, err
        else:  # a quantized file: every tensor within its format's error, some
            # logits error (amplified through the layers), the same model
            werr = weight_errors(out_dir / f"{name}-{outtype}.gguf", out_dir / f"{name}-f32.gguf")
            worst = {}
            for typ, rel in werr.values():
                worst[typ] = max(worst.get(typ, 0.0), rel)
            print("  weights: max relative Frobenius error per type",
                  ", ".join(f"{k} {v:.3g}" for k, v in sorted(worst.items())))
            assert 0 < err < 0.5 * scale, (err, scale)
        np.save(out_dir / "reference" / f"{name}-{outtype}_logits.npy", logits.astype(np.float64))


def read_safetensors(path: Path) -> dict:
    """name -> numpy array of a safetensors file (F32/F16/BF16 only; no package needed)."""
    import struct
    import numpy as np

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "F32":
            x = np.frombuffer(buf, dtype="<f4")
        elif info["dtype"] == "F16":
            x = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(info["dtype"])
        out[name] = x.reshape(info["shape"])
    return out


def describe(path: Path) -> None:
    """Every metadata key (tokenizer arrays by length) and the tensors of layer 0
    and the global ones: name, ggml type, ne (innermost first)."""
    import gguf

    r = gguf.GGUFReader(path)
    print(f"== {path.name}: {path.stat().st_size} bytes, {len(r.tensors)} tensors")
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        t = f.types[0] if f.types else None
        if t == gguf.GGUFValueType.ARRAY:
            if len(f.data) > 16:
                print(f"  {k} = [{len(f.data)} items of {f.types[-1].name}]")
            else:
                print(f"  {k} = {[f.parts[i].tolist()[0] for i in f.data]}")
        elif t == gguf.GGUFValueType.STRING:
            v = bytes(f.parts[f.data[0]]).decode("utf-8")
            print(f"  {k} = {v if len(v) < 120 else v[:120] + '...'!r}")
        else:
            print(f"  {k} = {f.parts[f.data[0]].tolist()[0]!r} ({t.name})")
    for t in r.tensors:
        if t.name.startswith("blk.") and not t.name.startswith("blk.0."):
            continue
        print(f"  {t.name:32s} {t.tensor_type.name:4s} ne {[int(x) for x in t.shape]}")
    layers = sorted({t.name.split(".")[1] for t in r.tensors if t.name.startswith("blk.")}, key=int)
    for b in layers[1:]:
        print(f"  blk.{b}: " + ", ".join(t.name[len(f'blk.{b}.'):].removesuffix('.weight')
                                       for t in r.tensors if t.name.startswith(f"blk.{b}.")))


def check_against_hf(src: Path, path: Path) -> None:
    """Every Hugging Face tensor of src/model.safetensors is in the F32 GGUF file
    bit-exactly once the converter's transformations are undone, and every GGUF
    tensor is accounted for:
      * experts: model.layers.N.{mlp,block_sparse_moe}.experts.X.<w>.weight is
        slice X of the stacked blk.N.ffn_<gate|up|down>_exps (numpy shape
        [n_expert, rows, cols] = ne [cols, rows, n_expert]);
      * LlamaModel (mixtral): W^Q / W^K rows permuted (inverted as for llama);
      * DeepseekV2Model: kv_b_proj (H (nope + v), kv_lora_rank) viewed as
        (H, nope + v, kv_lora_rank): attn_k_b = [:, :nope, :] transposed to
        (H, kv_lora_rank, nope), attn_v_b = [:, nope:, :] (H, v, kv_lora_rank);
      * Qwen2MoE: shared_expert_gate (1, d) is ffn_gate_inp_shexp ne [d] (1-D).
    """
    import re
    import numpy as np
    import gguf

    cfg = json.loads((src / "config.json").read_text())
    hf = read_safetensors(src / "model.safetensors")
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    n_layer = cfg["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(model_arch, n_layer)
    g = {t.name: np.asarray(t.data).reshape([int(x) for x in reversed(list(t.shape))])
         for t in r.tensors}
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in r.tensors)
    used = set()
    transforms = set()
    H, Hkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads")
    for name, w in hf.items():
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        m = re.match(r"model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$", name)
        if m:
            bid, kind, x, wid = m.groups()
            merged = {"mlp": f"model.layers.{bid}.mlp.experts.{wid}.weight",
                      "block_sparse_moe": f"layers.{bid}.feed_forward.experts.{wid}.weight"}[kind]
            gname = tmap.get_name(merged, try_suffixes=(".weight",))
            got = g[gname][int(x)]
            transforms.add(f"experts stacked into {gname.split('.', 2)[2]}")
        elif name.endswith("kv_b_proj.weight"):
            nope, vd = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            kb = g[tmap.get_name(name.replace("kv_b_proj", "k_b_proj"), try_suffixes=(".weight",))]
            vb = g[tmap.get_name(name.replace("kv_b_proj", "v_b_proj"), try_suffixes=(".weight",))]
            assert kb.shape == (H, cfg["kv_lora_rank"], nope) and vb.shape == (H, vd, cfg["kv_lora_rank"])
            got = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(w.shape)
            used.update({tmap.get_name(name.replace("kv_b_proj", x), try_suffixes=(".weight",))
                         for x in ("k_b_proj", "v_b_proj")})
            transforms.add("kv_b split into attn_k_b (transposed) / attn_v_b")
            assert np.array_equal(got, w), name
            continue
        else:
            gname = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
            assert gname is not None, name
            got = g[gname]
            if arch.startswith("gemma") and name.endswith("norm.weight"):
                # Gemma{2,3}Model: every *norm.weight stored as w + 1 (in float32:
                # HF's Gemma RMSNorm multiplies by 1 + w); exactly float32(w) + 1
                assert np.array_equal(got, (w.astype(np.float32) + np.float32(1)).reshape(got.shape)), name
                transforms.add("*norm.weight stored as float32(w + 1)")
                got = w
            if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
                n = H if "q_proj" in name else Hkv
                got = got.reshape(n, got.shape[0] // n // 2, 2, *got.shape[1:]).swapaxes(1, 2).reshape(got.shape)
                transforms.add("W^Q / W^K rows permuted (LlamaModel.permute)")
            if got.shape != w.shape:
                transforms.add(f"{gname}: HF shape {list(w.shape)} stored as {list(got.shape)}")
                got = got.reshape(w.shape)
        used.add(gname)
        assert np.array_equal(got, w), name
    extra = set(g) - used
    assert not extra, extra
    print(f"  {path.name}: all {len(hf)} Hugging Face tensors reproduced bit-exactly"
          f" ({len(g)} GGUF tensors); transformations: {sorted(transforms) or 'none'}")


def spm_vocab(out: Path) -> None:
    """A vocabulary-only GGUF (the converter's --vocab-only) of the SentencePiece
    BPE model tests/data/tokenize/sentencepiece/bpe_llama.model (Llama-2's
    settings; its ids for 338 inputs are in golden.json there), through
    LlamaModel.set_vocab -> _set_vocab_sentencepiece (Debian's sentencepiece
    0.1.97 binding reads the model): tokenizer.ggml.model "llama", tokens,
    scores, token types, BOS/EOS/UNK ids."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "tokenizer.model").write_bytes(
            (HERE.parent / "data" / "tokenize" / "sentencepiece" / "bpe_llama.model").read_bytes())
        # The few config keys LlamaModel's constructor and set_gguf_parameters read.
        (d / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
            "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 1, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "vocab_size": 900}))
        convert(d, "spm", "f32", out)


# KAPPA_GGUF_ONLY=mixtral,qwen3: convert and check only these HF_CHECKED models
ONLY = tuple(x for x in os.environ.get("KAPPA_GGUF_ONLY", "").split(",") if x)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # $LLAMA_CPP_DIR: an existing clone of the same bundle (commit checked below)
        repo = Path(os.environ["LLAMA_CPP_DIR"]) if os.environ.get("LLAMA_CPP_DIR") else fetch_llama_cpp(work)
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        sys.path[:0] = [str(repo / "gguf-py"), str(repo)]
        os.environ.setdefault("NO_LOCAL_GGUF", "1")
        stub_transformers()
        quantizer = None
        for src, name, outtypes in ([] if ONLY else JOBS):
            for outtype in outtypes:
                convert(MODELS / src, ARCH.get(name, name), outtype, OUT / f"{name}-{outtype}.gguf")
            if name in QUANTIZE:
                quantizer = quantizer or llama_quantize(repo)
                quantize(quantizer, name, QUANTIZE[name], OUT)
                outtypes = tuple(outtypes) + tuple(q.lower() for q in QUANTIZE[name])
            reference_logits(MODELS / src, name, name, outtypes, OUT)
        for name in ONLY or HF_CHECKED:
            convert(MODELS / name, name, "f32", OUT / f"{name}-f32.gguf")
            describe(OUT / f"{name}-f32.gguf")
            check_against_hf(MODELS / name, OUT / f"{name}-f32.gguf")
            if name in QUANTIZE:  # mixtral: Q8_0 and the reference logits of both files
                quantizer = quantizer or llama_quantize(repo)
                quantize(quantizer, name, QUANTIZE[name], OUT)
                reference_logits(MODELS / name, name, name,
                                 ("f32",) + tuple(q.lower() for q in QUANTIZE[name]), OUT)
        if ONLY:
            return
        spm_vocab(OUT / "spm-bpe_llama-vocab.gguf")
        print("llama.cpp commit", commit)


if __name__ == "__main__":
    main()
