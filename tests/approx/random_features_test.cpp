// Tests for kappa/attention/random_features.hpp.
//
// References: a plain-loop evaluation of the feature maps' formulas from the
// drawn projection; the exact kernel exp(s q.k) for the statistical tests (the
// mean over many seeds must be within 4 standard errors, sigma / sqrt(draws),
// of it at every checkpoint, and for i.i.d. positive features the sample
// variance must match the closed form); kappa::attention with the same
// kernel for the linear-time and recurrent paths; softmax attention for the
// convergence in m.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kappa/attention/approximation.hpp"
#include "kappa/attention/linear.hpp"
#include "kappa/attention/random_features.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using kernels::PositiveRandomFeatures;
using kernels::Projection;
using kernels::RandomFeatureOptions;
using kernels::TrigonometricRandomFeatures;
using testing::random_matrix;

template <class T>
class RandomFeaturesTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RandomFeaturesTest, Scalars);

// phi by the formulas of the header, in long double, from the drawn W.
template <class T>
RowMatrix<T> plain_positive(const RowMatrix<T>& x, const RowMatrix<double>& w, double s,
                            bool shift_rows) {
  const Index m = w.rows();
  RowMatrix<T> phi(x.rows(), m);
  const long double r = std::sqrt((long double)s);
  for (Index i = 0; i < x.rows(); ++i) {
    long double n2 = 0;
    for (Index c = 0; c < x.cols(); ++c) n2 += (r * x(i, c)) * (r * x(i, c));
    std::vector<long double> e(static_cast<std::size_t>(m));
    long double mx = -1e300L;
    for (Index j = 0; j < m; ++j) {
      long double dot = 0;
      for (Index c = 0; c < x.cols(); ++c) dot += (long double)w(j, c) * r * x(i, c);
      e[static_cast<std::size_t>(j)] = dot - n2 / 2;
      mx = std::max(mx, e[static_cast<std::size_t>(j)]);
    }
    for (Index j = 0; j < m; ++j)
      phi(i, j) = static_cast<T>(std::exp(e[static_cast<std::size_t>(j)] - (shift_rows ? mx : 0)) /
                                 std::sqrt((long double)m));
  }
  return phi;
}

template <class T>
RowMatrix<T> plain_trig(const RowMatrix<T>& x, const RowMatrix<double>& w, double s,
                        bool with_norm_factor) {
  const Index f = w.rows();
  RowMatrix<T> phi(x.rows(), 2 * f);
  const long double r = std::sqrt((long double)s);
  for (Index i = 0; i < x.rows(); ++i) {
    long double n2 = 0;
    for (Index c = 0; c < x.cols(); ++c) n2 += (r * x(i, c)) * (r * x(i, c));
    const long double factor =
        (with_norm_factor ? std::exp(n2 / 2) : 1.0L) / std::sqrt((long double)f);
    for (Index j = 0; j < f; ++j) {
      long double dot = 0;
      for (Index c = 0; c < x.cols(); ++c) dot += (long double)w(j, c) * r * x(i, c);
      phi(i, j) = static_cast<T>(factor * std::cos(dot));
      phi(i, f + j) = static_cast<T>(factor * std::sin(dot));
    }
  }
  return phi;
}

template <class T>
void expect_close(const RowMatrix<T>& got, const RowMatrix<T>& want, double rel) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  EXPECT_LE(relative_frobenius_error(got, want), rel);
}

