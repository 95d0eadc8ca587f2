// kappa/attention/whole_attention.hpp - the policy concept for approximations
// of a whole attention head (Nystrom, sequence sketches, sampled attention),
// and the pieces they share.
//
// A feature-map kernel (concepts.hpp) changes A = f_kappa(s Q K^T) entry by
// entry and leaves the rest of Y = Z^-1 A V to attention(). The methods here
// instead replace the computation of one head's Y as a whole: they never form
// A. Such a policy P provides
//
//     static constexpr const char* kName;                 // "nystrom", ...
//     template <Mask M>
//     void validate(Index n_q, Index n_kv, const M& mask) const;
//     template <Scalar T, Mask M>
//     void attend(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v,
//                 MatrixRef<T> y, const M& mask) const;  // Y_h, (N_Q x d_V)
//
// validate() throws (std::invalid_argument, ShapeError, RangeError) for
// parameters that do not fit the shapes (m = 0, m > N where not allowed, a
// mask the method cannot honour at run time); attend() may then assume they
// fit, so that nothing throws inside a parallel region. A mask the method
// does not support at all fails to compile with a message naming the method.
//
// MultiHeadAttention, GroupedQueryAttention and MultiQueryAttention accept
// such a policy in their Kernel slot: `MultiHeadAttention<float,
// approx::Nystrom>`; every query head h then calls attend() with Q_h and its
// kv head's K_g, V_g. Decoding through a KV cache (forward_cached) and
// head_weights() are rejected at compile time for them: they do not form A,
// and an approximation of a growing cache would have to be rebuilt per token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"

