// kappa/heads/latent.hpp - multi-head latent attention (MLA), DeepSeek-V2.
//
// DeepSeek-V2 (arXiv 2405.04434, section 2.1) compresses keys and values into
// one latent vector per token. In kappa's row convention (X: N x d, one token
// per row; head h's block of a stacked matrix is its column block h):
//
//   c_KV  = RMSNorm(X W^DKV)                       (N, d_c)     cached
//   k^R   = RoPE(X W^KR)                           (N, d_R)     cached, shared by all heads
//   K^C_h = c_KV W^UK_h,    V_h = c_KV W^UV_h      (N, d_h), (N, d_v)
//   c_Q   = RMSNorm(X W^DQ)                        (N, d_cq)    [query compression]
//   Q^C_h = c_Q W^UQ_h,     Q^R_h = RoPE(c_Q W^QR_h)            [or X W^Q_h, X W^QR_h]
//   A_h   = exp(s [Q^C_h, Q^R_h] [K^C_h, k^R]^T)   causal,  s = 1/sqrt(d_h + d_R)
//   O_h   = Z_h^-1 A_h V_h,   Y = [O_1 ... O_H] W^O               (N, d)
//
// The latent cache holds only [c_KV | k^R]: (d_c + d_R) values per token and
// layer, whatever the number of heads (DeepSeek-V2: 512 + 64 = 576, against
// 2 x 128 x 128 = 32768 for multi-head attention).
//
// Two execution paths, chosen by a type, with the same weights:
//
//  * NaiveLatent: up-project K^C_h and V_h from the cache for every head, then
//    ordinary attention per head. Cost per step O(N_KV d_c H (d_h + d_v)).
//  * AbsorbedLatent: since q^C_h . (c W^UK_h) = (q^C_h W^UK_h^T) . c, fold W^UK_h
//    into the query, q~_h = [q^C_h W^UK_h^T, q^R_h] (d_c + d_R wide), and take
//    scores directly against the cached rows [c_KV | k^R]; since
//    A_h (c W^UV_h) = (A_h c) W^UV_h, attend over c_KV itself and apply W^UV_h
//    (then W^O) to the d_c-wide result. All H heads then share one key matrix,
//    so they are stacked as H query rows per token (like multi-query
//    attention) and the cache is read once per step for all heads. The folded
//    products are formed at run time on the query/output side (a few small
//    GEMMs per step); precomputing W^UQ_h W^UK_h^T and W^UV_h W^O_h would cost
//    H d_cq d_c + H d_c d parameters (DeepSeek-V2: 335M + 100M per layer,
//    against 92M for W^UV and W^O), so kappa does not.
//
// Both paths agree to rounding (tests/heads/latent_test.cpp), and decoding
// through the latent cache equals the full causal forward pass.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/cache/decode.hpp"
#include "kappa/cache/formats.hpp"
#include "kappa/cache/token_store.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"
#include "kappa/embed/rope.hpp"
#include "kappa/embed/rope_scaling.hpp"
#include "kappa/heads/grouping.hpp"
#include "kappa/heads/head_weights.hpp"
#include "kappa/nn/norms.hpp"

namespace kappa {

/// Execution path of latent attention: up-project keys and values per head.
struct NaiveLatent {};
/// Execution path of latent attention: weight-absorbed, scores and values
/// taken directly against the latent cache (see the file comment).
struct AbsorbedLatent {};

template <class P>
concept LatentPath = std::same_as<P, NaiveLatent> || std::same_as<P, AbsorbedLatent>;

/// Sizes of a latent attention layer (DeepSeek-V2 names in brackets).
struct LatentConfig {
  Index d_model = 0;              ///< d [hidden_size]
  Index n_heads = 0;              ///< n_h [num_attention_heads]
  Index d_head = 0;               ///< d_h, per-head width of Q^C, K^C [qk_nope_head_dim]
  Index d_rope = 0;               ///< d_R, decoupled RoPE width [qk_rope_head_dim]
  Index d_v = 0;                  ///< per-head value width [v_head_dim]; 0 means d_head
  Index d_latent = 0;             ///< d_c, KV compression rank [kv_lora_rank]
  Index d_q_latent = 0;           ///< d_cq, query compression rank [q_lora_rank]; 0 = none
  double norm_eps = 1e-6;         ///< RMSNorm epsilon [rms_norm_eps]
  double rope_base = 10000.0;     ///< RoPE base [rope_theta]
  RopeScaling rope_scaling{};     ///< RoPE frequency rule [rope_scaling], e.g. yarn
  std::optional<double> scale{};  ///< s; unset means 1/sqrt(d_h + d_R)

