"""kappa: exact, inspectable attention for the applied mathematician's notebook.

The C++ library kappa (header-only C++20 on Eigen) as a Python module: attention
for any kernel and mask with A, Z and Z^-1 A in view, its randomized
approximations and their error against cost, multi-head / grouped-query /
latent attention with KV caches in every storage format, tokenizers, and whole
models (Hugging Face directories and GGUF files) with introspection and
generation. numpy arrays go in and come out without copies where they can.

    import numpy as np, kappa
    q, k, v = (np.random.default_rng(0).standard_normal((6, 4)) for _ in range(3))
    d = kappa.attention_details(q, k, v, kernel="softmax", mask="causal")
    print(d.A, d.Z, d.weights, d.Y, sep="\n")
"""

from ._kappa import (  # noqa: F401
    AttentionDetails,
    BpeTokenizer,
    CharTokenizer,
    FormatError,
    Generation,
    KVCache,
    LatentAttention,
    LatentCache,
    Model,
    MultiHeadAttention,
    RangeError,
    ShapeError,
    TextStream,
    Tokenizer,
    WordTokenizer,
    __version__,
    approximate_attention,
    attention,
    attention_details,
    compare_to_exact,
    has_openmp,
    linear_attention,
    num_threads,
    set_num_threads,
)
from ._kappa import _bench_attention  # noqa: F401

#: Grouped-query attention is MultiHeadAttention with n_kv_heads dividing
#: n_heads (1: multi-query attention); the same class, named for the reader.
GroupedQueryAttention = MultiHeadAttention

__all__ = [
    "AttentionDetails",
    "BpeTokenizer",
    "CharTokenizer",
    "FormatError",
    "Generation",
    "GroupedQueryAttention",
    "KVCache",
    "LatentAttention",
    "LatentCache",
    "Model",
    "MultiHeadAttention",
    "RangeError",
    "ShapeError",
    "TextStream",
    "Tokenizer",
    "WordTokenizer",
    "approximate_attention",
    "attention",
    "attention_details",
    "compare_to_exact",
    "has_openmp",
    "linear_attention",
    "num_threads",
    "set_num_threads",
]
