// Tests for kappa/core/quant_weights.hpp: Q8_0 and Q4_0 weight matrices.
//
// The reference is written here with plain loops: X's rows are quantized to
// Q8_0 the documented way (quant::quantize_row_q8_0), the integer products of
// each block are summed in int32 and multiplied by the two fp16 scales in
// double, block after block. Tolerances:
//   - block dot products: the AVX2 / VNNI path equals the portable path bit
//     for bit (EXPECT_EQ on floats); both equal the reference up to the
//     float summation of the block terms (exact integer sums times exact
//     d_w d_x, added in float lanes): |dot - ref| <= (nb + 8) 2^-24 sum |terms|
//     for nb blocks, sum |terms| over groups of 4 products;
//   - decode products (float): the same bound for each output;
//   - against the float product X W (computed in double) each output obeys
//     the format's bound, summed over its blocks:
//       |out - X W| <= sum_j (|x_j| e_w + |w_j| e_x + e_w e_x) + float slack,
//     e_w = 0.57 amax_w / 127 (Q8_0: half a step plus the fp16 rounding of
//     d, 127 2^-11 d) or 1.01 amax_w / 8 (Q4_0: the largest negative value's
//     clamp at q = 15 costs one step d = amax / 8), e_x = 0.57 amax_x / 127
//     (X's Q8_0), amax per block;
//   - prefill (more than 8 rows: float X times dequantized W with Eigen's
//     GEMM, or with AVX-512 VNNI X in Q8_0 times W in 8-bit integers, see
//     tests/support/prefill_reference.hpp) and the slow cross-layout
//     product: |out - X deq(W)| <= k 2^-23 sum |x| |w| against a double
//     reference (with VNNI: X's Q8_0 values, plus the codes' offsets);
//   - thread counts 1, 2, 3 give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/threading.hpp"
#include "support/expect_error.hpp"
#include "support/prefill_reference.hpp"

