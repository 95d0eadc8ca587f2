// kappa/core/parallel_product.hpp - the dense products of whole layers,
// threaded where Eigen does not thread them.
//
// A decode step multiplies one row (or a few) by every weight matrix: a
// matrix-vector product, memory-bound, which Eigen runs on one thread. With
// kappa::num_threads() > 1 these products split the weight's output columns
// (or rows of E for X E^T) into contiguous blocks, one per thread, so each
// thread streams its own part of the weights once. Larger row counts (a
// prompt) go to kappa's GEMM for float where the build has AVX2 + FMA or
// AVX-512 (core/gemm_simd.hpp, which splits the output columns the same way),
// else to Eigen's GEMM, which is threaded itself. In the first two, every
// output element is computed by one thread with the same code, so results do
// not depend on the thread count; Eigen's GEMM sizes its blocks of k by the
// thread count, so there they agree to rounding.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/gemm_simd.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"

namespace kappa {

/// Up to this many rows a product is treated as a (threaded) matrix-vector
/// product.
inline constexpr Index kFewRows = 8;

namespace detail {
/// Splits [0, n) into `parts` blocks whose starts are multiples of 16.
inline void block_range(Index n, int parts, int p, Index& lo, Index& hi) {
  const Index step = ((n + parts - 1) / parts + 15) / 16 * 16;
  lo = std::min(n, step * p);
  hi = std::min(n, lo + step);
}
}  // namespace detail

/// out = X W for X (n x k) and W (k x m). \throws ShapeError on mismatch.
template <Scalar T>
void product_into(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T> out) {
  require_shapes(x.cols() == w.rows() && out.rows() == x.rows() && out.cols() == w.cols(),
                 "product X W", "X", x.rows(), x.cols(), "W", w.rows(), w.cols(),
                 "X must have as many columns as W has rows, and the output must be (rows of X) x "
                 "(columns of W)");
  const int threads = num_threads();
#if KAPPA_SIMD_LANES > 0
  if constexpr (std::is_same_v<T, float>) {
    constexpr Index kNr = detail::gemm::kNr;
    if (x.rows() > kFewRows) {  // a prompt: our GEMM
      const float* wp = w.data();
      const Index ldw = w.outerStride();
      detail::gemm::gemm_nn(
          x.data(), x.outerStride(), x.rows(), x.cols(), w.cols(),
          [wp, ldw](Index t, Index kc, Index j, Index len, float* dst) {
            for (Index s = 0; s < kc; ++s)
              detail::gemm::copy_row(dst + s * kNr, wp + (t + s) * ldw + j, len);
          },
          out.data(), out.outerStride(), threads);
      return;
    }
  }
#endif
  if (threads <= 1 || x.rows() > kFewRows || w.cols() < 64) {
    out.noalias() = x * w;  // (n, m)
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (int p = 0; p < threads; ++p) {
    Index lo = 0, hi = 0;
    detail::block_range(w.cols(), threads, p, lo, hi);
    if (hi > lo) out.middleCols(lo, hi - lo).noalias() = x * w.middleCols(lo, hi - lo);
  }
}

/// out = X E^T for X (n x k) and E (m x k), as the output head's logits
/// H E_out^T. \throws ShapeError on mismatch.
template <Scalar T>
void product_transposed_into(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& e,
                             MatrixRef<T> out) {
  require_shapes(
      x.cols() == e.cols() && out.rows() == x.rows() && out.cols() == e.rows(), "product X E^T",
      "X", x.rows(), x.cols(), "E", e.rows(), e.cols(),
      "X and E must have the same number of columns, the output (rows of X) x (rows of E)");
  const int threads = num_threads();
#if KAPPA_SIMD_LANES > 0
  if constexpr (std::is_same_v<T, float>) {
    if (x.rows() > kFewRows) {  // a prompt: our GEMM
      const float* ep = e.data();
      const Index lde = e.outerStride();
      detail::gemm::gemm_nt(
          x.data(), x.outerStride(), x.rows(), x.cols(), e.rows(),
          [ep, lde](Index j, Index t, Index len, float* dst) {
            std::memcpy(dst, ep + j * lde + t, sizeof(float) * static_cast<std::size_t>(len));
          },
          out.data(), out.outerStride(), threads);
      return;
    }
  }
#endif
  if (threads <= 1 || x.rows() > kFewRows || e.rows() < 64) {
    out.noalias() = x * e.transpose();  // (n, m)
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (int p = 0; p < threads; ++p) {
    Index lo = 0, hi = 0;
    detail::block_range(e.rows(), threads, p, lo, hi);
    if (hi > lo) out.middleCols(lo, hi - lo).noalias() = x * e.middleRows(lo, hi - lo).transpose();
  }
}

}  // namespace kappa
