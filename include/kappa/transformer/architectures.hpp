// kappa/transformer/architectures.hpp - the published architectures as
// compositions of kappa's policies (type aliases; sizes come from a config).
//
//   Gpt2         pre-norm LayerNorm, MHA, learned positions, GELU (tanh) MLP, tied head
//   Llama        pre-norm RMSNorm, GQA with RoPE (rotate-half), SwiGLU; also
//                Mistral without a window and Qwen2 (q/k/v biases)
//   MistralSliding  Llama with sliding-window attention (and a window cache)
//   DeepSeekV2   pre-norm RMSNorm, latent attention (MLA, interleaved RoPE
//                pairs), SwiGLU dense feed-forward
//                Phi-3 is Llama too (its fused projections split at load;
//                partial rotary and longrope in its Rope)
//   Qwen3        Llama with RMS-normalized query and key heads (QkNorm)
//   Gemma2, Gemma3  sandwich norms, GeGLU, alternating sliding-window and
//                global layers; soft-capped scores (2) or QK-norm (3)
//   LlamaMoe     Llama whose feed-forward is, layer by layer, SwiGLU or a
//                mixture of SwiGLU experts (Mixtral, Qwen2-MoE)
//   DeepSeekMoe  DeepSeekV2 with the same per-layer choice (DeepSeek-V2,
//                V2-Lite, V3: dense first layers, then experts)
//   Bert         post-norm LayerNorm, MHA, learned positions + token types,
//                exact GELU MLP, masked-LM head
//   PaperTransformer  the original encoder-decoder: post-norm LayerNorm, MHA,
//                sinusoidal positions, ReLU MLP
//
// The decoder-only aliases take a weight storage policy S (DenseWeights,
// Bf16Weights, the GGUF block formats Q8_0Weights, ..., or AsStoredWeights:
// each matrix as its file stores it) for every weight matrix a decode step
// reads: the attention projections, the feed-forward and the output head.
// DeepSeek's latent attention keeps its projections in T (only its
// feed-forward and head take S).
#pragma once

#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/embed/positional.hpp"
#include "kappa/embed/rope.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/heads/qk_norm.hpp"
#include "kappa/nn/activations.hpp"
#include "kappa/nn/feed_forward.hpp"
#include "kappa/nn/layer_norm.hpp"
#include "kappa/nn/moe.hpp"
#include "kappa/nn/norms.hpp"
#include "kappa/transformer/layers.hpp"
#include "kappa/transformer/models.hpp"

namespace kappa {

template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gpt2Layer =
    DecoderOnlyLayer<T, MultiHeadAttention<T, kernels::Softmax, MultiHead, NoPosition, S>,
                     LayerNorm<T>, Mlp<T, GeluTanh, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gpt2 = DecoderLM<T, Gpt2Layer<T, S>, LearnedPositions<T>, S>;

template <Scalar T, WeightStoragePolicy S = DenseWeights>
using LlamaAttention = GroupedQueryAttention<T, kernels::Softmax, Rope<T, RotateHalf>, S>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using LlamaLayer = DecoderOnlyLayer<T, LlamaAttention<T, S>, RMSNorm<T>, SwiGlu<T, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Llama = DecoderLM<T, LlamaLayer<T, S>, NoAbsolutePositions, S>;

template <Scalar T, WeightStoragePolicy S = DenseWeights>
using MistralSlidingLayer =
    DecoderOnlyLayer<T, LlamaAttention<T, S>, RMSNorm<T>, SwiGlu<T, S>, PreNorm, SlidingWindowMask>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using MistralSliding = DecoderLM<T, MistralSlidingLayer<T, S>, NoAbsolutePositions, S>;

template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent>
using DeepSeekV2Layer =
    DecoderOnlyLayer<T, LatentAttention<T, Path, Interleaved>, RMSNorm<T>, SwiGlu<T, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent>
using DeepSeekV2 = DecoderLM<T, DeepSeekV2Layer<T, S, Path>, NoAbsolutePositions, S>;

/// Qwen3: LLaMA with an RMSNorm of each head's queries and keys before RoPE.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Qwen3Attention =
    GroupedQueryAttention<T, kernels::Softmax, QkNorm<T, Rope<T, RotateHalf>>, S>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Qwen3Layer = DecoderOnlyLayer<T, Qwen3Attention<T, S>, RMSNorm<T>, SwiGlu<T, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Qwen3 = DecoderLM<T, Qwen3Layer<T, S>, NoAbsolutePositions, S>;

/// Gemma 2: sandwich (1 + w) RMSNorms, GeGLU (tanh), soft-capped attention
/// scores (kernels::SoftCapped) scaled by query_pre_attn_scalar^-1/2, and
/// layers that alternate a sliding window with global attention: every
/// layer's mask is a SlidingWindowMask, the global ones as wide as the
/// context (its cache grows as tokens arrive, so a wide window costs no
/// memory up front).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gemma2Attention = GroupedQueryAttention<T, kernels::SoftCapped, Rope<T, RotateHalf>, S>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gemma2Layer = DecoderOnlyLayer<T, Gemma2Attention<T, S>, Sandwich<RMSNorm<T>>,
                                     GatedMlp<T, GeluTanh, S>, SandwichNorm, SlidingWindowMask>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gemma2 = DecoderLM<T, Gemma2Layer<T, S>, NoAbsolutePositions, S>;

/// Gemma 3 (text): Gemma 2's layer with QK-norm instead of soft-capping, and
/// per-layer RoPE bases (local and global).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gemma3Layer = DecoderOnlyLayer<T, Qwen3Attention<T, S>, Sandwich<RMSNorm<T>>,
                                     GatedMlp<T, GeluTanh, S>, SandwichNorm, SlidingWindowMask>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using Gemma3 = DecoderLM<T, Gemma3Layer<T, S>, NoAbsolutePositions, S>;

/// A layer's feed-forward when a model mixes dense and expert layers.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using SwiGluOrExperts = DenseOrSparse<SwiGlu<T, S>, MixtureOfExperts<T, S>>;

template <Scalar T, WeightStoragePolicy S = DenseWeights>
using LlamaMoeLayer =
    DecoderOnlyLayer<T, LlamaAttention<T, S>, RMSNorm<T>, SwiGluOrExperts<T, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using LlamaMoe = DecoderLM<T, LlamaMoeLayer<T, S>, NoAbsolutePositions, S>;

template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent>
using DeepSeekMoeLayer = DecoderOnlyLayer<T, LatentAttention<T, Path, Interleaved>, RMSNorm<T>,
                                          SwiGluOrExperts<T, S>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent>
using DeepSeekMoe = DecoderLM<T, DeepSeekMoeLayer<T, S, Path>, NoAbsolutePositions, S>;

template <Scalar T>
using BertLayer = EncoderLayer<T, MultiHeadAttention<T>, LayerNorm<T>, Mlp<T, Gelu>, PostNorm>;
template <Scalar T>
using Bert = EncoderOnlyModel<T, BertLayer<T>, Gelu>;

template <Scalar T>
using PaperEncoderLayer =
    EncoderLayer<T, MultiHeadAttention<T>, LayerNorm<T>, Mlp<T, Relu>, PostNorm>;
template <Scalar T>
using PaperDecoderLayer = DecoderLayer<T, MultiHeadAttention<T>, MultiHeadAttention<T>,
                                       LayerNorm<T>, Mlp<T, Relu>, PostNorm>;
template <Scalar T>
using PaperTransformer = EncoderDecoderModel<T, PaperEncoderLayer<T>, PaperDecoderLayer<T>>;

}  // namespace kappa
