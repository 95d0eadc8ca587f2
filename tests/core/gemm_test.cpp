// Tests for the prompt GEMM (kappa/core/gemm_simd.hpp) through the products
// that use it: product_into (X W, gemm_nn), product_transposed_into (X E^T,
// gemm_nt) and bfloat16 weights in both layouts (WeightMatrix<float,
// Bf16Weights>: W rounded as W or as W^T, and a view of W^T as a file stores
// it; where the build has AVX512_BF16, X P^T with P = W^T rounds X to
// bfloat16 and is checked against the rounded X).
//
// Reference: the sum over k in double, by plain loops, of the float inputs
// (the bfloat16 values widened exactly). Tolerance per output: the float
// summation bound (k + 2) 2^-24 sum_t |x_t| |w_t| (Higham's gamma_k), so
// the check cannot pass a wrong term. Shapes: row counts above the decode
// cut (kFewRows = 8) that are and are not multiples of the tile's 14 (or 6)
// rows and 32 (or 16) columns, reduction lengths around the 256-step block,
// k = 0. Also: 1, 2 and 3 threads give the same bits (within rounding in
// the default build, whose Eigen GEMM blocks k by thread count); strided views (a
// block of a larger X, an output block) read and write only their elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kappa/core/parallel_product.hpp"
#include "kappa/core/simd.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;

struct ThreadsGuard {
  ~ThreadsGuard() { kappa::set_num_threads(1); }
};

RowMatrix<float> random(Index r, Index c, std::mt19937_64& g) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

/// out (n x m) against X W for W (k x m) given as w(t, j), within the float
/// summation bound. The plain loops run over copies in double, X by rows and
/// W by columns: through Eigen's and the callable's accessors they took 23 s
/// of the sanitized -O0 run, most of its gemm tests' time.
template <class W>
void expect_product(const RowMatrix<float>& x, const W& w, Index m, const RowMatrix<float>& out,
                    const char* what) {
  const Index n = x.rows(), k = x.cols();
  ASSERT_EQ(out.rows(), n);
  ASSERT_EQ(out.cols(), m);
  std::vector<double> xd(static_cast<std::size_t>(n * k)), wd(static_cast<std::size_t>(k * m));
  for (Index i = 0; i < n; ++i)
    for (Index t = 0; t < k; ++t) xd[static_cast<std::size_t>(i * k + t)] = x(i, t);
  for (Index j = 0; j < m; ++j)
    for (Index t = 0; t < k; ++t) wd[static_cast<std::size_t>(j * k + t)] = w(t, j);
  const double gamma = static_cast<double>(k + 2) * std::ldexp(1.0, -24);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < m; ++j) {
      const double* xi = xd.data() + i * k;
      const double* wj = wd.data() + j * k;
      double s = 0, a = 0;
      for (Index t = 0; t < k; ++t) {
        const double p = xi[t] * wj[t];
        s += p;
        a += std::abs(p);
      }
      ASSERT_LE(std::abs(static_cast<double>(out(i, j)) - s), gamma * a)
          << what << ": n " << n << " k " << k << " m " << m << " at (" << i << ", " << j
          << "): " << out(i, j) << " vs " << s;
    }
}

const Index kRowsCases[] = {9, 14, 15, 31, 33, 100};
const Index kDepthCases[] = {1, 17, 256, 257, 600};
const Index kColsCases[] = {1, 31, 32, 33, 130};

TEST(PromptGemm, DenseBothLayoutsMatchPlainLoops) {
  std::mt19937_64 g(7);
  for (const Index n : kRowsCases)
    for (const Index k : kDepthCases)
      for (const Index m : kColsCases) {
        const RowMatrix<float> x = random(n, k, g), w = random(k, m, g), e = random(m, k, g);
        RowMatrix<float> out = RowMatrix<float>::Constant(n, m, 1e30f);
        kappa::product_into<float>(x, w, out);
        expect_product(
            x, [&](Index t, Index j) { return static_cast<double>(w(t, j)); }, m, out, "X W");
        out.setConstant(1e30f);
        kappa::product_transposed_into<float>(x, e, out);
        expect_product(
            x, [&](Index t, Index j) { return static_cast<double>(e(j, t)); }, m, out, "X E^T");
      }
}

