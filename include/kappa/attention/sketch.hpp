// kappa/attention/sketch.hpp - sequence sketching (Linformer-style; Wang et
// al. 2020, "Linformer: Self-Attention with Linear Complexity", eq. 7), a
// whole-attention approximation (whole_attention.hpp).
//
// K and V are compressed along the sequence by one random m x N_KV sketch S
// (Linformer's "key-value sharing", E = F = S), and the queries attend to the
// m compressed rows:
//
//     K~ = S K   (m x d_QK),   V~ = S V   (m x d_V)
//     Y ~= softmax(s Q K~^T + log c) V~                 (N_Q x d_V)
//
// with c = 1 (no term) for the zero-mean sketches. Cost 2 m N_KV (d_QK + d_V)
// flops for the sketch plus 2 N_Q m (d_QK + d_V) for the attention.
//
// Honest caveat: Linformer learns its projections; with *random* zero-mean
// sketches (kGaussian, kSparseSign) E[S^T S] = I keeps inner products with K
// on average but not the softmax: the rows of S V are signed mixtures of
// values of norm about sqrt(N_KV / m) ||v||, so Y's relative error is of
// order one or more and falls only slowly with m (it does not vanish at
// m = N_KV). kRandomPartition is a sparse non-negative sketch (one nonzero
// per column, as CountSketch without signs): K~ and V~ are means over m
// random groups of keys and log c adds each group's size, so that each group
// counts as its c_g keys (clustered attention); it is exact at m = N_KV.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/attention/masks.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"

namespace kappa::approx {

/// The random sketch S (m x N_KV), drawn from SeededNormal(seed).
enum class SketchKind {
  /// S_cj = normal() / sqrt(m), entries drawn in row-major order.
  kGaussian,
  /// Achlioptas' sparse sign sketch: u = uniform() per entry in row-major
  /// order; S_cj = +sqrt(3 / m) if u <= 1/6, -sqrt(3 / m) if u > 5/6, else 0
  /// (two thirds zeros; E[S^T S] = I).
  kSparseSign,
  /// A random partition into m groups of floor or ceil N / m keys: with the
  /// seeded permutation p (whole_attention.hpp), key p[t] is in group
  /// floor(t m / N), which holds c_g keys. S_gj = 1 / c_g for the keys j of group g (means), and
  /// log c_g is added to the logits. Exact at m = N.
  kRandomPartition,
};

/// Linformer-style sequence sketching with a sketch of m rows (see the file
/// comment).
///
/// ```cpp
/// kappa::approx::SequenceSketch sk(128, /*seed=*/7);  // Gaussian sketch
/// kappa::MultiHeadAttention<float, kappa::approx::SequenceSketch> attn(config, sk);
/// ```
/// Every head draws the same S (the seed does not depend on the head), as
/// Linformer's "layerwise sharing". Masks: NoMask, and KeyPaddingMask with one
/// valid length L (S then sketches the first L keys); others fail to
/// compile. Preconditions (validate() throws std::invalid_argument naming the
/// values): 1 <= m <= N_KV (visible keys; a sketch as long as the sequence
/// no longer compresses it).
struct SequenceSketch {
  static constexpr const char* kName = "SequenceSketch";

  Index rows = 0;  ///< m
  std::uint64_t seed = 0;
  SketchKind kind = SketchKind::kGaussian;
  double scale = 0.0;  ///< the softmax scale s; 0 means 1/sqrt(d_QK)

  SequenceSketch() = default;
  /// A sketch of m rows of the given kind from `s`.
  explicit SequenceSketch(Index m, std::uint64_t s = 0, SketchKind k = SketchKind::kGaussian)
      : rows(m), seed(s), kind(k) {}

  /// Throws std::invalid_argument when the parameters do not fit the shapes.
  template <Mask M>
  void validate(Index n_q, Index n_kv, const M& mask) const {
    const Index n = detail::common_key_length(kName, mask, n_q, n_kv);
    detail::require_at_least_one(kName, "the sketch size m", rows);
    if (n_q > 0 && rows > n) {
      detail::throw_parameter(kName, "the sketch size m = " + std::to_string(rows) +
                                         " exceeds the N_KV = " + std::to_string(n) +
                                         " (visible) keys; use m <= N_KV");
    }
    (void)detail::scale_or_default(kName, scale, 1);
  }

