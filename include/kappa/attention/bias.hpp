// kappa/attention/bias.hpp - additive score biases: A = f(s Q K^T + B).
//
// A bias is a mask-like policy: `bind(N_Q, N_KV)` validates it once per call
// and returns a bound object that, besides the key range of every query row
// (all keys: a bias masks nothing by itself), declares
// `static constexpr bool kHasBias = true` and provides
//
//     void add_bias(Index i, Index j0, T* scores, Index len) const;
//
// adding B(i, j0 + t) to scores[t], t < len. Attention calls it on the
// *scaled* scores x = s q_i . k_j of the keys a row sees, before the kernel's
// f (and before softmax's row maximum), in every path: blocked, tiled,
// few-query (decode) and attention_details. Combine it with a mask by
// all_of(CausalMask{}, AlibiBias{m}); a bias of -inf hides a key as a mask
// does (a row whose scores are all -inf gets a zero output row).
//
// Positions as for the masks (masks.hpp): query row i sits at position
// p_i = offset + i, key row j at position j; the default offset N_KV - N_Q
// makes the queries the last N_Q positions (what a KV cache needs).
//
// Single-head policies (for attention()): ScoreBias (a matrix), AlibiBias
// (one slope), T5RelativeBias::head(h). Per-head policies (PerHeadMask, for
// multi-head attention, which hands head h its own `head(h)`): HeadScoreBias
// (a matrix per head), Alibi (the standard slopes for H heads), and
// T5RelativeBias (a learned table of buckets x heads).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

// ---- A bias matrix ------------------------------------------------------------

/// One head's bias as a matrix: B (N_Q x N_KV) added to s Q K^T.
template <Scalar T>
struct ScoreBias {
  RowMatrix<T> bias;  ///< B, N_Q x N_KV

  struct Bound {
    static constexpr bool kHasHoles = false;
    static constexpr bool kHasBias = true;
    const RowMatrix<T>* b;
    [[nodiscard]] KeyRange range(Index /*i*/) const { return {0, b->cols()}; }
    /// scores[t] += B(i, j0 + t), t < len.
    void add_bias(Index i, Index j0, T* scores, Index len) const {
      Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>(scores, len) +=
          b->row(i).segment(j0, len).array();
    }
  };
  /// Throws ShapeError unless B is N_Q x N_KV.
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    require_shapes(bias.rows() == n_q && bias.cols() == n_kv, "ScoreBias", "the bias", bias.rows(),
                   bias.cols(), "(N_Q x N_KV)", n_q, n_kv, "the bias must be N_Q x N_KV");
    return {&bias};
  }
};

/// A view of one N_Q x N_KV bias matrix owned elsewhere (HeadScoreBias::head).
template <Scalar T>
struct ScoreBiasView {
  const RowMatrix<T>* bias;
  /// Throws ShapeError unless the matrix is N_Q x N_KV.
  [[nodiscard]] typename ScoreBias<T>::Bound bind(Index n_q, Index n_kv) const {
    require_shapes(bias->rows() == n_q && bias->cols() == n_kv, "ScoreBias", "the bias",
                   bias->rows(), bias->cols(), "(N_Q x N_KV)", n_q, n_kv,
                   "the bias must be N_Q x N_KV");
    return {bias};
  }
};

/// A bias matrix per head: head h adds per_head[h] (N_Q x N_KV).
template <Scalar T>
struct HeadScoreBias {
  std::vector<RowMatrix<T>> per_head;

  [[nodiscard]] Index heads() const { return static_cast<Index>(per_head.size()); }
  /// Head h's bias. Throws RangeError unless 0 <= h < heads().
  [[nodiscard]] ScoreBiasView<T> head(Index h) const {
    require_index("HeadScoreBias head", h, heads(), "heads");
    return {&per_head[static_cast<std::size_t>(h)]};
  }
};

// ---- ALiBi --------------------------------------------------------------------

