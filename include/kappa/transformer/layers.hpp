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
// C = N2(H + Cross(H, M)) (post), then the feed-forward with N3. Its cached
// decoding projects K = M W^K and V = M W^V once per sequence into the layer's
// cache (CrossAttentionOps) instead of at every step.
//
// Every layer runs a full sequence, a SequenceBatch of packed sequences, and
// cached decoding (prefill, then a few tokens per call); the cached outputs
// equal the full pass. The attention types plug in through
// SelfAttentionOps<Attn, Mask>, specialised below for MultiHeadAttention
// (MHA, GQA, MQA, with any kernel and positional policy) and LatentAttention.
#pragma once

#include <concepts>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/attention/masks.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/head_weights.hpp"
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
/// Norms on both sides of each sub-layer (Gemma 2 and 3's "sandwich"):
/// H = X + N_post(Attn(N_pre(X))), Y = H + N'_post(F(N'_pre(H))). The
/// layer's norm type is then Sandwich<N>, one {pre, post} pair per branch.
struct SandwichNorm {};

template <class P>
concept NormPlacement =
    std::same_as<P, PreNorm> || std::same_as<P, PostNorm> || std::same_as<P, SandwichNorm>;

/// The two norms of one branch of a SandwichNorm layer.
template <class N>
struct Sandwich {
  N pre;   ///< on the branch's input
  N post;  ///< on the sub-layer's output, before the residual sum
};

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
template <Scalar T, class K, HeadGrouping G, class P, WeightStoragePolicy S, class Mask>
struct SelfAttentionOps<MultiHeadAttention<T, K, G, P, S>, Mask> {
  using Attn = MultiHeadAttention<T, K, G, P, S>;
  static constexpr bool kWindowed = std::same_as<Mask, SlidingWindowMask>;
  using Retention = std::conditional_t<kWindowed, cache::SlidingWindow, cache::Growable>;
  /// The cache with rows stored in format F (cache/formats.hpp).
  // (F unconstrained here and Cache spelled out: clang 14 crashes checking a
  // constrained alias template's argument inside this partial specialization.)
  template <class F>
  using CacheOf = KVCache<T, Retention, F>;
  using Cache = KVCache<T, Retention, cache::Native>;

  template <cache::StorageFormat F = cache::Native>
  static CacheOf<F> make_cache(const Attn& a, const Mask& mask) {
    if constexpr (kWindowed) {
      return CacheOf<F>(a.kv_cache_config(), cache::SlidingWindow{mask.window});
    } else {
      (void)mask;
      return CacheOf<F>(a.kv_cache_config());
    }
  }
  static RowMatrix<T> full(const Attn& a, ConstMatrixRef<T> x, const Mask& mask) {
    return a.forward(x, mask);
  }
  static RowMatrix<T> batch(const Attn& a, const SequenceBatch<T>& x, const Mask& mask) {
    return a.forward(x, mask);
  }
  template <cache::StorageFormat F>
  static RowMatrix<T> cached(const Attn& a, ConstMatrixRef<T> x, CacheOf<F>& c) {
    return a.forward_cached(x, c);
  }
  template <cache::StorageFormat F>
  static RowMatrix<T> batch_cached(const Attn& a, const SequenceBatch<T>& x,
                                   const std::vector<CacheOf<F>*>& caches) {
    return a.forward_cached(x, caches);
  }
  static HeadWeights<T> head_weights(const Attn& a, ConstMatrixRef<T> x, const Mask& mask) {
    return a.head_weights(x, x, mask);
  }
  static std::size_t weight_bytes(const Attn& a) { return a.weight_bytes(); }
};

/// Latent attention (DeepSeek-V2): always causal, cached in a LatentCache.
template <Scalar T, LatentPath Path, class Conv, class Mask>
struct SelfAttentionOps<LatentAttention<T, Path, Conv>, Mask> {
  static_assert(std::same_as<Mask, CausalMask>,
                "kappa: LatentAttention is causal self-attention: use CausalMask");
  using Attn = LatentAttention<T, Path, Conv>;
  /// The latent cache with rows stored in format F (cache/formats.hpp).
  template <class F>
  using CacheOf = LatentCache<T, cache::Growable, F>;
  using Cache = LatentCache<T, cache::Growable, cache::Native>;

