// kappa/attention/attention.hpp - kernel-generic attention Y = Z^-1 A V.
//
// Given Q (N_Q x d_QK), K (N_KV x d_QK), V (N_KV x d_V), a kernel f_kappa and
// a mask, kappa computes (the paper's section 2, eq. for one head)
//
//     A = f_kappa(s Q K^T)          (N_Q x N_KV), masked entries set to 0
//     Z = diag(A 1)                 (N_Q x N_Q), the row sums of A
//     Y = Z^-1 A V                  (N_Q x d_V)
//
// For a feature-map kernel A = phi(Q) phi(K)^T instead.
//
// Documented edge cases:
//  * A query row whose keys are all masked, or whose normalizer Z_ii is exactly
//    zero, yields a zero output row and a zero weights row - never NaN.
//  * For shift-invariant kernels (Softmax) kappa subtracts each row's maximum
//    m_i (over visible keys) before f, so logits of any size stay finite. The
//    A and Z it reports (attention_details) are then exp(-m_i) times the
//    mathematical ones, row by row; the weights Z^-1 A and the output Y are
//    exact. The shifts m_i are reported too, so A e^{m_i} can be rebuilt.
//
// Cost: 2 N_Q N_KV d_QK + 2 N_Q N_KV d_V flops (4 N_Q N_KV d when equal) plus
// N_Q N_KV kernel evaluations. attention() works on blocks of query rows, so
// its scratch memory is O(block x N_KV), not N_Q x N_KV; with a causal or
// sliding-window mask it skips the keys no row of a block can see. A decode
// step (at most kFewQueryRows queries seeing the same keys) is computed
// transposed so that the long key dimension drives the GEMMs.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"