  [[nodiscard]] Index value_width() const { return d_v > 0 ? d_v : d_head; }
  [[nodiscard]] bool query_compression() const { return d_q_latent > 0; }
  /// Width of a cached latent row: d_c + d_R.
  [[nodiscard]] Index cache_width() const { return d_latent + d_rope; }
};

/// Latent-cache elements per token for `layers` layers: (d_c + d_R) l.
/// \throws RangeError naming the values if one is negative or the result
///         does not fit in Index.
inline Index latent_cache_elements_per_token(const LatentConfig& c, Index layers) {
  constexpr Index kAny = std::numeric_limits<Index>::max();
  return checked_mul("latent cache elements per token: (d_c + d_R) x layers",
                     checked_add("latent cache: d_c + d_R", c.d_latent, c.d_rope, kAny), layers,
                     kAny);
}

/// KV-cache elements per token of one model under the four attention forms
/// (DeepSeek-V2, Table 1): MHA 2 n_h d_h l, GQA 2 n_g d_h l, MQA 2 d_h l,
/// MLA (d_c + d_R) l.
struct CacheElementsPerToken {
  Index mha = 0, gqa = 0, mqa = 0, mla = 0;
};

/// \param n_heads n_h   \param n_groups n_g (kv heads of the GQA form)
/// \param d_head d_h    \param d_latent d_c   \param d_rope d_R   \param layers l
/// \throws RangeError naming the values if one is negative or a count does
///         not fit in Index.
inline CacheElementsPerToken cache_elements_per_token(Index n_heads, Index n_groups, Index d_head,
                                                      Index d_latent, Index d_rope, Index layers) {
  constexpr Index kAny = std::numeric_limits<Index>::max();
  const Index per_head =
      checked_mul("cache elements per token: 2 d_h x layers",
                  checked_mul("cache elements per token: 2 x d_h", 2, d_head, kAny), layers, kAny);
  return {checked_mul("cache elements per token: n_h x 2 d_h l", n_heads, per_head, kAny),
          checked_mul("cache elements per token: n_g x 2 d_h l", n_groups, per_head, kAny),
          per_head,
          checked_mul("cache elements per token: (d_c + d_R) x layers",
                      checked_add("cache elements per token: d_c + d_R", d_latent, d_rope, kAny),
                      layers, kAny)};
}

/// The weights of a latent attention layer in the paper's convention (all
/// used as X W; per-head matrices stacked by columns, head h = block h).
template <Scalar T>
struct LatentWeights {
  RowMatrix<T> w_dq;     ///< W^DQ  (d, d_cq)        [query compression only]
  RowVector<T> q_norm;   ///< RMSNorm gain of c_Q (d_cq)
  RowMatrix<T> w_uq;     ///< W^UQ  (d_cq, H d_h)     or W^Q (d, H d_h) without compression
  RowMatrix<T> w_qr;     ///< W^QR  (d_cq, H d_R)     or (d, H d_R) without compression
  RowMatrix<T> w_dkv;    ///< W^DKV (d, d_c)
  RowVector<T> kv_norm;  ///< RMSNorm gain of c_KV (d_c)
  RowMatrix<T> w_uk;     ///< W^UK  (d_c, H d_h)
  RowMatrix<T> w_uv;     ///< W^UV  (d_c, H d_v)
  RowMatrix<T> w_kr;     ///< W^KR  (d, d_R)
  RowMatrix<T> w_o;      ///< W^O   (H d_v, d)
};

/// The same weights as Hugging Face's DeepSeek-V2 checkpoint names them
/// (nn.Linear weights: out x in, applied as x W^T). Per head, q rows are
/// [nope (d_h) | rope (d_R)] and kv_b rows are [k_nope (d_h) | v (d_v)].
template <Scalar T>
struct HfDeepSeekV2AttentionWeights {
  RowMatrix<T> q_a_proj;            ///< (d_cq, d)              [query compression]
  RowVector<T> q_a_layernorm;       ///< (d_cq)                 [query compression]
  RowMatrix<T> q_b_proj;            ///< (H (d_h + d_R), d_cq)  [query compression]
  RowMatrix<T> q_proj;              ///< (H (d_h + d_R), d)     [no query compression]
  RowMatrix<T> kv_a_proj_with_mqa;  ///< (d_c + d_R, d)
  RowVector<T> kv_a_layernorm;      ///< (d_c)
  RowMatrix<T> kv_b_proj;           ///< (H (d_h + d_v), d_c)
  RowMatrix<T> o_proj;              ///< (d, H d_v)
};

/// The latent cache of one layer: per token the row [c_KV | k^R]
/// (d_c + d_R values), in a preallocated TokenStore (one stream). Same
/// append / truncate / reset / capacity / bytes() interface as KVCache.
/// \tparam F  storage format (cache/formats.hpp): cache::Native (T),
///            cache::BF16, cache::F16 or cache::Int8 (one scale per token
///            for the whole row [c_KV | k^R]). DeepSeek-V2 (60 layers, d_c
///            512, d_R 64) holds 138240 bytes per token in float, 69120 in
///            BF16 or F16 and 34800 in Int8.
template <Scalar T, cache::RetentionPolicy R = cache::Growable,
          cache::StorageFormat F = cache::Native>
class LatentCache {
  static_assert(!R::kWindowed,
                "kappa: LatentCache supports cache::Growable and cache::FixedCapacity; latent "
                "attention with a sliding window is not implemented");

