// kappa/attention/linear.hpp - linear-time attention for feature-map kernels.
//
// When kappa(q, k) = phi(q) . phi(k), the product A V can be reassociated
// (Katharopoulos et al. 2020, "Transformers are RNNs"):
//
//     Y = Z^-1 A V = diag(phi(Q) u)^-1 phi(Q) S,
//     S = phi(K)^T V   (m x d_V),   u = phi(K)^T 1   (m),
//
// which costs O((N_Q + N_KV) m d_V) instead of O(N_Q N_KV (m + d_V)): linear
// in the sequence length. With a causal mask the sums run over the keys a
// query sees, S_i = sum_{j <= offset + i} phi(k_j) v_j^T, which is a
// recurrence with a constant-size state (S, u): LinearAttentionState below is
// that state, for decoding one token at a time.
//
// The result equals kappa::attention(q, k, v, kernel, mask) up to rounding
// (tests/attention/linear_test.cpp), with the same rule for rows whose
// normalizer is zero: a zero output row.
#pragma once

#include "kappa/attention/attention.hpp"

namespace kappa {

/// The recurrent state of causal linear attention: S = sum_j phi(k_j) v_j^T
/// (m x d_V) and u = sum_j phi(k_j) (m) over the keys appended so far.
/// Memory is m (d_V + 1) values, whatever the number of tokens.
template <Scalar T, class K>
class LinearAttentionState {
  static_assert(FeatureMapKernel<K>,
                "kappa: LinearAttentionState needs a feature-map kernel (one with "
                "feature_map(x, role)), e.g. kernels::EluPlusOne; score kernels such as "
                "Softmax have no finite feature map");

 public:
  explicit LinearAttentionState(K kernel = {}) : kernel_(std::move(kernel)) {}

  /// Adds keys and values (rows of k: n x d_QK, v: n x d_V) to the state:
  /// S += phi(k)^T v, u += phi(k)^T 1.
  /// \throws ShapeError if k and v disagree, or differ from earlier calls.
  void append(ConstMatrixRef<T> k, ConstMatrixRef<T> v) {
    require_shapes(k.rows() == v.rows(), "LinearAttentionState::append", "K", k, "V", v,
                   "K and V must have the same number of rows");
    const RowMatrix<T> phi_k = kernel_.template feature_map<T>(k, FeatureRole::kKey);  // (n, m)
    if (s_.size() == 0) {
      s_ = RowMatrix<T>::Zero(phi_k.cols(), v.cols());
      u_ = Vector<T>::Zero(phi_k.cols());
      d_qk_ = k.cols();
    }
    require_shapes(phi_k.cols() == s_.rows() && v.cols() == s_.cols() && k.cols() == d_qk_,
                   "LinearAttentionState::append", "the new (phi(K) | V)", phi_k.cols(), v.cols(),
                   "the state S", s_.rows(), s_.cols(), "widths must not change between calls");
    s_.noalias() += phi_k.transpose() * v;                          // (m, d_V)
    u_.noalias() += phi_k.transpose() * Vector<T>::Ones(k.rows());  // (m)
    length_ += k.rows();
  }

  /// Y_i = phi(q_i) S / (phi(q_i) u) for each row of q (n x d_QK): each query
  /// sees every key appended so far. Zero rows where the normalizer is zero.
  [[nodiscard]] RowMatrix<T> query(ConstMatrixRef<T> q) const {
    if (s_.size() == 0) return RowMatrix<T>::Zero(q.rows(), 0);
    require_shapes(q.cols() == d_qk_, "LinearAttentionState::query", "Q", q.rows(), q.cols(),
                   "the keys so far", length_, d_qk_, "Q and K must have the same d_QK");
    const RowMatrix<T> phi_q = kernel_.template feature_map<T>(q, FeatureRole::kQuery);  // (n, m)
    RowMatrix<T> y = phi_q * s_;                                                         // (n, d_V)
    const Vector<T> z = phi_q * u_;                                                      // (n)
    for (Index i = 0; i < y.rows(); ++i) {
      if (z(i) != T(0)) {
        y.row(i) /= z(i);
      } else {
        y.row(i).setZero();
      }
    }
    return y;
  }

  [[nodiscard]] Index length() const { return length_; }
  /// Bytes held by the state: m (d_V + 1) scalars.
  [[nodiscard]] std::size_t bytes() const {
    return static_cast<std::size_t>(s_.size() + u_.size()) * sizeof(T);
  }
  void reset() {
    s_.resize(0, 0);
    u_.resize(0);
    length_ = 0;
  }

