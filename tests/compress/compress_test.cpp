// Tests for kappa/heads/compress.hpp: compressing a grouped-query layer into
// latent form against PyTorch golden data (tests/reference/
// make_compress_golden.py: the original layer and the layers with keys and
// values from the exact rank-r truncation of [W^K W^V], weight-space and data
// aware), exactness at full rank for MHA, GQA and MQA, the randomized factor
// against the exact one, decoding through the latent cache, the cache bytes,
// and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kappa/attention/masks.hpp"
#include "kappa/heads/compress.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/io/npy.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;

template <class T>
RowMatrix<T> compress_npy(const std::string& name) {
  return io::read_npy_matrix<T>(std::string(KAPPA_TEST_DATA_DIR) + "/compress/" + name + ".npy");
}

// Tolerance for outputs against golden data per scalar type (relative to
// max |Y|): rounding of a few small GEMMs, a QR and an SVD.
template <class T>
double compress_tol() {
  return sizeof(T) == 4 ? 2e-4 : 1e-10;
}

template <class T>
using Gqa = MultiHeadAttention<T, kernels::Softmax, GroupedQuery>;

// The golden layer: d 24, H 4, H_kv 2, d_h 6, d_v 5.
template <class T>
Gqa<T> golden_gqa() {
  Gqa<T> gqa({.d_in = 24, .n_heads = 4, .d_head = 6, .n_kv_heads = 2, .d_v = 5});
  gqa.set_weights(compress_npy<T>("w_q"), compress_npy<T>("w_k"), compress_npy<T>("w_v"),
                  compress_npy<T>("w_o"));
  return gqa;
}

template <class T>
class CompressTest : public ::testing::Test {};
using CompressScalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CompressTest, CompressScalars);

TYPED_TEST(CompressTest, GoldenLayerAndItsTruncations) {
  using T = TypeParam;
  const Gqa<T> gqa = golden_gqa<T>();
  const RowMatrix<T> x = compress_npy<T>("x");
  ASSERT_LT(
      max_scaled_error(gqa.forward(x, CausalMask{}), compress_npy<T>("y"), compress_tol<T>(), 0),
      1.0);
  const RowMatrix<T> s_w = compress_npy<T>("s_w");
  for (Index r : {4, 8, 16}) {
    const RowMatrix<T> y_r = compress_npy<T>("y_r" + std::to_string(r));
    const auto exact = compress_to_latent(gqa, r, ExactTruncatedSvd{});
    EXPECT_LT(max_scaled_error(exact.layer.forward(x), y_r, compress_tol<T>(), 0), 1.0) << r;
    const auto naive = compress_to_latent<NaiveLatent>(gqa, r, ExactTruncatedSvd{});
    EXPECT_LT(max_scaled_error(naive.layer.forward(x), y_r, compress_tol<T>(), 0), 1.0) << r;
    EXPECT_LT(
        max_scaled_error(exact.singular_values.transpose(), s_w.leftCols(r), compress_tol<T>(), 0),
        1.0);
    // The randomized factor with a full sample (l = 22 columns) is the exact truncation.
    const auto full_sample = compress_to_latent(
        gqa, r, RandomizedTruncatedSvd{{.oversampling = 22, .power_iterations = 0, .seed = 3}});
    EXPECT_LT(max_scaled_error(full_sample.layer.forward(x), y_r, compress_tol<T>(), 0), 1.0) << r;
    // Data-aware: the truncation of X_cal [W^K W^V].
    const auto data = compress_to_latent_on(gqa, r, compress_npy<T>("x_cal"), ExactTruncatedSvd{});
    EXPECT_LT(max_scaled_error(data.layer.forward(x), compress_npy<T>("yd_r" + std::to_string(r)),
                               compress_tol<T>(), 0),
              1.0)
        << r;
    // Frobenius error of W_r: the tail of the golden spectrum over its norm.
    const double tail = static_cast<double>(s_w.rightCols(22 - r).norm() / s_w.norm());
    EXPECT_NEAR(exact.factor_error, tail, sizeof(T) == 4 ? 1e-5 : 1e-12) << r;
  }
}

TYPED_TEST(CompressTest, RandomizedErrorTracksTheExactTruncation) {
  using T = TypeParam;
  const Gqa<T> gqa = golden_gqa<T>();
  const RowMatrix<T> x = compress_npy<T>("x"), y = gqa.forward(x, CausalMask{});
  double previous = 1e30;
  for (Index r : {4, 8, 16}) {
    const auto exact = compress_to_latent(gqa, r, ExactTruncatedSvd{});
    const auto rand = compress_to_latent(
        gqa, r, RandomizedTruncatedSvd{{.oversampling = 4, .power_iterations = 2, .seed = 9}});
    const double e_exact = static_cast<double>((exact.layer.forward(x) - y).norm() / y.norm());
    const double e_rand = static_cast<double>((rand.layer.forward(x) - y).norm() / y.norm());
    EXPECT_LT(e_exact, previous) << r;  // more rank, less error
    previous = e_exact;
    EXPECT_LE(rand.factor_error, 1.05 * exact.factor_error) << r;
    EXPECT_NEAR(e_rand, e_exact, 0.1 * e_exact) << r;
  }
}