namespace {

using kappa::BlocksAlong;
using kappa::Index;
using kappa::Q4_0Weights;
using kappa::Q8_0Weights;
using kappa::RowMatrix;
using kappa::WeightMatrix;
using kappa::testing::expect_error;
namespace q = kappa::quant;

struct QwThreadsGuard {
  ~QwThreadsGuard() { kappa::set_num_threads(1); }
};

RowMatrix<float> qw_random(Index r, Index c, std::mt19937_64& g, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

float qw_fp16(const unsigned char* block) {
  std::uint16_t h = 0;
  std::memcpy(&h, block, 2);
  return q::fp16_to_float(h);
}

/// Weight q value (the integer multiplying d) of element j of a block.
template <class Format>
int qw_weight_int(const unsigned char* block, int j) {
  if constexpr (std::is_same_v<Format, Q8_0Weights>) {
    return static_cast<int>(static_cast<std::int8_t>(block[2 + j]));
  } else {
    const unsigned char byte = block[2 + (j % 16)];
    return (j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
  }
}

template <class Format>
constexpr std::size_t qw_bytes() {
  return std::is_same_v<Format, Q8_0Weights> ? q::kBytesQ8_0 : q::kBytesQ4_0;
}

/// Reference block dot product in block order: sum of d_w d_x s_b in double
/// (s_b the block's int32 sum). `abs_sum` gets the sum of |d_w d_x s| over
/// groups of 4 products, the float lanes' terms.
template <class Format>
double qw_ref_dot(const unsigned char* w, const unsigned char* x, Index nb, double& abs_sum) {
  double sum = 0;
  abs_sum = 0;
  for (Index b = 0; b < nb; ++b) {
    const unsigned char* wb = w + static_cast<std::size_t>(b) * qw_bytes<Format>();
    const unsigned char* xb = x + static_cast<std::size_t>(b) * q::kBytesQ8_0;
    const double d = static_cast<double>(qw_fp16(wb)) * static_cast<double>(qw_fp16(xb));
    std::int32_t s = 0;
    for (int g = 0; g < 8; ++g) {
      std::int32_t group = 0;
      for (int j = 4 * g; j < 4 * g + 4; ++j)
        group += qw_weight_int<Format>(wb, j) * static_cast<std::int8_t>(xb[2 + j]);
      s += group;
      abs_sum += std::fabs(d * static_cast<double>(group));
    }
    sum += d * static_cast<double>(s);
  }
  return sum;
}

std::vector<unsigned char> qw_quantize_x(const RowMatrix<float>& x, Index r) {
  const Index k = x.cols();
  std::vector<unsigned char> out(static_cast<std::size_t>(k / 32) * q::kBytesQ8_0);
  std::vector<float> row(x.row(r).data(), x.row(r).data() + k);
  q::quantize_row_q8_0(row.data(), out.data(), k);
  return out;
}

template <class Format>
float qw_dot_portable(const unsigned char* w, const kappa::detail::Q8Row& row) {
  if constexpr (std::is_same_v<Format, Q8_0Weights>)
    return kappa::detail::dot_q8_0_portable(w, row);
  else
    return kappa::detail::dot_q4_0_portable(w, row);
}
template <class Format>
float qw_dot_fast(const unsigned char* w, const kappa::detail::Q8Row& row) {
  if constexpr (std::is_same_v<Format, Q8_0Weights>)
    return kappa::detail::dot_q8_0(w, row);
  else
    return kappa::detail::dot_q4_0(w, row);
}

template <class Format>
class QuantWeights : public ::testing::Test {};
using QuantFormats = ::testing::Types<Q8_0Weights, Q4_0Weights>;
TYPED_TEST_SUITE(QuantWeights, QuantFormats);

// Random bytes (every int8 and nibble, -128 included, random finite fp16
// scales): the build's block dot product equals the portable one bit for bit,
// and both the block-order reference up to the order of the additions.
TYPED_TEST(QuantWeights, BlockDotIsExactAndEqualsPortable) {
  using F = TypeParam;
  std::mt19937_64 g(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> xbyte(-127, 127);
  std::uniform_int_distribution<int> exponent(5, 20);  // fp16 scales 2^-10 .. 2^5
  std::cout << "block dot products: " << kappa::detail::kQuantDotIsa
#if KAPPA_QUANT_WIDE_LOOPS
            << (kappa::detail::q4_0_wide() ? " (Q8_0, Q4_0: 512-bit)" : " (Q8_0, Q4_0: 256-bit)")
#endif
            << "\n";
  for (Index nb : {1, 2, 3, 7, 8, 9, 64, 129}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<unsigned char> w(static_cast<std::size_t>(nb) * qw_bytes<F>());
      std::vector<unsigned char> x(static_cast<std::size_t>(nb) * q::kBytesQ8_0);
      for (auto& c : w) c = static_cast<unsigned char>(byte(g));
      for (Index b = 0; b < nb; ++b) {
        unsigned char* xb = x.data() + static_cast<std::size_t>(b) * q::kBytesQ8_0;
        for (int j = 0; j < 32; ++j)
          xb[2 + j] = static_cast<unsigned char>(static_cast<std::int8_t>(xbyte(g)));
        const auto hw = static_cast<std::uint16_t>((byte(g) & 0x83FF) | (exponent(g) << 10));
        const auto hx = static_cast<std::uint16_t>((byte(g) & 0x83FF) | (exponent(g) << 10));
        std::memcpy(w.data() + static_cast<std::size_t>(b) * qw_bytes<F>(), &hw, 2);
        std::memcpy(xb, &hx, 2);
      }
      if (trial == 0)  // the extremes: every weight -128 (Q8_0) or 0 (Q4_0), x -127
        for (Index b = 0; b < nb; ++b) {
          unsigned char* wb = w.data() + static_cast<std::size_t>(b) * qw_bytes<F>();
          std::memset(wb + 2, std::is_same_v<F, Q8_0Weights> ? 0x80 : 0x00, qw_bytes<F>() - 2);
          for (int j = 0; j < 32; ++j)
            x[static_cast<std::size_t>(b) * q::kBytesQ8_0 + 2 + static_cast<std::size_t>(j)] =
                static_cast<unsigned char>(static_cast<std::int8_t>(-127));
        }
      const kappa::detail::Q8Row row(x.data(), nb);
      const float portable = qw_dot_portable<F>(w.data(), row);
      const float fast = qw_dot_fast<F>(w.data(), row);
      EXPECT_EQ(fast, portable) << "nb " << nb << " trial " << trial;
      // The loops chosen at run time: each one, whichever this CPU takes.
      if constexpr (std::is_same_v<F, Q8_0Weights>) {
#if KAPPA_QUANT_WIDE_LOOPS
        EXPECT_EQ(kappa::detail::dot_q8_0_wide(w.data(), row), portable) << "nb " << nb;
#endif
#if KAPPA_QUANT_AVX2
        EXPECT_EQ(kappa::detail::dot_q8_0_narrow(w.data(), row), portable) << "nb " << nb;
#endif
      }
      if constexpr (std::is_same_v<F, Q4_0Weights>) {
#if KAPPA_QUANT_WIDE_LOOPS
        EXPECT_EQ(kappa::detail::dot_q4_0_wide(w.data(), row), portable) << "nb " << nb;
#endif
#if !KAPPA_QUANT_AVX512 && KAPPA_QUANT_AVX2 && \
    ((defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__))
        EXPECT_EQ(kappa::detail::dot_q4_0_vnni(w.data(), row), portable) << "nb " << nb;
#endif
      }
      double abs_sum = 0;
      const double ref = qw_ref_dot<F>(w.data(), x.data(), nb, abs_sum);
      EXPECT_LE(std::fabs(portable - ref), static_cast<double>(nb + 8) * std::ldexp(abs_sum, -24))
          << "nb " << nb << " trial " << trial;
    }
  }
}

// Packing: row j of P is column j of W (kRows) or row j of W (kCols),
// quantized by quant::quantize_row_*; dense() dequantizes it back.
TYPED_TEST(QuantWeights, LayoutIsRowsOfTheReductionDimension) {
  using F = TypeParam;
  std::mt19937_64 g(3);
  const RowMatrix<float> w = qw_random(64, 5, g, 1.0f);
  const WeightMatrix<float, F> by_rows(w);
  const WeightMatrix<float, F> by_cols(RowMatrix<float>(w.transpose()), BlocksAlong::kCols);
  EXPECT_EQ(by_rows.bytes(), 5u * 2u * qw_bytes<F>());
  ASSERT_EQ(by_rows.bytes(), by_cols.bytes());
  std::vector<unsigned char> expect(by_rows.bytes());
  for (Index j = 0; j < 5; ++j) {
    std::vector<float> col(64);
    for (Index t = 0; t < 64; ++t) col[static_cast<std::size_t>(t)] = w(t, j);
    unsigned char* out = expect.data() + static_cast<std::size_t>(j) * 2 * qw_bytes<F>();
    if constexpr (std::is_same_v<F, Q8_0Weights>)
      q::quantize_row_q8_0(col.data(), out, 64);
    else
      q::quantize_row_q4_0(col.data(), out, 64);
  }
  const auto a = by_rows.blocks(), b = by_cols.blocks();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), expect.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), expect.begin()));
  const RowMatrix<float> d = by_rows.dense();
  EXPECT_TRUE(RowMatrix<float>(by_cols.dense().transpose()) == d);
  for (Index j = 0; j < 5; ++j) {
    std::vector<float> y(64);
    if constexpr (std::is_same_v<F, Q8_0Weights>)
      q::dequantize_row_q8_0(expect.data() + static_cast<std::size_t>(j) * 2 * qw_bytes<F>(),
                             y.data(), 64);
    else
      q::dequantize_row_q4_0(expect.data() + static_cast<std::size_t>(j) * 2 * qw_bytes<F>(),
                             y.data(), 64);
    for (Index t = 0; t < 64; ++t) EXPECT_EQ(d(t, j), y[static_cast<std::size_t>(t)]);
  }
}