namespace kappa {

/// Everything attention computes, for those who want to look inside.
template <Scalar T>
struct AttentionDetails {
  RowMatrix<T> scores;   ///< A (N_Q x N_KV); row-shifted for Softmax, see above
  Vector<T> normalizer;  ///< diag(Z) (N_Q), the row sums of A
  RowMatrix<T> weights;  ///< Z^-1 A (N_Q x N_KV); rows sum to 1 (or are zero)
  Vector<T> row_shift;   ///< m_i subtracted before f (0 for other kernels)
  RowMatrix<T> output;   ///< Y = Z^-1 A V (N_Q x d_V)
};

/// Reusable scratch memory for attention_into (one per thread).
template <Scalar T>
struct AttentionWorkspace {
  std::vector<T> scores;      // block of A
  std::vector<T> z;           // block of diag(Z)
  RowMatrix<T> phi_q, phi_k;  // feature maps (feature-map kernels only)
  // Few-query path: s Q; per thread a chunk of A^T; per key chunk (A V)^T,
  // and the chunks' row maxima and sums (column-major: one query per column).
  RowMatrix<T> q_scaled;
  std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> split_scores{1};
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> split_y, split_mz;
};

/// Up to this many query rows that share one key range (a decode step: one
/// token, or the heads of one token stacked as rows) take the transposed path.
inline constexpr Index kFewQueryRows = 16;
/// Keys per chunk of the few-query path (chunks run on separate threads).
inline constexpr Index kSplitKeys = 4096;
/// Up to this many queries the few-query path streams K and V row by row
/// (memory-bound); more queries use GEMMs (compute-bound).
inline constexpr Index kStreamRows = 8;

namespace detail {

// Policies are checked here, not by constraining the entry points, so that a
// wrong type gets kappa's message rather than a list of failed overloads.
template <class K, class M>
consteval bool check_policies() {
  return check_kernel<K>() && check_mask<M>();
}

/// Throws std::invalid_argument naming kernel K and the scale s (see
/// checked_scale).
template <class K>
[[noreturn]] void throw_bad_scale(double s, bool overflows_t) {
  std::string what = "attention: the ";
  if constexpr (requires { K::kName; }) {
    what += K::kName;
    what += " kernel's";
  } else {
    what += "kernel's";
  }
  what += " scale s";
  if (!overflows_t) require_finite(what, s);  // throws, naming nan / inf / -inf
  throw std::invalid_argument("kappa: " + what + " = " + std::to_string(s) +
                              " is not finite in the scalar type (float)");
}

/// The scale s of a score kernel for width d_QK, in T. Throws
/// std::invalid_argument naming the kernel and the value when s is NaN or
/// infinite, or overflows T: such a scale would turn every output into NaN
/// silently. Called once per attention call; allocates only to throw.
template <class T, class K>
T checked_scale(const K& kernel, Index d_qk) {
  const double s = kernel.scale_for(d_qk);
  const T st = static_cast<T>(s);
  if (!std::isfinite(st)) [[unlikely]]
    throw_bad_scale<K>(s, std::isfinite(s));
  return st;
}

/// Checks the shapes of Q, K, V (and Y if given) and throws ShapeError naming
/// both shapes when they do not fit.
template <class T>
void check_attention_shapes(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                            const ConstMatrixRef<T>& v) {
  require_shapes(q.cols() == k.cols(), "attention", "Q", q, "K", k,
                 "Q and K must have the same number of columns, d_QK");
  require_shapes(k.rows() == v.rows(), "attention", "K", k, "V", v,
                 "K and V must have the same number of rows, N_KV");
}

/// Rows per block: enough for an efficient GEMM (16..128 rows), few enough
/// that the block of A (rows x N_KV) stays within about 2 MB (L2/L3). Measured
/// on Zen 4 at N = 4096, d = 64: 256 KB blocks 79k tokens/s, 512 KB 101k,
/// 2 MB 108k; the full N x N matrix 49k (benchmarks/README.md).
template <class T>
Index block_rows(Index n_q, Index n_kv) {
  const Index target = (Index{2048} * 1024) / static_cast<Index>(sizeof(T));  // elements
  Index b = n_kv > 0 ? target / n_kv : n_q;
  b = std::clamp<Index>(b, 16, 128);
  return std::max<Index>(1, std::min(b, n_q));
}

/// Applies the kernel to one block of scaled scores in place: turns rows
/// [r0, r0 + rows) of s Q K^T, restricted to keys [kb, kb + span), into A and
/// writes the row sums into z (and the row shifts into shift, if given).
template <class T, class K, class B>
void kernel_rows(const K& kernel, const B& bound, Index r0, Index rows, Index kb, Index span,
                 T* scores, T* z, T* shift) {
  for (Index r = 0; r < rows; ++r) {
    T* row = scores + r * span;
    const KeyRange full = bound.range(r0 + r);
    const Index lo = std::clamp(full.begin - kb, Index{0}, span);
    const Index hi = std::clamp(full.end - kb, lo, span);
    std::fill(row, row + lo, T(0));
    std::fill(row + hi, row + span, T(0));
    T m = T(0);
    Index visible = hi - lo;
    if constexpr (B::kHasHoles) {
      visible = 0;
      for (Index j = lo; j < hi; ++j) {
        if (bound.allowed(r0 + r, kb + j)) ++visible;
      }
    }
    if (visible == 0) {
      std::fill(row + lo, row + hi, T(0));
      z[r] = T(0);
      if (shift) shift[r] = T(0);
      continue;
    }
    if constexpr (ShiftInvariantKernel<K>) {
      m = -std::numeric_limits<T>::infinity();
      if constexpr (B::kHasHoles) {
        for (Index j = lo; j < hi; ++j) {
          if (bound.allowed(r0 + r, kb + j)) m = std::max(m, row[j]);
        }
      } else {
        m = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo).maxCoeff();
      }
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo) -= m;
    }
    if constexpr (ScoreKernel<K>) {
      if constexpr (HasVectorForm<K, T>) {
        kernel.apply(row + lo, hi - lo);
      } else {
        for (Index j = lo; j < hi; ++j) row[j] = kernel(row[j]);
      }
    }
    if constexpr (B::kHasHoles) {
      for (Index j = lo; j < hi; ++j) {
        if (!bound.allowed(r0 + r, kb + j)) row[j] = T(0);
      }
    }
    z[r] = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo).sum();
    if (shift) shift[r] = m;
  }
}

/// The keys any row of [r0, r0 + rows) may see: the union of their ranges.
template <class B>
KeyRange block_keys(const B& bound, Index r0, Index rows) {
  KeyRange u{std::numeric_limits<Index>::max(), 0};
  for (Index r = 0; r < rows; ++r) {
    const KeyRange kr = bound.range(r0 + r);
    if (kr.size() == 0) continue;
    u.begin = std::min(u.begin, kr.begin);
    u.end = std::max(u.end, kr.end);
  }
  if (u.end <= u.begin) return {0, 0};
  return u;
}

