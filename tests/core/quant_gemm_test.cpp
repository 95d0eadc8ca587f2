// Tests for kappa/core/quant_gemm.hpp: the 8-bit integer prefill products.
//
// References, written here from the block formats' definitions:
//   - codes: s q + c (in float) against the dequantized weight:
//     equal for Q8_0, Q4_0 and Q4_K (the same float operations), within
//     2^-23 (|s q| + |c|) for Q6_K (s q - 32 s against s (q - 32));
//   - the panel product against sum_t deq(W)_t deq(Q8_0(X))_t in double
//     (X's rows quantized with quant::quantize_row_q8_0 and dequantized, W's
//     rows dequantized with quant::dequantize_row_*), within the file
//     comment's bound (3 groups + 2) 2^-24 M plus the Q6_K codes' rounding,
//     M = sum_g |s_g dx I_g| + |c_g dx S_g| computed in double;
//   - the VNNI or AVX2 kernel (where the build has one) equals the portable
//     loop bit for bit, for 1..9 rows of X and 1..32 rows of P;
//   - 8-bit codes at the ends of their range (Q8_0's -128 and 127) times X's
//     +-127: the integer sums against a plain loop in int64, so that a
//     saturated int16 pair in the AVX2 kernel's sign trick would show;
//   - through WeightMatrix (prefill, more than 8 rows): the same bits as the
//     panel loop, for thread counts 1..3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kappa/core/quant_gemm.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/threading.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::WeightMatrix;
namespace q = kappa::quant;

struct GemmThreadsGuard {
  ~GemmThreadsGuard() { kappa::set_num_threads(1); }
};

