// tests/support/heads_reference.hpp - plain-loop multi-head / grouped-query
// attention for the heads, cache and decoding tests: long-double products,
// per-head slices copied out explicitly, K and V of kv head h / (H / H_kv)
// looked up by index, and reference_attention() per head.
#pragma once

#include <functional>
#include <random>
#include <vector>

#include "kappa/core/matrix.hpp"
#include "support/reference.hpp"

namespace kappa::testing {

/// a b + bias (bias may be empty), accumulated in long double.
template <class T>
RowMatrix<T> ref_affine(const RowMatrix<T>& a, const RowMatrix<T>& b, const RowVector<T>& bias) {
  RowMatrix<T> c(a.rows(), b.cols());
  for (Index i = 0; i < a.rows(); ++i)
    for (Index j = 0; j < b.cols(); ++j) {
      long double acc = bias.size() ? (long double)bias(j) : 0.0L;
      for (Index k = 0; k < a.cols(); ++k) acc += (long double)a(i, k) * (long double)b(k, j);
      c(i, j) = static_cast<T>(acc);
    }
  return c;
}

/// Weights of a multi-head layer in the paper's convention.
template <class T>
struct RefHeadsWeights {
  RowMatrix<T> w_q, w_k, w_v, w_o;
  RowVector<T> b_q, b_k, b_v, b_o;
};

/// Random weights for the given sizes, entries uniform in [lo, lo + 2 amp].
template <class T>
RefHeadsWeights<T> random_heads_weights(Index d_in, Index d_kv_in, Index n_heads, Index n_kv_heads,
                                        Index d_head, Index d_v, Index d_out, bool biases,
                                        unsigned seed, double amp = 0.5, double lo = -0.5) {
  auto rnd = [&](Index r, Index c, unsigned s) {
    RowMatrix<T> m = random_matrix<T>(r, c, s, amp);
    m.array() += static_cast<T>(lo + amp);
    return m;
  };
  RefHeadsWeights<T> w;
  w.w_q = rnd(d_in, n_heads * d_head, seed);
  w.w_k = rnd(d_kv_in, n_kv_heads * d_head, seed + 1);
  w.w_v = rnd(d_kv_in, n_kv_heads * d_v, seed + 2);
  w.w_o = rnd(n_heads * d_v, d_out, seed + 3);
  if (biases) {
    w.b_q = rnd(1, n_heads * d_head, seed + 4);
    w.b_k = rnd(1, n_kv_heads * d_head, seed + 5);
    w.b_v = rnd(1, n_kv_heads * d_v, seed + 6);
    w.b_o = rnd(1, d_out, seed + 7);
  }
  return w;
}

/// Transforms one head's (N x d_head) block given its first absolute position
/// (the reference's view of a positional policy); identity when empty.
template <class T>
using RefPosition = std::function<void(RowMatrix<T>&, Index)>;

/// Reference multi-head attention: Q = xq W^Q + b_Q, K, V likewise from xkv;
/// head h uses kv head h / (H / H_kv); Y_h = reference_attention(Q_h, K_g,
/// V_g); output [Y_1 .. Y_H] W^O + b_O. `visible(i, j)` as in
/// reference_attention; `position` (if set) is applied to each head block of
/// Q and K with first position 0.
template <class T>
RowMatrix<T> reference_heads(const RowMatrix<T>& xq, const RowMatrix<T>& xkv,
                             const RefHeadsWeights<T>& w, Index n_heads, Index n_kv_heads,
                             Index d_head, Index d_v, double scale,
                             const std::function<long double(long double)>& f, bool exponential,
                             const Visibility& visible, const RefPosition<T>& position = {},
                             std::vector<RowMatrix<T>>* weights = nullptr) {
  const RowMatrix<T> q = ref_affine(xq, w.w_q, w.b_q);
  const RowMatrix<T> k = ref_affine(xkv, w.w_k, w.b_k);
  const RowMatrix<T> v = ref_affine(xkv, w.w_v, w.b_v);
  const Index group = n_heads / n_kv_heads;
  RowMatrix<T> y(xq.rows(), n_heads * d_v);
  if (weights) weights->clear();
  for (Index h = 0; h < n_heads; ++h) {
    const Index g = h / group;
    RowMatrix<T> qh(q.rows(), d_head), kg(k.rows(), d_head), vg(v.rows(), d_v);
    for (Index i = 0; i < q.rows(); ++i)
      for (Index c = 0; c < d_head; ++c) qh(i, c) = q(i, h * d_head + c);
    for (Index i = 0; i < k.rows(); ++i) {
      for (Index c = 0; c < d_head; ++c) kg(i, c) = k(i, g * d_head + c);
      for (Index c = 0; c < d_v; ++c) vg(i, c) = v(i, g * d_v + c);
    }
    if (position) {
      position(qh, 0);
      position(kg, 0);
    }
    RowMatrix<T> wh;
    const RowMatrix<T> yh = reference_attention(qh, kg, vg, scale, f, exponential, visible, &wh);
    if (weights) weights->push_back(wh);
    for (Index i = 0; i < y.rows(); ++i)
      for (Index c = 0; c < d_v; ++c) y(i, h * d_v + c) = yh(i, c);
  }
  return ref_affine(y, w.w_o, w.b_o);
}

inline long double ref_exp(long double x) {
  return std::exp(x);
}
inline long double ref_identity(long double x) {
  return x;
}

}  // namespace kappa::testing