// More tokens than one block of X^T (kNb = 256 in gemm_nt): three blocks,
// the last partial, in float and through the bfloat16 view.
TEST(PromptGemm, LongPromptsInBlocks) {
  std::mt19937_64 g(11);
  const Index n = 600, k = 70, m = 45;
  const RowMatrix<float> x = random(n, k, g), w = random(k, m, g), e = random(m, k, g);
  RowMatrix<float> out = RowMatrix<float>::Constant(n, m, 1e30f);
  kappa::product_transposed_into<float>(x, e, out);
  expect_product(
      x, [&](Index t, Index j) { return static_cast<double>(e(j, t)); }, m, out, "long X E^T");
  out.setConstant(1e30f);
  kappa::product_into<float>(x, w, out);
  expect_product(
      x, [&](Index t, Index j) { return static_cast<double>(w(t, j)); }, m, out, "long X W");
  std::vector<std::uint16_t> pt(static_cast<std::size_t>(k * m));
  RowMatrix<float> wv(k, m);
  for (Index t = 0; t < k; ++t)
    for (Index j = 0; j < m; ++j) {
      pt[static_cast<std::size_t>(j * k + t)] = kappa::float_to_bf16(w(t, j));
      wv(t, j) = kappa::bf16_to_float_exact(pt[static_cast<std::size_t>(j * k + t)]);
    }
  const kappa::WeightMatrix<float, kappa::Bf16Weights> viewed(k, m, true, pt.data(), nullptr);
#if KAPPA_GEMM_BF16_PAIRS
  RowMatrix<float> xr(n, k);
  for (Index i = 0; i < x.size(); ++i)
    xr.data()[i] = kappa::bf16_to_float_exact(kappa::float_to_bf16(x.data()[i]));
#else
  const RowMatrix<float>& xr = x;
#endif
  out.setConstant(1e30f);
  viewed.multiply(x, out);
  expect_product(
      xr, [&](Index t, Index j) { return static_cast<double>(wv(t, j)); }, m, out,
      "long bf16 X W (P = W^T)");
}

TEST(PromptGemm, EmptyReductionGivesZeros) {
  const RowMatrix<float> x(20, 0), w(0, 40), e(40, 0);
  RowMatrix<float> out = RowMatrix<float>::Constant(20, 40, 3.0f);
  kappa::product_into<float>(x, w, out);
  EXPECT_EQ(out.cwiseAbs().maxCoeff(), 0.0f);
  out.setConstant(3.0f);
  kappa::product_transposed_into<float>(x, e, out);
  EXPECT_EQ(out.cwiseAbs().maxCoeff(), 0.0f);
}

TEST(PromptGemm, Bf16BothLayoutsMatchPlainLoops) {
  std::mt19937_64 g(8);
  for (const Index n : {9, 15, 40})
    for (const Index k : {17, 256, 300})
      for (const Index m : {5, 32, 70}) {
        const RowMatrix<float> x = random(n, k, g);
        // W rounded to bfloat16 as P = W (along W's columns), and the same
        // values as W^T viewed (P = W^T, the layout of a file's projection)
        // and rounded along W's rows (P = W^T too, the default).
        const RowMatrix<float> w = random(k, m, g);
        const kappa::WeightMatrix<float, kappa::Bf16Weights> rounded(w, kappa::BlocksAlong::kCols);
        const kappa::WeightMatrix<float, kappa::Bf16Weights> rounded_t(w);
        EXPECT_FALSE(rounded.stored_transposed());
        EXPECT_TRUE(rounded_t.stored_transposed());
        const RowMatrix<float> wv = rounded.dense();  // exact widening
        EXPECT_EQ(rounded_t.dense(), wv);
        std::vector<float> row(static_cast<std::size_t>(m));  // a row of W, as held
        rounded.row_into(k - 1, row.data());
        for (Index j = 0; j < m; ++j) EXPECT_EQ(row[static_cast<std::size_t>(j)], wv(k - 1, j));
        row.assign(row.size(), 0.0f);
        rounded_t.row_into(k - 1, row.data());  // held as W^T: a column of P
        for (Index j = 0; j < m; ++j) EXPECT_EQ(row[static_cast<std::size_t>(j)], wv(k - 1, j));
        std::vector<std::uint16_t> pt(static_cast<std::size_t>(k * m));
        for (Index t = 0; t < k; ++t)
          for (Index j = 0; j < m; ++j)
            pt[static_cast<std::size_t>(j * k + t)] = kappa::float_to_bf16(wv(t, j));
        const kappa::WeightMatrix<float, kappa::Bf16Weights> viewed(k, m, true, pt.data(), nullptr);
        const auto wref = [&](Index t, Index j) { return static_cast<double>(wv(t, j)); };
        RowMatrix<float> out(n, m);
        rounded.multiply(x, out);
        expect_product(x, wref, m, out, "bf16 X W (P = W)");
        // X P^T: with AVX512_BF16, X rounded to bfloat16 (nearest even) is
        // what is multiplied.
#if KAPPA_GEMM_BF16_PAIRS
        RowMatrix<float> xr(n, k);
        for (Index i = 0; i < x.size(); ++i)
          xr.data()[i] = kappa::bf16_to_float_exact(kappa::float_to_bf16(x.data()[i]));
#else
        const RowMatrix<float>& xr = x;
#endif
        viewed.multiply(x, out);
        expect_product(xr, wref, m, out, "bf16 X W (P = W^T)");
        out.setConstant(1e30f);
        rounded_t.multiply(x, out);
        expect_product(xr, wref, m, out, "bf16 X W (rounded, P = W^T)");
        // The head's product X E^T with E = W^T held as P = E (m x k).
        const kappa::WeightMatrix<float, kappa::Bf16Weights> head(m, k, false, pt.data(), nullptr);
        head.multiply_transposed(x, out);
        expect_product(xr, wref, m, out, "bf16 X E^T");
      }
}