 public:
  using Format = F;
  using Store = cache::TokenStore<T, R, F>;
  using ConstView = typename Store::ConstView;
  /// The cached rows in the storage format (see cache/formats.hpp).
  using Rows = typename Store::Rows;

  explicit LatentCache(const LatentConfig& config, R retention = {})
      : d_latent_(config.d_latent),
        d_rope_(config.d_rope),
        store_({checked_width(config)}, retention) {}

  /// Tokens appended so far (the position of the next token).
  [[nodiscard]] Index length() const { return store_.length(); }
  [[nodiscard]] Index capacity() const { return store_.capacity(); }
  [[nodiscard]] Index d_latent() const { return d_latent_; }
  [[nodiscard]] Index d_rope() const { return d_rope_; }
  /// The cached rows [c_KV | k^R] (length x (d_c + d_R)), a view (Native
  /// format only; every format has stored_rows()).
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, cache::Native>
  [[nodiscard]] ConstView rows() const { return store_.stream(0); }
  /// c_KV (length x d_c) and k^R (length x d_R), views (Native format only).
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, cache::Native>
  [[nodiscard]] auto latent() const { return rows().leftCols(d_latent_); }
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, cache::Native>
  [[nodiscard]] auto rope_keys() const { return rows().rightCols(d_rope_); }
  /// The cached rows [c_KV | k^R] in the storage format, a view.
  [[nodiscard]] Rows stored_rows() const { return store_.stored_rows(0); }

  /// Appends n rows [c_KV | k^R] (n x (d_c + d_R)).
  /// \throws ShapeError for a wrong width; RangeError past a fixed capacity.
  void append(ConstMatrixRef<T> rows) {
    const ConstMatrixRef<T> streams[1] = {rows};
    store_.append(std::span<const ConstMatrixRef<T>>(streams, 1));
  }
  void reserve(Index tokens) { store_.reserve(tokens); }
  /// Rolls back to the first len tokens. \throws RangeError if len > length().
  void truncate(Index len) { store_.truncate(len); }
  void reset() { store_.reset(); }
  /// Bytes of the live rows: length x bytes_per_token().
  [[nodiscard]] std::size_t bytes() const { return store_.bytes(); }
  /// Bytes this cache holds per token: (d_c + d_R) x the bytes of a stored
  /// value (+ 4 for the Int8 scale).
  [[nodiscard]] std::size_t bytes_per_token() const { return store_.bytes_per_token(); }
  /// Bytes per token of a latent cache for a model of `layers` layers, each
  /// scalar stored in `bytes_per_scalar` bytes (sizeof(T) unless given):
  /// (d_c + d_R) x layers x bytes_per_scalar. The same name and shape as
  /// KVCache::bytes_per_token. \throws RangeError naming the values if
  /// one is negative or the product does not fit in int64.
  static std::size_t bytes_per_token(const LatentConfig& c, Index layers = 1,
                                     std::size_t bytes_per_scalar = sizeof(T)) {
    constexpr Index kAny = std::numeric_limits<Index>::max();
    if (bytes_per_scalar > static_cast<std::size_t>(kAny))
      throw RangeError("kappa: latent cache bytes per token: bytes per scalar " +
                       std::to_string(bytes_per_scalar) + " is too large");
    return static_cast<std::size_t>(checked_mul("latent cache bytes per token: elements x bytes",
                                                latent_cache_elements_per_token(c, layers),
                                                static_cast<Index>(bytes_per_scalar), kAny));
  }
  /// Bytes per token of a latent cache of `layers` layers stored in format
  /// F2: (d_c + d_R) layers sizeof(element), plus 4 layers bytes of row
  /// scales for Int8. \throws RangeError as the overload above.
  template <cache::StorageFormat F2>
  static std::size_t bytes_per_token(const LatentConfig& c, Index layers, F2 /*format*/) {
    constexpr Index kAny = std::numeric_limits<Index>::max();
    const std::size_t values = bytes_per_token(c, layers, sizeof(typename F2::template Element<T>));
    if constexpr (!F2::kScaled) {
      return values;
    } else {
      return static_cast<std::size_t>(checked_add(
          "latent cache bytes per token: values + scales", static_cast<Index>(values),
          checked_mul("latent cache: scale bytes, 4 x layers", layers, Index{4}, kAny), kAny));
    }
  }