/// Checks a decode product (out = X P^T, rows of X <= 8) against the block
/// reference and the float product X W_true against the format's bound.
/// `w_true` is the unquantized W in the product's orientation (k x m).
template <class F>
void qw_check_decode(const WeightMatrix<float, F>& wq, const RowMatrix<float>& w_true,
                     const RowMatrix<float>& x, const RowMatrix<float>& out, double& rel_err) {
  const Index k = w_true.rows(), m = w_true.cols(), nb = k / 32;
  const auto packed = wq.blocks();
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * qw_bytes<F>();
  double err2 = 0, ref2 = 0;
  for (Index r = 0; r < x.rows(); ++r) {
    const std::vector<unsigned char> xq = qw_quantize_x(x, r);
    for (Index j = 0; j < m; ++j) {
      double abs_sum = 0;
      const double ref = qw_ref_dot<F>(packed.data() + static_cast<std::size_t>(j) * row_bytes,
                                       xq.data(), nb, abs_sum);
      const double got = out(r, j);
      ASSERT_LE(std::fabs(got - ref), static_cast<double>(nb + 8) * std::ldexp(abs_sum, -24))
          << "row " << r << " col " << j;
      // The format's bound against X W_true.
      double exact = 0, bound = 0, mag = 0;
      for (Index b = 0; b < nb; ++b) {
        double amax_w = 0, amax_x = 0;
        for (Index t = 32 * b; t < 32 * b + 32; ++t) {
          amax_w = std::max(amax_w, std::fabs(static_cast<double>(w_true(t, j))));
          amax_x = std::max(amax_x, std::fabs(static_cast<double>(x(r, t))));
        }
        const double e_w = std::is_same_v<F, Q8_0Weights> ? 0.57 * amax_w / 127 : 1.01 * amax_w / 8;
        const double e_x = 0.57 * amax_x / 127;
        for (Index t = 32 * b; t < 32 * b + 32; ++t) {
          const double xv = x(r, t), wv = w_true(t, j);
          exact += xv * wv;
          bound += std::fabs(xv) * e_w + std::fabs(wv) * e_x + e_w * e_x;
          mag += std::fabs(xv * wv);
        }
      }
      ASSERT_LE(std::fabs(got - exact), bound + static_cast<double>(k) * std::ldexp(mag, -23))
          << "row " << r << " col " << j;
      err2 += (got - exact) * (got - exact);
      ref2 += exact * exact;
    }
  }
  rel_err = std::sqrt(err2 / ref2);
}