/// One block of query rows [r0, r0 + rows): Y_block = Z^-1 A V.
/// `qs` is s Q (score kernels) or phi(Q); `ks` is K or phi(K).
template <class T, class K, class B>
void attention_block(const K& kernel, const B& bound, const ConstMatrixRef<T>& qs, T q_scale,
                     const ConstMatrixRef<T>& ks, const ConstMatrixRef<T>& v, MatrixRef<T>& y,
                     Index r0, Index rows, std::vector<T>& scores_buf, std::vector<T>& z_buf) {
  const KeyRange keys = block_keys(bound, r0, rows);
  const Index span = keys.size();
  if (span == 0) {
    y.middleRows(r0, rows).setZero();
    return;
  }
  const auto n_scores = static_cast<std::size_t>(rows * span);  // both >= 0
  if (scores_buf.size() < n_scores) scores_buf.resize(n_scores);
  if (z_buf.size() < static_cast<std::size_t>(rows)) z_buf.resize(static_cast<std::size_t>(rows));
  Eigen::Map<RowMatrix<T>> a(scores_buf.data(), rows, span);
  a.noalias() = (q_scale * qs.middleRows(r0, rows)) *
                ks.middleRows(keys.begin, span).transpose();  // (rows, span)
  kernel_rows<T>(kernel, bound, r0, rows, keys.begin, span, scores_buf.data(), z_buf.data(),
                 static_cast<T*>(nullptr));
  auto y_block = y.middleRows(r0, rows);
  y_block.noalias() = a * v.middleRows(keys.begin, span);  // (rows, d_V)
  const T* const z = z_buf.data();
  for (Index r = 0; r < rows; ++r) {
    const T zr = z[r];
    if (zr != T(0)) {
      y_block.row(r) *= T(1) / zr;
    } else {
      y_block.row(r).setZero();
    }
  }
}

/// The decode-shaped case: m <= kFewQueryRows queries that all see the same
/// keys [b, e). Computed transposed,
///     A^T = f(K (s Q)^T)    (span x m),      (A V)^T = V^T A^T    (d_V x m),
/// so the long key dimension is the GEMM's row dimension and the few queries
/// its narrow column dimension, which Eigen's kernels tile well (the m x span
/// product with m = 1..16 runs as a GEMV-like loop otherwise), in chunks of
/// kSplitKeys keys spread over the threads ("split-K", as flash decoding).
/// K and V are each read once. Returns false, writing nothing, when it does
/// not apply.
template <class T, class K, class B>
bool few_query_rows(const K& kernel, const B& bound, T scale, const ConstMatrixRef<T>& q,
                    const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v, MatrixRef<T>& y,
                    AttentionWorkspace<T>& ws) {
  if constexpr (!ScoreKernel<K> || B::kHasHoles) {
    return false;
  } else {
    const Index m = q.rows();
    if (m > kFewQueryRows) return false;
    const KeyRange keys = bound.range(0);
    for (Index i = 1; i < m; ++i) {
      const KeyRange r = bound.range(i);
      if (r.begin != keys.begin || r.end != keys.end) return false;
    }
    const Index span = keys.size();
    if (span == 0) {
      y.setZero();
      return true;
    }
    ws.q_scaled.noalias() = scale * q;  // (m, d_QK)
    // Split the keys into fixed chunks of kSplitKeys (independent of the thread
    // count, so results are too). Chunk c gives, per query i, its row max
    // m_ci (shift-invariant kernels), z_ci = sum_j f(x_ij - m_ci) and
    // y_ci = sum_j f(x_ij - m_ci) v_j; they combine as
    //   m_i = max_c m_ci,  z_i = sum_c e^{m_ci - m_i} z_ci,  y_i = sum_c e^{m_ci - m_i} y_ci.
    // Each chunk's products run single-threaded inside the parallel loop:
    // Eigen's own threaded GEMM is up to 8x *slower* on this tall-skinny
    // (span x d) (d x m) shape with 2 threads.
    const Index n_chunks = (span + kSplitKeys - 1) / kSplitKeys;
    ws.split_y.resize(v.cols(), m * n_chunks);  // [y_c0 | y_c1 | ...], (d_V, m) each
    ws.split_mz.resize(2 * n_chunks, m);        // rows 2c: m_c, 2c + 1: z_c
    const int threads = static_cast<int>(std::min<Index>(num_threads(), n_chunks));
    if (ws.split_scores.size() < static_cast<std::size_t>(threads))
      ws.split_scores.resize(static_cast<std::size_t>(threads));
    auto chunk = [&](Index c, Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& sc) {
      const Index b0 = keys.begin + c * kSplitKeys;
      const Index len = std::min(kSplitKeys, keys.end - b0);
      const bool stream = m <= kStreamRows;
      if (stream) {
        // Few queries: memory-bound. One pass over the key rows, m dot
        // products each, no packing copy of K (which a GEMM would make).
        sc.resize(len, m);
        for (Index j = 0; j < len; ++j) {
          const auto k_j = k.row(b0 + j);
          for (Index i = 0; i < m; ++i) sc(j, i) = k_j.dot(ws.q_scaled.row(i));
        }
      } else {
        sc.noalias() = k.middleRows(b0, len) * ws.q_scaled.transpose();  // (len, m)
      }
      for (Index i = 0; i < m; ++i) {
        T* col = sc.col(i).data();
        T shift = T(0);
        if constexpr (ShiftInvariantKernel<K>) {
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(col, len);
          shift = a.maxCoeff();
          a -= shift;
        }
        if constexpr (HasVectorForm<K, T>) {
          kernel.apply(col, len);
        } else {
          for (Index j = 0; j < len; ++j) col[j] = kernel(col[j]);
        }
        ws.split_mz(2 * c, i) = shift;
        ws.split_mz(2 * c + 1, i) = sc.col(i).sum();
      }
      auto y_c = ws.split_y.middleCols(c * m, m);  // (d_V, m)
      if (stream) {
        // (A V)^T accumulated row by row of V: y_i += a_ij v_j, V read once.
        y_c.setZero();
        for (Index j = 0; j < len; ++j) {
          const auto v_j = v.row(b0 + j).transpose();
          for (Index i = 0; i < m; ++i) y_c.col(i).noalias() += sc(j, i) * v_j;
        }
      } else {
        y_c.noalias() = v.middleRows(b0, len).transpose() * sc;
      }
    };
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (Index c = 0; c < n_chunks; ++c)
        chunk(c, ws.split_scores[static_cast<std::size_t>(omp_get_thread_num())]);
    } else
#endif
    {
      for (Index c = 0; c < n_chunks; ++c) chunk(c, ws.split_scores[0]);
    }
    for (Index i = 0; i < m; ++i) {
      T m_i = ws.split_mz(0, i);
      for (Index c = 1; c < n_chunks; ++c) m_i = std::max(m_i, ws.split_mz(2 * c, i));
      T z = T(0);
      auto y_i = y.row(i);
      y_i.setZero();
      for (Index c = 0; c < n_chunks; ++c) {
        const T w = ShiftInvariantKernel<K> ? std::exp(ws.split_mz(2 * c, i) - m_i) : T(1);
        z += w * ws.split_mz(2 * c + 1, i);
        y_i += w * ws.split_y.col(c * m + i).transpose();
      }
      if (z != T(0)) {
        y_i *= T(1) / z;
      } else {
        y_i.setZero();
      }
    }
    return true;
  }
}

}  // namespace detail