 private:
  static Index checked_width(const LatentConfig& c) {
    if (c.d_latent < 1 || c.d_rope < 0) {
      throw std::invalid_argument("kappa: LatentCache needs d_latent >= 1 and d_rope >= 0, got " +
                                  std::to_string(c.d_latent) + " and " + std::to_string(c.d_rope));
    }
    return checked_add("LatentCache: row width d_c + d_R", c.d_latent, c.d_rope, kMaxElements);
  }
  Index d_latent_;
  Index d_rope_;
  Store store_;
};

/// Multi-head latent attention (DeepSeek-V2), causal self-attention.
///
/// \tparam T        float or double
/// \tparam Path     NaiveLatent or AbsorbedLatent (same results, different cost)
/// \tparam RopeConvention  Interleaved (the default: DeepSeek's checkpoints) or
///                         RotateHalf. DeepSeek stores the rotary parts of q and
///                         k with pairs (2i, 2i + 1); its modeling code
///                         de-interleaves them (view(d/2, 2).transpose) before
///                         rotate_half, which rotates exactly those pairs. The
///                         scores are invariant to the order of the channels, so
///                         Interleaved on the stored weights is DeepSeek's
///                         equation. RotateHalf is for weights laid out as
///                         HF LLaMA's (pairs (i, i + d_R/2)).
///
/// ```cpp
/// kappa::LatentAttention<float, kappa::AbsorbedLatent> mla(config);
/// mla.set_weights(weights);                       // LatentWeights<float>
/// kappa::LatentCache<float> cache(config);
/// auto y0 = mla.forward_cached(prompt, cache);   // prefill (N x d)
/// auto y1 = mla.forward_cached(next_token, cache);  // one decode step (1 x d)
/// ```
/// A freshly constructed layer holds no weights: forward calls throw
/// std::logic_error until set_weights(), set_weights_from_hf() or
/// init_random(seed) is called. The rotary width is LatentConfig::d_rope
/// (DeepSeek's qk_rope_head_dim); the layer builds its RoPE from it.
template <Scalar T, LatentPath Path = AbsorbedLatent, class RopeConvention = Interleaved>
class LatentAttention {
 public:
  using value_type = T;

  explicit LatentAttention(LatentConfig config)
      : c_(checked(std::move(config))),
        rope_(c_.d_rope, c_.rope_base, c_.rope_scaling),
        scale_(static_cast<T>(
            c_.scale.value_or(1.0 / std::sqrt(static_cast<double>(c_.d_head + c_.d_rope))))) {}

  [[nodiscard]] const LatentConfig& config() const { return c_; }

  /// Sets the weights from the paper's matrices (see LatentWeights for the
  /// shapes). \throws ShapeError naming the expected and the actual shape.
  void set_weights(LatentWeights<T> w) {
    const Index d = c_.d_model, h = c_.n_heads;
    const Index q_in = c_.query_compression() ? c_.d_q_latent : d;
    if (c_.query_compression()) {
      expect("w_dq", w.w_dq, d, c_.d_q_latent);
      expect("q_norm", w.q_norm, 1, c_.d_q_latent);
    }
    expect(c_.query_compression() ? "w_uq" : "w_uq (W^Q)", w.w_uq, q_in, h * c_.d_head);
    expect("w_qr", w.w_qr, q_in, h * c_.d_rope);
    expect("w_dkv", w.w_dkv, d, c_.d_latent);
    expect("kv_norm", w.kv_norm, 1, c_.d_latent);
    expect("w_uk", w.w_uk, c_.d_latent, h * c_.d_head);
    expect("w_uv", w.w_uv, c_.d_latent, h * c_.value_width());
    expect("w_kr", w.w_kr, d, c_.d_rope);
    expect("w_o", w.w_o, h * c_.value_width(), d);
    if (c_.query_compression()) q_norm_ = RMSNorm<T>(w.q_norm, c_.norm_eps);
    kv_norm_ = RMSNorm<T>(w.kv_norm, c_.norm_eps);
    w_ = std::move(w);
    // W^DKV and W^KR side by side: one product gives [c_KV | k^R] pre-norm.
    w_dkv_kr_.resize(d, c_.cache_width());
    w_dkv_kr_ << w_.w_dkv, w_.w_kr;
    // Queries: [W^UQ | W^QR] side by side, one product for both parts.
    w_q_all_.resize(q_in, h * (c_.d_head + c_.d_rope));
    w_q_all_ << w_.w_uq, w_.w_qr;
    has_weights_ = true;
  }

