// Tests for kappa/core/stored_weights.hpp's fp16 view (detail::MappedF16):
// W's values are fp16 (quant::fp16_from_float of random floats) stored as
// GGUF does, P = W^T (BlocksAlong::kRows) or P = W (kCols); the reference is
// X times those values widened exactly (quant::fp16_to_float) in double.
// Tolerance: k 2^-23 sum |x| |w| per output (float summation), both
// products, decode (1..3 rows) and prefill (9, 40 rows), reduction lengths
// that are and are not multiples of the 32-wide vector loop; threads 1..3
// give the same bits; rows_into reads kCols rows exactly.
//
// multiply_each (kappa/core/quant_weights.hpp), the products of one X in one
// parallel region: its outputs equal each matrix's own multiply() bit for
// bit, for every format AsStoredWeights holds and for compile-time storages,
// on 1 to 3 threads, for decode rows and a prompt; a mismatched output
// names both shapes.
#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "kappa/core/allocator.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/stored_weights.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/expect_error.hpp"
#include "support/sanitized.hpp"

namespace {

using kappa::BlocksAlong;
using kappa::Index;
using kappa::RowMatrix;
using kappa::testing::expect_error;
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
  expect_error<kappa::ShapeError>([&] { proj.multiply(x, out); },
                                  {"2 x 63", "64 x 10", "product X W (f16 weights)"});
}

// The bf16 storage's products: both shapes and the storage in the message,
// for X W and X W^T.
TEST(Bf16Weights, ShapeMismatchNamesBothShapesAndTheStorage) {
  const kappa::WeightMatrix<float, kappa::Bf16Weights> w(RowMatrix<float>::Ones(64, 10));
  RowMatrix<float> x(2, 63), out(2, 10);
  expect_error<kappa::ShapeError>([&] { w.multiply(x, out); },
                                  {"2 x 63", "64 x 10", "product X W (bf16 weights)"});
  RowMatrix<float> xt(2, 10), outt(2, 63);
  expect_error<kappa::ShapeError>([&] { w.multiply_transposed(xt, outt); },
                                  {"product X W^T (bf16 weights)", "(rows of W)"});
  RowMatrix<float> ok_x(2, 64), ok_out(2, 10);
  EXPECT_NO_THROW(w.multiply(ok_x, ok_out));
}

using Stored = kappa::WeightMatrix<float, kappa::AsStoredWeights>;