/// Decodes 1..8 random rows of X with `proj` (out = X W) and `head` (X E^T,
/// E = W^T): the two agree bit for bit, give the same bits on 1..3 threads,
/// and pass qw_check_decode, whose block reference reads the rows of
/// `rows` (the same W). Returns the worst relative error against X W.
template <class F>
double qw_check_decodes(const WeightMatrix<float, F>& proj, const WeightMatrix<float, F>& head,
                        const WeightMatrix<float, F>& rows, const RowMatrix<float>& w,
                        std::mt19937_64& g) {
  const Index k = w.rows(), m = w.cols();
  double worst = 0;
  for (Index n = 1; n <= 8; ++n) {
    const RowMatrix<float> x = qw_random(n, k, g, 1.0f);
    RowMatrix<float> one(n, m), one_t(n, m);
    kappa::set_num_threads(1);
    proj.multiply(x, one);
    head.multiply_transposed(x, one_t);
    EXPECT_TRUE(one == one_t) << n << " rows";
    double rel = 0;
    qw_check_decode<F>(rows, w, x, one, rel);
    worst = std::max(worst, rel);
#ifdef _OPENMP
    for (int threads : {2, 3}) {
      kappa::set_num_threads(threads);
      RowMatrix<float> many(n, m), many_t(n, m);
      proj.multiply(x, many);
      head.multiply_transposed(x, many_t);
      EXPECT_TRUE(many == one) << n << " rows, " << threads << " threads";
      EXPECT_TRUE(many_t == one) << n << " rows, " << threads << " threads";
    }
    kappa::set_num_threads(1);
#endif
  }
  return worst;
}

// Decode: 1..8 rows, both products, odd output widths, thread counts 1..3
// (bit-identical), against the block reference and the format's bound.
TYPED_TEST(QuantWeights, DecodeMatchesReferenceAndBound) {
  using F = TypeParam;
  QwThreadsGuard guard;
  std::mt19937_64 g(5);
  const Index k = 352, m = 203;  // 11 blocks (a group of 8 and 3), an odd number of outputs
  const RowMatrix<float> w = qw_random(k, m, g, 0.05f);
  const WeightMatrix<float, F> proj(w);  // out = X W
  const WeightMatrix<float, F> head(RowMatrix<float>(w.transpose()), BlocksAlong::kCols);  // X E^T
  std::cout << F::kName << " decode: relative error against X W (Frobenius) at most "
            << qw_check_decodes(proj, head, proj, w, g) << "\n";
}