  /// Sets the weights from Hugging Face DeepSeek-V2 tensors (see
  /// HfDeepSeekV2AttentionWeights). \throws ShapeError naming the tensor, the
  /// expected and the actual shape.
  void set_weights_from_hf(const HfDeepSeekV2AttentionWeights<T>& hf) {
    const Index d = c_.d_model, h = c_.n_heads, dh = c_.d_head, dr = c_.d_rope,
                dv = c_.value_width(), dc = c_.d_latent;
    LatentWeights<T> w;
    const RowMatrix<T>* q_b;
    if (c_.query_compression()) {
      expect("q_a_proj", hf.q_a_proj, c_.d_q_latent, d);
      expect("q_a_layernorm", hf.q_a_layernorm, 1, c_.d_q_latent);
      expect("q_b_proj", hf.q_b_proj, h * (dh + dr), c_.d_q_latent);
      w.w_dq = hf.q_a_proj.transpose();
      w.q_norm = hf.q_a_layernorm;
      q_b = &hf.q_b_proj;
    } else {
      expect("q_proj", hf.q_proj, h * (dh + dr), d);
      q_b = &hf.q_proj;
    }
    const Index q_in = q_b->cols();
    w.w_uq.resize(q_in, h * dh);
    w.w_qr.resize(q_in, h * dr);
    for (Index i = 0; i < h; ++i) {
      w.w_uq.middleCols(i * dh, dh) = q_b->middleRows(i * (dh + dr), dh).transpose();
      w.w_qr.middleCols(i * dr, dr) = q_b->middleRows(i * (dh + dr) + dh, dr).transpose();
    }
    expect("kv_a_proj_with_mqa", hf.kv_a_proj_with_mqa, dc + dr, d);
    expect("kv_a_layernorm", hf.kv_a_layernorm, 1, dc);
    expect("kv_b_proj", hf.kv_b_proj, h * (dh + dv), dc);
    expect("o_proj", hf.o_proj, d, h * dv);
    w.w_dkv = hf.kv_a_proj_with_mqa.topRows(dc).transpose();
    w.w_kr = hf.kv_a_proj_with_mqa.bottomRows(dr).transpose();
    w.kv_norm = hf.kv_a_layernorm;
    w.w_uk.resize(dc, h * dh);
    w.w_uv.resize(dc, h * dv);
    for (Index i = 0; i < h; ++i) {
      w.w_uk.middleCols(i * dh, dh) = hf.kv_b_proj.middleRows(i * (dh + dv), dh).transpose();
      w.w_uv.middleCols(i * dv, dv) = hf.kv_b_proj.middleRows(i * (dh + dv) + dh, dv).transpose();
    }
    w.w_o = hf.o_proj.transpose();
    set_weights(std::move(w));
  }

  /// Draws every weight from the seed: W^DQ (with query compression only),
  /// W^UQ (or W^Q), W^QR, W^DKV, W^UK, W^UV, W^KR, W^O in that order from one
  /// SeededNormal(seed) stream, each W (fan_in x fan_out) with entries
  /// W_ij ~ U(-a, a], a = sqrt(3 / fan_in): mean 0, variance 1 / fan_in
  /// (seeded_projection, core/random.hpp); the RMSNorm gains are 1. c_KV is
  /// normalized, so K^C_h and V_h have unit-variance entries, and for X with
  /// independent unit-variance entries so has Y for a single token. The same
  /// seed gives the same weights on every platform.
  void init_random(std::uint64_t seed) {
    SeededNormal g(seed);
    const Index d = c_.d_model, h = c_.n_heads, dv = c_.value_width();
    const Index q_in = c_.query_compression() ? c_.d_q_latent : d;
    LatentWeights<T> w;
    if (c_.query_compression()) {
      w.w_dq = seeded_projection<T>(d, c_.d_q_latent, g);
      w.q_norm = RowVector<T>::Ones(c_.d_q_latent);
    }
    w.w_uq = seeded_projection<T>(q_in, h * c_.d_head, g);
    w.w_qr = seeded_projection<T>(q_in, h * c_.d_rope, g);
    w.w_dkv = seeded_projection<T>(d, c_.d_latent, g);
    w.kv_norm = RowVector<T>::Ones(c_.d_latent);
    w.w_uk = seeded_projection<T>(c_.d_latent, h * c_.d_head, g);
    w.w_uv = seeded_projection<T>(c_.d_latent, h * dv, g);
    w.w_kr = seeded_projection<T>(d, c_.d_rope, g);
    w.w_o = seeded_projection<T>(h * dv, d, g);
    set_weights(std::move(w));
  }

  [[nodiscard]] const LatentWeights<T>& weights() const { return w_; }

  /// The cache rows [c_KV | k^R] of x (N x d), tokens at positions
  /// first_position.. (N x (d_c + d_R)).
  [[nodiscard]] RowMatrix<T> latent_rows(ConstMatrixRef<T> x, Index first_position) const {
    check_input(x);
    RowMatrix<T> rows = x * w_dkv_kr_;  // (N, d_c + d_R)
    kv_norm_.apply(rows.leftCols(c_.d_latent));
    rope_.apply(rows.rightCols(c_.d_rope), first_position);
    return rows;
  }

  /// Causal self-attention over x alone (N x d), token i at position
  /// first_position + i: returns Y (N x d).
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x, Index first_position = 0) const {
    const RowMatrix<T> rows = latent_rows(x, first_position);
    return attend(x, first_position, rows);
  }

