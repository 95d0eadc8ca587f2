// kappa/transformer/layers.hpp - Transformer layers composed at compile time
// from an attention type, a norm, a feed-forward policy and the placement of
// the norms (the paper's section 3).
//
// With Attn the self-attention, F the feed-forward, N1, N2 (and N3) norms:
//
//   pre-norm  (GPT-2, LLaMA, DeepSeek)      post-norm (original, BERT)
//     H = X + Attn(N1(X))                      H = N1(X + Attn(X))
//     Y = H + F(N2(H))                         Y = N2(H + F(H))
//
// The decoder layer of the encoder-decoder Transformer adds cross-attention
// over the encoder output M between the two: C = H + Cross(N2(H), M) (pre) or
// C = N2(H + Cross(H, M)) (post), then the feed-forward with N3.
//
// Every layer runs a full sequence, a SequenceBatch of packed sequences, and
// cached decoding (prefill, then a few tokens per call); the cached outputs
// equal the full pass. The attention types plug in through
// SelfAttentionOps<Attn, Mask>, specialised below for MultiHeadAttention
// (MHA, GQA, MQA, with any kernel and positional policy) and LatentAttention.
#pragma once

#include <concepts>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/attention/masks.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/nn/feed_forward.hpp"
#include "kappa/nn/layer_norm.hpp"
#include "kappa/nn/norms.hpp"

namespace kappa {

/// Norms before each sub-layer, inside the residual branch (GPT-2, LLaMA).
struct PreNorm {};
/// Norms after each residual sum (the original Transformer, BERT).
struct PostNorm {};

template <class P>
concept NormPlacement = std::same_as<P, PreNorm> || std::same_as<P, PostNorm>;

/// A norm policy: `apply(MatrixRef<T>) const` normalises each row in place
/// (LayerNorm<T>, RMSNorm<T>).
template <class N, class T>
concept NormPolicy = requires(const N& n, MatrixRef<T> x) {
  n.apply(x);
};

/// How a layer drives its self-attention type: full causal (or windowed)
/// pass, batch, and cached decoding. Specialised for kappa's attention types;
/// a user's own attention type plugs in by specialising it.
template <class Attn, class Mask>
struct SelfAttentionOps {
  static_assert(dependent_false<Attn>,
                "kappa: no SelfAttentionOps for this attention type: use MultiHeadAttention / "
                "GroupedQueryAttention / MultiQueryAttention / LatentAttention, or specialise "
                "kappa::SelfAttentionOps<YourAttention, Mask>");
};

/// MHA / GQA / MQA: the mask is CausalMask (a KVCache that grows) or
/// SlidingWindowMask (a KVCache that keeps the window, as Mistral), or NoMask
/// for encoders (no cache).
template <Scalar T, class K, HeadGrouping G, class P, class Mask>
struct SelfAttentionOps<MultiHeadAttention<T, K, G, P>, Mask> {
  using Attn = MultiHeadAttention<T, K, G, P>;
  static constexpr bool kWindowed = std::same_as<Mask, SlidingWindowMask>;
  using Cache = KVCache<T, std::conditional_t<kWindowed, cache::SlidingWindow, cache::Growable>>;

  static Cache make_cache(const Attn& a, const Mask& mask) {
    if constexpr (kWindowed) {
      return Cache(a.kv_cache_config(), cache::SlidingWindow{mask.window});
    } else {
      (void)mask;
      return Cache(a.kv_cache_config());
    }
  }
  static RowMatrix<T> full(const Attn& a, ConstMatrixRef<T> x, const Mask& mask) {
    return a.forward(x, mask);
  }
  static RowMatrix<T> batch(const Attn& a, const SequenceBatch<T>& x, const Mask& mask) {
    return a.forward(x, mask);
  }
  static RowMatrix<T> cached(const Attn& a, ConstMatrixRef<T> x, Cache& c) {
    return a.forward_cached(x, c);
  }
  static RowMatrix<T> batch_cached(const Attn& a, const SequenceBatch<T>& x,
                                   const std::vector<Cache*>& caches) {
    return a.forward_cached(x, caches);
  }
  static std::size_t weight_bytes(const Attn& a) {
    const HeadsConfig& c = a.config();
    const Index n = c.d_in * c.n_heads * c.d_head + 2 * c.d_kv_in * c.n_kv_heads * c.d_head +
                    c.n_heads * c.d_v * c.d_out;
    return sizeof(T) * static_cast<std::size_t>(n);
  }
};

/// Latent attention (DeepSeek-V2): always causal, cached in a LatentCache.
template <Scalar T, LatentPath Path, class Conv, class Mask>
struct SelfAttentionOps<LatentAttention<T, Path, Conv>, Mask> {
  static_assert(std::same_as<Mask, CausalMask>,
                "kappa: LatentAttention is causal self-attention: use CausalMask");
  using Attn = LatentAttention<T, Path, Conv>;
  using Cache = LatentCache<T>;

