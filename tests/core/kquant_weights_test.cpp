// Tests for the k-quant weight matrices of kappa/core/quant_weights.hpp:
// WeightMatrix<T, Q4_KWeights> and WeightMatrix<T, Q6_KWeights>.
//
// References are plain loops written here:
//   - dense(): ggml's own bytes and floats (tests/data/io/gguf/blocks), bit
//     for bit;
//   - decode (up to 8 rows): X's rows quantized to Q8_0 (quant::quantize_row_q8_0)
//     and dequantized (quant::dequantize_row_q8_0), times the dequantized
//     weights (quant::dequantize_row_q4_K / _q6_K), summed in double. The
//     product sums exact sub-block terms in float, so
//       |out - ref| <= (k / 256 + 8) 2^-24 T  (+ 2^-24 sum |w x| for Q4_K,
//       whose dequantization rounds d sc q - dmin m once)
//     with T = sum_j (|d sc q_j| + |dmin m|) |x_j| (Q4_K) or sum_j |w_j x_j|
//     (Q6_K), a bound on the sum of |sub-block terms|; the scales are read
//     from the bytes here by the format's definition. The build's dot product
//     equals the portable one (called directly) bit for bit, and thread
//     counts 1 and 2 give the same bits;
//   - prefill (16 rows, dequantized panels and Eigen's GEMM): |out - X deq(W)|
//     <= 1e-5 sum |x| |w| against double;
//   - our quantizer: each weight within half its step d sc of the input plus
//     2^-18 max |x| of its super-block, the step within the stated bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/threading.hpp"
#include "support/expect_error.hpp"
#include "support/prefill_reference.hpp"