RowMatrix<float> normal_matrix(Index rows, Index cols, std::mt19937_64& g) {
  std::normal_distribution<float> n(0.0f, 0.5f);
  RowMatrix<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

/// W (k x m) in format `f` as AsStoredWeights holds it, from random values.
Stored stored_matrix(int f, Index k, Index m, std::mt19937_64& g,
                     std::vector<std::shared_ptr<const void>>& keep) {
  const RowMatrix<float> w = normal_matrix(k, m, g);
  switch (f) {
    case 0:
      return Stored(w);  // dense
    case 1:
      return Stored(kappa::WeightMatrix<float, kappa::Bf16Weights>(w));  // P = W^T
    case 2:                                                              // P = W: the X P loop
      return Stored(kappa::WeightMatrix<float, kappa::Bf16Weights>(w, BlocksAlong::kCols));
    case 3:
      return Stored(kappa::WeightMatrix<float, kappa::Q8_0Weights>(w));
    case 4:
      return Stored(kappa::WeightMatrix<float, kappa::Q4_0Weights>(w));
    case 5:
      return Stored(kappa::WeightMatrix<float, kappa::Q4_KWeights>(w));
    case 6:
      return Stored(kappa::WeightMatrix<float, kappa::Q6_KWeights>(w));
    case 7:  // blocks along the columns: the slow product, one thread
      return Stored(kappa::WeightMatrix<float, kappa::Q8_0Weights>(w, BlocksAlong::kCols));
    case 8: {  // an F32 view of W^T, as GGUF stores a projection
      auto p = std::make_shared<RowMatrix<float>>(w.transpose());
      keep.push_back(p);
      return Stored(kappa::detail::MappedDense<float>(k, m, BlocksAlong::kRows, p->data(), p));
    }
    case 9: {  // an F32 view of W itself
      auto p = std::make_shared<RowMatrix<float>>(w);
      keep.push_back(p);
      return Stored(kappa::detail::MappedDense<float>(k, m, BlocksAlong::kCols, p->data(), p));
    }
    case 10: {
      const F16Matrix h = f16_matrix(k, m, BlocksAlong::kRows, g);
      return Stored(
          kappa::detail::MappedF16<float>(k, m, BlocksAlong::kRows, h.bytes->data(), h.bytes));
    }
    default: {
      const F16Matrix h = f16_matrix(k, m, BlocksAlong::kCols, g);
      return Stored(
          kappa::detail::MappedF16<float>(k, m, BlocksAlong::kCols, h.bytes->data(), h.bytes));
    }
  }
}

/// multiply_each of x with `w` against each w[i]->multiply(x, .), bit for
/// bit, on 1 to 3 threads (the products one by one on the same count).
template <class W, std::size_t N>
void expect_each_matches(const RowMatrix<float>& x, const std::array<const W*, N>& w) {
  for (const int threads : {1, 2, 3}) {
    if (kappa::set_num_threads(threads) != threads) continue;  // a build without OpenMP
    std::array<RowMatrix<float>, N> one, each;
    for (std::size_t i = 0; i < N; ++i) {
      one[i].resize(x.rows(), w[i]->cols());
      w[i]->multiply(x, one[i]);
      each[i] = RowMatrix<float>::Constant(x.rows(), w[i]->cols(), -7.0f);
    }
    std::array<kappa::MatrixRef<float>, N> out =
        [&each]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<kappa::MatrixRef<float>, N>{kappa::MatrixRef<float>(each[I])...};
    }
    (std::make_index_sequence<N>{});
    kappa::multiply_each<float>(x, w, out);
    for (std::size_t i = 0; i < N; ++i)
      EXPECT_TRUE(each[i] == one[i]) << "product " << i << ", " << threads << " threads";
  }
}

TEST(MultiplyEach, EqualsTheProductsOneByOneInEveryHeldFormat) {
  F16ThreadsGuard guard;
  std::mt19937_64 g(3);
  const Index k = 256;
  std::vector<std::shared_ptr<const void>> keep;
  for (int f = 0; f < 12; ++f) {
    // Three widths: two split over the threads, one too narrow to split.
    const Stored a = stored_matrix(f, k, 224, g, keep);
    const Stored b = stored_matrix(f, k, 96, g, keep);
    const Stored c = stored_matrix(f, k, 32, g, keep);
    for (const Index n : {1, 3, 9}) {  // decode rows, and a prompt
      SCOPED_TRACE(a.format() + " (case " + std::to_string(f) + "), " + std::to_string(n) +
                   " rows");
      expect_each_matches(normal_matrix(n, k, g), std::array<const Stored*, 3>{&a, &b, &c});
    }
  }
}

// A llama.cpp Q4_K_M file's mix: W^Q, W^K in Q4_K and W^V in Q6_K beside an
// F32 view and a Q8_0 matrix, X quantized once for all the block formats.
TEST(MultiplyEach, MixedFormatsShareOneQuantizedX) {
  F16ThreadsGuard guard;
  std::mt19937_64 g(4);
  std::vector<std::shared_ptr<const void>> keep;
  const Stored q = stored_matrix(5, 512, 512, g, keep);
  const Stored kk = stored_matrix(5, 512, 128, g, keep);
  const Stored v = stored_matrix(6, 512, 128, g, keep);
  const Stored f32 = stored_matrix(8, 512, 64, g, keep);
  const Stored q8 = stored_matrix(3, 512, 80, g, keep);
  for (const Index n : {1, 2})
    expect_each_matches(normal_matrix(n, 512, g),
                        std::array<const Stored*, 5>{&q, &kk, &v, &f32, &q8});
}