  static Cache make_cache(const Attn& a, const Mask& /*mask*/) { return Cache(a.config()); }
  static RowMatrix<T> full(const Attn& a, ConstMatrixRef<T> x, const Mask& /*mask*/) {
    return a.forward(x, 0);
  }
  static RowMatrix<T> batch(const Attn& a, const SequenceBatch<T>& x, const Mask& /*mask*/) {
    const std::vector<Index> off = x.offsets();
    RowMatrix<T> y(x.rows.rows(), a.config().d_model);
    for (std::size_t b = 0; b + 1 < off.size(); ++b)
      y.middleRows(off[b], off[b + 1] - off[b]) =
          a.forward(x.rows.middleRows(off[b], off[b + 1] - off[b]), 0);
    return y;
  }
  static RowMatrix<T> cached(const Attn& a, ConstMatrixRef<T> x, Cache& c) {
    return a.forward_cached(x, c);
  }
  static RowMatrix<T> batch_cached(const Attn& a, const SequenceBatch<T>& x,
                                   const std::vector<Cache*>& caches) {
    const std::vector<Index> off = x.offsets();
    if (caches.size() + 1 != off.size())
      throw ShapeError("kappa: latent attention (batch): " + std::to_string(off.size() - 1) +
                       " sequences but " + std::to_string(caches.size()) + " caches");
    RowMatrix<T> y(x.rows.rows(), a.config().d_model);
    for (std::size_t b = 0; b + 1 < off.size(); ++b)
      y.middleRows(off[b], off[b + 1] - off[b]) =
          a.forward_cached(x.rows.middleRows(off[b], off[b + 1] - off[b]), *caches[b]);
    return y;
  }
  static std::size_t weight_bytes(const Attn& a) {
    const LatentWeights<T>& w = a.weights();
    const Index n = w.w_dq.size() + w.q_norm.size() + w.w_uq.size() + w.w_qr.size() +
                    w.w_dkv.size() + w.kv_norm.size() + w.w_uk.size() + w.w_uv.size() +
                    w.w_kr.size() + w.w_o.size();
    return sizeof(T) * static_cast<std::size_t>(n);
  }
};

namespace detail {
/// out <- out + r (the residual sum), with a shape check naming both.
template <Scalar T>
void add_residual(const char* what, RowMatrix<T>& out, const RowMatrix<T>& r) {
  require_shapes(out.rows() == r.rows() && out.cols() == r.cols(), what, "the residual stream",
                 out.rows(), out.cols(), "the sub-layer output", r.rows(), r.cols(),
                 "a sub-layer must return one d_model row per token");
  out += r;
}

/// One residual sub-layer F with its norm N on the residual stream h:
/// h = h + F(N(h)) (PreNorm) or h = N(h + F(h)) (PostNorm).
template <NormPlacement Placement, Scalar T, class Norm, class SubLayer>
void residual_branch(const char* what, RowMatrix<T>& h, const Norm& norm, SubLayer&& sub_layer) {
  if constexpr (std::same_as<Placement, PreNorm>) {
    RowMatrix<T> n = h;
    norm.apply(n);
    add_residual(what, h, sub_layer(n));
  } else {
    add_residual(what, h, sub_layer(h));
    norm.apply(h);
  }
}
}  // namespace detail

/// A decoder-only layer (GPT-2, LLaMA, Mistral, Qwen2, DeepSeek-V2 dense):
/// masked self-attention and a feed-forward, each in a residual branch.
///
/// \tparam T          float or double
/// \tparam Attn       MultiHeadAttention<T, ...> (MHA/GQA/MQA) or LatentAttention<T, ...>
/// \tparam Norm       LayerNorm<T> or RMSNorm<T>
/// \tparam FFN        Mlp<T, Act> or GatedMlp<T, Act>
/// \tparam Placement  PreNorm or PostNorm
/// \tparam Mask       CausalMask, or SlidingWindowMask (Mistral)
///
/// ```cpp
/// using Layer = kappa::DecoderOnlyLayer<float, kappa::GroupedQueryAttention<float,
///     kappa::kernels::Softmax, kappa::Rope<float>>, kappa::RMSNorm<float>,
///     kappa::SwiGlu<float>, kappa::PreNorm>;
/// Layer layer{std::move(attn), RMSNorm<float>(d), RMSNorm<float>(d), SwiGlu<float>(d, ff)};
/// auto y = layer.forward(x);                       // (N, d), causal
/// auto cache = layer.make_cache();
/// auto y0 = layer.forward_cached(prompt, cache);   // prefill
/// ```
template <Scalar T, class Attn, class Norm, class FFN, NormPlacement Placement = PreNorm,
          class Mask = CausalMask>
class DecoderOnlyLayer {
  static_assert(NormPolicy<Norm, T>, "kappa: the norm must provide apply(MatrixRef<T>) const");
  static_assert(FeedForward<FFN, T>,
                "kappa: the feed-forward must provide forward(ConstMatrixRef<T>) const");
  static_assert(std::same_as<Mask, CausalMask> || std::same_as<Mask, SlidingWindowMask>,
                "kappa: a decoder-only layer is causal: Mask is CausalMask or SlidingWindowMask");

