// kappa/heads/qk_norm.hpp - RMS normalization of each head's queries and
// keys before the rotation (Qwen3, Gemma 3, OLMo 2-style "QK-norm"):
//
//   Q_h <- RMSNorm_q(Q_h) row by row,  K_h <- RMSNorm_k(K_h) row by row,
//
// each over the head's d_head columns with one gain vector shared by all
// heads (g_q for queries, g_k for keys), then the inner positional policy
// (RoPE) as usual. A positional policy in kappa's terms (heads/positional.hpp):
// it changes each head's Q and K blocks in place, knowing which is which.
//
//   using Attn = kappa::GroupedQueryAttention<float, kernels::Softmax,
//                                             kappa::QkNorm<float, kappa::Rope<float>>>;
//   Attn a(config, kappa::QkNorm<float, kappa::Rope<float>>(g_q, g_k, 1e-6, rope));
#pragma once

#include <utility>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/heads/positional.hpp"
#include "kappa/nn/norms.hpp"

namespace kappa {

/// RMSNorm of every head's query and key rows, then `Inner` (see the file
/// comment). \tparam Inner  the positional policy applied after the norm
/// (Rope<T, RotateHalf>, or NoPosition).
template <Scalar T, class Inner = NoPosition>
class QkNorm {
 public:
  /// g_q and g_k (d_head each) and the norms' epsilon; `inner` after them.
  /// \throws ShapeError unless g_q and g_k have the same length.
  QkNorm(RowVector<T> g_q, RowVector<T> g_k, double eps, Inner inner = {})
      : norm_q_(std::move(g_q), eps), norm_k_(std::move(g_k), eps), inner_(std::move(inner)) {
    require_shapes(norm_q_.gain().size() == norm_k_.gain().size(), "QkNorm", "g_q", 1,
                   norm_q_.gain().size(), "g_k", 1, norm_k_.gain().size(),
                   "one gain per head column for queries and keys");
  }

  /// x (N x d_head) of one head: normalized with g_q or g_k by `role`, then
  /// the inner policy at positions first_position + i.
  /// \throws ShapeError unless x has d_head columns.
  void apply(MatrixRef<T> x, Index first_position, ProjectionRole role) const {
    const RMSNorm<T>& n = role == ProjectionRole::kQuery ? norm_q_ : norm_k_;
    require_shapes(x.cols() == n.gain().size(), "QkNorm::apply", "the head block", x.rows(),
                   x.cols(), "the gain", 1, n.gain().size(), "d_head columns");
    n.apply(x);
    apply_positional<T>(inner_, x, first_position, role);
  }

  /// The inner policy's rotary width (the layer checks it against d_head).
  [[nodiscard]] Index rotary_dim() const requires WidthReportingPosition<Inner> {
    return static_cast<Index>(inner_.rotary_dim());
  }
  [[nodiscard]] const RMSNorm<T>& query_norm() const { return norm_q_; }
  [[nodiscard]] const RMSNorm<T>& key_norm() const { return norm_k_; }
  [[nodiscard]] const Inner& inner() const { return inner_; }

 private:
  RMSNorm<T> norm_q_, norm_k_;
  Inner inner_;
};

}  // namespace kappa