TEST(PromptGemm, ThreadCountDoesNotChangeBits) {
  const ThreadsGuard guard;
  std::mt19937_64 g(9);
  const Index n = 45, k = 700, m = 301;
  const RowMatrix<float> x = random(n, k, g), w = random(k, m, g), e = random(m, k, g);
  const kappa::WeightMatrix<float, kappa::Bf16Weights> b(w);
  RowMatrix<float> nn1(n, m), nt1(n, m), bf1(n, m);
  kappa::set_num_threads(1);
  kappa::product_into<float>(x, w, nn1);
  kappa::product_transposed_into<float>(x, e, nt1);
  b.multiply(x, bf1);
  for (const int threads : {2, 3}) {
    if (kappa::set_num_threads(threads) != threads) GTEST_SKIP() << "built without OpenMP";
    RowMatrix<float> nn(n, m), nt(n, m), bf(n, m);
    kappa::product_into<float>(x, w, nn);
    kappa::product_transposed_into<float>(x, e, nt);
    b.multiply(x, bf);
#if KAPPA_SIMD_LANES > 0
    EXPECT_TRUE(nn == nn1) << threads << " threads, X W";
    EXPECT_TRUE(nt == nt1) << threads << " threads, X E^T";
    EXPECT_TRUE(bf == bf1) << threads << " threads, bf16 X W";
#else
    // Eigen's GEMM (this build's) chooses its blocks of k by the thread
    // count: the same sums within rounding, not the same bits.
    const float tol = 1e-5f * static_cast<float>(k);
    EXPECT_LE((nn - nn1).cwiseAbs().maxCoeff(), tol) << threads << " threads, X W";
    EXPECT_LE((nt - nt1).cwiseAbs().maxCoeff(), tol) << threads << " threads, X E^T";
    EXPECT_LE((bf - bf1).cwiseAbs().maxCoeff(), tol) << threads << " threads, bf16 X W";
#endif
  }
}

TEST(PromptGemm, StridedViewsTouchOnlyTheirElements) {
  std::mt19937_64 g(10);
  const Index n = 20, k = 70, m = 50;
  const RowMatrix<float> big_x = random(n + 3, k + 5, g), w = random(k, m, g), e = random(m, k, g);
  const RowMatrix<float> x = big_x.block(2, 3, n, k);
  for (const bool transposed : {false, true}) {
    RowMatrix<float> big_out = RowMatrix<float>::Constant(n + 4, m + 7, 5.0f);
    auto out = big_out.block(1, 2, n, m);
    if (transposed)
      kappa::product_transposed_into<float>(big_x.block(2, 3, n, k), e, out);
    else
      kappa::product_into<float>(big_x.block(2, 3, n, k), w, out);
    const RowMatrix<float> got = out;
    if (transposed)
      expect_product(
          x, [&](Index t, Index j) { return static_cast<double>(e(j, t)); }, m, got,
          "strided X E^T");
    else
      expect_product(
          x, [&](Index t, Index j) { return static_cast<double>(w(t, j)); }, m, got, "strided X W");
    for (Index i = 0; i < big_out.rows(); ++i)
      for (Index j = 0; j < big_out.cols(); ++j)
        if (i < 1 || i >= n + 1 || j < 2 || j >= m + 2) {
          ASSERT_EQ(big_out(i, j), 5.0f)
              << "outside the output block at (" << i << ", " << j << ")";
        }
  }
}

}  // namespace