  /// The attention weights Z_h^-1 A_h (N x N, causal) of every head that
  /// forward(x, first_position) forms: softmax of s [Q^C_h | Q^R_h]
  /// [K^C_h | k^R]^T with K^C_h = c_KV W^UK_h (the naive path's matrices;
  /// the absorbed path forms the same scores in another order). Allocates
  /// H N^2: for inspection, not speed.
  [[nodiscard]] HeadWeights<T> head_weights(ConstMatrixRef<T> x, Index first_position = 0) const {
    const RowMatrix<T> kv = latent_rows(x, first_position);
    const RowMatrix<T> q = queries(x, first_position);
    const Index n = x.rows(), h_n = c_.n_heads, dh = c_.d_head, dr = c_.d_rope, dc = c_.d_latent;
    const kernels::Softmax softmax{.scale = static_cast<double>(scale_)};
    RowMatrix<T> q_h(n, dh + dr), k_h(n, dh + dr);
    std::vector<RowMatrix<T>> weights;
    weights.reserve(static_cast<std::size_t>(h_n));
    for (Index h = 0; h < h_n; ++h) {
      q_h.leftCols(dh) = q.middleCols(h * dh, dh);
      q_h.rightCols(dr) = q.middleCols(h_n * dh + h * dr, dr);
      k_h.leftCols(dh).noalias() = kv.leftCols(dc) * w_.w_uk.middleCols(h * dh, dh);
      k_h.rightCols(dr) = kv.rightCols(dr);
      weights.push_back(
          attention_details(q_h, k_h, kv.leftCols(dc), softmax, CausalMask{}).weights);
    }
    return HeadWeights<T>(std::move(weights));
  }

  /// Appends x's tokens (N x d) to the cache, then attends from them to
  /// every cached token (causal): prefill with N > 1, decoding with N = 1.
  /// Token i sits at position cache.length() + i. Returns Y (N x d).
  ///
  /// The cache may store any format. With BF16, F16 or Int8 the
  /// weight-absorbed path attends over the stored rows through the decode
  /// kernel (cache/decode.hpp; the N_Q H stacked query rows in blocks of
  /// kDecodeRows), and so does a float cache when N_Q H <= kDecodeRows and
  /// the kernel's register loops are compiled in; the naive path, which
  /// up-projects K^C_h and V_h (N x d_h each) for every head anyway, first
  /// decodes the rows to T.
  template <cache::RetentionPolicy R, cache::StorageFormat F>
  RowMatrix<T> forward_cached(ConstMatrixRef<T> x, LatentCache<T, R, F>& cache) const {
    require_shapes(cache.d_latent() == c_.d_latent && cache.d_rope() == c_.d_rope,
                   "LatentAttention::forward_cached", "the cache (d_c x d_R)", cache.d_latent(),
                   cache.d_rope(), "the layer (d_c x d_R)", c_.d_latent, c_.d_rope,
                   "the cache must be made for this layer's config");
    const Index first = cache.length();
    cache.append(latent_rows(x, first));
    if constexpr (std::same_as<F, cache::Native>) {
#if KAPPA_DECODE_SIMD
      // A decode step (at most kDecodeRows stacked heads) over a float cache:
      // the decode kernel's wide register loops, 1.3-1.6x the blocked
      // attention_into path at 16 heads (benchmarks/README.md, "Latent
      // attention"). More rows (a prompt chunk, more heads) go through
      // attention_into, as in grouped attention.
      if constexpr (std::is_same_v<Path, AbsorbedLatent> && std::is_same_v<T, float>) {
        if (x.rows() * c_.n_heads <= kDecodeRows)
          return attend_absorbed_stored(queries(x, first), cache.stored_rows());
      }
#endif
      return attend(x, first, cache.rows());
    } else if constexpr (std::is_same_v<Path, NaiveLatent>) {
      return attend(x, first, cache.stored_rows().decoded());
    } else {
      return attend_absorbed_stored(queries(x, first), cache.stored_rows());
    }
  }