/// The ALiBi slopes for H heads (Press et al. 2022, "Train Short, Test Long";
/// the same as Hugging Face BLOOM's build_alibi_tensor): with P the largest
/// power of two <= H, head h < P gets 2^(-8 (h + 1) / P); the remaining
/// H - P heads get every other slope of the sequence for 2P heads,
/// 2^(-8 (2 k + 1) / (2 P)), k = 0, 1, ... Throws RangeError unless H >= 1.
inline std::vector<double> alibi_slopes(Index n_heads) {
  if (n_heads < 1) {
    throw RangeError("kappa: alibi_slopes: n_heads must be >= 1, got " + std::to_string(n_heads));
  }
  Index p = 1;
  while (p * 2 <= n_heads) p *= 2;
  std::vector<double> slopes;
  slopes.reserve(static_cast<std::size_t>(n_heads));
  const auto pd = static_cast<double>(p);
  for (Index h = 1; h <= p; ++h) slopes.push_back(std::exp2(-8.0 * static_cast<double>(h) / pd));
  for (Index k = 0; k < n_heads - p; ++k)
    slopes.push_back(std::exp2(-8.0 * static_cast<double>(2 * k + 1) / (2.0 * pd)));
  return slopes;
}

/// One head's ALiBi bias: B(i, j) = -m (p_i - j), a penalty linear in the
/// distance from query position p_i = offset + i back to key j (use it with
/// CausalMask, as the paper does). BLOOM adds m j instead, which differs by
/// m p_i in each row: the softmax weights are the same.
struct AlibiBias {
  double slope = 0;               ///< m
  std::optional<Index> offset{};  ///< unset: N_KV - N_Q, as CausalMask

  struct Bound {
    static constexpr bool kHasHoles = false;
    static constexpr bool kHasBias = true;
    double slope;
    Index offset;
    Index n_kv;
    [[nodiscard]] KeyRange range(Index /*i*/) const { return {0, n_kv}; }
    /// scores[t] += m (j0 + t - p_i), t < len.
    template <Scalar T>
    void add_bias(Index i, Index j0, T* scores, Index len) const {
      const T m = static_cast<T>(slope);
      const Index base = j0 - (offset + i);  // |j - p_i| fits: bind checked offset
      for (Index t = 0; t < len; ++t) scores[t] += m * static_cast<T>(base + t);
    }
  };
  /// Throws std::invalid_argument if the slope is not finite; RangeError if
  /// offset + N_Q overflows.
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    if (!std::isfinite(slope)) {
      throw std::invalid_argument("kappa: AlibiBias slope must be finite, got " +
                                  std::to_string(slope));
    }
    const Index off = offset.value_or(n_kv - n_q);
    detail::require_position_fits("AlibiBias", off, n_q, "offset + N_Q", "N_Q", n_q);
    detail::require_position_fits("AlibiBias", off, -n_kv, "offset - N_KV", "N_KV", n_kv);
    return {slope, off, n_kv};
  }
};

/// ALiBi for a layer of H heads: head h adds AlibiBias{slopes[h]}. The
/// default slopes are alibi_slopes(H).
struct Alibi {
  std::vector<double> slopes;
  std::optional<Index> offset{};

  Alibi() = default;
  /// The standard slopes for n_heads heads (alibi_slopes).
  explicit Alibi(Index n_heads, std::optional<Index> off = std::nullopt)
      : slopes(alibi_slopes(n_heads)), offset(off) {}
  /// Given slopes, one per head.
  explicit Alibi(std::vector<double> s, std::optional<Index> off = std::nullopt)
      : slopes(std::move(s)), offset(off) {}

  [[nodiscard]] Index heads() const { return static_cast<Index>(slopes.size()); }
  /// Head h's bias. Throws RangeError unless 0 <= h < heads().
  [[nodiscard]] AlibiBias head(Index h) const {
    require_index("Alibi head", h, heads(), "heads");
    return {slopes[static_cast<std::size_t>(h)], offset};
  }
};

// ---- T5 relative position buckets -------------------------------------------