/// |out - X deq(W)| <= k 2^-23 sum |x| |w| against double.
void qw_check_float_product(const RowMatrix<float>& x, const RowMatrix<float>& w_deq,
                            const RowMatrix<float>& out) {
  const Eigen::MatrixXd ref = x.cast<double>() * w_deq.cast<double>();
  const Eigen::MatrixXd mag = x.cast<double>().cwiseAbs() * w_deq.cast<double>().cwiseAbs();
  const double k = static_cast<double>(x.cols());
  for (Index r = 0; r < out.rows(); ++r)
    for (Index j = 0; j < out.cols(); ++j)
      ASSERT_LE(std::fabs(out(r, j) - ref(r, j)), k * std::ldexp(mag(r, j), -23))
          << "row " << r << " col " << j;
}

// Prefill (9 and 40 rows: dequantized panels and Eigen's GEMM, or 8-bit
// integer panels with VNNI) and the slow
// cross-layout products, against X deq(W) in double; threads bit-identical.
TYPED_TEST(QuantWeights, PrefillAndCrossLayoutMatchDequantizedProduct) {
  using F = TypeParam;
  QwThreadsGuard guard;
  std::mt19937_64 g(8);
  const Index k = 96, m = 150;
  const RowMatrix<float> w = qw_random(k, m, g, 0.05f);
  const WeightMatrix<float, F> proj(w);
  const WeightMatrix<float, F> head(RowMatrix<float>(w.transpose()), BlocksAlong::kCols);
  const RowMatrix<float> w_deq = proj.dense();
  for (Index n : {9, 40}) {
    const RowMatrix<float> x = qw_random(n, k, g, 1.0f);
    kappa::set_num_threads(1);
    RowMatrix<float> out(n, m), out_t(n, m);
    proj.multiply(x, out);
    head.multiply_transposed(x, out_t);
    kappa_test::check_prefill(x, w_deq, out, static_cast<double>(k) * std::ldexp(1.0, -23));
    kappa_test::check_prefill(x, w_deq, out_t, static_cast<double>(k) * std::ldexp(1.0, -23));
#ifdef _OPENMP
    for (int threads : {2, 3}) {
      kappa::set_num_threads(threads);
      RowMatrix<float> many(n, m);
      proj.multiply(x, many);
      EXPECT_TRUE(many == out) << n << " rows, " << threads << " threads";
    }
    kappa::set_num_threads(1);
#endif
  }
  // Cross layout: multiply() of a kCols matrix reduces over P's rows.
  const RowMatrix<float> e = qw_random(m, k, g, 0.05f);  // E (m x k) packed along k
  const WeightMatrix<float, F> e_q(e, BlocksAlong::kCols);
  const RowMatrix<float> e_deq = e_q.dense();
  for (Index n : {1, 3, 12}) {
    const RowMatrix<float> x = qw_random(n, m, g, 1.0f);
    RowMatrix<float> out(n, k);
    e_q.multiply(x, out);  // X E
    qw_check_float_product(x, e_deq, out);
    const RowMatrix<float> xm = qw_random(n, m, g, 1.0f);
    RowMatrix<float> out_rows(n, k);
    proj.multiply_transposed(xm, out_rows);  // X W^T with W (k x m) packed along rows
    qw_check_float_product(xm, RowMatrix<float>(w_deq.transpose()), out_rows);
  }
}