 private:
  static LatentConfig checked(LatentConfig c) {
    if (c.d_rope < 2 || c.d_rope % 2 != 0) {
      throw ShapeError(
          "kappa: LatentAttention: the rotary width d_rope (d_R, "
          "qk_rope_head_dim) must be even and >= 2, got " +
          std::to_string(c.d_rope));
    }
    if (c.d_model < 1 || c.n_heads < 1 || c.d_head < 1 || c.d_latent < 1 || c.d_v < 0 ||
        c.d_q_latent < 0) {
      throw std::invalid_argument(
          "kappa: LatentConfig needs d_model, n_heads, d_head, d_latent >= 1 and d_v, "
          "d_q_latent >= 0, got d_model " +
          std::to_string(c.d_model) + ", n_heads " + std::to_string(c.n_heads) + ", d_head " +
          std::to_string(c.d_head) + ", d_latent " + std::to_string(c.d_latent) + ", d_v " +
          std::to_string(c.d_v) + ", d_q_latent " + std::to_string(c.d_q_latent));
    }
    // Every width and matrix the layer forms, checked once so that no later
    // product of sizes can overflow (RangeError naming the values).
    require_head_count("LatentAttention: n_heads", c.n_heads);
    const Index h = c.n_heads, d = c.d_model, dv = c.value_width();
    const Index q_in = c.query_compression() ? c.d_q_latent : d;
    const Index qr = checked_add("LatentAttention: d_h + d_R", c.d_head, c.d_rope, kMaxElements);
    const Index kv = checked_add("LatentAttention: d_h + d_v", c.d_head, dv, kMaxElements);
    const Index cw = checked_add("LatentAttention: d_c + d_R", c.d_latent, c.d_rope, kMaxElements);
    const Index q_cols = checked_mul("LatentAttention: H (d_h + d_R)", h, qr);
    (void)checked_mul("LatentAttention: H (d_h + d_v)", h, kv);
    const Index hv = checked_mul("LatentAttention: H d_v", h, dv);
    (void)checked_mul("LatentAttention: H (d_c + d_R), absorbed queries", h, cw);
    (void)checked_mul("LatentAttention: [W^UQ | W^QR], q_in x H (d_h + d_R)", q_in, q_cols);
    (void)checked_mul("LatentAttention: [W^DKV | W^KR], d x (d_c + d_R)", d, cw);
    (void)checked_mul("LatentAttention: W^UK, d_c x H d_h", c.d_latent,
                      checked_mul("LatentAttention: H d_h", h, c.d_head));
    (void)checked_mul("LatentAttention: W^UV, d_c x H d_v", c.d_latent, hv);
    (void)checked_mul("LatentAttention: W^O, H d_v x d", hv, d);
    if (c.query_compression())
      (void)checked_mul("LatentAttention: W^DQ, d x d_cq", d, c.d_q_latent);
    if (c.scale) require_finite("LatentAttention: scale s", *c.scale);
    return c;
  }
  template <class M>
  static void expect(const char* name, const M& m, Index rows, Index cols) {
    require_shapes(m.rows() == rows && m.cols() == cols, "LatentAttention weights", name, m.rows(),
                   m.cols(), "expected", rows, cols, "see LatentConfig");
  }
  void check_input(const ConstMatrixRef<T>& x) const {
    if (!has_weights_)
      throw std::logic_error("kappa: LatentAttention: set_weights() was not called");
    require_shapes(x.cols() == c_.d_model, "LatentAttention", "X", x.rows(), x.cols(),
                   "(N x d_model)", x.rows(), c_.d_model, "X must have d_model columns");
  }

  /// Queries [Q^C | Q^R] for x: (N, H d_h) then (N, H d_R), RoPE applied.
  RowMatrix<T> queries(const ConstMatrixRef<T>& x, Index first_position) const {
    RowMatrix<T> q;
    if (c_.query_compression()) {
      RowMatrix<T> c_q = x * w_.w_dq;  // (N, d_cq)
      q_norm_.apply(c_q);
      q.noalias() = c_q * w_q_all_;  // (N, H (d_h + d_R))
    } else {
      q.noalias() = x * w_q_all_;  // (N, H (d_h + d_R))
    }
    rope_.apply_heads(q.rightCols(c_.n_heads * c_.d_rope), c_.n_heads, first_position);
    return q;
  }

  template <class Rows>
  RowMatrix<T> attend(const ConstMatrixRef<T>& x, Index first_position, const Rows& kv_rows) const {
    const RowMatrix<T> q = queries(x, first_position);
    if constexpr (std::is_same_v<Path, NaiveLatent>) {
      return attend_naive(q, kv_rows);
    } else {
      return attend_absorbed(q, kv_rows);
    }
  }

  RowMatrix<T> attend_naive(const RowMatrix<T>& q, const ConstMatrixRef<T>& kv) const {
    const Index n_q = q.rows(), n_kv = kv.rows(), h_n = c_.n_heads, dh = c_.d_head, dr = c_.d_rope,
                dv = c_.value_width(), dc = c_.d_latent;
    const auto c_kv = kv.leftCols(dc);
    RowMatrix<T> o(n_q, h_n * dv);  // [O_1 ... O_H]
    RowMatrix<T> q_h(n_q, dh + dr), k_h(n_kv, dh + dr), v_h(n_kv, dv);
    AttentionWorkspace<T> ws;
    const kernels::Softmax softmax{.scale = static_cast<double>(scale_)};
    for (Index h = 0; h < h_n; ++h) {
      q_h.leftCols(dh) = q.middleCols(h * dh, dh);
      q_h.rightCols(dr) = q.middleCols(h_n * dh + h * dr, dr);
      k_h.leftCols(dh).noalias() = c_kv * w_.w_uk.middleCols(h * dh, dh);  // K^C_h (N_KV, d_h)
      k_h.rightCols(dr) = kv.rightCols(dr);                                // k^R   (N_KV, d_R)
      v_h.noalias() = c_kv * w_.w_uv.middleCols(h * dv, dv);               // V_h   (N_KV, d_v)
      attention_into<T>(q_h, k_h, v_h, o.middleCols(h * dv, dv), ws, softmax, CausalMask{});
    }
    return o * w_.w_o;  // (N_Q, d)
  }