// A compile-time storage (no per-matrix dispatch) takes the same path.
TEST(MultiplyEach, CompileTimeStorages) {
  F16ThreadsGuard guard;
  std::mt19937_64 g(5);
  const kappa::WeightMatrix<float, kappa::Q4_0Weights> a(normal_matrix(128, 160, g));
  const kappa::WeightMatrix<float, kappa::Q4_0Weights> b(normal_matrix(128, 64, g));
  expect_each_matches(normal_matrix(1, 128, g),
                      std::array<const kappa::WeightMatrix<float, kappa::Q4_0Weights>*, 2>{&a, &b});
  const kappa::WeightMatrix<float, kappa::Bf16Weights> c(normal_matrix(128, 160, g));
  expect_each_matches(normal_matrix(2, 128, g),
                      std::array<const kappa::WeightMatrix<float, kappa::Bf16Weights>*, 1>{&c});
  const kappa::WeightMatrix<float> d(normal_matrix(128, 160, g));
  const kappa::WeightMatrix<float> e(normal_matrix(128, 70, g));
  expect_each_matches(normal_matrix(1, 128, g),
                      std::array<const kappa::WeightMatrix<float>*, 2>{&d, &e});
}

TEST(MultiplyEach, MismatchedOutputNamesBothShapes) {
  std::mt19937_64 g(6);
  std::vector<std::shared_ptr<const void>> keep;
  for (const int f : {0, 1, 4, 8, 10}) {
    const Stored a = stored_matrix(f, 64, 80, g, keep);
    const Stored b = stored_matrix(f, 64, 80, g, keep);
    const RowMatrix<float> x = normal_matrix(1, 64, g);
    RowMatrix<float> ya(1, 80), yb(1, 79);  // the second output one column short
    std::array<kappa::MatrixRef<float>, 2> out{kappa::MatrixRef<float>(ya),
                                               kappa::MatrixRef<float>(yb)};
    SCOPED_TRACE(a.format());
    const std::string what = expect_error<kappa::ShapeError>(
        [&] {
          kappa::multiply_each<float>(x, std::array<const Stored*, 2>{&a, &b}, out);
        },
        {"1 x 64"});
    // (An F32 view names its stored layout, W^T: 80 x 64.)
    EXPECT_TRUE(what.find("64 x 80") != std::string::npos ||
                what.find("80 x 64") != std::string::npos)
        << what;
  }
}

// DecodeInput quantizes the X of its first caller: a second X is a logic
// error, not the first X's Q8_0 rows handed out again.
TEST(MultiplyEach, SharedInputServesOneX) {
  std::mt19937_64 g(7);
  const RowMatrix<float> x = normal_matrix(2, 64, g), other = normal_matrix(2, 64, g);
  kappa::detail::DecodeInput shared;
  const auto& q8 = shared.q8_rows<float>(x);
  EXPECT_EQ(q8.size(), 2u);
  EXPECT_EQ(&shared.q8_rows<float>(x), &q8);  // made once
  EXPECT_THROW((void)shared.q8_rows<float>(other), std::logic_error);
  EXPECT_THROW((void)shared.q8_rows<float>(x.topRows(1)), std::logic_error);
}

// WeightMatrix::zeros (the placeholders of a fresh layer, in untouched zero
// pages): exactly zero in every storage that has it, through dense(), the
// decode and the prefill products, at the packed size of the format; and a
// fresh attention layer with such storage still outputs exactly zero (the
// documented start), with the shapes set_weights expects.
template <class W>
void expect_zero_matrix(const W& w, Index rows, Index cols, std::size_t bytes, const char* name) {
  EXPECT_EQ(w.rows(), rows) << name;
  EXPECT_EQ(w.cols(), cols) << name;
  EXPECT_EQ(w.bytes(), bytes) << name;
  EXPECT_TRUE(w.dense().isZero(0)) << name;
  std::mt19937_64 g(5);
  for (const Index n : {Index{1}, Index{3}, Index{40}}) {  // decode and prefill
    const RowMatrix<float> x = normal_matrix(n, rows, g);
    RowMatrix<float> out = RowMatrix<float>::Constant(n, cols, 1.0f);
    w.multiply(x, out);
    EXPECT_TRUE(out.isZero(0)) << name << ", " << n << " rows";
  }
}