// double: the same bits as float's product for decode (the sums are the
// same doubles, only the final rounding differs).
TYPED_TEST(QuantWeights, DoubleComputeType) {
  using F = TypeParam;
  std::mt19937_64 g(9);
  const RowMatrix<float> w = qw_random(64, 70, g, 0.1f);
  const RowMatrix<float> x = qw_random(2, 64, g, 1.0f);
  const WeightMatrix<float, F> wf(w);
  const WeightMatrix<double, F> wd(RowMatrix<double>(w.cast<double>()));
  RowMatrix<float> of(2, 70);
  RowMatrix<double> od(2, 70);
  wf.multiply(x, of);
  wd.multiply(RowMatrix<double>(x.cast<double>()), od);
  EXPECT_TRUE(RowMatrix<float>(od.cast<float>()) == of);
  EXPECT_TRUE(RowMatrix<double>(wd.dense()) ==
              RowMatrix<double>(wf.dense().template cast<double>()));
}

// GGUF bytes: a matrix made from packed blocks (copied or viewed) is the
// same matrix; a wrong size is a ShapeError naming W and the byte counts.
TYPED_TEST(QuantWeights, FromPackedBlocks) {
  using F = TypeParam;
  std::mt19937_64 g(4);
  const RowMatrix<float> w = qw_random(128, 40, g, 0.1f);
  const WeightMatrix<float, F> made(w);
  const auto bytes = made.blocks();
  const WeightMatrix<float, F> copied(128, 40, BlocksAlong::kRows, bytes);
  auto file = std::make_shared<std::vector<unsigned char>>(bytes.begin(), bytes.end());
  const WeightMatrix<float, F> viewed(128, 40, BlocksAlong::kRows, file->data(), file->size(),
                                      file);
  file.reset();  // the view keeps the bytes alive
  const RowMatrix<float> x = qw_random(3, 128, g, 1.0f);
  RowMatrix<float> a(3, 40), b(3, 40), c(3, 40);
  made.multiply(x, a);
  copied.multiply(x, b);
  viewed.multiply(x, c);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == c);
  EXPECT_EQ(made.bytes(), copied.bytes());
  expect_error<kappa::ShapeError>(
      [&] { const WeightMatrix<float, F> bad(128, 40, BlocksAlong::kRows, bytes.subspan(1)); },
      {"(128 x 40)", std::to_string(bytes.size())});
}

// k not a multiple of 32: a ShapeError naming W and a block; products with
// the wrong shapes name X and W.
TYPED_TEST(QuantWeights, ShapeErrors) {
  using F = TypeParam;
  const RowMatrix<float> w = RowMatrix<float>::Ones(100, 64);
  expect_error<kappa::ShapeError>([&] { const WeightMatrix<float, F> bad(w); },
                                  {"(100 x 64)", "(32 x 1)", "multiple of 32"});
  EXPECT_THROW((WeightMatrix<float, F>(RowMatrix<float>::Ones(64, 33), BlocksAlong::kCols)),
               kappa::ShapeError);
  EXPECT_NO_THROW((WeightMatrix<float, F>(RowMatrix<float>::Ones(64, 33))));  // 33 outputs: fine
  const WeightMatrix<float, F> ok(RowMatrix<float>::Ones(64, 33));
  RowMatrix<float> x(2, 63), out(2, 33);
  expect_error<kappa::ShapeError>(
      [&] { ok.multiply(x, out); },
      {"(2 x 63)", "(64 x 33)", std::string("product X W (") + F::kName + " weights)"});
  RowMatrix<float> x2(2, 64), out2(2, 32);
  EXPECT_THROW(ok.multiply(x2, out2), kappa::ShapeError);
  EXPECT_THROW(ok.multiply_transposed(x2, out2), kappa::ShapeError);
}

// The storage policies fit the concept, and bytes() is the packed size.
// ---- Q4_0 rows interleaved by eights (WeightMatrix::interleaved) -----------------------

/// Random Q4_0 rows (n rows of nb blocks) from a normal W.
std::vector<unsigned char> qw_q4_0_rows(Index n, Index nb, std::mt19937_64& g) {
  const RowMatrix<float> w = qw_random(n, 32 * nb, g, 0.05f);
  std::vector<unsigned char> out(static_cast<std::size_t>(n * nb) * q::kBytesQ4_0);
  for (Index r = 0; r < n; ++r)
    q::quantize_row_q4_0(w.row(r).data(), out.data() + static_cast<std::size_t>(r * nb) * 18,
                         32 * nb);
  return out;
}