  RowMatrix<T> attend_absorbed(const RowMatrix<T>& q, const ConstMatrixRef<T>& kv) const {
    const Index n_q = q.rows(), h_n = c_.n_heads, dh = c_.d_head, dr = c_.d_rope,
                dv = c_.value_width(), dc = c_.d_latent, w = dc + dr;
    // q~ = [Q^C_h W^UK_h^T | Q^R_h] for every head, stored as N_Q x (H w):
    // the same memory is the head-stacked (N_Q H) x w matrix.
    RowMatrix<T> q_abs(n_q, h_n * w);
    for (Index h = 0; h < h_n; ++h) {
      q_abs.middleCols(h * w, dc).noalias() =
          q.middleCols(h * dh, dh) * w_.w_uk.middleCols(h * dh, dh).transpose();  // (N_Q, d_c)
      q_abs.middleCols(h * w + dc, dr) = q.middleCols(h_n * dh + h * dr, dr);     // (N_Q, d_R)
    }
    const Eigen::Map<const RowMatrix<T>> q_stacked(q_abs.data(), n_q * h_n,
                                                   w);  // (N_Q H, d_c + d_R)
    RowMatrix<T> o_lat(n_q, h_n * dc);  // viewed as (N_Q H, d_c): row i H + h = head h of token i
    Eigen::Map<RowMatrix<T>> o_stacked(o_lat.data(), n_q * h_n, dc);
    AttentionWorkspace<T> ws;
    const kernels::Softmax softmax{.scale = static_cast<double>(scale_)};
    const CausalMask causal{};  // row i H + h is token i: GroupedRows maps it back
    attention_into<T>(q_stacked, kv, kv.leftCols(dc), o_stacked, ws, softmax,
                      GroupedRows<CausalMask>{&causal, h_n});
    RowMatrix<T> o(n_q, h_n * dv);  // [O_1 ... O_H], O_h = (A_h c_KV / Z_h) W^UV_h
    for (Index h = 0; h < h_n; ++h) {
      o.middleCols(h * dv, dv).noalias() =
          o_lat.middleCols(h * dc, dc) * w_.w_uv.middleCols(h * dv, dv);  // (N_Q, d_v)
    }
    return o * w_.w_o;  // (N_Q, d)
  }

  /// attend_absorbed over rows stored in format F, through the decode kernel.
  template <cache::StorageFormat F>
  RowMatrix<T> attend_absorbed_stored(const RowMatrix<T>& q,
                                      const cache::StoredRows<T, F>& kv) const {
    const Index n_q = q.rows(), h_n = c_.n_heads, dh = c_.d_head, dr = c_.d_rope,
                dv = c_.value_width(), dc = c_.d_latent, w = dc + dr;
    RowMatrix<T> q_abs(n_q, h_n * w);  // as in attend_absorbed
    for (Index h = 0; h < h_n; ++h) {
      q_abs.middleCols(h * w, dc).noalias() =
          q.middleCols(h * dh, dh) * w_.w_uk.middleCols(h * dh, dh).transpose();  // (N_Q, d_c)
      q_abs.middleCols(h * w + dc, dr) = q.middleCols(h_n * dh + h * dr, dr);     // (N_Q, d_R)
    }
    const Eigen::Map<const RowMatrix<T>> q_stacked(q_abs.data(), n_q * h_n, w);
    RowMatrix<T> o_lat(n_q, h_n * dc);
    Eigen::Map<RowMatrix<T>> o_stacked(o_lat.data(), n_q * h_n, dc);
    DecodeWorkspace<T> ws;
    const kernels::Softmax softmax{.scale = static_cast<double>(scale_)};
    // Row i H + h is head h of token i: group H maps it to the mask's row i.
    decode_attention_into<T, F>(q_stacked, kv, kv.middle_cols(0, dc), o_stacked, ws, softmax,
                                CausalMask{}, h_n);
    RowMatrix<T> o(n_q, h_n * dv);
    for (Index h = 0; h < h_n; ++h) {
      o.middleCols(h * dv, dv).noalias() =
          o_lat.middleCols(h * dc, dc) * w_.w_uv.middleCols(h * dv, dv);  // (N_Q, d_v)
    }
    return o * w_.w_o;  // (N_Q, d)
  }

  LatentConfig c_;
  Rope<T, RopeConvention> rope_;
  T scale_;
  LatentWeights<T> w_;
  RMSNorm<T> q_norm_, kv_norm_;
  RowMatrix<T> w_dkv_kr_, w_q_all_;
  bool has_weights_ = false;
};

}  // namespace kappa
