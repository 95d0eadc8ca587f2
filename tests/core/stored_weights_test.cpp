// Tests for kappa/core/stored_weights.hpp's fp16 view (detail::MappedF16):
// W's values are fp16 (quant::fp16_from_float of random floats) stored as
// GGUF does, P = W^T (BlocksAlong::kRows) or P = W (kCols); the reference is
// X times those values widened exactly (quant::fp16_to_float) in double.
// Tolerance: k 2^-23 sum |x| |w| per output (float summation), both
// products, decode (1..3 rows) and prefill (9, 40 rows), reduction lengths
// that are and are not multiples of the 32-wide vector loop; threads 1..3
// give the same bits; rows_into reads kCols rows exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/stored_weights.hpp"
#include "kappa/core/threading.hpp"

namespace {

using kappa::BlocksAlong;
using kappa::Index;
using kappa::RowMatrix;
namespace q = kappa::quant;

struct F16ThreadsGuard {
  ~F16ThreadsGuard() { kappa::set_num_threads(1); }
};

/// W (rows x cols) rounded to fp16, and its bytes in the layout `along`.
struct F16Matrix {
  RowMatrix<double> w;  // the fp16 values, exactly
  std::shared_ptr<std::vector<unsigned char>> bytes;
};

F16Matrix f16_matrix(Index rows, Index cols, BlocksAlong along, std::mt19937_64& g) {
  std::normal_distribution<float> n(0.0f, 0.1f);
  F16Matrix m{RowMatrix<double>(rows, cols),
              std::make_shared<std::vector<unsigned char>>(2 * static_cast<std::size_t>(rows) *
                                                           static_cast<std::size_t>(cols))};
  const Index n_p = along == BlocksAlong::kRows ? cols : rows;
  const Index k = along == BlocksAlong::kRows ? rows : cols;
  for (Index j = 0; j < n_p; ++j)
    for (Index t = 0; t < k; ++t) {
      const std::uint16_t h = q::fp16_from_float(n(g));
      std::memcpy(m.bytes->data() + 2 * static_cast<std::size_t>(j * k + t), &h, 2);
      const double v = q::fp16_to_float(h);
      if (along == BlocksAlong::kRows)
        m.w(t, j) = v;
      else
        m.w(j, t) = v;
    }
  return m;
}

void f16_check(const RowMatrix<float>& x, const RowMatrix<double>& w, const RowMatrix<float>& out) {
  const Eigen::MatrixXd xd = x.cast<double>();
  const Eigen::MatrixXd ref = xd * w;
  const Eigen::MatrixXd mag = xd.cwiseAbs() * w.cwiseAbs();
  const double k = static_cast<double>(x.cols());
  for (Index r = 0; r < out.rows(); ++r)
    for (Index j = 0; j < out.cols(); ++j)
      ASSERT_LE(std::fabs(out(r, j) - ref(r, j)), k * std::ldexp(mag(r, j), -23))
          << "row " << r << " col " << j;
}

TEST(MappedF16, ProductsMatchTheWidenedValues) {
  F16ThreadsGuard guard;
  std::mt19937_64 g(1);
  std::normal_distribution<float> nx(0.0f, 1.0f);
  for (const Index k : {64, 77}) {
    const Index m = 150;
    // kRows: W (k x m) for X W; kCols: E (m x k) for X E^T.
    const F16Matrix wr = f16_matrix(k, m, BlocksAlong::kRows, g);
    const F16Matrix wc = f16_matrix(m, k, BlocksAlong::kCols, g);
    const kappa::WeightMatrix<float, kappa::AsStoredWeights> proj(
        kappa::detail::MappedF16<float>(k, m, BlocksAlong::kRows, wr.bytes->data(), wr.bytes));
    const kappa::WeightMatrix<float, kappa::AsStoredWeights> head(
        kappa::detail::MappedF16<float>(m, k, BlocksAlong::kCols, wc.bytes->data(), wc.bytes));
    EXPECT_EQ(proj.format(), "f16 view");
    EXPECT_EQ(proj.bytes(), 2u * static_cast<std::size_t>(k * m));
    EXPECT_TRUE(proj.dense().cast<double>() == wr.w);
    for (const Index n : {1, 3, 9, 40}) {
      SCOPED_TRACE("k " + std::to_string(k) + ", " + std::to_string(n) + " rows");
      RowMatrix<float> x(n, k), xm(n, m);
      for (Index i = 0; i < x.size(); ++i) x.data()[i] = nx(g);
      for (Index i = 0; i < xm.size(); ++i) xm.data()[i] = nx(g);
      kappa::set_num_threads(1);
      RowMatrix<float> a(n, m), b(n, m), c(n, k), d(n, k);
      proj.multiply(x, a);              // fast: X P^T
      head.multiply_transposed(x, b);   // fast: X P^T
      proj.multiply_transposed(xm, c);  // slow: X P
      head.multiply(xm, d);             // slow: X P
      f16_check(x, wr.w, a);
      f16_check(x, RowMatrix<double>(wc.w.transpose()), b);
      f16_check(xm, RowMatrix<double>(wr.w.transpose()), c);
      f16_check(xm, wc.w, d);
#ifdef _OPENMP
      for (const int threads : {2, 3}) {
        kappa::set_num_threads(threads);
        RowMatrix<float> a2(n, m), b2(n, m);
        proj.multiply(x, a2);
        head.multiply_transposed(x, b2);
        EXPECT_TRUE(a2 == a) << threads << " threads";
        EXPECT_TRUE(b2 == b) << threads << " threads";
      }
#endif
    }
    // Rows of a kCols view (an embedding lookup) are the fp16 values.
    ASSERT_TRUE(head.rows_readable());
    EXPECT_FALSE(proj.rows_readable());
    const std::vector<kappa::TokenId> ids = {5, 0, 149, 5};
    RowMatrix<float> rows(4, k);
    head.rows_into(ids, rows);
    for (Index j = 0; j < 4; ++j)
      EXPECT_TRUE(rows.row(j).cast<double>() == wc.w.row(ids[static_cast<std::size_t>(j)]));
  }
}

TEST(MappedF16, ShapeMismatchNamesBothShapes) {
  std::mt19937_64 g(2);
  const F16Matrix wr = f16_matrix(64, 10, BlocksAlong::kRows, g);
  const kappa::WeightMatrix<float, kappa::AsStoredWeights> proj(
      kappa::detail::MappedF16<float>(64, 10, BlocksAlong::kRows, wr.bytes->data(), wr.bytes));
  RowMatrix<float> x(2, 63), out(2, 10);
  try {
    proj.multiply(x, out);
    FAIL() << "no ShapeError";
  } catch (const kappa::ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 x 63"), std::string::npos) << what;
    EXPECT_NE(what.find("64 x 10"), std::string::npos) << what;
  }
}

}  // namespace