/// The bucket of a relative position r = j - p_i (key minus query position),
/// as in T5 (Raffel et al. 2020; Hugging Face's T5Attention.
/// _relative_position_bucket). Bidirectional: half the buckets for r > 0,
/// half for r <= 0, by |r|; otherwise only r <= 0 counts (r > 0 is bucket 0).
/// Of the n buckets (per direction), distances below n / 2 get one bucket
/// each; larger ones share logarithmically spaced buckets up to max_distance,
/// beyond which all fall in the last. The logarithm is taken in float, as
/// the reference does, so bucket edges agree with it.
/// Throws std::invalid_argument unless num_buckets >= 2 (>= 4 if
/// bidirectional) and max_distance > the exact range (n / 2).
inline Index t5_relative_position_bucket(Index relative_position, bool bidirectional,
                                         Index num_buckets = 32, Index max_distance = 128) {
  Index n = num_buckets;
  Index bucket = 0;
  if (bidirectional) {
    n /= 2;
    if (relative_position > 0) bucket += n;
  }
  const Index max_exact = n / 2;
  if (max_exact < 1 || max_distance <= max_exact) {
    throw std::invalid_argument(
        "kappa: T5 relative position buckets: num_buckets = " + std::to_string(num_buckets) +
        (bidirectional ? " (bidirectional)" : "") +
        " and max_distance = " + std::to_string(max_distance) +
        " leave no logarithmic buckets (need num_buckets >= " + (bidirectional ? "4" : "2") +
        " and max_distance > the exact range " + std::to_string(max_exact) + ")");
  }
  Index rp = 0;
  if (bidirectional) {
    rp = relative_position < 0 ? -relative_position : relative_position;
  } else {
    rp = relative_position < 0 ? -relative_position : 0;
  }
  if (rp < max_exact) return bucket + rp;
  const float ratio = std::log(static_cast<float>(rp) / static_cast<float>(max_exact)) /
                      static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                  static_cast<double>(max_exact)));
  const auto large = max_exact + static_cast<Index>(ratio * static_cast<float>(n - max_exact));
  return bucket + std::min(large, n - 1);
}

/// T5's learned relative position bias for a layer: table (num_buckets x H),
/// as Hugging Face's relative_attention_bias embedding; head h adds
/// B(i, j) = table(bucket(j - p_i), h). (T5 uses it with scale s = 1.)
template <Scalar T>
struct T5RelativeBias {
  RowMatrix<T> table;         ///< num_buckets x H
  bool bidirectional = true;  ///< encoder: true; decoder (causal): false
  Index max_distance = 128;
  std::optional<Index> offset{};

  [[nodiscard]] Index heads() const { return table.cols(); }

  /// One head of it (a single-head bias policy).
  struct Head {
    const T5RelativeBias* parent;
    Index h;

    struct Bound {
      static constexpr bool kHasHoles = false;
      static constexpr bool kHasBias = true;
      std::vector<T> lut;  // bias of relative positions -D .. D, D = max_distance
      Index max_distance;
      Index offset;
      Index n_kv;
      [[nodiscard]] KeyRange range(Index /*i*/) const { return {0, n_kv}; }
      /// scores[t] += table(bucket(j0 + t - p_i), h), t < len.
      void add_bias(Index i, Index j0, T* scores, Index len) const {
        const Index base = j0 - (offset + i);
        const T* const mid = lut.data() + max_distance;  // mid[r] for |r| <= D
        for (Index t = 0; t < len; ++t)
          scores[t] += mid[std::clamp(base + t, -max_distance, max_distance)];
      }
    };
    /// Throws std::invalid_argument for bucket settings
    /// t5_relative_position_bucket rejects, or max_distance > 2^24;
    /// RangeError if offset + N_Q overflows.
    [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
      const T5RelativeBias& p = *parent;
      if (p.max_distance > (Index{1} << 24)) {
        throw std::invalid_argument("kappa: T5RelativeBias max_distance must be <= 2^24, got " +
                                    std::to_string(p.max_distance));
      }
      const Index off = p.offset.value_or(n_kv - n_q);
      detail::require_position_fits("T5RelativeBias", off, n_q, "offset + N_Q", "N_Q", n_q);
      detail::require_position_fits("T5RelativeBias", off, -n_kv, "offset - N_KV", "N_KV", n_kv);
      const Index d = p.max_distance;
      Bound b{std::vector<T>(static_cast<std::size_t>(2 * d + 1)), d, off, n_kv};
      // Beyond +-D every distance is in its direction's last bucket (the
      // logarithmic buckets end at max_distance), so the table covers all.
      for (Index r = -d; r <= d; ++r) {
        const Index bucket = t5_relative_position_bucket(r, p.bidirectional, p.table.rows(), d);
        b.lut[static_cast<std::size_t>(r + d)] = p.table(bucket, h);
      }
      return b;
    }
  };
  /// Head h's bias. Throws RangeError unless 0 <= h < heads().
  [[nodiscard]] Head head(Index h) const {
    require_index("T5RelativeBias head", h, heads(), "heads");
    return {this, h};
  }
};

}  // namespace kappa