  /// The sketch S (m x n) for n keys. \throws std::invalid_argument unless
  /// 1 <= m <= n.
  template <Scalar T>
  [[nodiscard]] RowMatrix<T> matrix(Index n) const {
    validate(1, n, NoMask{});
    const Index m = rows;
    RowMatrix<T> sk = RowMatrix<T>::Zero(m, n);
    SeededNormal g(seed);
    const double inv_sqrt_m = 1.0 / std::sqrt(static_cast<double>(m));
    if (kind == SketchKind::kGaussian) {
      for (Index c = 0; c < m; ++c)
        for (Index j = 0; j < n; ++j) sk(c, j) = static_cast<T>(g.normal() * inv_sqrt_m);
    } else if (kind == SketchKind::kSparseSign) {
      const double a = std::sqrt(3.0) * inv_sqrt_m;
      for (Index c = 0; c < m; ++c) {
        for (Index j = 0; j < n; ++j) {
          const double u = g.uniform();
          if (u <= 1.0 / 6.0) {
            sk(c, j) = static_cast<T>(a);
          } else if (u > 5.0 / 6.0) {
            sk(c, j) = static_cast<T>(-a);
          }
        }
      }
    } else {
      const std::vector<Index> p = detail::seeded_permutation(n, seed);
      const std::vector<Index> size = group_sizes(n);
      for (Index t = 0; t < n; ++t) {
        const Index grp = t * m / n;
        sk(grp, p[static_cast<std::size_t>(t)]) =
            T(1) / static_cast<T>(size[static_cast<std::size_t>(grp)]);
      }
    }
    return sk;
  }

  /// Draws S for n keys once and keeps it: attend() with n visible keys
  /// then reuses it instead of drawing S on every call (m N normal draws).
  /// Changing rows, seed or kind afterwards needs another prepare().
  template <Scalar T>
  void prepare(Index n) {
    if constexpr (std::is_same_v<T, float>) {
      kept_f_ = matrix<float>(n);
    } else {
      kept_d_ = matrix<double>(n);
    }
  }

  /// Y (N_Q x d_V) of one head into y. \throws as validate().
  template <Scalar T, Mask M = NoMask>
  void attend(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v, MatrixRef<T> y,
              const M& mask = {}) const {
    const Index n = detail::checked_key_length(*this, q, k, v, y, mask);
    if (q.rows() == 0) return;
    const T s = static_cast<T>(detail::scale_or_default(kName, scale, q.cols()));
    const RowMatrix<T>& kept = kept_sketch<T>();
    const bool reuse = kept.rows() == rows && kept.cols() == n;
    const RowMatrix<T> drawn = reuse ? RowMatrix<T>() : matrix<T>(n);
    const RowMatrix<T>& sk = reuse ? kept : drawn;        // (m, N)
    const RowMatrix<T> k_tilde = sk * k.topRows(n);       // (m, d_QK)
    const RowMatrix<T> v_tilde = sk * v.topRows(n);       // (m, d_V)
    RowMatrix<T> logits = (s * q) * k_tilde.transpose();  // (N_Q, m)
    if (kind == SketchKind::kRandomPartition) {
      const std::vector<Index> size = group_sizes(n);
      for (Index grp = 0; grp < rows; ++grp) {
        logits.col(grp).array() +=
            static_cast<T>(std::log(static_cast<double>(size[static_cast<std::size_t>(grp)])));
      }
    }
    detail::softmax_rows_in_place(logits);
    y.noalias() = logits * v_tilde;  // (N_Q, d_V)
  }

 private:
  /// c_g for kRandomPartition: how many t in 0 .. n - 1 have floor(t m / n) = g.
  [[nodiscard]] std::vector<Index> group_sizes(Index n) const {
    std::vector<Index> size(static_cast<std::size_t>(rows), 0);
    for (Index t = 0; t < n; ++t) ++size[static_cast<std::size_t>(t * rows / n)];
    return size;
  }

  template <class T>
  const RowMatrix<T>& kept_sketch() const {
    if constexpr (std::is_same_v<T, float>) {
      return kept_f_;
    } else {
      return kept_d_;
    }
  }
  RowMatrix<float> kept_f_;
  RowMatrix<double> kept_d_;
};

}  // namespace kappa::approx
