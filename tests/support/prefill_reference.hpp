// tests/support/prefill_reference.hpp - the reference for a block-quantized
// weight matrix's prefill product (more than kFewRows rows of X).
//
// With AVX-512 VNNI or AVX2 (KAPPA_QUANT_GEMM_INT8), prefill quantizes X's rows to
// Q8_0 as decoding does and multiplies in 8-bit integers
// (kappa/core/quant_gemm.hpp); otherwise it multiplies float X by
// dequantized panels. The reference is X' deq(W) in double, X' = X or
// X's Q8_0 rows dequantized (quant::quantize_row_q8_0, then
// dequantize_row_q8_0), within
//   float path:  rel_tol sum_t |x_t| |w_t|
//   int8 path:   rel_tol (sum_t |x'_t| |w_t| + sum_t |x'_t| amax_t), amax_t
//                the largest |w| in t's block of 32 (the size of the codes'
//                offset c, see quant_gemm.hpp's bound).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kappa/core/matrix.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_gemm.hpp"

namespace kappa_test {

/// X as the prefill product multiplies it.
inline kappa::RowMatrix<float> prefill_x(const kappa::RowMatrix<float>& x) {
#if KAPPA_QUANT_GEMM_INT8
  namespace q = kappa::quant;
  const kappa::Index k = x.cols();
  kappa::RowMatrix<float> xq(x.rows(), k);
  std::vector<unsigned char> blocks(static_cast<std::size_t>(k / 32) * q::kBytesQ8_0);
  for (kappa::Index r = 0; r < x.rows(); ++r) {
    q::quantize_row_q8_0(x.row(r).data(), blocks.data(), k);
    q::dequantize_row_q8_0(blocks.data(), xq.row(r).data(), k);
  }
  return xq;
#else
  return x;
#endif
}

/// out against prefill_x(x) w_deq (w_deq: k x m, dequantized) in double.
inline void check_prefill(const kappa::RowMatrix<float>& x, const kappa::RowMatrix<float>& w_deq,
                          const kappa::RowMatrix<float>& out, double rel_tol) {
  const Eigen::MatrixXd xs = prefill_x(x).cast<double>();
  const Eigen::MatrixXd ws = w_deq.cast<double>();
  const Eigen::MatrixXd ref = xs * ws;
  Eigen::MatrixXd mag = xs.cwiseAbs() * ws.cwiseAbs();
#if KAPPA_QUANT_GEMM_INT8
  Eigen::MatrixXd amax(ws.rows(), ws.cols());
  for (kappa::Index j = 0; j < ws.cols(); ++j)
    for (kappa::Index b = 0; b < ws.rows(); b += 32) {
      const kappa::Index len = std::min<kappa::Index>(32, ws.rows() - b);
      amax.col(j).segment(b, len).setConstant(ws.col(j).segment(b, len).cwiseAbs().maxCoeff());
    }
  mag += xs.cwiseAbs() * amax;
#endif
  for (kappa::Index r = 0; r < out.rows(); ++r)
    for (kappa::Index j = 0; j < out.cols(); ++j)
      ASSERT_LE(std::fabs(out(r, j) - ref(r, j)), rel_tol * mag(r, j))
          << "row " << r << " col " << j;
}

}  // namespace kappa_test