 public:
  using value_type = T;
  using AttentionType = Attn;
  using NormType = Norm;
  using FeedForwardType = FFN;
  using PlacementType = Placement;
  using Ops = SelfAttentionOps<Attn, Mask>;
  using Cache = typename Ops::Cache;

  DecoderOnlyLayer(Attn attn, Norm norm_attn, Norm norm_ffn, FFN ffn, Mask mask = {})
      : attn_(std::move(attn)),
        norm_1_(std::move(norm_attn)),
        norm_2_(std::move(norm_ffn)),
        ffn_(std::move(ffn)),
        mask_(std::move(mask)) {}

  /// Y for one sequence X (N, d); causal (or windowed) self-attention.
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x) const {
    return run(x, [&](ConstMatrixRef<T> h) { return Ops::full(attn_, h, mask_); });
  }
  /// Y for B packed sequences (see SequenceBatch); each attends to itself only.
  [[nodiscard]] RowMatrix<T> forward(const SequenceBatch<T>& x) const {
    (void)x.offsets();  // validates the lengths before any work
    return run(x.rows, [&](ConstMatrixRef<T> h) {
      return Ops::batch(attn_, SequenceBatch<T>{h, x.lengths}, mask_);
    });
  }
  /// An empty cache for this layer.
  [[nodiscard]] Cache make_cache() const { return Ops::make_cache(attn_, mask_); }
  /// New tokens X (n, d) continuing the sequence in `cache`; appends to it.
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, Cache& cache) const {
    return run(x, [&](ConstMatrixRef<T> h) { return Ops::cached(attn_, h, cache); });
  }
  /// forward_cached for B sequences at once, sequence b continuing *caches[b].
  [[nodiscard]] RowMatrix<T> forward_cached(const SequenceBatch<T>& x,
                                            const std::vector<Cache*>& caches) const {
    (void)x.offsets();
    return run(x.rows, [&](ConstMatrixRef<T> h) {
      return Ops::batch_cached(attn_, SequenceBatch<T>{h, x.lengths}, caches);
    });
  }

  [[nodiscard]] const Attn& attention() const { return attn_; }
  [[nodiscard]] const Norm& norm_attention() const { return norm_1_; }
  [[nodiscard]] const Norm& norm_feed_forward() const { return norm_2_; }
  [[nodiscard]] const FFN& feed_forward() const { return ffn_; }
  [[nodiscard]] const Mask& mask() const { return mask_; }
  /// Bytes of every weight of the layer.
  [[nodiscard]] std::size_t weight_bytes() const {
    return Ops::weight_bytes(attn_) + ffn_.weight_bytes();
  }
  /// Bytes of weights one decode step reads: all of them, but for a
  /// feed-forward that reads part of its own (a mixture of experts reads
  /// the router and its k chosen experts: its decode_bytes()).
  [[nodiscard]] std::size_t decode_bytes() const {
    if constexpr (requires { ffn_.decode_bytes(); }) {
      return Ops::weight_bytes(attn_) + ffn_.decode_bytes();
    } else {
      return weight_bytes();
    }
  }

 private:
  template <class AttnFn>
  RowMatrix<T> run(ConstMatrixRef<T> x, AttnFn&& attend) const {
    constexpr const char* what = "DecoderOnlyLayer";
    RowMatrix<T> h = x;  // the residual stream (N, d)
    // Pre-norm: H = X + Attn(N1(X)), Y = H + F(N2(H)); post-norm: H = N1(X + Attn(X)),
    // Y = N2(H + F(H)).
    detail::residual_branch<Placement>(what, h, norm_1_, attend);
    detail::residual_branch<Placement>(what, h, norm_2_,
                                       [&](ConstMatrixRef<T> f) { return ffn_.forward(f); });
    return h;
  }

  Attn attn_;
  Norm norm_1_, norm_2_;
  FFN ffn_;
  Mask mask_;
};