  template <cache::StorageFormat F = cache::Native>
  static CacheOf<F> make_cache(const Attn& a, const Mask& /*mask*/) {
    return CacheOf<F>(a.config());
  }
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
  template <cache::StorageFormat F>
  static RowMatrix<T> cached(const Attn& a, ConstMatrixRef<T> x, CacheOf<F>& c) {
    return a.forward_cached(x, c);
  }
  template <cache::StorageFormat F>
  static RowMatrix<T> batch_cached(const Attn& a, const SequenceBatch<T>& x,
                                   const std::vector<CacheOf<F>*>& caches) {
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
  static HeadWeights<T> head_weights(const Attn& a, ConstMatrixRef<T> x, const Mask& /*mask*/) {
    return a.head_weights(x, 0);
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
/// The norm type a model's final norm has: N for a layer of Sandwich<N>.
template <class N>
struct BranchNorm {
  using type = N;
};
template <class N>
struct BranchNorm<Sandwich<N>> {
  using type = N;
};

template <NormPlacement Placement, Scalar T, class Norm, class SubLayer>
void residual_branch(const char* what, RowMatrix<T>& h, const Norm& norm, SubLayer&& sub_layer) {
  if constexpr (std::same_as<Placement, SandwichNorm>) {
    RowMatrix<T> n = h;
    norm.pre.apply(n);
    RowMatrix<T> y = sub_layer(n);
    norm.post.apply(y);
    add_residual(what, h, y);
  } else if constexpr (std::same_as<Placement, PreNorm>) {
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
  static_assert(NormPolicy<typename detail::BranchNorm<Norm>::type, T>,
                "kappa: the norm must provide apply(MatrixRef<T>) const");
  static_assert(std::same_as<Placement, SandwichNorm> ==
                    !std::same_as<typename detail::BranchNorm<Norm>::type, Norm>,
                "kappa: a SandwichNorm layer takes Sandwich<N> norms, and only it does");
  static_assert(FeedForward<FFN, T>,
                "kappa: the feed-forward must provide forward(ConstMatrixRef<T>) const");
  static_assert(std::same_as<Mask, CausalMask> || std::same_as<Mask, SlidingWindowMask>,
                "kappa: a decoder-only layer is causal: Mask is CausalMask or SlidingWindowMask");

 public:
  using value_type = T;
  using AttentionType = Attn;
  /// The norm of the model's final layer (N for Sandwich<N> branches).
  using NormType = typename detail::BranchNorm<Norm>::type;
  using BranchNormType = Norm;
  using FeedForwardType = FFN;
  using PlacementType = Placement;
  using Ops = SelfAttentionOps<Attn, Mask>;
  /// The layer's cache with rows stored in format F (cache/formats.hpp).
  template <class F>
  using CacheOf = typename Ops::template CacheOf<F>;
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
  /// An empty cache for this layer, its rows stored in format F.
  template <cache::StorageFormat F = cache::Native>
  [[nodiscard]] CacheOf<F> make_cache() const {
    return Ops::template make_cache<F>(attn_, mask_);
  }
  /// New tokens X (n, d) continuing the sequence in `cache`; appends to it.
  template <cache::StorageFormat F>
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, CacheOf<F>& cache) const {
    return run(x, [&](ConstMatrixRef<T> h) { return Ops::cached(attn_, h, cache); });
  }
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, Cache& cache) const {
    return forward_cached<cache::Native>(x, cache);
  }
  /// forward_cached for B sequences at once, sequence b continuing *caches[b].
  template <cache::StorageFormat F>
  [[nodiscard]] RowMatrix<T> forward_cached(const SequenceBatch<T>& x,
                                            const std::vector<CacheOf<F>*>& caches) const {
    (void)x.offsets();
    return run(x.rows, [&](ConstMatrixRef<T> h) {
      return Ops::batch_cached(attn_, SequenceBatch<T>{h, x.lengths}, caches);
    });
  }

  /// The attention weights Z_h^-1 A_h (N x N) of every head that
  /// forward(x) forms for the layer's input x (N, d): over the normalized
  /// input N1(x) (pre-norm; the sandwich's pre norm) or x itself
  /// (post-norm), with the layer's causal or sliding-window mask. Allocates
  /// H N^2: for inspection, not speed.
  [[nodiscard]] HeadWeights<T> attention_weights(ConstMatrixRef<T> x) const {
    if constexpr (std::same_as<Placement, PostNorm>) {
      return Ops::head_weights(attn_, x, mask_);
    } else {
      RowMatrix<T> h = x;
      if constexpr (std::same_as<Placement, SandwichNorm>)
        norm_1_.pre.apply(h);
      else
        norm_1_.apply(h);
      return Ops::head_weights(attn_, h, mask_);
    }
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

/// K = M W^K + b_K and V = M W^V + b_V of the encoder output M (N_src rows):
/// what a decoder layer's cross-attention attends to at every target
/// position. Computed once per sequence and kept in the DecoderLayer's cache.
template <Scalar T>
struct ProjectedKV {
  RowMatrix<T> keys;    ///< K (N_src x H_kv d_head)
  RowMatrix<T> values;  ///< V (N_src x H_kv d_v)

  /// N_src, the memory rows held.
  [[nodiscard]] Index rows() const { return keys.rows(); }
  /// Bytes of K and V.
  [[nodiscard]] std::size_t bytes() const {
    return sizeof(T) * static_cast<std::size_t>(keys.size() + values.size());
  }
};

/// How a DecoderLayer caches its cross-attention over the encoder output M:
/// `Memory project(a, M)` once per sequence, `attend(a, H, memory)` at every
/// decoding step, `rows(memory)` and `bytes(memory)`. This primary template
/// serves any attention type with forward_cross(H, M): its Memory is a copy
/// of M and every step projects it again (kProjectsOnce = false). The
/// specialisation below for MultiHeadAttention (MHA, GQA, MQA) without a
/// positional policy keeps the projected K and V instead; a user's attention
/// type plugs in by specialising it.
template <class CrossAttn>
struct CrossAttentionOps {
  using T = typename CrossAttn::value_type;
  using Memory = RowMatrix<T>;
  static constexpr bool kProjectsOnce = false;

  static Memory project(const CrossAttn& /*a*/, ConstMatrixRef<T> memory) { return memory; }
  static RowMatrix<T> attend(const CrossAttn& a, ConstMatrixRef<T> h, const Memory& memory) {
    return a.forward_cross(h, memory, NoMask{});
  }
  static Index rows(const Memory& memory) { return memory.rows(); }
  static std::size_t bytes(const Memory& memory) {
    return sizeof(T) * static_cast<std::size_t>(memory.size());
  }
};

/// MHA / GQA / MQA cross-attention (no positional policy): the memory is
/// ProjectedKV, and a step is Y = [Y_1 ... Y_H] W^O + b_O with Q = H W^Q + b_Q
/// attending over the cached K and V through grouped_attention_into, the same
/// kernels and order of operations as forward_cross(H, M), so the results are
/// equal to it.
template <Scalar T, class K, HeadGrouping G>
struct CrossAttentionOps<MultiHeadAttention<T, K, G, NoPosition>> {
  using Attn = MultiHeadAttention<T, K, G, NoPosition>;
  using Memory = ProjectedKV<T>;
  static constexpr bool kProjectsOnce = true;

  /// K and V of M (N_src x d_kv_in). \throws ShapeError for another width.
  static Memory project(const Attn& a, ConstMatrixRef<T> memory) {
    const HeadsConfig& c = a.config();
    require_shapes(memory.cols() == c.d_kv_in, "DecoderLayer (cross-attention)", "M", memory.rows(),
                   memory.cols(), "W^K", c.d_kv_in, c.n_kv_heads * c.d_head,
                   "the encoder output must have d_kv_in columns");
    Memory kv;
    affine(memory, a.w_k(), a.b_k(), kv.keys);    // (N_src, H_kv d_head)
    affine(memory, a.w_v(), a.b_v(), kv.values);  // (N_src, H_kv d_v)
    return kv;
  }
  /// Cross-attention of the rows h (n x d_in) over the cached K, V.
  static RowMatrix<T> attend(const Attn& a, ConstMatrixRef<T> h, const Memory& kv) {
    const HeadsConfig& c = a.config();
    require_shapes(h.cols() == c.d_in, "DecoderLayer (cross-attention)", "X^Q", h.rows(), h.cols(),
                   "W^Q", c.d_in, c.n_heads * c.d_head, "the queries must have d_in columns");
    RowMatrix<T> q, out;
    affine(h, a.w_q(), a.b_q(), q);               // (n, H d_head)
    RowMatrix<T> y(h.rows(), c.n_heads * c.d_v);  // (n, H d_v)
    if (kv.rows() == 0) {
      y.setZero();  // no key to attend to: zero rows (the fully masked row's rule)
    } else {
      grouped_attention_into<T>(q, kv.keys, kv.values, y, c.n_heads, c.n_kv_heads, a.kernel(),
                                NoMask{});
    }
    affine(y, a.w_o(), a.b_o(), out);  // (n, d_out)
    return out;
  }
  static Index rows(const Memory& kv) { return kv.rows(); }
  static std::size_t bytes(const Memory& kv) { return kv.bytes(); }

 private:
  /// out = x W + b, as MultiHeadAttention projects.
  static void affine(ConstMatrixRef<T> x, const RowMatrix<T>& w, const RowVector<T>& b,
                     RowMatrix<T>& out) {
    out.resize(x.rows(), w.cols());
    product_into<T>(x, w, out);
    if (b.size() != 0) out.rowwise() += b;
  }
};

/// The decoder layer of the encoder-decoder Transformer: masked
/// self-attention, cross-attention over the encoder output M, feed-forward.
/// \tparam SelfAttn, CrossAttn  MultiHeadAttention<T, ...>
///
/// Cached decoding keeps, per layer and sequence, the self-attention's KV
/// cache (growing by the target tokens) and the cross-attention's K = M W^K,
/// V = M W^V (N_src rows each, see CrossAttentionOps), projected once: by
/// set_memory(M, cache), or by the first forward_cached(x, M, cache). The
/// rule for M afterwards: the cache serves the memory it was made from.
/// A later forward_cached(x, M', cache) checks that M' is that same matrix
/// (the same data pointer, rows, columns and stride: an O(1) check, not a
/// comparison of the values) and throws ShapeError otherwise; the cached K
/// and V are used, so M' may not be changed in place in between either.
/// forward_cached(x, cache) uses the bound memory without passing it (M may
/// then be gone). set_memory() replaces the memory explicitly; reset()
/// drops it with the tokens, truncate() keeps it.
template <Scalar T, class SelfAttn, class CrossAttn, class Norm, class FFN,
          NormPlacement Placement = PostNorm>
class DecoderLayer {
  static_assert(NormPolicy<Norm, T>, "kappa: the norm must provide apply(MatrixRef<T>) const");
  static_assert(FeedForward<FFN, T>,
                "kappa: the feed-forward must provide forward(ConstMatrixRef<T>) const");

 public:
  using value_type = T;
  using Ops = SelfAttentionOps<SelfAttn, CausalMask>;
  using SelfCache = typename Ops::Cache;
  using CrossOps = CrossAttentionOps<CrossAttn>;

  /// The cache of one target sequence in this layer: the self-attention's
  /// cache and the cross-attention's memory (see the class comment).
  class Cache {
   public:
    explicit Cache(SelfCache self) : self_(std::move(self)) {}

    /// Target tokens seen so far.
    [[nodiscard]] Index length() const { return self_.length(); }
    /// Whether the memory's K and V are held (set_memory or a first step).
    [[nodiscard]] bool has_memory() const { return memory_.has_value(); }
    /// N_src of the memory held (0 without one).
    [[nodiscard]] Index memory_rows() const { return memory_ ? CrossOps::rows(*memory_) : 0; }
    /// The cross-attention's memory: ProjectedKV (K, V) for MultiHeadAttention.
    /// \throws std::logic_error without one.
    [[nodiscard]] const typename CrossOps::Memory& memory() const {
      if (!memory_) throw std::logic_error("kappa: DecoderLayer::Cache: no memory set yet");
      return *memory_;
    }
    [[nodiscard]] const SelfCache& self_attention() const { return self_; }
    /// Bytes in use: the self-attention's cached tokens and the memory's K, V.
    [[nodiscard]] std::size_t bytes() const {
      return self_.bytes() + (memory_ ? CrossOps::bytes(*memory_) : 0);
    }
    /// Bytes the self-attention caches per target token (the memory's bytes
    /// are per sequence, not per token).
    [[nodiscard]] std::size_t bytes_per_token() const { return self_.bytes_per_token(); }
    /// Rolls back to the first `len` target tokens; the memory stays.
    void truncate(Index len) { self_.truncate(len); }
    /// Drops every cached token and the memory (for a new sequence).
    void reset() {
      self_.reset();
      memory_.reset();
      key_ = {};
    }

   private:
    friend class DecoderLayer;
    /// What identifies M: its data, shape and stride (no data when empty).
    struct Key {
      const T* data = nullptr;
      Index rows = 0, cols = 0, stride = 0;
      bool operator==(const Key&) const = default;
    };
    static Key key_of(const ConstMatrixRef<T>& m) {
      if (m.rows() == 0) return {nullptr, 0, m.cols(), 0};
      return {m.data(), m.rows(), m.cols(), m.outerStride()};
    }

    SelfCache self_;
    std::optional<typename CrossOps::Memory> memory_;
    Key key_{};
  };

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
  /// An empty cache for one target sequence (no memory yet).
  [[nodiscard]] Cache make_cache() const { return Cache(Ops::make_cache(self_, CausalMask{})); }

  /// Projects the encoder output M (N_src x d_kv_in) into the cache's
  /// cross-attention K and V, replacing any memory it held; the cached
  /// target tokens stay. \throws ShapeError for another width (the cache is
  /// then unchanged).
  void set_memory(ConstMatrixRef<T> memory, Cache& cache) const {
    cache.memory_ = CrossOps::project(cross_, memory);
    cache.key_ = Cache::key_of(memory);
  }
  /// Throws unless `memory` is the matrix the cache's memory was made from
  /// (see the class comment); a cache without memory accepts any.
  /// \throws ShapeError naming both shapes.
  void check_memory(ConstMatrixRef<T> memory, const Cache& cache) const {
    if (!cache.memory_ || Cache::key_of(memory) == cache.key_) return;
    const typename Cache::Key& k = cache.key_;
    throw ShapeError(
        "kappa: DecoderLayer::forward_cached: the cache holds the cross-attention K and V of an "
        "encoder output M " +
        shape_string(k.rows, k.cols) + " but this call passes " +
        (memory.rows() == k.rows && memory.cols() == k.cols ? "another matrix " : "") +
        shape_of(memory) +
        ": a cache serves one memory; pass the same matrix, call set_memory(memory, cache) to "
        "replace it, or reset() the cache for a new sequence");
  }

  /// New target tokens (n, d) continuing the sequence in `cache`, over M:
  /// the first call (or set_memory) projects M's K and V into the cache,
  /// later calls must pass the same M and reuse them.
  /// \throws ShapeError if M is not the cache's memory (the cache is then
  ///         unchanged), or for a width the layer does not have.
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, ConstMatrixRef<T> memory,
                                            Cache& cache) const {
    if (cache.memory_) {
      check_memory(memory, cache);
    } else {
      set_memory(memory, cache);
    }
    return forward_cached(x, cache);
  }
  /// New target tokens (n, d) continuing the sequence in `cache`, over the
  /// memory the cache holds.
  /// \throws std::logic_error if the cache has no memory yet.
  [[nodiscard]] RowMatrix<T> forward_cached(ConstMatrixRef<T> x, Cache& cache) const {
    if (!cache.memory_)
      throw std::logic_error(
          "kappa: DecoderLayer::forward_cached: the cache has no encoder memory yet: call "
          "set_memory(memory, cache) or forward_cached(x, memory, cache) first");
    const typename CrossOps::Memory& mem = *cache.memory_;
    return run(
        x, [&](ConstMatrixRef<T> h) { return self_.forward_cached(h, cache.self_); },
        [&](ConstMatrixRef<T> h) { return CrossOps::attend(cross_, h, mem); });
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