TYPED_TEST(RandomFeaturesTest, PositiveFeaturesMatchAPlainLoop) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  const RowMatrix<T> x = random_matrix<T>(6, 3, 1, 1.5);
  for (const Projection p : {Projection::kIid, Projection::kOrthogonal}) {
    const PositiveRandomFeatures f(3, 5, 42, {.projection = p, .scale = 0.7});
    expect_close<T>(f.feature_map<T>(x, FeatureRole::kKey),
                    plain_positive<T>(x, f.projection(), 0.7, false), tol);
    expect_close<T>(f.feature_map<T>(x, FeatureRole::kQuery),
                    plain_positive<T>(x, f.projection(), 0.7, true), tol);
    const PositiveRandomFeatures raw(3, 5, 42, {.projection = p, .scale = 0.7, .stabilize = false});
    expect_close<T>(raw.feature_map<T>(x, FeatureRole::kQuery),
                    plain_positive<T>(x, raw.projection(), 0.7, false), tol);
  }
  // The default scale is 1/sqrt(d_QK).
  const PositiveRandomFeatures f(3, 4, 9);
  EXPECT_DOUBLE_EQ(f.scale(), 1.0 / std::sqrt(3.0));
  expect_close<T>(f.feature_map<T>(x, FeatureRole::kKey),
                  plain_positive<T>(x, f.projection(), 1.0 / std::sqrt(3.0), false), tol);
}

TYPED_TEST(RandomFeaturesTest, TrigonometricFeaturesMatchAPlainLoop) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  const RowMatrix<T> x = random_matrix<T>(6, 3, 2, 1.5);
  for (const Projection p : {Projection::kIid, Projection::kOrthogonal}) {
    const TrigonometricRandomFeatures f(3, 8, 43, {.projection = p, .scale = 0.6});
    ASSERT_EQ(f.projection().rows(), 4);  // m/2 frequencies
    expect_close<T>(f.feature_map<T>(x, FeatureRole::kKey),
                    plain_trig<T>(x, f.projection(), 0.6, true), tol);
    expect_close<T>(f.feature_map<T>(x, FeatureRole::kQuery),
                    plain_trig<T>(x, f.projection(), 0.6, false), tol);
    const TrigonometricRandomFeatures raw(3, 8, 43,
                                          {.projection = p, .scale = 0.6, .stabilize = false});
    expect_close<T>(raw.feature_map<T>(x, FeatureRole::kQuery),
                    plain_trig<T>(x, raw.projection(), 0.6, true), tol);
  }
}

TEST(RandomFeatures, ProjectionsSeedsAndRedraw) {
  const Index d = 8, m = 4096;
  const PositiveRandomFeatures iid(d, m, 5, {.projection = Projection::kIid});
  const PositiveRandomFeatures orth(d, m, 5, {.projection = Projection::kOrthogonal});
  // Rows are N(0, I): E|w|^2 = d, sd of |w|^2 is sqrt(2 d); mean of 4096 rows
  // within 4 standard errors (4 * 4 / 64 = 0.25).
  for (const auto* f : {&iid, &orth}) {
    const double mean_norm2 = f->projection().rowwise().squaredNorm().mean();
    EXPECT_NEAR(mean_norm2, static_cast<double>(d), 0.25);
    // Each coordinate has variance 1 (4 standard errors of a variance: 4 sqrt(2/4096)).
    const double var0 = f->projection().col(0).squaredNorm() / static_cast<double>(m);
    EXPECT_NEAR(var0, 1.0, 0.09);
  }
  // Rows of one orthogonal block are orthogonal; rows of different blocks are not.
  const auto& w = orth.projection();
  for (Index a = 0; a < d; ++a)
    for (Index b = a + 1; b < d; ++b)
      EXPECT_LE(std::abs(w.row(a).dot(w.row(b))), 1e-12 * w.row(a).norm() * w.row(b).norm());
  EXPECT_GT(std::abs(w.row(0).dot(w.row(d))), 1e-6);
  // A seed reproduces W; another seed or redraw() changes it.
  PositiveRandomFeatures f(d, 16, 77);
  const RowMatrix<double> w77 = f.projection();
  EXPECT_EQ(PositiveRandomFeatures(d, 16, 77).projection(), w77);
  f.redraw(78);
  EXPECT_EQ(f.seed(), 78u);
  EXPECT_GT((f.projection() - w77).norm(), 1.0);
  f.redraw(77);
  EXPECT_EQ(f.projection(), w77);
}