/// An encoder layer (BERT, the original encoder): unmasked self-attention
/// (or a KeyPaddingMask for padded batches) and a feed-forward.
/// \tparam Attn  MultiHeadAttention<T, ...>
template <Scalar T, class Attn, class Norm, class FFN, NormPlacement Placement = PostNorm>
class EncoderLayer {
  static_assert(NormPolicy<Norm, T>, "kappa: the norm must provide apply(MatrixRef<T>) const");
  static_assert(FeedForward<FFN, T>,
                "kappa: the feed-forward must provide forward(ConstMatrixRef<T>) const");

 public:
  using value_type = T;
  using AttentionType = Attn;
  using NormType = Norm;

  EncoderLayer(Attn attn, Norm norm_attn, Norm norm_ffn, FFN ffn)
      : attn_(std::move(attn)),
        norm_1_(std::move(norm_attn)),
        norm_2_(std::move(norm_ffn)),
        ffn_(std::move(ffn)) {}

  /// Y for one sequence X (N, d); `mask` (NoMask, KeyPaddingMask, ...) bound to (N, N).
  template <class M = NoMask>
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x, const M& mask = {}) const {
    return run(x, [&](ConstMatrixRef<T> h) { return attn_.forward(h, mask); });
  }
  /// Y for B packed sequences, each attending to itself only (no padding).
  [[nodiscard]] RowMatrix<T> forward(const SequenceBatch<T>& x) const {
    (void)x.offsets();
    return run(x.rows, [&](ConstMatrixRef<T> h) {
      return attn_.forward(SequenceBatch<T>{h, x.lengths}, NoMask{});
    });
  }

  [[nodiscard]] const Attn& attention() const { return attn_; }
  [[nodiscard]] const FFN& feed_forward() const { return ffn_; }

 private:
  template <class AttnFn>
  RowMatrix<T> run(ConstMatrixRef<T> x, AttnFn&& attend) const {
    constexpr const char* what = "EncoderLayer";
    RowMatrix<T> h = x;
    detail::residual_branch<Placement>(what, h, norm_1_, attend);
    detail::residual_branch<Placement>(what, h, norm_2_,
                                       [&](ConstMatrixRef<T> f) { return ffn_.forward(f); });
    return h;
  }

  Attn attn_;
  Norm norm_1_, norm_2_;
  FFN ffn_;
};