/// Y = Z^-1 A V with A = f_kappa(s Q K^T) masked, written into `y`
/// (N_Q x d_V, preallocated). The hot-path entry point: `ws` is reused
/// across calls so that steady-state calls allocate nothing.
///
/// \param q  Q, N_Q x d_QK      \param k  K, N_KV x d_QK
/// \param v  V, N_KV x d_V      \param y  Y, N_Q x d_V (output)
/// \param ws  scratch buffers, reused across calls
/// \param kernel  f_kappa      \param mask  which keys each query row sees
/// \throws ShapeError when the shapes do not fit (the message names both),
///         std::invalid_argument when a score kernel's scale is not finite,
///         and whatever the mask's bind() throws.
template <Scalar T, class K = kernels::Softmax, class M = NoMask>
void attention_into(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v, MatrixRef<T> y,
                    AttentionWorkspace<T>& ws, const K& kernel = {}, const M& mask = {}) {
  static_assert(detail::check_policies<K, M>());
  detail::check_attention_shapes<T>(q, k, v);
  require_shapes(y.rows() == q.rows() && y.cols() == v.cols(), "attention", "Y", y.rows(), y.cols(),
                 "(N_Q x d_V)", q.rows(), v.cols(), "Y must be N_Q x d_V");
  const auto bound = mask.bind(q.rows(), k.rows());
  T scale = T(1);
  if constexpr (ScoreKernel<K>) scale = detail::checked_scale<T>(kernel, q.cols());
  const Index n_q = q.rows();
  if (n_q == 0) return;
  if (k.rows() == 0) {
    y.setZero();
    return;
  }
  if (detail::few_query_rows<T>(kernel, bound, scale, q, k, v, y, ws)) return;
  const Index block = detail::block_rows<T>(n_q, k.rows());
  const Index n_blocks = (n_q + block - 1) / block;

  auto run = [&](const ConstMatrixRef<T>& qs, T q_scale, const ConstMatrixRef<T>& ks) {
#ifdef _OPENMP
    const int threads = static_cast<int>(std::min<Index>(num_threads(), n_blocks));
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
      {
        std::vector<T> scores_buf, z_buf;
#pragma omp for schedule(dynamic, 1)
        for (Index b = 0; b < n_blocks; ++b) {
          const Index r0 = b * block;
          detail::attention_block<T>(kernel, bound, qs, q_scale, ks, v, y, r0,
                                     std::min(block, n_q - r0), scores_buf, z_buf);
        }
      }
      return;
    }
#endif
    for (Index b = 0; b < n_blocks; ++b) {
      const Index r0 = b * block;
      detail::attention_block<T>(kernel, bound, qs, q_scale, ks, v, y, r0,
                                 std::min(block, n_q - r0), ws.scores, ws.z);
    }
  };

  if constexpr (ScoreKernel<K>) {
    run(q, scale, k);
  } else {
    ws.phi_q = kernel.template feature_map<T>(q, FeatureRole::kQuery);
    ws.phi_k = kernel.template feature_map<T>(k, FeatureRole::kKey);
    require_shapes(ws.phi_q.cols() == ws.phi_k.cols(), "attention feature map", "phi(Q)", ws.phi_q,
                   "phi(K)", ws.phi_k, "phi(Q) and phi(K) must have equal widths");
    run(ws.phi_q, T(1), ws.phi_k);
  }
}