namespace kappa {

/// A policy that computes one attention head's Y = Z^-1 A V approximately as
/// a whole (see the file comment for the members it provides).
template <class P>
concept AttentionApproximation = requires(const P& p, Index n, const ConstMatrixRef<float>& qf,
                                          MatrixRef<float>& yf, const ConstMatrixRef<double>& qd,
                                          MatrixRef<double>& yd) {
  { P::kName } -> std::convertible_to<const char*>;
  p.validate(n, n, NoMask{});
  p.template attend<float>(qf, qf, qf, yf, NoMask{});
  p.template attend<double>(qd, qd, qd, yd, NoMask{});
};

/// What the Kernel slot of the multi-head layers accepts: a kernel f_kappa
/// (check_kernel) or an AttentionApproximation. Use as
/// `static_assert(check_heads_kernel<K>())`.
template <class K>
consteval bool check_heads_kernel() {
  if constexpr (AttentionApproximation<K>) {
    return true;
  } else {
    return check_kernel<K>();
  }
}

namespace approx::detail {

/// Throws std::invalid_argument "kappa: <method>: <what> = <value> ...".
[[noreturn]] inline void throw_parameter(const char* method, const std::string& msg) {
  throw std::invalid_argument(std::string("kappa: ") + method + ": " + msg);
}

/// Throws std::invalid_argument "kappa: <method>: <what> = <value> must be at
/// least 1" unless value >= 1 (a sample, landmark or iteration count).
inline void require_at_least_one(const char* method, const char* what, Index value) {
  if (value < 1) {
    throw_parameter(method,
                    std::string(what) + " = " + std::to_string(value) + " must be at least 1");
  }
}

/// Throws ShapeError naming the method unless Q and K have the same d_QK
/// columns and K and V the same N_KV rows.
template <class T>
void require_qkv_shapes(const char* method, const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                        const ConstMatrixRef<T>& v) {
  require_shapes(q.cols() == k.cols() && k.rows() == v.rows(), method, "Q", q, "K", k,
                 "Q and K have d_QK columns; K and V have N_KV rows");
}

/// Throws ShapeError naming the method unless Y is N_Q x d_V.
template <class T>
void require_output_shape(const char* method, const ConstMatrixRef<T>& q,
                          const ConstMatrixRef<T>& v, const MatrixRef<T>& y) {
  require_shapes(y.rows() == q.rows() && y.cols() == v.cols(), method, "Y", y.rows(), y.cols(),
                 "(N_Q x d_V)", q.rows(), v.cols(), "Y must be N_Q x d_V");
}

/// The number of leading keys every query row sees under mask M, for methods
/// that compress the key sequence once for all queries: N_KV for NoMask, the
/// valid length for a KeyPaddingMask whose lengths are all equal. Throws
/// std::invalid_argument for per-row lengths that differ (the compressed keys
/// would differ per row), and whatever the mask's bind() throws. Other masks
/// fail to compile, naming the method.
template <class M>
Index common_key_length(const char* method, const M& mask, Index n_q, Index n_kv) {
  if constexpr (std::is_same_v<M, NoMask>) {
    return n_kv;
  } else if constexpr (std::is_same_v<M, KeyPaddingMask>) {
    const auto bound = mask.bind(n_q, n_kv);
    if (n_q == 0) return n_kv;
    const Index len = bound.range(0).end;
    for (Index i = 1; i < n_q; ++i) {
      if (bound.range(i).end != len) {
        throw_parameter(method, "a KeyPaddingMask with different valid lengths per query row (" +
                                    std::to_string(len) + " for row 0, " +
                                    std::to_string(bound.range(i).end) + " for row " +
                                    std::to_string(i) +
                                    ") is not supported: the method compresses the keys once for "
                                    "every query; use one valid length");
      }
    }
    return len;
  } else {
    static_assert(dependent_false<M>,
                  "kappa: this attention approximation supports only NoMask and KeyPaddingMask "
                  "(one valid length for every query): it compresses the key sequence once for all "
                  "queries, which a causal or sliding-window mask does not allow");
    return 0;
  }
}

/// The checks that open attend() of a method that compresses the keys once
/// for every query (Nystrom, SequenceSketch): the shapes of Q, K, V and Y,
/// then p.validate(). Returns the number N of leading keys every query sees
/// (common_key_length).
template <class P, class T, class M>
Index checked_key_length(const P& p, const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                         const ConstMatrixRef<T>& v, const MatrixRef<T>& y, const M& mask) {
  require_qkv_shapes<T>(P::kName, q, k, v);
  require_output_shape<T>(P::kName, q, v, y);
  p.validate(q.rows(), k.rows(), mask);
  return common_key_length(P::kName, mask, q.rows(), k.rows());
}

/// Replaces each row x of logits by softmax(x), shifted by its maximum first.
template <class T>
void softmax_rows_in_place(RowMatrix<T>& logits) {
  for (Index i = 0; i < logits.rows(); ++i) {
    auto r = logits.row(i).array();
    r = (r - r.maxCoeff()).exp();
    r /= r.sum();
  }
}

/// Writes softmax(s a b^T) row by row into out (a.rows() x b.rows()), each
/// row shifted by its maximum first.
template <class T, class DA, class DB>
void softmax_rows(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b, T s,
                  RowMatrix<T>& out) {
  out.noalias() = (s * a) * b.transpose();  // (a rows, b rows)
  softmax_rows_in_place(out);
}

/// The softmax scale 1/sqrt(d_QK) unless given; throws std::invalid_argument
/// naming the method if the given scale is not finite and positive.
inline double scale_or_default(const char* method, double scale, Index d_qk) {
  if (scale == 0.0) return d_qk > 0 ? 1.0 / std::sqrt(static_cast<double>(d_qk)) : 1.0;
  if (!std::isfinite(scale) || scale < 0.0) {
    throw_parameter(method, "scale = " + std::to_string(scale) +
                                " must be finite and positive (0 means 1/sqrt(d_QK))");
  }
  return scale;
}

/// A seeded uniform permutation of 0 .. n - 1 (Fisher-Yates): for i = n - 1
/// down to 1, swap entries i and next_u64() mod (i + 1) of the identity.
inline std::vector<Index> seeded_permutation(Index n, std::uint64_t seed) {
  std::vector<Index> p(static_cast<std::size_t>(std::max<Index>(n, 0)));
  std::iota(p.begin(), p.end(), Index{0});
  SeededNormal g(seed);
  for (Index i = n - 1; i >= 1; --i) {
    const auto j = static_cast<Index>(g.next_u64() % static_cast<std::uint64_t>(i + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

/// m distinct indices of 0 .. n - 1 drawn without replacement with
/// probabilities proportional to weights w (Efraimidis-Spirakis: the m
/// largest log(u_j) / w_j, u_j = uniform() in order j = 0 .. n - 1; a zero
/// weight is drawn last, all-zero weights draw uniformly), sorted ascending.
inline std::vector<Index> weighted_sample_without_replacement(const std::vector<double>& w, Index m,
                                                              std::uint64_t seed) {
  const auto n = static_cast<Index>(w.size());
  const bool all_zero = std::all_of(w.begin(), w.end(), [](double x) { return x <= 0.0; });
  SeededNormal g(seed);
  std::vector<double> key(w.size());
  for (std::size_t j = 0; j < w.size(); ++j) {
    const double lu = std::log(g.uniform());  // <= 0
    const double wj = all_zero ? 1.0 : w[j];
    key[j] = wj > 0.0 ? lu / wj : -std::numeric_limits<double>::infinity();
  }
  std::vector<Index> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), Index{0});
  // Largest key first; ties by index, so the draw does not depend on the sort.
  std::stable_sort(idx.begin(), idx.end(), [&key](Index a, Index b) {
    return key[static_cast<std::size_t>(a)] > key[static_cast<std::size_t>(b)];
  });
  idx.resize(static_cast<std::size_t>(m));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace approx::detail

namespace approx {

/// Y (N_Q x d_V) of one head by any AttentionApproximation p, with the
/// shape and parameter checks of p.attend().
template <class P, class DQ, class DK, class DV, Mask M = NoMask>
requires AttentionApproximation<P> && Scalar<typename DQ::Scalar> RowMatrix<typename DQ::Scalar>
approximate_attention(const P& p, const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                      const Eigen::MatrixBase<DV>& v, const M& mask = {}) {
  using T = typename DQ::Scalar;
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  RowMatrix<T> y(qr.rows(), vr.cols());
  p.template attend<T>(qr, kr, vr, y, mask);
  return y;
}

}  // namespace approx

}  // namespace kappa