TEST(ZeroWeights, ExactlyZeroInEveryStorageThatHasThem) {
  constexpr Index k = 256, m = 40;  // k: a whole Q4_K / Q6_K super-block
  constexpr auto km = static_cast<std::size_t>(k * m);
  expect_zero_matrix(Stored::zeros(k, m), k, m, 4 * km, "as stored");
  expect_zero_matrix(kappa::WeightMatrix<float, kappa::Bf16Weights>::zeros(k, m), k, m, 2 * km,
                     "bf16");
  expect_zero_matrix(kappa::WeightMatrix<float, kappa::Q8_0Weights>::zeros(k, m), k, m,
                     km / 32 * q::kBytesQ8_0, "q8_0");
  expect_zero_matrix(kappa::WeightMatrix<float, kappa::Q4_0Weights>::zeros(k, m), k, m,
                     km / 32 * q::kBytesQ4_0, "q4_0");
  expect_zero_matrix(kappa::WeightMatrix<float, kappa::Q4_KWeights>::zeros(k, m), k, m,
                     km / 256 * q::kBytesQ4_K, "q4_k");
  expect_zero_matrix(kappa::WeightMatrix<float, kappa::Q6_KWeights>::zeros(k, m), k, m,
                     km / 256 * q::kBytesQ6_K, "q6_k");
  // The block dimension must hold whole blocks, as for the constructor from W.
  expect_error<kappa::ShapeError>(
      [] { (void)kappa::WeightMatrix<float, kappa::Q4_KWeights>::zeros(96, 8); }, {"256"});
}

template <class Storage>
void expect_fresh_layer_zero() {
  using Attn = kappa::MultiHeadAttention<float, kappa::kernels::Softmax, kappa::GroupedQuery,
                                         kappa::NoPosition, Storage>;
  const kappa::HeadsConfig c{.d_in = 64, .n_heads = 4, .d_head = 16, .n_kv_heads = 2};
  Attn a(c);
  std::mt19937_64 g(8);
  const RowMatrix<float> x = normal_matrix(5, 64, g);
  EXPECT_TRUE(a.forward(x).isZero(0)) << Storage::kName;
  // The placeholders have the shapes the setters check against.
  const RowMatrix<float> w_q = normal_matrix(64, 64, g), w_kv = normal_matrix(64, 32, g);
  a.set_weights(w_q, w_kv, w_kv, w_q);
  EXPECT_FALSE(a.forward(x).isZero(0)) << Storage::kName;
}

TEST(ZeroWeights, FreshAttentionLayerOutputsZero) {
  expect_fresh_layer_zero<kappa::AsStoredWeights>();
  expect_fresh_layer_zero<kappa::Q4_0Weights>();
}

// retain_freed_memory(): a layer's worth of activations (four 3 MiB blocks)
// comes from malloc's heap, not from mappings of their own, and stays there
// once freed, for the next layer. (AddressSanitizer's allocator replaces
// glibc's: it ignores mallopt, and glibc's statistics are not the memory the
// test allocates.)
TEST(RetainFreedMemory, KeepsALayersActivationsOnTheHeapForTheNext) {
#if defined(__GLIBC__)
  if (kappa::testing::kSanitized) GTEST_SKIP() << "AddressSanitizer's allocator is not glibc's";
  ASSERT_TRUE(kappa::retain_freed_memory());
  constexpr std::size_t kBlock = std::size_t{3} << 20;
  const struct mallinfo2 before = mallinfo2();
  std::vector<std::vector<char>> blocks;
  for (int i = 0; i < 4; ++i) blocks.emplace_back(kBlock, static_cast<char>(i + 1));
  EXPECT_EQ(mallinfo2().hblks, before.hblks) << "blocks of 3 MiB served from the heap";
  blocks.clear();
  EXPECT_GE(mallinfo2().fordblks, 4 * kBlock) << "the freed blocks kept for reuse";
#else
  EXPECT_FALSE(kappa::retain_freed_memory());
#endif
}

}  // namespace