 private:
  K kernel_;
  RowMatrix<T> s_;
  Vector<T> u_;
  Index length_ = 0;
  Index d_qk_ = 0;
};

/// Linear-time Y = Z^-1 A V for a feature-map kernel, with NoMask or
/// CausalMask (any offset). Q: N_Q x d_QK, K: N_KV x d_QK, V: N_KV x d_V.
/// Cost O((N_Q + N_KV) m d_V), memory O(m d_V) beyond the inputs.
/// \throws ShapeError as kappa::attention does.
template <class DQ, class DK, class DV, class K, class M = NoMask>
requires Scalar<typename DQ::Scalar> RowMatrix<typename DQ::Scalar> linear_attention(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const K& kernel, const M& mask = {}) {
  using T = typename DQ::Scalar;
  static_assert(FeatureMapKernel<K>,
                "kappa: linear_attention needs a feature-map kernel (one with feature_map(x, "
                "role)), e.g. kernels::EluPlusOne; use kappa::attention for score kernels");
  static_assert(std::is_same_v<M, NoMask> || std::is_same_v<M, CausalMask>,
                "kappa: linear_attention supports NoMask and CausalMask (masks that keep a "
                "prefix of the keys); use kappa::attention for other masks");
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  detail::check_attention_shapes<T>(qr, kr, vr);
  const Index n_q = qr.rows(), n_kv = kr.rows();
  if constexpr (std::is_same_v<M, NoMask>) {
    LinearAttentionState<T, K> state(kernel);
    if (n_kv == 0) return RowMatrix<T>::Zero(n_q, vr.cols());
    state.append(kr, vr);
    return state.query(qr);
  } else {
    // Query i sees keys [0, p_i), p_i nondecreasing. Chunks of C queries:
    // keys every row of the chunk sees are folded into the state (S, u)
    // first; the chunk's own diagonal block of keys is handled quadratically
    // with its mask. Everything is a GEMM; the state is O(m d_V).
    const auto bound = mask.bind(n_q, n_kv);
    const RowMatrix<T> phi_q = kernel.template feature_map<T>(qr, FeatureRole::kQuery);  // (N_Q, m)
    const RowMatrix<T> phi_k = kernel.template feature_map<T>(kr, FeatureRole::kKey);  // (N_KV, m)
    require_shapes(phi_q.cols() == phi_k.cols(), "linear_attention", "phi(Q)", phi_q, "phi(K)",
                   phi_k, "phi(Q) and phi(K) must have equal widths");
    constexpr Index kChunk = 64;
    RowMatrix<T> s = RowMatrix<T>::Zero(phi_k.cols(), vr.cols());  // (m, d_V)
    RowVector<T> u = RowVector<T>::Zero(phi_k.cols());             // (m)
    RowMatrix<T> y(n_q, vr.cols());
    Vector<T> z(n_q);
    RowMatrix<T> a;  // the chunk's diagonal block of A
    Index seen = 0;
    const auto absorb = [&](Index end) {  // S += phi(K)^T V, u += phi(K)^T 1 over [seen, end)
      if (end <= seen) return;
      s.noalias() +=
          phi_k.middleRows(seen, end - seen).transpose() * vr.middleRows(seen, end - seen);
      u.noalias() += phi_k.middleRows(seen, end - seen).colwise().sum();
      seen = end;
    };
    for (Index i0 = 0; i0 < n_q; i0 += kChunk) {
      const Index c = std::min(kChunk, n_q - i0);
      absorb(bound.range(i0).end);                   // keys all rows of the chunk see
      const Index ke = bound.range(i0 + c - 1).end;  // the chunk's last row sees [0, ke)
      auto y_c = y.middleRows(i0, c);
      y_c.noalias() = phi_q.middleRows(i0, c) * s;                           // (C, d_V)
      z.segment(i0, c).noalias() = phi_q.middleRows(i0, c) * u.transpose();  // (C)
      if (ke > seen) {
        const Index span = ke - seen;
        a.noalias() =
            phi_q.middleRows(i0, c) * phi_k.middleRows(seen, span).transpose();  // (C, span)
        for (Index r = 0; r < c; ++r) {
          const Index visible = bound.range(i0 + r).end - seen;
          if (visible < span) a.row(r).tail(span - visible).setZero();
        }
        y_c.noalias() += a * vr.middleRows(seen, span);
        z.segment(i0, c) += a.rowwise().sum();
      }
      for (Index r = 0; r < c; ++r) {
        const T zr = z(i0 + r);
        if (bound.range(i0 + r).end == 0 || zr == T(0)) {
          y_c.row(r).setZero();
        } else {
          y_c.row(r) /= zr;
        }
      }
      absorb(ke);
    }
    return y;
  }
}

}  // namespace kappa