// The estimate phi(q).phi(k) of exp(s q.k) over `draws` seeds.
template <class F>
std::vector<double> estimates(Index d, Index m, Projection p, const RowMatrix<double>& q,
                              const RowMatrix<double>& k, int draws) {
  std::vector<double> out;
  for (int seed = 1; seed <= draws; ++seed) {
    const F f(d, m, static_cast<std::uint64_t>(seed), {.projection = p, .stabilize = false});
    out.push_back((f.template feature_map<double>(q, FeatureRole::kQuery) *
                   f.template feature_map<double>(k, FeatureRole::kKey).transpose())(0, 0));
  }
  return out;
}

template <class F>
void expect_unbiased(Projection p, double size = 1.0, double* variance_out = nullptr) {
  const Index d = 4, m = 4;
  RowMatrix<double> q(1, d), k(1, d);
  q << 0.9, -0.4, 0.3, 0.6;
  k << 0.5, 0.8, -0.2, 0.7;
  q *= size;
  k *= size;
  const double exact = std::exp(q.row(0).dot(k.row(0)) / std::sqrt(double(d)));
  const std::vector<double> x = estimates<F>(d, m, p, q, k, 4000);
  double sum = 0, sum2 = 0;
  std::size_t n = 0;
  for (const std::size_t checkpoint : {250u, 1000u, 4000u}) {
    for (; n < checkpoint; ++n) {
      sum += x[n];
      sum2 += x[n] * x[n];
    }
    const double mean = sum / double(n), var = (sum2 - double(n) * mean * mean) / double(n - 1);
    const double standard_error = std::sqrt(var / double(n));
    EXPECT_LE(std::abs(mean - exact), 4 * standard_error)
        << F::kName << ", " << n << " draws: mean " << mean << ", exact " << exact;
    EXPECT_GT(standard_error, 0.0);
    if (variance_out) *variance_out = var;
  }
}

TEST(RandomFeatures, PositiveIsUnbiasedWithTheClosedFormVariance) {
  expect_unbiased<PositiveRandomFeatures>(Projection::kIid);
  expect_unbiased<PositiveRandomFeatures>(Projection::kOrthogonal);
  // Var of one feature's product: exp(2|q'+k'|^2 - |q'|^2 - |k'|^2) - exp(2 q'.k'),
  // divided by m = 4. The sample variance of 4000 draws is within 15 % (its
  // standard error for these vectors is about 4 %, by simulation; the
  // vectors are halved because the estimate's tails grow with |q' + k'|).
  double var_iid = 0;
  expect_unbiased<PositiveRandomFeatures>(Projection::kIid, 0.5, &var_iid);
  RowMatrix<double> q(1, 4), k(1, 4);
  q << 0.9, -0.4, 0.3, 0.6;
  k << 0.5, 0.8, -0.2, 0.7;
  q *= 0.5 * std::sqrt(0.5);  // x' = sqrt(s) x, s = 1/2
  k *= 0.5 * std::sqrt(0.5);
  const double per_feature =
      std::exp(2 * (q + k).squaredNorm() - q.squaredNorm() - k.squaredNorm()) -
      std::exp(2 * q.row(0).dot(k.row(0)));
  EXPECT_NEAR(var_iid / (per_feature / 4), 1.0, 0.15);
}

TEST(RandomFeatures, TrigonometricIsUnbiased) {
  expect_unbiased<TrigonometricRandomFeatures>(Projection::kIid);
  expect_unbiased<TrigonometricRandomFeatures>(Projection::kOrthogonal);
}

template <class F>
double mean_squared_error(Projection p) {
  const Index d = 8, m = 8;
  const RowMatrix<double> qs = random_matrix<double>(6, d, 11),
                          ks = random_matrix<double>(6, d, 12);
  double total = 0;
  for (Index pair = 0; pair < qs.rows(); ++pair) {
    const RowMatrix<double> q = qs.row(pair), k = ks.row(pair);
    const double exact = std::exp(q.row(0).dot(k.row(0)) / std::sqrt(double(d)));
    for (const double e : estimates<F>(d, m, p, q, k, 400)) total += (e - exact) * (e - exact);
  }
  return total;
}