RowMatrix<float> gemm_random(Index r, Index c, std::mt19937_64& g, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

double gemm_fp16(const unsigned char* block) {
  std::uint16_t h = 0;
  std::memcpy(&h, block, 2);
  return q::fp16_to_float(h);
}

template <class F>
class QuantGemm : public ::testing::Test {};
using GemmFormats = ::testing::Types<kappa::Q8_0Weights, kappa::Q4_0Weights, kappa::Q4_KWeights,
                                     kappa::Q6_KWeights>;
TYPED_TEST_SUITE(QuantGemm, GemmFormats);

template <class F>
using Ops = kappa::detail::BlockFormatOps<F>;

/// The rows of P (the packed blocks) of a quantized k x m matrix (kRows).
template <class F>
std::vector<unsigned char> gemm_packed(const WeightMatrix<float, F>& w) {
  const auto b = w.blocks();
  return {b.begin(), b.end()};
}

/// Packs rows first .. first + count - 1 of P (k weights in format F, in
/// rows of `row_bytes`) into `panel`, which resize() made for k and F.
template <class F>
void pack_rows(q::CodePanel& panel, const std::vector<unsigned char>& packed, std::size_t row_bytes,
               Index first, Index count, Index k) {
  std::vector<const unsigned char*> rows(static_cast<std::size_t>(q::kPanelRows), nullptr);
  for (Index r = 0; r < count; ++r)
    rows[static_cast<std::size_t>(r)] =
        packed.data() + static_cast<std::size_t>(first + r) * row_bytes;
  panel.pack(rows.data(), row_bytes * 256 / static_cast<std::size_t>(k), &Ops<F>::codes);
}

/// X's rows in Q8_0 with groups of G, as the products take them.
q::Q8Panel quantize_rows(const RowMatrix<float>& x, Index G) {
  q::Q8Panel xq;
  xq.resize(x.rows(), x.cols(), G);
  std::vector<unsigned char> blocks;
  for (Index r = 0; r < x.rows(); ++r) xq.set_row(r, x.row(r).data(), blocks);
  return xq;
}

// X's Q8_0 rounding without libm: std::round's value on ties, near ties,
// integers, large values and random floats of the range |v| < 2^31.
TEST(QuantRounding, RoundHalfAwayIsStdRound) {
  std::vector<float> v = {0.5f,         -0.5f,       1.5f,       -1.5f,       2.5f,
                          -2.5f,        126.5f,      -126.5f,    127.49999f,  0.49999997f,
                          -0.49999997f, 0.50000006f, 8388607.5f, -8388607.5f, 8388608.0f,
                          16777217.0f,  2.1e9f,      -2.1e9f,    0.0f,        -0.0f,
                          1e-45f,       -1e-45f};
  std::mt19937_64 g(4);
  std::uniform_real_distribution<float> u(-130.0f, 130.0f);
  for (int i = 0; i < 100000; ++i) v.push_back(u(g));
  for (const float x : v)
    ASSERT_EQ(static_cast<double>(q::detail::round_half_away_int(x)),
              static_cast<double>(std::round(x)))
        << x;
}

TYPED_TEST(QuantGemm, CodesAreTheDequantizedWeights) {
  using F = TypeParam;
  std::mt19937_64 g(1);
  const Index k = 512, m = 7;
  const WeightMatrix<float, F> w(gemm_random(k, m, g, 0.05f));
  const auto packed = gemm_packed(w);
  const std::size_t row_bytes = packed.size() / static_cast<std::size_t>(m);
  const Index G = Ops<F>::kGroup;
  std::vector<std::uint8_t> qc(static_cast<std::size_t>(k));
  std::vector<float> s(static_cast<std::size_t>(k / G)), c(s.size()), deq(qc.size());
  for (Index j = 0; j < m; ++j) {
    const unsigned char* row = packed.data() + static_cast<std::size_t>(j) * row_bytes;
    Ops<F>::codes(row, k, qc.data(), s.data(), c.data());
    Ops<F>::dequantize(row, deq.data(), k);
    for (Index t = 0; t < k; ++t) {
      const auto gi = static_cast<std::size_t>(t / G);
      const float sq = s[gi] * static_cast<float>(qc[static_cast<std::size_t>(t)]);
      const float v = sq + c[gi];
      if constexpr (std::is_same_v<F, kappa::Q6_KWeights>)
        ASSERT_LE(std::fabs(v - deq[static_cast<std::size_t>(t)]),
                  std::ldexp(std::fabs(sq) + std::fabs(c[gi]), -23))
            << j << ", " << t;
      else
        ASSERT_EQ(v, deq[static_cast<std::size_t>(t)]) << j << ", " << t;
    }
  }
}

TYPED_TEST(QuantGemm, PanelProductMatchesReferenceAndPortable) {
  using F = TypeParam;
  std::mt19937_64 g(2);
  const Index k = F::kBlockWeights == 256 ? 512 : 352, G = Ops<F>::kGroup, ng = k / G;
  for (Index cols : {1, 5, 16, 17, 32}) {
    const WeightMatrix<float, F> w(gemm_random(k, cols, g, 0.05f));
    const auto packed = gemm_packed(w);
    const std::size_t row_bytes = packed.size() / static_cast<std::size_t>(cols);
    q::CodePanel panel;
    panel.resize(k, G, Ops<F>::kCodeBits);
    pack_rows<F>(panel, packed, row_bytes, 0, cols, k);
    for (Index n = 1; n <= 9; ++n) {
      const RowMatrix<float> x = gemm_random(n, k, g, 1.0f);
      const q::Q8Panel xq = quantize_rows(x, G);
      const Index ld = 35;  // wider than the panel: the store must stay in its columns
      std::vector<float> fast(static_cast<std::size_t>(n * ld), -7.0f), slow(fast);
      q::panel_product(panel, xq, 0, n, fast.data(), ld, cols);
      q::panel_product_portable(panel, xq, 0, n, slow.data(), ld, cols);
      for (std::size_t i = 0; i < fast.size(); ++i)
        ASSERT_EQ(fast[i], slow[i]) << "cols " << cols << ", rows " << n << ", element " << i;
      // Against deq(W) deq(Q8_0(X)) in double.
      std::vector<float> wd(static_cast<std::size_t>(k)), xd(wd.size());
      std::vector<unsigned char> xb(static_cast<std::size_t>(k / 32) * q::kBytesQ8_0);
      std::vector<std::uint8_t> qc(wd.size());
      std::vector<float> s(static_cast<std::size_t>(ng)), c(s.size());
      for (Index r = 0; r < n; ++r) {
        q::quantize_row_q8_0(x.row(r).data(), xb.data(), k);
        q::dequantize_row_q8_0(xb.data(), xd.data(), k);
        for (Index j = 0; j < cols; ++j) {
          const unsigned char* row = packed.data() + static_cast<std::size_t>(j) * row_bytes;
          Ops<F>::dequantize(row, wd.data(), k);
          Ops<F>::codes(row, k, qc.data(), s.data(), c.data());
          double ref = 0, mag = 0, codes_slack = 0;
          for (Index gi = 0; gi < ng; ++gi) {
            const double dx =
                gemm_fp16(xb.data() + static_cast<std::size_t>(gi * G / 32) * q::kBytesQ8_0);
            double isum = 0, ssum = 0;
            for (Index t = gi * G; t < (gi + 1) * G; ++t) {
              const auto ts = static_cast<std::size_t>(t);
              ref += static_cast<double>(wd[ts]) * static_cast<double>(xd[ts]);
              const double xq_t = dx == 0.0 ? 0.0 : static_cast<double>(xd[ts]) / dx;
              isum += static_cast<double>(qc[ts]) * xq_t;
              ssum += xq_t;
              codes_slack +=
                  std::ldexp(
                      std::fabs(static_cast<double>(s[static_cast<std::size_t>(gi)]) * qc[ts]) +
                          std::fabs(c[static_cast<std::size_t>(gi)]),
                      -23) *
                  std::fabs(static_cast<double>(xd[ts]));
            }
            mag += std::fabs(s[static_cast<std::size_t>(gi)] * dx * isum) +
                   std::fabs(c[static_cast<std::size_t>(gi)] * dx * ssum);
          }
          const double got = fast[static_cast<std::size_t>(r * ld + j)];
          ASSERT_LE(std::fabs(got - ref),
                    static_cast<double>(3 * ng + 2) * std::ldexp(mag, -24) + codes_slack)
              << "cols " << cols << ", row " << r << ", col " << j;
        }
        for (Index j = cols; j < ld; ++j)
          ASSERT_EQ(fast[static_cast<std::size_t>(r * ld + j)], -7.0f) << "stored past the panel";
      }
    }
  }
}

// Q8_0 weights of -128 and 127 (a file may hold -128; ggml's quantizer does
// not write it) times X's codes of +-127, signs chosen so that many pairs of
// products have the same sign: the largest int16 pairs the AVX2 kernel forms
// (128 * 127 * 2 = 32512). Against the portable loop's bits, and against
// sum_g dw dx I_g with I_g summed in int64 here.
TEST(QuantGemmExtremes, Q8_0CodesAtTheEndsOfTheRange) {
  const Index k = 128, cols = 32, n = 5, nb = k / 32;
  std::mt19937_64 g(9);
  std::vector<unsigned char> packed(static_cast<std::size_t>(cols * nb) * q::kBytesQ8_0);
  std::vector<std::int8_t> wv(static_cast<std::size_t>(cols * k));
  for (Index r = 0; r < cols; ++r)
    for (Index b = 0; b < nb; ++b) {
      unsigned char* blk = packed.data() + static_cast<std::size_t>(r * nb + b) * q::kBytesQ8_0;
      q::detail::store_u16(blk, 0x3C00);  // d = 1
      for (int j = 0; j < 32; ++j) {
        // Rows 0..15: one end per block; rows 16..31: each weight at random.
        const bool low = r < 16 ? ((r + b) % 2 == 0) : (g() & 1) != 0;
        const std::int8_t v = low ? std::int8_t{-128} : std::int8_t{127};
        wv[static_cast<std::size_t>(r * k + b * 32 + j)] = v;
        std::memcpy(blk + 2 + j, &v, 1);
      }
    }
  // X: +-1 (codes +-127), one sign per row and block.
  RowMatrix<float> x(n, k);
  for (Index i = 0; i < n; ++i)
    for (Index t = 0; t < k; ++t) x(i, t) = ((i + t / 32) % 2 == 0) ? -1.0f : 1.0f;
  const q::Q8Panel xq = quantize_rows(x, 32);
  q::CodePanel panel;
  panel.resize(k, 32, 8);
  pack_rows<kappa::Q8_0Weights>(panel, packed, static_cast<std::size_t>(nb) * q::kBytesQ8_0, 0,
                                cols, k);
  std::vector<float> fast(static_cast<std::size_t>(n * cols)), slow(fast.size());
  q::panel_product(panel, xq, 0, n, fast.data(), cols, cols);
  q::panel_product_portable(panel, xq, 0, n, slow.data(), cols, cols);
  for (Index i = 0; i < n; ++i)
    for (Index r = 0; r < cols; ++r) {
      double exact = 0, mag = 0;
      for (Index b = 0; b < nb; ++b) {
        std::int64_t isum = 0;
        for (Index t = 32 * b; t < 32 * (b + 1); ++t) {
          ASSERT_EQ(std::abs(xq.q[static_cast<std::size_t>(i * k + t)]), 127);
          isum += std::int64_t{wv[static_cast<std::size_t>(r * k + t)]} *
                  xq.q[static_cast<std::size_t>(i * k + t)];
        }
        const double dx = xq.d[static_cast<std::size_t>(i * nb + b)];
        exact += dx * static_cast<double>(isum);
        mag += dx * (32.0 * 255 * 127 + 128.0 * 32 * 127);  // |s dx I_g| + |c dx S_g| at most
      }
      const auto at = static_cast<std::size_t>(i * cols + r);
      ASSERT_EQ(fast[at], slow[at]) << "row " << i << ", col " << r;
      // The file comment's bound: (3 groups + 2) 2^-24 of the magnitudes.
      EXPECT_LE(std::fabs(fast[at] - exact), (3.0 * nb + 2) * std::ldexp(mag, -24))
          << "row " << i << ", col " << r;
    }
}

#if KAPPA_QUANT_GEMM_INT8
// With VNNI or AVX2, WeightMatrix's prefill (more than 8 rows) is the panel loop:
// the same bits as panel_product_portable over panels of 32, every thread
// count.
TYPED_TEST(QuantGemm, PrefillIsThePanelProduct) {
  using F = TypeParam;
  GemmThreadsGuard guard;
  std::mt19937_64 g(3);
  const Index k = F::kBlockWeights == 256 ? 256 : 288, m = 75, n = 13, G = Ops<F>::kGroup;
  const WeightMatrix<float, F> w(gemm_random(k, m, g, 0.05f));
  const auto packed = gemm_packed(w);
  const std::size_t row_bytes = packed.size() / static_cast<std::size_t>(m);
  const RowMatrix<float> x = gemm_random(n, k, g, 1.0f);
  const q::Q8Panel xq = quantize_rows(x, G);
  RowMatrix<float> ref(n, m);
  q::CodePanel panel;
  panel.resize(k, G, Ops<F>::kCodeBits);
  for (Index r0 = 0; r0 < m; r0 += q::kPanelRows) {
    const Index cols = std::min(q::kPanelRows, m - r0);
    pack_rows<F>(panel, packed, row_bytes, r0, cols, k);
    q::panel_product_portable(panel, xq, 0, n, ref.data() + r0, m, cols);
  }
  for (int threads : {1, 2, 3}) {
    kappa::set_num_threads(threads);
    RowMatrix<float> out(n, m);
    w.multiply(x, out);
    EXPECT_TRUE(out == ref) << threads << " threads";
  }
}
#endif

}  // namespace