/// Y = Z^-1 A V with A = f_kappa(s Q K^T) masked: returns Y (N_Q x d_V).
///
/// ```cpp
/// RowMatrix<float> y = kappa::attention(q, k, v, kernels::Softmax{}, CausalMask{});
/// ```
/// Q, K, V may be any Eigen expressions of one scalar type (row-major blocks
/// and maps pass without a copy).
/// \throws ShapeError when the shapes do not fit (the message names both);
///         std::invalid_argument for a non-finite kernel scale.
template <class DQ, class DK, class DV, class K = kernels::Softmax, class M = NoMask>
requires Scalar<typename DQ::Scalar> RowMatrix<typename DQ::Scalar> attention(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const K& kernel = {}, const M& mask = {}) {
  using T = typename DQ::Scalar;
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  RowMatrix<T> y(qr.rows(), vr.cols());  // shapes are checked by attention_into
  AttentionWorkspace<T> ws;
  attention_into<T>(qr, kr, vr, y, ws, kernel, mask);
  return y;
}

/// Like attention(), but returns A, Z, Z^-1 A and Y (see AttentionDetails).
/// Allocates N_Q x N_KV twice: meant for inspection and teaching, not speed.
template <class DQ, class DK, class DV, class K = kernels::Softmax, class M = NoMask>
requires Scalar<typename DQ::Scalar> AttentionDetails<typename DQ::Scalar> attention_details(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const K& kernel = {}, const M& mask = {}) {
  using T = typename DQ::Scalar;
  static_assert(detail::check_policies<K, M>());
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  detail::check_attention_shapes<T>(qr, kr, vr);
  const auto bound = mask.bind(qr.rows(), kr.rows());
  const Index n_q = qr.rows(), n_kv = kr.rows();
  AttentionDetails<T> d;
  d.scores.resize(n_q, n_kv);
  if constexpr (ScoreKernel<K>) {
    const T s = detail::checked_scale<T>(kernel, qr.cols());
    d.scores.noalias() = (s * qr) * kr.transpose();  // (N_Q, N_KV)
  } else {
    const RowMatrix<T> phi_q = kernel.template feature_map<T>(qr, FeatureRole::kQuery);
    const RowMatrix<T> phi_k = kernel.template feature_map<T>(kr, FeatureRole::kKey);
    require_shapes(phi_q.cols() == phi_k.cols(), "attention feature map", "phi(Q)", phi_q, "phi(K)",
                   phi_k, "phi(Q) and phi(K) must have equal widths");
    d.scores.noalias() = phi_q * phi_k.transpose();  // (N_Q, N_KV)
  }
  d.normalizer.resize(n_q);
  d.row_shift.resize(n_q);
  if (n_kv > 0) {
    detail::kernel_rows<T>(kernel, bound, 0, n_q, 0, n_kv, d.scores.data(), d.normalizer.data(),
                           d.row_shift.data());
  } else {
    d.normalizer.setZero();
    d.row_shift.setZero();
  }
  d.weights.resize(n_q, n_kv);
  for (Index i = 0; i < n_q; ++i) {
    const T zi = d.normalizer(i);
    if (zi != T(0)) {
      d.weights.row(i) = d.scores.row(i) / zi;
    } else {
      d.weights.row(i).setZero();
    }
  }
  d.output.noalias() = d.weights * vr;  // (N_Q, d_V)
  return d;
}

}  // namespace kappa