TEST(RandomFeatures, OrthogonalProjectionsLowerTheVariance) {
  // Summed over 6 pairs (q, k) and 400 seeds each, m = d = 8.
  const double pos_iid = mean_squared_error<PositiveRandomFeatures>(Projection::kIid);
  const double pos_orth = mean_squared_error<PositiveRandomFeatures>(Projection::kOrthogonal);
  EXPECT_LT(pos_orth, 0.9 * pos_iid) << pos_orth << " vs " << pos_iid;
  const double trig_iid = mean_squared_error<TrigonometricRandomFeatures>(Projection::kIid);
  const double trig_orth = mean_squared_error<TrigonometricRandomFeatures>(Projection::kOrthogonal);
  EXPECT_LT(trig_orth, 0.9 * trig_iid) << trig_orth << " vs " << trig_iid;
}

template <class F>
void expect_converges(Projection p) {
  // N = 64 tokens: the error of Y at m = N is below the error at m = N / 8,
  // for each of five fixed seeds.
  const Index n = 64, d = 16;
  // (V has mean 1/2 so that Y is not near zero and its relative error means
  // something.)
  const RowMatrix<double> q = random_matrix<double>(n, d, 21), k = random_matrix<double>(n, d, 22);
  const RowMatrix<double> v = random_matrix<double>(n, 8, 23).array() + 0.5;
  const RowMatrix<double> y = attention(q, k, v);
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const double coarse = relative_frobenius_error(
        linear_attention(q, k, v, F(d, n / 8, seed, {.projection = p})), y);
    const double fine =
        relative_frobenius_error(linear_attention(q, k, v, F(d, n, seed, {.projection = p})), y);
    EXPECT_LT(fine, coarse) << F::kName << " seed " << seed;
    EXPECT_LT(fine, 0.15) << F::kName << " seed " << seed;
  }
}

TEST(RandomFeatures, ErrorShrinksFromMEqualsNOver8ToN) {
  expect_converges<PositiveRandomFeatures>(Projection::kIid);
  expect_converges<PositiveRandomFeatures>(Projection::kOrthogonal);
  expect_converges<TrigonometricRandomFeatures>(Projection::kOrthogonal);
}

TEST(RandomFeatures, ManyFeaturesApproachSoftmaxAttention) {
  // m = 4096 orthogonal positive features on small logits: within 2 % of
  // softmax attention (the error shrinks like 1/sqrt(m)).
  const RowMatrix<double> q = random_matrix<double>(16, 8, 31),
                          k = random_matrix<double>(24, 8, 32);
  const RowMatrix<double> v = random_matrix<double>(24, 4, 33).array() + 0.5;
  const PositiveRandomFeatures f(8, 4096, 3);
  EXPECT_LT(relative_frobenius_error(linear_attention(q, k, v, f), attention(q, k, v)), 0.02);
}

TYPED_TEST(RandomFeaturesTest, StabilizationLeavesTheWeightsUnchanged) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-12;
  const RowMatrix<T> q = random_matrix<T>(10, 8, 41, 2.0), k = random_matrix<T>(12, 8, 42, 2.0);
  const RowMatrix<T> v = random_matrix<T>(12, 4, 43);
  const PositiveRandomFeatures on(8, 32, 7), off(8, 32, 7, {.stabilize = false});
  expect_close<T>(attention_details(q, k, v, on).weights, attention_details(q, k, v, off).weights,
                  tol);
  const TrigonometricRandomFeatures t_on(8, 32, 7), t_off(8, 32, 7, {.stabilize = false});
  expect_close<T>(attention_details(q, k, v, t_on).weights,
                  attention_details(q, k, v, t_off).weights, tol);
  // Large queries: every unshifted feature exp(w.q' - |q'|^2/2) underflows
  // to (nearly) 0, below 1e-30; the shifted ones keep the row's
  // largest feature at 1/sqrt(m) and give the same weights as a double
  // computation of the shifted map.
  const RowMatrix<T> big_q = random_matrix<T>(4, 8, 44, 60.0);
  EXPECT_LT(static_cast<double>(off.feature_map<T>(big_q, FeatureRole::kQuery).maxCoeff()), 1e-30);
  const RowMatrix<T> phi = on.feature_map<T>(big_q, FeatureRole::kQuery);
  EXPECT_NEAR(static_cast<double>(phi.maxCoeff()), 1.0 / std::sqrt(32.0), 1e-6);
  const RowMatrix<T> y = linear_attention(big_q, k, v, on);
  EXPECT_TRUE(y.allFinite());
  EXPECT_GT(y.norm(), T(0.1));
}

