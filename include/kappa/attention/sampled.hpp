// kappa/attention/sampled.hpp - sampled attention: importance sampling of
// keys, a whole-attention approximation (whole_attention.hpp).
//
// For query i write a_ij = exp(s q_i . k_j) (0 for masked keys), the
// numerator n_i = sum_j a_ij v_j, the normalizer z_i = sum_j a_ij, so that
// y_i = n_i / z_i. Draw S keys j_1 .. j_S i.i.d. with replacement from a
// proposal p (p_j > 0 wherever some a_ij > 0), shared by every query, and
// estimate
//
//     n^_i = (1/S) sum_t a_{i j_t} v_{j_t} / p_{j_t},
//     z^_i = (1/S) sum_t a_{i j_t} / p_{j_t},          y^_i = n^_i / z^_i.
//
// n^_i and z^_i are unbiased (E n^_i = n_i, E z^_i = z_i), with
//     Var z^_i = (1/S) (sum_j a_ij^2 / p_j - z_i^2).
// Their ratio y^_i is not: with the exact weights w_ij = a_ij / z_i, the delta
// method gives the bias and mean squared error
//     E y^_i - y_i    = -(1/S) sum_j (w_ij^2 / p_j) (v_j - y_i) + O(S^-2),
//     E||y^_i - y_i||^2 = (1/S) sum_j (w_ij^2 / p_j) ||v_j - y_i||^2 + O(S^-2),
// so the bias is O(1/S), below the O(1/sqrt(S)) noise. The variance is
// smallest for p_j proportional to w_ij ||v_j - y_i||; the proposals below
// approximate w_ij by cheap bounds that do not depend on i, so one draw
// serves every query: O(N_KV d) to build p, O(S log N_KV) to draw, and
// 2 N_Q S' (d_QK + d_V) flops for the S' <= S distinct keys drawn.
//
// Each row is shifted by the largest sampled logit c_i before exp (the ratio
// does not change), so any logits stay finite.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"

namespace kappa::approx {

/// The proposal p_j of sampled attention; keys no query may see get p_j = 0.
enum class Proposal {
  /// p_j = 1 / N_KV.
  kUniform,
  /// p_j proportional to ||k_j|| (uniform if every key is zero).
  kKeyNorm,
  /// p_j proportional to exp(s r ||k_j||), r = the mean query norm: the
  /// Cauchy-Schwarz bound a_ij <= exp(s ||q_i|| ||k_j||) for a query of
  /// typical norm.
  kNormBound,
};

/// The unbiased parts of sampled attention (see the file comment): row i
/// estimates n_i e^{-c_i} and z_i e^{-c_i}.
template <Scalar T>
struct SampledParts {
  RowMatrix<T> numerator;     ///< n^_i e^{-c_i}, (N_Q x d_V)
  Vector<T> denominator;      ///< z^_i e^{-c_i}, (N_Q)
  Vector<T> shift;            ///< c_i, the largest visible sampled logit (0 if none)
  std::vector<Index> keys;    ///< the distinct keys drawn, ascending
  std::vector<double> count;  ///< how often each was drawn
};

/// Sampled attention with S samples (see the file comment).
///
/// ```cpp
/// kappa::approx::SampledAttention sa(256, /*seed=*/3);
/// kappa::MultiHeadAttention<float, kappa::approx::SampledAttention> attn(config, sa);
/// ```
/// Every mask is supported (masked keys have a_ij = 0 in both estimates); a
/// row none of whose sampled keys is visible gets a zero output row. Every
/// head and every call draws the same keys for the same shapes (the seed does
/// not depend on the head). S > N_KV is allowed (sampling is with
/// replacement). validate() throws std::invalid_argument for S < 1.
struct SampledAttention {
  static constexpr const char* kName = "SampledAttention";

  Index samples = 0;  ///< S
  std::uint64_t seed = 0;
  Proposal proposal = Proposal::kNormBound;
  double scale = 0.0;  ///< the softmax scale s; 0 means 1/sqrt(d_QK)

  SampledAttention() = default;
  /// S samples drawn from `s` by proposal `p`.
  explicit SampledAttention(Index count, std::uint64_t s = 0, Proposal p = Proposal::kNormBound)
      : samples(count), seed(s), proposal(p) {}

  /// Throws std::invalid_argument for S < 1 or a bad scale, and whatever the
  /// mask's bind() throws.
  template <Mask M>
  void validate(Index n_q, Index n_kv, const M& mask) const {
    (void)mask.bind(n_q, n_kv);
    detail::require_at_least_one(kName, "the number of samples S", samples);
    (void)detail::scale_or_default(kName, scale, 1);
  }