// Full rank: min(d, H_kv (d_h + d_v)) reproduces the layer to rounding.
template <class T, class Grouping>
void expect_full_rank_exact(Index n_kv, Index d_in) {
  MultiHeadAttention<T, kernels::Softmax, Grouping> mha(
      {.d_in = d_in, .n_heads = 4, .d_head = 8, .n_kv_heads = n_kv, .d_v = 6});
  mha.init_random(17);
  const Index full = std::min(d_in, n_kv * (8 + 6));
  const RowMatrix<T> x = testing::random_matrix<T>(11, d_in, 5);
  const RowMatrix<T> y = mha.forward(x, CausalMask{});
  const auto c = compress_to_latent(mha, full);
  EXPECT_LT(max_scaled_error(c.layer.forward(x), y, sizeof(T) == 4 ? 5e-5 : 1e-12, 0), 1.0)
      << "H_kv " << n_kv << ", d_in " << d_in;
  EXPECT_LT(c.factor_error, sizeof(T) == 4 ? 1e-5 : 1e-13);
  // One token at a time through the latent cache equals the full pass.
  LatentCache<T> cache(c.layer.config());
  for (Index i = 0; i < x.rows(); ++i) {
    const RowMatrix<T> yi = c.layer.forward_cached(x.row(i), cache);
    EXPECT_LT(max_scaled_error(yi, y.row(i), sizeof(T) == 4 ? 5e-5 : 1e-12, 0), 1.0) << i;
  }
  EXPECT_EQ(c.bytes_per_token_before,
            static_cast<std::size_t>(n_kv * (8 + 6)) * sizeof(T));  // H_kv (d_h + d_v)
  EXPECT_EQ(c.bytes_per_token_after, static_cast<std::size_t>(full + 2) * sizeof(T));
}

TYPED_TEST(CompressTest, FullRankIsExactForMhaGqaMqa) {
  using T = TypeParam;
  expect_full_rank_exact<T, MultiHead>(4, 32);     // W: 32 x 56, full rank 32
  expect_full_rank_exact<T, GroupedQuery>(2, 40);  // W: 40 x 28, full rank 28
  expect_full_rank_exact<T, MultiQuery>(1, 20);    // W: 20 x 14, full rank 14
}

TEST(Compress, KeyBiasIsDroppedExactlyOtherBiasesAreRejected) {
  Gqa<double> gqa = golden_gqa<double>();
  const RowMatrix<double> x = compress_npy<double>("x");
  const RowVector<double> b_k = testing::random_matrix<double>(1, 12, 3);
  gqa.set_biases(RowVector<double>(), b_k, RowVector<double>(), RowVector<double>());
  const auto c = compress_to_latent(gqa, 22);
  EXPECT_LT(max_scaled_error(c.layer.forward(x), gqa.forward(x, CausalMask{}), 1e-12, 0), 1.0);
  gqa.set_biases(RowVector<double>(), b_k, testing::random_matrix<double>(1, 10, 4),
                 RowVector<double>());
  try {
    (void)compress_to_latent(gqa, 8);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sizes 0, 10, 0"), std::string::npos) << e.what();
  }
}

TEST(Compress, BadRankAndShapesThrowNamingTheValues) {
  const Gqa<double> gqa = golden_gqa<double>();
  for (Index r : {0, 23}) {
    try {
      (void)compress_to_latent(gqa, r);
      ADD_FAILURE() << "no exception for d_c = " << r;
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("d_c = " + std::to_string(r)), std::string::npos) << m;
      EXPECT_NE(m.find("= 22]"), std::string::npos) << m;
    }
  }
  const RowMatrix<double> x_cal = compress_npy<double>("x_cal");
  EXPECT_THROW((void)compress_to_latent_on(gqa, 4, x_cal.leftCols(20)), ShapeError);
  // Calibration of 6 tokens: rank at most 6.
  EXPECT_THROW((void)compress_to_latent_on(gqa, 7, x_cal.topRows(6)), std::invalid_argument);
  MultiHeadAttention<double> cross({.d_in = 16, .n_heads = 2, .d_kv_in = 12});
  EXPECT_THROW((void)compress_to_latent(cross, 4), ShapeError);
}

}  // namespace
}  // namespace kappa