// The layout as documented: group g, block b at (8 g nb + 8 b) 18 bytes: the
// 8 scales, then the 8 rows' 16 bytes of nibbles; the rows after the last
// whole group unchanged; every row read back as it was.
TEST(QuantWeightsInterleaved, LayoutAsDocumentedAndRowsReadBack) {
  std::mt19937_64 g(21);
  for (Index n : {1, 7, 8, 13, 24}) {
    constexpr Index nb = 3;
    const std::vector<unsigned char> rows = qw_q4_0_rows(n, nb, g);
    std::vector<unsigned char> il(rows.size());
    q::interleave_q4_0(rows.data(), n, nb, il.data());
    const auto at = [](Index j, Index b) { return static_cast<std::size_t>(j * nb + b) * 18; };
    for (Index j = 0; j < n; ++j) {
      for (Index b = 0; b < nb; ++b) {
        if (j < n / 8 * 8) {
          const std::size_t base = at(j / 8 * 8, 0) + static_cast<std::size_t>(b) * 144;
          const auto r = static_cast<std::size_t>(j % 8);
          EXPECT_EQ(0, std::memcmp(il.data() + base + 2 * r, rows.data() + at(j, b), 2)) << j;
          EXPECT_EQ(0, std::memcmp(il.data() + base + 16 + 16 * r, rows.data() + at(j, b) + 2, 16))
              << j;
        } else {
          EXPECT_EQ(0, std::memcmp(il.data() + at(j, b), rows.data() + at(j, b), 18)) << j;
        }
      }
      std::vector<unsigned char> back(static_cast<std::size_t>(nb) * 18);
      q::deinterleave_row_q4_0(il.data(), n, nb, j, back.data());
      EXPECT_EQ(0, std::memcmp(back.data(), rows.data() + at(j, 0), back.size()))
          << "row " << j << " of " << n;
    }
    for (Index j0 = 0; j0 < n; ++j0) {  // runs of rows, from a group's start or not
      for (Index count = 1; j0 + count <= n; ++count) {
        std::vector<unsigned char> run(static_cast<std::size_t>(count * nb) * 18);
        q::deinterleave_rows_q4_0(il.data(), n, nb, j0, count, run.data());
        EXPECT_EQ(0, std::memcmp(run.data(), rows.data() + at(j0, 0), run.size()))
            << "rows " << j0 << " + " << count << " of " << n;
      }
    }
  }
}

// dot8_q4_0 (AVX2 / VNNI where built) equals dot8_q4_0_portable bit for bit,
// and both are the exact block sums up to the float summation in block
// order: |dot - ref| <= nb 2^-24 sum |terms|. The extremes (every nibble 0
// or 15, x at +-127) reach the largest int16 pairs of the maddubs path.
TEST(QuantWeightsInterleaved, Dot8IsExactAndEqualsPortable) {
  std::mt19937_64 g(22);
  for (Index nb : {1, 2, 7, 8, 9, 33}) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<unsigned char> rows = qw_q4_0_rows(8, nb, g);
      RowMatrix<float> x = qw_random(1, 32 * nb, g, 1.0f);
      if (trial == 0) {  // extremes
        for (std::size_t i = 0; i < rows.size(); i += 18)
          std::memset(rows.data() + i + 2, (i / 18) % 2 ? 0xFF : 0x00, 16);
        for (Index t = 0; t < x.cols(); ++t) x(0, t) = t % 3 ? 1.0f : -1.0f;
      }
      const std::vector<unsigned char> xq = qw_quantize_x(x, 0);
      const kappa::detail::Q8Row row(xq.data(), nb);
      std::vector<unsigned char> il(rows.size());
      q::interleave_q4_0(rows.data(), 8, nb, il.data());
      float fast[8], portable[8];
      kappa::detail::dot8_q4_0(il.data(), row, fast);
      kappa::detail::dot8_q4_0_portable(il.data(), row, portable);
      // each built loop on its own, whichever q4_0_wide() picks
#if KAPPA_QUANT_AVX2
      float avx2[8];
      kappa::detail::dot8_q4_0_avx2(il.data(), row, avx2);
#endif
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
      float wide[8];
      kappa::detail::dot8_q4_0_wide(il.data(), row, wide);
#endif
      for (int r = 0; r < 8; ++r) {
        EXPECT_EQ(fast[r], portable[r]) << "nb " << nb << " trial " << trial << " row " << r;
#if KAPPA_QUANT_AVX2
        EXPECT_EQ(avx2[r], portable[r]) << "avx2: nb " << nb << " trial " << trial << " row " << r;
#endif
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
        EXPECT_EQ(wide[r], portable[r])
            << "512-bit: nb " << nb << " trial " << trial << " row " << r;
#endif
        double abs_sum = 0;
        const double ref = qw_ref_dot<Q4_0Weights>(
            rows.data() + static_cast<std::size_t>(r * nb) * 18, xq.data(), nb, abs_sum);
        EXPECT_LE(std::fabs(portable[r] - ref), static_cast<double>(nb) * std::ldexp(abs_sum, -24))
            << "nb " << nb << " trial " << trial << " row " << r;
      }
    }
  }
}

