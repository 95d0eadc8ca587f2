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
#include <functional>
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

/// The number of pieces a decode product (a few rows of X) with m outputs
/// per row is split into: one per thread, or 1 for fewer than 64 outputs.
inline int decode_parts(Index m) {
  const int threads = num_threads();
  return (threads > 1 && m >= 64) ? threads : 1;
}

/// What the products that share one X prepare once (X's rows in Q8_0 for
/// the block formats; kappa/core/quant_weights.hpp).
struct DecodeInput;

/// A decode product cut into pieces for a parallel region that the caller
/// runs (multiply_each, kappa/core/quant_weights.hpp): run(p) computes piece
/// p < parts alone. The pieces are the ones the product's own region
/// computes (the same ranges of outputs, the same loops), so the result is
/// the product's, bit for bit.
struct DecodeJob {
  int parts = 1;
  std::function<void(int)> run;
};

/// Runs piece(p) for p < parts, one piece per thread of one OpenMP region;
/// with one part, on the calling thread without a region (a region of one
/// thread still costs about 1 us).
template <class Piece>
void run_pieces(int parts, Piece&& piece) {
  if (parts <= 1) {
    piece(0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static)
#endif
  for (int p = 0; p < parts; ++p) piece(p);
}

/// \throws ShapeError unless out = X W is defined.
template <Scalar T>
void check_product(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w,
                   const MatrixRef<T>& out) {
  require_shapes(x.cols() == w.rows() && out.rows() == x.rows() && out.cols() == w.cols(),
                 "product X W", "X", x.rows(), x.cols(), "W", w.rows(), w.cols(),
                 "X must have as many columns as W has rows, and the output must be (rows of X) x "
                 "(columns of W)");
}
/// \throws ShapeError unless out = X E^T is defined.
template <Scalar T>
void check_product_transposed(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& e,
                              const MatrixRef<T>& out) {
  require_shapes(
      x.cols() == e.cols() && out.rows() == x.rows() && out.cols() == e.rows(), "product X E^T",
      "X", x.rows(), x.cols(), "E", e.rows(), e.cols(),
      "X and E must have the same number of columns, the output (rows of X) x (rows of E)");
}

/// Piece p of `parts` of the decode product out = X W: a block of W's
/// columns; with one part, the whole product.
template <Scalar T>
void product_piece(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T>& out, int p,
                   int parts) {
  if (parts <= 1) {
    out.noalias() = x * w;  // (n, m)
    return;
  }
  Index lo = 0, hi = 0;
  block_range(w.cols(), parts, p, lo, hi);
  if (hi > lo) out.middleCols(lo, hi - lo).noalias() = x * w.middleCols(lo, hi - lo);
}

/// Piece p of `parts` of the decode product out = X E^T: a block of E's
/// rows; with one part, the whole product.
template <Scalar T>
void product_transposed_piece(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& e,
                              MatrixRef<T>& out, int p, int parts) {
  if (parts <= 1) {
    out.noalias() = x * e.transpose();  // (n, m)
    return;
  }
  Index lo = 0, hi = 0;
  block_range(e.rows(), parts, p, lo, hi);
  if (hi > lo) out.middleCols(lo, hi - lo).noalias() = x * e.middleRows(lo, hi - lo).transpose();
}
}  // namespace detail

/// out = X W for X (n x k) and W (k x m). \throws ShapeError on mismatch.
template <Scalar T>
void product_into(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T> out) {
  detail::check_product<T>(x, w, out);
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
          out.data(), out.outerStride(), num_threads());
      return;
    }
  }
#endif
  const int parts = x.rows() > kFewRows ? 1 : detail::decode_parts(w.cols());
  detail::run_pieces(parts, [&](int p) { detail::product_piece<T>(x, w, out, p, parts); });
}

/// out = X E^T for X (n x k) and E (m x k), as the output head's logits
/// H E_out^T. \throws ShapeError on mismatch.
template <Scalar T>
void product_transposed_into(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& e,
                             MatrixRef<T> out) {
  detail::check_product_transposed<T>(x, e, out);
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
          out.data(), out.outerStride(), num_threads());
      return;
    }
  }
#endif
  const int parts = x.rows() > kFewRows ? 1 : detail::decode_parts(e.rows());
  detail::run_pieces(parts,
                     [&](int p) { detail::product_transposed_piece<T>(x, e, out, p, parts); });
}

namespace detail {
/// product_into's decode product as a job (see DecodeJob).
/// \throws ShapeError on mismatch.
template <Scalar T>
DecodeJob product_job(const ConstMatrixRef<T>& x, ConstMatrixRef<T> w, MatrixRef<T>& out) {
  check_product<T>(x, w, out);
  const int parts = decode_parts(w.cols());
  return {parts, [&x, w, &out, parts](int p) { product_piece<T>(x, w, out, p, parts); }};
}
/// product_transposed_into's decode product as a job (see DecodeJob).
/// \throws ShapeError on mismatch.
template <Scalar T>
DecodeJob product_transposed_job(const ConstMatrixRef<T>& x, ConstMatrixRef<T> e,
                                 MatrixRef<T>& out) {
  check_product_transposed<T>(x, e, out);
  const int parts = decode_parts(e.rows());
  return {parts, [&x, e, &out, parts](int p) { product_transposed_piece<T>(x, e, out, p, parts); }};
}
}  // namespace detail

}  // namespace kappa