/// The decoder layer of the encoder-decoder Transformer: masked
/// self-attention, cross-attention over the encoder output M, feed-forward.
/// \tparam SelfAttn, CrossAttn  MultiHeadAttention<T, ...>
template <Scalar T, class SelfAttn, class CrossAttn, class Norm, class FFN,
          NormPlacement Placement = PostNorm>
class DecoderLayer {
  static_assert(NormPolicy<Norm, T>, "kappa: the norm must provide apply(MatrixRef<T>) const");
  static_assert(FeedForward<FFN, T>,
                "kappa: the feed-forward must provide forward(ConstMatrixRef<T>) const");

 public:
  using value_type = T;
  using Ops = SelfAttentionOps<SelfAttn, CausalMask>;
  using Cache = typename Ops::Cache;

  DecoderLayer(SelfAttn self_attn, CrossAttn cross_attn, Norm norm_self, Norm norm_cross,
               Norm norm_ffn, FFN ffn)
      : self_(std::move(self_attn)),
        cross_(std::move(cross_attn)),
        norm_1_(std::move(norm_self)),
        norm_2_(std::move(norm_cross)),
        norm_3_(std::move(norm_ffn)),
        ffn_(std::move(ffn)) {}

  /// Y for target tokens X (N_t, d) over the encoder output M (N_s, d_mem);
  /// the self-attention is causal, the cross-attention sees all of M (or
  /// `memory_mask`, bound to (N_t, N_s)).
  template <class MM = NoMask>
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x, ConstMatrixRef<T> memory,
                                     const MM& memory_mask = {}) const {
    return run(
        x, [&](ConstMatrixRef<T> h) { return self_.forward(h, CausalMask{}); },
        [&](ConstMatrixRef<T> h) { return cross_.forward_cross(h, memory, memory_mask); });
  }
  /// B target sequences over their B encoder outputs, packed (see
  /// SequenceBatch): target b attends causally to itself and crosses to
  /// memory b only. Row for row equal to forward() of each pair alone.
  /// \throws ShapeError if the batches differ in B.
  [[nodiscard]] RowMatrix<T> forward(const SequenceBatch<T>& x,
                                     const SequenceBatch<T>& memory) const {
    (void)x.offsets();
    return run(
        x.rows,
        [&](ConstMatrixRef<T> h) {
          return self_.forward(SequenceBatch<T>{h, x.lengths}, CausalMask{});
        },
        [&](ConstMatrixRef<T> h) {
          return cross_.forward_cross(SequenceBatch<T>{h, x.lengths}, memory, NoMask{});
        });
  }
  [[nodiscard]] Cache make_cache() const { return Ops::make_cache(self_, CausalMask{}); }
  /// New target tokens (n, d) continuing the sequence in `cache`, over M.
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, ConstMatrixRef<T> memory,
                                            Cache& cache) const {
    return run(
        x, [&](ConstMatrixRef<T> h) { return self_.forward_cached(h, cache); },
        [&](ConstMatrixRef<T> h) { return cross_.forward_cross(h, memory, NoMask{}); });
  }

  [[nodiscard]] const SelfAttn& self_attention() const { return self_; }
  [[nodiscard]] const CrossAttn& cross_attention() const { return cross_; }

 private:
  template <class SelfFn, class CrossFn>
  RowMatrix<T> run(ConstMatrixRef<T> x, SelfFn&& self_fn, CrossFn&& cross_fn) const {
    constexpr const char* what = "DecoderLayer";
    RowMatrix<T> h = x;
    detail::residual_branch<Placement>(what, h, norm_1_, self_fn);
    detail::residual_branch<Placement>(what, h, norm_2_, cross_fn);
    detail::residual_branch<Placement>(what, h, norm_3_,
                                       [&](ConstMatrixRef<T> f) { return ffn_.forward(f); });
    return h;
  }

  SelfAttn self_;
  CrossAttn cross_;
  Norm norm_1_, norm_2_, norm_3_;
  FFN ffn_;
};

}  // namespace kappa