// A whole matrix: decode (both layouts of P, 1..8 rows of X, 25 groups and 3
// rows after them) within the block reference's bound, the same bits for
// 1..3 threads; prefill, the cross-layout product, dense() and the rows
// exactly as the matrix before interleaving gives them.
TEST(QuantWeightsInterleaved, MatrixProductsMatchTheRows) {
  QwThreadsGuard guard;
  std::mt19937_64 g(23);
  const Index k = 352, m = 203;
  const RowMatrix<float> w = qw_random(k, m, g, 0.05f);
  const WeightMatrix<float, Q4_0Weights> proj(w);
  const WeightMatrix<float, Q4_0Weights> head(RowMatrix<float>(w.transpose()), BlocksAlong::kCols);
  const WeightMatrix<float, Q4_0Weights> proj8 = proj.interleaved(), head8 = head.interleaved();
  EXPECT_FALSE(proj.is_interleaved());
  ASSERT_TRUE(proj8.is_interleaved() && head8.is_interleaved());
  EXPECT_EQ(proj8.bytes(), proj.bytes());
  EXPECT_TRUE(proj8.interleaved().is_interleaved());
  EXPECT_TRUE(proj8.dense() == proj.dense());
  std::vector<unsigned char> scratch;
  for (Index j = 0; j < m; ++j) {
    const unsigned char* a = proj8.row_blocks(j, scratch);
    EXPECT_EQ(0,
              std::memcmp(a, proj.blocks().data() + static_cast<std::size_t>(j) * 11 * 18, 11 * 18))
        << "row " << j;
  }
  // (the block reference reads proj's rows)
  std::cout << "q4_0 interleaved decode: relative error against X W (Frobenius) at most "
            << qw_check_decodes(proj8, head8, proj, w, g) << "\n";
  for (Index n : {9, 40}) {  // prefill: the same rows, the same products
    const RowMatrix<float> x = qw_random(n, k, g, 1.0f);
    RowMatrix<float> a(n, m), b(n, m);
    proj.multiply(x, a);
    proj8.multiply(x, b);
    EXPECT_TRUE(a == b) << n << " rows";
  }
  for (Index n : {1, 12}) {  // cross layout: X W^T with W packed along its rows
    const RowMatrix<float> x = qw_random(n, m, g, 1.0f);
    RowMatrix<float> a(n, k), b(n, k);
    proj.multiply_transposed(x, a);
    proj8.multiply_transposed(x, b);
    EXPECT_TRUE(a == b) << n << " rows";
  }
}

TEST(QuantWeightsPolicy, ConceptAndBytes) {
  static_assert(kappa::WeightStoragePolicy<Q8_0Weights>);
  static_assert(kappa::WeightStoragePolicy<Q4_0Weights>);
  static_assert(!kappa::WeightStoragePolicy<int>);
  const RowMatrix<float> w = RowMatrix<float>::Ones(4096, 64);
  EXPECT_EQ((WeightMatrix<float, Q8_0Weights>(w).bytes()), 64u * 128u * 34u);
  EXPECT_EQ((WeightMatrix<float, Q4_0Weights>(w).bytes()), 64u * 128u * 18u);
}

}  // namespace