  /// The unbiased numerator and normalizer estimates (SampledParts).
  template <Scalar T, Mask M = NoMask>
  [[nodiscard]] SampledParts<T> parts(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v,
                                      const M& mask = {}) const {
    detail::require_qkv_shapes(kName, q, k, v);
    validate(q.rows(), k.rows(), mask);
    const auto bound = mask.bind(q.rows(), k.rows());
    const Index n_q = q.rows(), n = k.rows();
    const double s = detail::scale_or_default(kName, scale, q.cols());
    SampledParts<T> out;
    out.numerator = RowMatrix<T>::Zero(n_q, v.cols());
    out.denominator = Vector<T>::Zero(n_q);
    out.shift = Vector<T>::Zero(n_q);
    // Keys some query may see: [lo, hi), the union of the rows' ranges.
    Index lo = n, hi = 0;
    for (Index i = 0; i < n_q; ++i) {
      const KeyRange r = bound.range(i);
      if (r.size() == 0) continue;
      lo = std::min(lo, r.begin);
      hi = std::max(hi, r.end);
    }
    if (hi <= lo) return out;
    // Proposal weights (double), cumulated in key order.
    std::vector<double> w(static_cast<std::size_t>(hi - lo), 1.0);
    if (proposal != Proposal::kUniform) {
      double r_mean = 0.0;
      if (proposal == Proposal::kNormBound) {
        for (Index i = 0; i < n_q; ++i) r_mean += static_cast<double>(q.row(i).norm());
        r_mean /= static_cast<double>(n_q);
      }
      double top = -std::numeric_limits<double>::infinity();
      for (Index j = lo; j < hi; ++j) {
        const double kn = static_cast<double>(k.row(j).norm());
        double& wj = w[static_cast<std::size_t>(j - lo)];
        wj = proposal == Proposal::kKeyNorm ? kn : s * r_mean * kn;  // weight or log weight
        top = std::max(top, wj);
      }
      if (proposal == Proposal::kNormBound) {
        for (double& wj : w) wj = std::exp(wj - top);
      } else if (top <= 0.0) {
        std::fill(w.begin(), w.end(), 1.0);
      }
    }
    std::vector<double> cdf(w.size());
    double total = 0.0;
    for (std::size_t j = 0; j < w.size(); ++j) cdf[j] = total += w[j];
    // S draws by inversion: the first key whose cumulative weight reaches
    // u total, u = uniform() in (0, 1].
    SeededNormal g(seed);
    std::vector<Index> drawn(static_cast<std::size_t>(samples));
    for (Index t = 0; t < samples; ++t) {
      const double target = g.uniform() * total;
      auto it = std::lower_bound(cdf.begin(), cdf.end(), target);
      if (it == cdf.end()) --it;  // rounding at u = 1
      drawn[static_cast<std::size_t>(t)] = lo + static_cast<Index>(it - cdf.begin());
    }
    std::sort(drawn.begin(), drawn.end());
    for (const Index key : drawn) {
      if (out.keys.empty() || out.keys.back() != key) {
        out.keys.push_back(key);
        out.count.push_back(1.0);
      } else {
        out.count.back() += 1.0;
      }
    }
    const auto u = static_cast<Index>(out.keys.size());
    RowMatrix<T> ks(u, k.cols()), vs(u, v.cols());  // (S', d_QK), (S', d_V)
    std::vector<T> omega(out.keys.size());          // c_j / (S p_j)
    for (Index t = 0; t < u; ++t) {
      const auto st = static_cast<std::size_t>(t);
      const Index j = out.keys[st];
      ks.row(t) = k.row(j);
      vs.row(t) = v.row(j);
      const double p_j = w[static_cast<std::size_t>(j - lo)] / total;
      omega[st] = static_cast<T>(out.count[st] / (static_cast<double>(samples) * p_j));
    }
    RowMatrix<T> a = (static_cast<T>(s) * q) * ks.transpose();  // (N_Q, S')
    for (Index i = 0; i < n_q; ++i) {
      const KeyRange r = bound.range(i);
      T c = -std::numeric_limits<T>::infinity();
      std::vector<bool> visible(out.keys.size());
      for (Index t = 0; t < u; ++t) {
        const Index j = out.keys[static_cast<std::size_t>(t)];
        bool ok = j >= r.begin && j < r.end;
        if constexpr (std::remove_cvref_t<decltype(bound)>::kHasHoles)
          ok = ok && bound.allowed(i, j);
        visible[static_cast<std::size_t>(t)] = ok;
        if (ok) c = std::max(c, a(i, t));
      }
      if (c == -std::numeric_limits<T>::infinity()) {
        a.row(i).setZero();
        continue;
      }
      out.shift(i) = c;
      for (Index t = 0; t < u; ++t) {
        const auto st = static_cast<std::size_t>(t);
        a(i, t) = visible[st] ? omega[st] * std::exp(a(i, t) - c) : T(0);
      }
      out.denominator(i) = a.row(i).sum();
    }
    out.numerator.noalias() = a * vs;  // (N_Q, d_V)
    return out;
  }

  /// Y^ (N_Q x d_V) of one head into y: n^_i / z^_i row by row.
  template <Scalar T, Mask M = NoMask>
  void attend(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v, MatrixRef<T> y,
              const M& mask = {}) const {
    detail::require_output_shape(kName, q, v, y);
    const SampledParts<T> p = parts<T>(q, k, v, mask);
    for (Index i = 0; i < q.rows(); ++i) {
      const T z = p.denominator(i);
      if (z > T(0)) {
        y.row(i) = p.numerator.row(i) / z;
      } else {
        y.row(i).setZero();
      }
    }
  }
};

}  // namespace kappa::approx