namespace {

using kappa::BlocksAlong;
using kappa::Index;
using kappa::Q4_KWeights;
using kappa::Q6_KWeights;
using kappa::RowMatrix;
using kappa::WeightMatrix;
using kappa::testing::expect_error;
namespace q = kappa::quant;

const std::string kKqBlocksDir = std::string(KAPPA_TEST_DATA_DIR) + "/io/gguf/blocks/";

struct KqThreadsGuard {
  ~KqThreadsGuard() { kappa::set_num_threads(1); }
};

std::vector<unsigned char> kq_read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> kq_read_f32(const std::string& path) {
  const std::vector<unsigned char> bytes = kq_read_bytes(path);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

template <class F>
constexpr bool kIsQ4K = std::is_same_v<F, Q4_KWeights>;

template <class F>
const char* kq_file_stem() {
  return kIsQ4K<F> ? "q4_k" : "q6_k";
}

float kq_fp16(const unsigned char* p) {
  std::uint16_t h = 0;
  std::memcpy(&h, p, 2);
  return q::fp16_to_float(h);
}

/// The 6-bit scale and min of Q4_K sub-block s, read by the format's
/// definition: s < 4: the low 6 bits of bytes s and s + 4; s >= 4: the low
/// and high nibbles of byte s + 4 with the top 2 bits of bytes s - 4 and s.
void kq_q4k_scale_min(const unsigned char* packed, int s, int& sc, int& m) {
  if (s < 4) {
    sc = packed[s] & 63;
    m = packed[s + 4] & 63;
  } else {
    sc = (packed[s + 4] & 15) | ((packed[s - 4] >> 6) << 4);
    m = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
}

/// Q6_K's step d sc for element e (0..255) of a super-block.
double kq_q6k_step(const unsigned char* block, int e) {
  return static_cast<double>(kq_fp16(block + 208)) *
         static_cast<double>(static_cast<std::int8_t>(block[192 + e / 16]));
}

/// Plain-loop reference of one output: the weights of a row of P
/// (dequantized by quant::dequantize_row_*) times X's Q8_0 values, in
/// double; `tol` gets the bound stated at the top of this file.
template <class F>
double kq_reference(const unsigned char* w_row, const std::vector<unsigned char>& x_q8, Index k,
                    double& tol) {
  std::vector<float> w(static_cast<std::size_t>(k)), x(static_cast<std::size_t>(k));
  if constexpr (kIsQ4K<F>)
    q::dequantize_row_q4_K(w_row, w.data(), k);
  else
    q::dequantize_row_q6_K(w_row, w.data(), k);
  q::dequantize_row_q8_0(x_q8.data(), x.data(), k);
  double sum = 0, abs_wx = 0, terms = 0;
  for (Index t = 0; t < k; ++t) {
    const auto j = static_cast<std::size_t>(t);
    const double xv = x[j], wv = w[j];
    sum += wv * xv;
    abs_wx += std::fabs(wv * xv);
    if constexpr (kIsQ4K<F>) {
      const unsigned char* block = w_row + static_cast<std::size_t>(t / 256) * q::kBytesQ4_K;
      const int e = static_cast<int>(t % 256), s = e / 32;
      int sc = 0, m = 0;
      kq_q4k_scale_min(block + 4, s, sc, m);
      const int nib = (block[16 + 32 * (s / 2) + e % 32] >> (4 * (s & 1))) & 15;
      terms += (std::fabs(static_cast<double>(kq_fp16(block)) * sc * nib) +
                std::fabs(static_cast<double>(kq_fp16(block + 2)) * m)) *
               std::fabs(xv);
    }
  }
  if constexpr (!kIsQ4K<F>) terms = abs_wx;
  tol = static_cast<double>(k / 256 + 8) * std::ldexp(terms, -24) +
        (kIsQ4K<F> ? std::ldexp(abs_wx, -24) : 0.0);
  return sum;
}

/// Random super-blocks: every byte random except the fp16 scales (random
/// sign and mantissa, exponent 5..20: 2^-10 .. 2^5), so the products stay
/// finite.
template <class F>
std::vector<unsigned char> kq_random_blocks(std::size_t n_blocks, std::mt19937_64& g) {
  std::uniform_int_distribution<int> byte(0, 255), exponent(5, 20);
  std::vector<unsigned char> out(n_blocks * F::kBlockBytes);
  for (auto& c : out) c = static_cast<unsigned char>(byte(g));
  for (std::size_t b = 0; b < n_blocks; ++b) {
    unsigned char* block = out.data() + b * F::kBlockBytes;
    for (std::size_t at :
         kIsQ4K<F> ? std::vector<std::size_t>{0, 2} : std::vector<std::size_t>{208}) {
      const auto h = static_cast<std::uint16_t>((byte(g) << 8 | byte(g)) & 0x83FF);
      const auto e = static_cast<std::uint16_t>(exponent(g) << 10);
      const auto bits = static_cast<std::uint16_t>(h | e);
      std::memcpy(block + at, &bits, 2);
    }
  }
  return out;
}

/// X's row r in Q8_0 (quant::quantize_row_q8_0).
std::vector<unsigned char> kq_quantize_x(const RowMatrix<float>& x, Index r) {
  const Index k = x.cols();
  std::vector<unsigned char> out(static_cast<std::size_t>(k / 32) * q::kBytesQ8_0);
  std::vector<float> row(x.row(r).data(), x.row(r).data() + k);
  q::quantize_row_q8_0(row.data(), out.data(), k);
  return out;
}

RowMatrix<float> kq_random(Index r, Index c, std::mt19937_64& g, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

template <class F>
float kq_dot_portable(const unsigned char* w, const kappa::detail::Q8Row& x) {
  if constexpr (kIsQ4K<F>)
    return kappa::detail::dot_q4_k_portable(w, x);
  else
    return kappa::detail::dot_q6_k_portable(w, x);
}
template <class F>
float kq_dot_build(const unsigned char* w, const kappa::detail::Q8Row& x) {
  if constexpr (kIsQ4K<F>)
    return kappa::detail::dot_q4_k(w, x);
  else
    return kappa::detail::dot_q6_k(w, x);
}

bool kq_same_bits(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

template <class F>
class KQuantWeights : public ::testing::Test {};
using KQuantFormats = ::testing::Types<Q4_KWeights, Q6_KWeights>;
TYPED_TEST_SUITE(KQuantWeights, KQuantFormats);

// dense() of ggml's committed bytes (its quantization of input.f32, and
// random bytes) equals ggml's committed floats bit for bit, in both layouts;
// a view holds the given bytes without a copy.
TYPED_TEST(KQuantWeights, DenseOfGgmlBytesEqualsGgmlFloats) {
  using F = TypeParam;
  for (const std::string kind : {"quant", "random"}) {
    const std::string stem = kKqBlocksDir + kq_file_stem<F>();
    const auto bytes =
        std::make_shared<std::vector<unsigned char>>(kq_read_bytes(stem + "." + kind + ".bin"));
    const std::vector<float> want =
        kq_read_f32(stem + (kind == "quant" ? ".dequant.f32" : ".random_dequant.f32"));
    const std::size_t n_blocks = bytes->size() / F::kBlockBytes;
    ASSERT_GT(n_blocks, 1u) << stem;
    ASSERT_EQ(n_blocks * F::kBlockBytes, bytes->size());
    ASSERT_EQ(want.size(), n_blocks * 256);
    // P: n_blocks / 2 rows of 2 super-blocks (512 weights) when even.
    const Index per_row = n_blocks % 2 == 0 ? 2 : 1;
    const Index n_p = static_cast<Index>(n_blocks) / per_row, k = 256 * per_row;
    const WeightMatrix<float, F> head(n_p, k, BlocksAlong::kCols,
                                      std::span<const unsigned char>(*bytes));
    const RowMatrix<float> e = head.dense();  // (n_p, k): row-major = the file's order
    EXPECT_TRUE(kq_same_bits(e.data(), want.data(), want.size())) << stem << " " << kind;
    const WeightMatrix<float, F> proj(k, n_p, BlocksAlong::kRows, bytes->data(), bytes->size(),
                                      bytes);
    EXPECT_EQ(proj.blocks().data(), bytes->data());  // a view, no copy
    EXPECT_EQ(proj.bytes(), bytes->size());
    const RowMatrix<float> wt = RowMatrix<float>(proj.dense().transpose());
    EXPECT_TRUE(kq_same_bits(wt.data(), want.data(), want.size())) << stem << " " << kind;
  }
}

// Random bytes (every nibble, 6-bit q, scale and min; extremes): the build's
// dot product (AVX2 / VNNI where built) equals the portable one bit for bit,
// and both the plain-loop reference within the float summation bound.
TYPED_TEST(KQuantWeights, BlockDotEqualsPortableAndReference) {
  using F = TypeParam;
  std::mt19937_64 g(21);
  std::uniform_int_distribution<int> xbyte(-127, 127);
  std::cout << "block dot products: " << kappa::detail::kQuantDotIsa << "\n";
  for (Index n_super : {1, 2, 3, 5}) {
    const Index k = 256 * n_super;
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<unsigned char> w = kq_random_blocks<F>(static_cast<std::size_t>(n_super), g);
      RowMatrix<float> xf(1, k);
      for (Index t = 0; t < k; ++t) xf(0, t) = static_cast<float>(xbyte(g)) * 0.01f;
      std::vector<unsigned char> x = kq_quantize_x(xf, 0);
      if (trial == 0) {  // the extremes: q all 15 (Q4_K) or all 0 (Q6_K: -32), x all -127
        for (Index b = 0; b < n_super; ++b) {
          unsigned char* block = w.data() + static_cast<std::size_t>(b) * F::kBlockBytes;
          if constexpr (kIsQ4K<F>) {
            std::memset(block + 4, 0xFF, 12);  // every scale and min 63
            std::memset(block + 16, 0xFF, 128);
          } else {
            std::memset(block, 0, 192);
            std::memset(block + 192, 0x80, 16);  // every scale -128
          }
        }
        for (std::size_t b = 0; b < x.size() / q::kBytesQ8_0; ++b)
          std::memset(x.data() + b * q::kBytesQ8_0 + 2, 0x81, 32);  // -127
      }
      const kappa::detail::Q8Row row(x.data(), k / 32);
      const float portable = kq_dot_portable<F>(w.data(), row);
      const float build = kq_dot_build<F>(w.data(), row);
      EXPECT_EQ(build, portable) << "k " << k << " trial " << trial;
#if KAPPA_QUANT_Q4_0_WIDE
      // The 512-bit and 256-bit loops by name, whichever this CPU takes
      // (q4_0_wide()).
      namespace kd = kappa::detail;
      if constexpr (kIsQ4K<F>) {
        EXPECT_EQ(kd::dot_q4_k_wide(w.data(), row), portable) << "k " << k << " trial " << trial;
        EXPECT_EQ(kd::dot_k_avx2<q::kBytesQ4_K>(
                      w.data(), row, [](auto... a) { return kd::q4_k_block_avx2(a...); }),
                  portable)
            << "k " << k << " trial " << trial;
      } else {
        EXPECT_EQ(kd::dot_q6_k_wide(w.data(), row), portable) << "k " << k << " trial " << trial;
        EXPECT_EQ(kd::dot_k_avx2<q::kBytesQ6_K>(
                      w.data(), row, [](auto... a) { return kd::q6_k_block_avx2(a...); }),
                  portable)
            << "k " << k << " trial " << trial;
      }
#endif
      double tol = 0;
      const double ref = kq_reference<F>(w.data(), x, k, tol);
      EXPECT_LE(std::fabs(static_cast<double>(portable) - ref), tol)
          << "k " << k << " trial " << trial;
    }
  }
}

// Decode: 1..8 rows, both layouts, k = 256, 512, 1280; against the
// plain-loop reference and the portable dot product, threads 1 and 2
// bit-identical.
TYPED_TEST(KQuantWeights, DecodeMatchesReferenceAndPortable) {
  using F = TypeParam;
  KqThreadsGuard guard;
  std::mt19937_64 g(5);
  for (Index k : {256, 512, 1280}) {
    const Index m = 67;  // more than 64 outputs, so two threads split them
    const std::vector<unsigned char> packed =
        kq_random_blocks<F>(static_cast<std::size_t>(m * k / 256), g);
    const WeightMatrix<float, F> proj(k, m, BlocksAlong::kRows,
                                      std::span<const unsigned char>(packed));  // X W
    const WeightMatrix<float, F> head(m, k, BlocksAlong::kCols,
                                      std::span<const unsigned char>(packed));  // X E^T
    const std::size_t row_bytes = static_cast<std::size_t>(k / 256) * F::kBlockBytes;
    for (Index n = 1; n <= 8; ++n) {
      const RowMatrix<float> x = kq_random(n, k, g, 1.0f);
      kappa::set_num_threads(1);
      RowMatrix<float> out(n, m), out_t(n, m);
      proj.multiply(x, out);
      head.multiply_transposed(x, out_t);
      EXPECT_TRUE(out == out_t) << "k " << k << ", " << n << " rows";
      for (Index r = 0; r < n; ++r) {
        const std::vector<unsigned char> xq = kq_quantize_x(x, r);
        const kappa::detail::Q8Row row(xq.data(), k / 32);
        for (Index j = 0; j < m; ++j) {
          const unsigned char* w = packed.data() + static_cast<std::size_t>(j) * row_bytes;
          ASSERT_EQ(out(r, j), kq_dot_portable<F>(w, row)) << "k " << k << " row " << r;
          double tol = 0;
          const double ref = kq_reference<F>(w, xq, k, tol);
          ASSERT_LE(std::fabs(static_cast<double>(out(r, j)) - ref), tol)
              << "k " << k << " row " << r << " col " << j;
        }
      }
#ifdef _OPENMP
      kappa::set_num_threads(2);
      RowMatrix<float> two(n, m), two_t(n, m);
      proj.multiply(x, two);
      head.multiply_transposed(x, two_t);
      EXPECT_TRUE(two == out) << "k " << k << ", " << n << " rows, 2 threads";
      EXPECT_TRUE(two_t == out) << "k " << k << ", " << n << " rows, 2 threads";
#endif
    }
  }
}

// Prefill (16 rows): dequantized panels and Eigen's GEMM (or with VNNI,
// 8-bit integer panels: tests/support/prefill_reference.hpp), against
// X deq(W) in double; threads 1 and 2 bit-identical. Also the cross-layout product.
TYPED_TEST(KQuantWeights, PrefillMatchesDequantizedProduct) {
  using F = TypeParam;
  KqThreadsGuard guard;
  std::mt19937_64 g(8);
  const Index k = 512, m = 150, n = 16;
  const RowMatrix<float> w = kq_random(k, m, g, 0.05f);
  const WeightMatrix<float, F> proj(w);
  const RowMatrix<float> w_deq = proj.dense();
  const RowMatrix<float> x = kq_random(n, k, g, 1.0f);
  const auto check = [](const RowMatrix<float>& xs, const RowMatrix<float>& ws,
                        const RowMatrix<float>& out) {
    const Eigen::MatrixXd ref = xs.cast<double>() * ws.cast<double>();
    const Eigen::MatrixXd mag = xs.cast<double>().cwiseAbs() * ws.cast<double>().cwiseAbs();
    for (Index r = 0; r < out.rows(); ++r)
      for (Index j = 0; j < out.cols(); ++j)
        ASSERT_LE(std::fabs(out(r, j) - ref(r, j)), 1e-5 * mag(r, j)) << r << ", " << j;
  };
  kappa::set_num_threads(1);
  RowMatrix<float> out(n, m);
  proj.multiply(x, out);
  kappa_test::check_prefill(x, w_deq, out, 1e-5);
#ifdef _OPENMP
  kappa::set_num_threads(2);
  RowMatrix<float> two(n, m);
  proj.multiply(x, two);
  EXPECT_TRUE(two == out);
  kappa::set_num_threads(1);
#endif
  const RowMatrix<float> xm = kq_random(3, m, g, 1.0f);
  RowMatrix<float> out_rows(3, k);
  proj.multiply_transposed(xm, out_rows);  // X W^T with W packed along its rows: the slow path
  check(xm, RowMatrix<float>(w_deq.transpose()), out_rows);
}

// Our quantizer: the packed bytes are quantize_row_*_simple of each column,
// and each weight is within half its step of W (plus float rounding), the
// step within the documented bound; zero, one-signed and outlier
// sub-blocks included.
TYPED_TEST(KQuantWeights, QuantizerRoundTripBound) {
  using F = TypeParam;
  std::mt19937_64 g(13);
  const Index k = 512, m = 24;
  RowMatrix<float> w = kq_random(k, m, g, 0.05f);
  w.col(1).setZero();
  w.col(2) = w.col(2).cwiseAbs();           // all positive
  w.col(3) = -w.col(3).cwiseAbs();          // all negative
  w(17, 4) = 3.0f;                          // an outlier
  w.block(0, 5, 32, 1).setConstant(0.25f);  // a constant sub-block
  w.col(6) *= 1e-4f;                        // small scales (fp16 subnormal steps)
  const WeightMatrix<float, F> wq(w);
  const RowMatrix<float> deq = wq.dense();
  const auto packed = wq.blocks();
  const std::size_t row_bytes = static_cast<std::size_t>(k / 256) * F::kBlockBytes;
  std::vector<unsigned char> expect(row_bytes);
  double err2 = 0, ref2 = 0;
  for (Index j = 0; j < m; ++j) {
    std::vector<float> col(static_cast<std::size_t>(k));
    for (Index t = 0; t < k; ++t) col[static_cast<std::size_t>(t)] = w(t, j);
    if constexpr (kIsQ4K<F>)
      kappa::detail::quantize_row_q4_K_simple(col.data(), expect.data(), k);
    else
      kappa::detail::quantize_row_q6_K_simple(col.data(), expect.data(), k);
    const unsigned char* row = packed.data() + static_cast<std::size_t>(j) * row_bytes;
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), row)) << "column " << j;
    for (Index b = 0; b < k / 256; ++b) {
      const unsigned char* block = row + static_cast<std::size_t>(b) * F::kBlockBytes;
      double amax = 0;
      for (Index t = 256 * b; t < 256 * b + 256; ++t)
        amax = std::max(amax, std::fabs(static_cast<double>(w(t, j))));
      const double slack = std::ldexp(amax, -18);
      for (int s = 0; s < (kIsQ4K<F> ? 8 : 16); ++s) {
        const int len = kIsQ4K<F> ? 32 : 16;
        double lo = 0, hi = -1e30, gmax = 0;
        for (int l = 0; l < len; ++l) {
          const double v = w(256 * b + len * s + l, j);
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          gmax = std::max(gmax, std::fabs(v));
        }
        double step = 0, step_bound = 0;
        if constexpr (kIsQ4K<F>) {
          int sc = 0, mn = 0;
          kq_q4k_scale_min(block + 4, s, sc, mn);
          const double d = kq_fp16(block), dmin = kq_fp16(block + 2);
          step = d * sc;
          step_bound = (hi - lo + dmin) / 15 + d;
        } else {
          const double d = kq_fp16(block + 208);
          step = kq_q6k_step(block, 16 * s);
          step_bound = gmax / 31 + d;
        }
        EXPECT_LE(step, step_bound * (1 + 1e-6) + 1e-30) << "column " << j << " sub-block " << s;
        for (int l = 0; l < len; ++l) {
          const Index t = 256 * b + len * s + l;
          const double e = std::fabs(static_cast<double>(deq(t, j)) - w(t, j));
          ASSERT_LE(e, 0.5 * std::fabs(step) + slack)
              << "column " << j << " element " << t << " step " << step;
          err2 += e * e;
          ref2 += static_cast<double>(w(t, j)) * w(t, j);
        }
      }
    }
  }
  std::cout << F::kName << " quantizer: relative error (Frobenius) " << std::sqrt(err2 / ref2)
            << "\n";
  // The float-built matrix decodes like any other.
  const RowMatrix<float> x = kq_random(2, k, g, 1.0f);
  RowMatrix<float> out(2, m);
  wq.multiply(x, out);
  for (Index r = 0; r < 2; ++r) {
    const std::vector<unsigned char> xq = kq_quantize_x(x, r);
    for (Index j = 0; j < m; ++j) {
      double tol = 0;
      const double ref =
          kq_reference<F>(packed.data() + static_cast<std::size_t>(j) * row_bytes, xq, k, tol);
      EXPECT_LE(std::fabs(static_cast<double>(out(r, j)) - ref), tol);
    }
  }
}

// double: the same decode bits as float's (the same float sums, then
// widened); dense() the same values.
TYPED_TEST(KQuantWeights, DoubleComputeType) {
  using F = TypeParam;
  std::mt19937_64 g(9);
  const RowMatrix<float> w = kq_random(256, 70, g, 0.1f);
  const RowMatrix<float> x = kq_random(2, 256, g, 1.0f);
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

// k not a multiple of 256: a ShapeError naming W and the block; a wrong
// byte count names both sizes; products with the wrong shapes name X and W.
TYPED_TEST(KQuantWeights, ShapeErrors) {
  using F = TypeParam;
  expect_error<kappa::ShapeError>(
      [] { const WeightMatrix<float, F> bad(RowMatrix<float>::Ones(128, 64)); },
      {"(128 x 64)", "(256 x 1)", "multiple of 256", F::kName});
  EXPECT_THROW((WeightMatrix<float, F>(RowMatrix<float>::Ones(3, 288), BlocksAlong::kCols)),
               kappa::ShapeError);
  EXPECT_NO_THROW((WeightMatrix<float, F>(RowMatrix<float>::Ones(3, 512), BlocksAlong::kCols)));
  const std::vector<unsigned char> bytes(2 * F::kBlockBytes);
  EXPECT_NO_THROW(
      (WeightMatrix<float, F>(256, 2, BlocksAlong::kRows, std::span<const unsigned char>(bytes))));
  expect_error<kappa::ShapeError>(
      [&] {
        const WeightMatrix<float, F> bad(512, 2, BlocksAlong::kRows,
                                         std::span<const unsigned char>(bytes));
      },
      {"(512 x 2)", std::to_string(4 * F::kBlockBytes), std::to_string(bytes.size())});
  expect_error<kappa::ShapeError>([&] {
    const WeightMatrix<float, F> bad(256, 32, BlocksAlong::kRows, bytes.data(), bytes.size(),
                                     nullptr);
  });
  const WeightMatrix<float, F> ok(RowMatrix<float>::Ones(256, 33));
  RowMatrix<float> x(2, 255), out(2, 33);
  expect_error<kappa::ShapeError>([&] { ok.multiply(x, out); }, {"(2 x 255)", "(256 x 33)"});
  RowMatrix<float> x2(2, 256), out2(2, 32);
  EXPECT_THROW(ok.multiply(x2, out2), kappa::ShapeError);
  EXPECT_THROW(ok.multiply_transposed(x2, out2), kappa::ShapeError);
}

// ---- Q4_K rows interleaved by eights, X in Q8_K ----------------------------------------

/// X's row in Q8_K by ggml's definition (quantize_row_q8_K_ref), written
/// here on its own: per 256, the value of largest magnitude m (the first
/// on ties), iscale = -127 / m, q = min(127, nearest_int(iscale x)) with
/// ggml's nearest_int (the float bits of v + 1.5 2^23: ties to even),
/// d = 1 / iscale; all 0 for a block of zeros.
void kq_q8k_reference(const float* x, Index k, std::vector<int>& qs, std::vector<float>& ds) {
  qs.assign(static_cast<std::size_t>(k), 0);
  ds.assign(static_cast<std::size_t>(k / 256), 0.0f);
  for (Index i = 0; i < k / 256; ++i) {
    float m = 0, amax = 0;
    for (Index j = 256 * i; j < 256 * i + 256; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        m = x[j];
      }
    if (amax == 0) continue;
    const float iscale = -127.f / m;
    for (Index j = 256 * i; j < 256 * i + 256; ++j) {
      const float v = iscale * x[j] + 12582912.f;
      std::int32_t bits = 0;
      std::memcpy(&bits, &v, 4);
      qs[static_cast<std::size_t>(j)] = std::min(127, (bits & 0x007fffff) - 0x00400000);
    }
    ds[static_cast<std::size_t>(i)] = 1 / iscale;
  }
}

/// One output of a Q4_K row `w_row` (k weights) against X in Q8_K, from the
/// format's definition in double: sum_i dx_i (d_i sum_s sc_s sum q x -
/// dmin_i sum_s m_s sum x). `tol`: (2 n + 3) 2^-24 sum_i |dx_i| (|d_i I_i| +
/// |dmin_i M_i|) (n super-blocks; dot8_q4_k's bound with a margin for second
/// order).
double kq_q8k_dot_ref(const unsigned char* w_row, const std::vector<int>& xq,
                      const std::vector<float>& xd, Index k, double& tol) {
  double sum = 0, terms = 0;
  for (Index i = 0; i < k / 256; ++i) {
    const unsigned char* b = w_row + static_cast<std::size_t>(i) * q::kBytesQ4_K;
    double ints = 0, mins = 0;
    for (int s = 0; s < 8; ++s) {
      int sc = 0, m = 0;
      kq_q4k_scale_min(b + 4, s, sc, m);
      double qx = 0, xs = 0;
      for (int l = 0; l < 32; ++l) {
        const int x = xq[static_cast<std::size_t>(256 * i + 32 * s + l)];
        qx += ((b[16 + 32 * (s / 2) + l] >> (4 * (s & 1))) & 15) * x;
        xs += x;
      }
      ints += sc * qx;
      mins += m * xs;
    }
    const double dx = xd[static_cast<std::size_t>(i)], d = kq_fp16(b), dmin = kq_fp16(b + 2);
    sum += dx * (d * ints - dmin * mins);
    terms += std::fabs(dx) * (std::fabs(d * ints) + std::fabs(dmin * mins));
  }
  tol = static_cast<double>(2 * (k / 256) + 3) * std::ldexp(terms, -24);
  return sum;
}

// Q8KRow: the quants and scales ggml's definition gives and the sums per
// 16 (ggml's bsums); a block of zeros, a negative largest value and exact
// ties (m = -127: iscale = 1) included.
TEST(KQuantInterleaved, Q8KRowAsGgmlDefines) {
  std::mt19937_64 g(41);
  RowMatrix<float> x = kq_random(1, 1024, g, 1.0f);
  for (Index j = 256; j < 512; ++j) x(0, j) = 0;  // block 1: zeros
  x(0, 600) = -40.0f;                             // block 2: m < 0
  for (Index j = 768; j < 1024; ++j) x(0, j) = 0.5f * static_cast<float>(j % 9) - 2.0f;
  x(0, 800) = -127.0f;  // block 3: ties at .5
  kappa::detail::Q8KRow row;
  row.assign(x.data(), 1024);
  std::vector<int> qs;
  std::vector<float> ds;
  kq_q8k_reference(x.data(), 1024, qs, ds);
  ASSERT_EQ(row.nb, 4);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(row.d[i], ds[i]) << "block " << i;
  EXPECT_EQ(row.d[1], 0.0f);
  EXPECT_EQ(row.d[3], 1.0f);  // m = -127: iscale 1, so q = nearest(x), ties to even
  // x(768 + j) = 0.5 ((3 + j) mod 9) - 2
  EXPECT_EQ(row.q[768 + 0], 0);   // x = -0.5
  EXPECT_EQ(row.q[768 + 2], 0);   // x = 0.5
  EXPECT_EQ(row.q[768 + 4], 2);   // x = 1.5
  EXPECT_EQ(row.q[768 + 7], -2);  // x = -1.5
  for (std::size_t j = 0; j < 1024; ++j) ASSERT_EQ(row.q[j], qs[j]) << "element " << j;
  for (std::size_t s = 0; s < 64; ++s) {  // ggml's bsums: per 16 quants
    int sum = 0;
    for (std::size_t j = 16 * s; j < 16 * s + 16; ++j) sum += qs[j];
    EXPECT_EQ(row.sum16[s], sum) << "group of 16 " << s;
  }
}

// The layout as documented (quant::kBytesQ4_Kx8): for group g and super-block
// i at (8 g nb + 8 i) 144 bytes: d at 2 r, dmin at 16 + 2 r, word u of the
// scales at 32 + 32 u + 4 r, nibble piece p at 128 + 32 p + 4 r; the rows
// after the last whole group unchanged; rows read back as they were; in
// place the same bytes.
TEST(KQuantInterleaved, LayoutAsDocumentedAndRowsReadBack) {
  std::mt19937_64 g(42);
  using L = q::Q4_KRows8;
  for (Index n : {1, 7, 8, 13, 24}) {
    constexpr Index nb = 2;
    const std::vector<unsigned char> rows =
        kq_random_blocks<Q4_KWeights>(static_cast<std::size_t>(n * nb), g);
    std::vector<unsigned char> il(rows.size());
    q::interleave_rows<L>(rows.data(), n, nb, il.data());
    std::vector<unsigned char> in_place = rows;
    q::interleave_rows_in_place<L>(in_place.data(), n, nb);
    EXPECT_TRUE(in_place == il) << n << " rows";
    const auto at = [](Index j, Index b) { return static_cast<std::size_t>(j * nb + b) * 144; };
    for (Index j = 0; j < n; ++j) {
      for (Index b = 0; b < nb; ++b) {
        const unsigned char* blk = rows.data() + at(j, b);
        if (j < n / 8 * 8) {
          const unsigned char* grp =
              il.data() + at(j / 8 * 8, 0) + static_cast<std::size_t>(b) * 1152;
          const auto r = static_cast<std::size_t>(j % 8);
          EXPECT_EQ(0, std::memcmp(grp + 2 * r, blk, 2)) << j;
          EXPECT_EQ(0, std::memcmp(grp + 16 + 2 * r, blk + 2, 2)) << j;
          for (std::size_t u = 0; u < 3; ++u)
            EXPECT_EQ(0, std::memcmp(grp + 32 + 32 * u + 4 * r, blk + 4 + 4 * u, 4)) << j;
          for (std::size_t p = 0; p < 32; ++p)
            EXPECT_EQ(0, std::memcmp(grp + 128 + 32 * p + 4 * r, blk + 16 + 4 * p, 4)) << j;
        } else {
          EXPECT_EQ(0, std::memcmp(il.data() + at(j, b), blk, 144)) << j;
        }
      }
      std::vector<unsigned char> back(static_cast<std::size_t>(nb) * 144);
      q::deinterleave_row<L>(il.data(), n, nb, j, back.data());
      EXPECT_EQ(0, std::memcmp(back.data(), rows.data() + at(j, 0), back.size())) << j;
    }
    for (Index j0 = 0; j0 < n; ++j0)
      for (Index count = 1; j0 + count <= n; ++count) {
        std::vector<unsigned char> run(static_cast<std::size_t>(count * nb) * 144);
        q::deinterleave_rows<L>(il.data(), n, nb, j0, count, run.data());
        EXPECT_EQ(0, std::memcmp(run.data(), rows.data() + at(j0, 0), run.size()))
            << "rows " << j0 << " + " << count << " of " << n;
      }
  }
}

// dot8_q4_k (AVX2 where built) equals dot8_q4_k_portable bit for bit, and
// both are within the stated bound of the double reference. Trials 0 and 1
// take the extremes: every nibble 15, every scale and min 63, X at +-127
// (trial 1: all at 127, the largest int16 sums of the AVX2 and 512-bit
// loops: 16 x 15 x 127).
TEST(KQuantInterleaved, Dot8EqualsPortableAndReference) {
  std::mt19937_64 g(43);
  for (Index nb : {1, 2, 5}) {
    const Index k = 256 * nb;
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<unsigned char> rows =
          kq_random_blocks<Q4_KWeights>(static_cast<std::size_t>(8 * nb), g);
      RowMatrix<float> x = kq_random(1, k, g, 1.0f);
      if (trial < 2) {
        for (std::size_t b = 0; b < rows.size(); b += 144) {
          std::memset(rows.data() + b + 4, 0xFF, 12);
          std::memset(rows.data() + b + 16, 0xFF, 128);
        }
        for (Index t = 0; t < k; ++t) x(0, t) = trial == 1 || t % 3 ? 1.0f : -1.0f;
      }
      kappa::detail::Q8KRow row;
      row.assign(x.data(), k);
      std::vector<int> xq;
      std::vector<float> xd;
      kq_q8k_reference(x.data(), k, xq, xd);
      std::vector<unsigned char> il(rows.size());
      q::interleave_rows<q::Q4_KRows8>(rows.data(), 8, nb, il.data());
      float fast[8], portable[8];
      kappa::detail::dot8_q4_k(il.data(), row, fast);
      kappa::detail::dot8_q4_k_portable(il.data(), row, portable);
      // each built loop on its own, whichever q4_0_wide() picks
#if KAPPA_QUANT_AVX2
      float avx2[8];
      kappa::detail::dot8_q4_k_avx2(il.data(), row, avx2);
#endif
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
      float wide[8];
      kappa::detail::dot8_q4_k_wide(il.data(), row, wide);
#endif
      for (int r = 0; r < 8; ++r) {
        const unsigned char* w = rows.data() + static_cast<std::size_t>(r * nb) * 144;
        EXPECT_EQ(fast[r], portable[r]) << "nb " << nb << " trial " << trial << " row " << r;
#if KAPPA_QUANT_AVX2
        EXPECT_EQ(avx2[r], portable[r]) << "avx2: nb " << nb << " trial " << trial << " row " << r;
#endif
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
        EXPECT_EQ(wide[r], portable[r])
            << "512-bit: nb " << nb << " trial " << trial << " row " << r;
#endif
        EXPECT_EQ(portable[r], kappa::detail::dot_q4_k_q8k(w, row)) << "row " << r;
        double tol = 0;
        const double ref = kq_q8k_dot_ref(w, xq, xd, k, tol);
        EXPECT_LE(std::fabs(static_cast<double>(portable[r]) - ref), tol)
            << "nb " << nb << " trial " << trial << " row " << r;
      }
    }
  }
}

// A whole matrix interleaved (25 groups and 3 rows after them): decode of
// 1..8 rows of X (both layouts of P, 1 and 2 threads bit-identical, through
// multiply() and through multiply_each's shared X) within the reference's
// bound; prefill, the cross-layout product, dense() and the rows as the
// matrix before interleaving gives them, bit for bit.
TEST(KQuantInterleaved, MatrixProductsMatchReferenceAndRows) {
  KqThreadsGuard guard;
  std::mt19937_64 g(44);
  const Index k = 512, m = 203;
  const std::vector<unsigned char> packed =
      kq_random_blocks<Q4_KWeights>(static_cast<std::size_t>(m * k / 256), g);
  using W = WeightMatrix<float, Q4_KWeights>;
  const W proj(k, m, BlocksAlong::kRows, std::span<const unsigned char>(packed));
  const W head(m, k, BlocksAlong::kCols, std::span<const unsigned char>(packed));
  const W proj8 = proj.interleaved(), head8 = head.interleaved();
  ASSERT_TRUE(proj8.is_interleaved() && head8.is_interleaved());
  EXPECT_FALSE(proj.is_interleaved());
  EXPECT_EQ(proj8.bytes(), proj.bytes());
  EXPECT_TRUE(proj8.dense() == proj.dense());
  const W viewed = W::already_interleaved(
      W(k, m, BlocksAlong::kRows, std::span<const unsigned char>(proj8.blocks())));
  EXPECT_TRUE(viewed.dense() == proj.dense());
  const std::size_t row_bytes = 2 * 144;
  for (Index n = 1; n <= 8; ++n) {
    const RowMatrix<float> x = kq_random(n, k, g, 1.0f);
    kappa::set_num_threads(1);
    RowMatrix<float> out(n, m), out_t(n, m), each(n, m);
    proj8.multiply(x, out);
    head8.multiply_transposed(x, out_t);
    EXPECT_TRUE(out == out_t) << n << " rows";
    std::array<kappa::MatrixRef<float>, 1> outs{each};
    kappa::multiply_each<float, W, 1>(x, {&viewed}, outs);
    EXPECT_TRUE(each == out) << n << " rows, multiply_each";
    for (Index r = 0; r < n; ++r) {
      std::vector<int> xq;
      std::vector<float> xd;
      kq_q8k_reference(x.row(r).data(), k, xq, xd);
      for (Index j = 0; j < m; ++j) {
        double tol = 0;
        const double ref =
            kq_q8k_dot_ref(packed.data() + static_cast<std::size_t>(j) * row_bytes, xq, xd, k, tol);
        ASSERT_LE(std::fabs(static_cast<double>(out(r, j)) - ref), tol)
            << n << " rows, row " << r << " col " << j;
      }
    }
#ifdef _OPENMP
    kappa::set_num_threads(2);
    RowMatrix<float> two(n, m), two_t(n, m);
    proj8.multiply(x, two);
    head8.multiply_transposed(x, two_t);
    EXPECT_TRUE(two == out && two_t == out) << n << " rows, 2 threads";
    kappa::set_num_threads(1);
#endif
  }
  for (Index n : {9, 40}) {  // prefill: the rows read back, the same products
    const RowMatrix<float> x = kq_random(n, k, g, 1.0f);
    RowMatrix<float> a(n, m), b(n, m);
    proj.multiply(x, a);
    proj8.multiply(x, b);
    EXPECT_TRUE(a == b) << n << " rows";
  }
  for (Index n : {1, 12}) {  // cross layout: X W^T with W packed along its rows
    const RowMatrix<float> x = kq_random(n, m, g, 1.0f);
    RowMatrix<float> a(n, k), b(n, k);
    proj.multiply_transposed(x, a);
    proj8.multiply_transposed(x, b);
    EXPECT_TRUE(a == b) << n << " rows";
  }
}

// The policies fit the concept; bytes() is the packed size.
TEST(KQuantWeightsPolicy, ConceptAndBytes) {
  static_assert(kappa::WeightStoragePolicy<Q4_KWeights>);
  static_assert(kappa::WeightStoragePolicy<Q6_KWeights>);
  static_assert(Q4_KWeights::kBlockWeights == 256 && Q4_KWeights::kBlockBytes == 144);
  static_assert(Q6_KWeights::kBlockWeights == 256 && Q6_KWeights::kBlockBytes == 210);
  const RowMatrix<float> w = RowMatrix<float>::Ones(4096, 64);
  EXPECT_EQ((WeightMatrix<float, Q4_KWeights>(w).bytes()), 64u * 16u * 144u);
  EXPECT_EQ((WeightMatrix<float, Q6_KWeights>(w).bytes()), 64u * 16u * 210u);
}

}  // namespace