TYPED_TEST(RandomFeaturesTest, LinearTimeRecurrentAndMultiHeadPaths) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const RowMatrix<T> q = random_matrix<T>(40, 8, 51), k = random_matrix<T>(40, 8, 52);
  const RowMatrix<T> v = random_matrix<T>(40, 4, 53);
  const PositiveRandomFeatures f(8, 16, 1);
  expect_close<T>(linear_attention(q, k, v, f), attention(q, k, v, f), tol);
  expect_close<T>(linear_attention(q, k, v, f, CausalMask{}), attention(q, k, v, f, CausalMask{}),
                  tol);
  // The recurrent state: keys appended in two parts give the same as one.
  LinearAttentionState<T, PositiveRandomFeatures> state(f);
  state.append(k.topRows(15), v.topRows(15));
  state.append(k.bottomRows(25), v.bottomRows(25));
  expect_close<T>(state.query(q), attention(q, k, v, f), tol);
  const TrigonometricRandomFeatures t(8, 16, 1);
  expect_close<T>(linear_attention(q, k, v, t), attention(q, k, v, t), 100 * tol);
  // Multi-head attention with the kernel (one projection shared by the heads):
  // with many features it is near the softmax layer of the same weights.
  const HeadsConfig config{.d_in = 16, .n_heads = 2};
  MultiHeadAttention<T> exact(config);
  exact.init_random(3);
  MultiHeadAttention<T, PositiveRandomFeatures> approx(config, PositiveRandomFeatures(8, 2048, 4));
  approx.init_random(3);
  const RowMatrix<T> x = random_matrix<T>(20, 16, 54);
  EXPECT_LT(relative_frobenius_error(approx.forward(x), exact.forward(x)), 0.15);
}

TEST(RandomFeatures, BadParametersThrow) {
  EXPECT_THROW(PositiveRandomFeatures(8, 0, 1), RangeError);
  EXPECT_THROW(PositiveRandomFeatures(0, 8, 1), RangeError);
  EXPECT_THROW(PositiveRandomFeatures(8, -3, 1), RangeError);
  EXPECT_THROW(TrigonometricRandomFeatures(8, 0, 1), RangeError);
  EXPECT_THROW(TrigonometricRandomFeatures(8, 7, 1), std::invalid_argument);
  EXPECT_THROW(PositiveRandomFeatures(8, 8, 1, {.scale = -1.0}), std::invalid_argument);
  EXPECT_THROW(PositiveRandomFeatures(8, 8, 1, {.scale = std::nan("")}), std::invalid_argument);
  try {
    PositiveRandomFeatures(8, 0, 1);
  } catch (const RangeError& e) {
    EXPECT_NE(std::string(e.what()).find("got 0"), std::string::npos) << e.what();
  }
  try {
    TrigonometricRandomFeatures(8, 7, 1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("got 7"), std::string::npos) << e.what();
  }
  const PositiveRandomFeatures f(8, 8, 1);
  EXPECT_THROW((void)f.feature_map<float>(RowMatrix<float>::Zero(3, 7), FeatureRole::kQuery),
               ShapeError);
  EXPECT_THROW(
      (void)attention(RowMatrix<double>::Zero(3, 4).eval(), RowMatrix<double>::Zero(3, 4).eval(),
                      RowMatrix<double>::Zero(3, 2).eval(), f),
      ShapeError);
}

}  // namespace
}  // namespace kappa
