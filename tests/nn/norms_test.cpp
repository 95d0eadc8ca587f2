// Tests for kappa/nn/norms.hpp: RMSNorm against its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/core/random.hpp"
#include "kappa/nn/feed_forward.hpp"
#include "kappa/nn/norms.hpp"
#include "support/init_checks.hpp"

namespace kappa {
namespace {

TEST(RMSNorm, MatchesDefinitionByHand) {
  // x = (3, 4): mean(x^2) = 12.5, rms = sqrt(12.5 + eps); g = (1, 2).
  RowMatrix<double> x(2, 2);
  x << 3, 4, 0, 0;
  RowVector<double> g(2);
  g << 1, 2;
  const RMSNorm<double> norm(g, 1e-6);
  const RowMatrix<double> y = norm(x);
  const double r = std::sqrt(12.5 + 1e-6);
  EXPECT_NEAR(y(0, 0), 3 / r, 1e-15);
  EXPECT_NEAR(y(0, 1), 8 / r, 1e-15);
  EXPECT_EQ(y(1, 0), 0.0);  // a zero row stays zero, no NaN
  EXPECT_EQ(y(1, 1), 0.0);
  const RMSNorm<float> no_eps(2, 0.0);
  const RowMatrix<float> z = no_eps(RowMatrix<float>::Zero(1, 2));
  EXPECT_TRUE(z.allFinite());
}

TEST(RMSNorm, Errors) {
  const RMSNorm<double> norm(3);
  EXPECT_THROW((void)norm(RowMatrix<double>::Ones(2, 4)), ShapeError);
  EXPECT_THROW(RMSNorm<double>(3, -1.0), std::invalid_argument);
}

// NaN in gives NaN out: a NaN row must not turn into zeros (which would hide
// the NaN inside, e.g., the latent cache).
TEST(RMSNorm, NaNRowsStayNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RowMatrix<double> x(3, 3);
  x << nan, nan, nan,  //
      1, nan, 2,       //
      1, 2, 2;
  for (const double eps : {1e-6, 0.0}) {
    const RowMatrix<double> y = RMSNorm<double>(3, eps)(x);
    EXPECT_TRUE(y.row(0).array().isNaN().all()) << y;
    EXPECT_TRUE(y.row(1).array().isNaN().all()) << y;
    EXPECT_TRUE(y.row(2).allFinite()) << y;
  }
  RowMatrix<float> xf(1, 2);
  xf << std::numeric_limits<float>::quiet_NaN(), 1.0f;
  EXPECT_TRUE(RMSNorm<float>(2)(xf).array().isNaN().all());
}

// Rows whose squares overflow (or underflow) normalize as the mathematics
// says: the result is scale-invariant up to eps.
template <class T>
void expect_scale_invariant(T big) {
  RowMatrix<T> x(2, 4);
  x << big, -big, big, -big,  //
      big, T(2) * big, T(-2) * big, T(4) * big;
  RowVector<T> g(4);
  g << 1, 2, 3, 4;
  const RMSNorm<T> norm(g, 1e-6);
  const RowMatrix<T> y = norm(x);
  ASSERT_TRUE(y.allFinite()) << y;
  // Row 0: rms = big, so y = (1, -2, 3, -4).
  for (Index j = 0; j < 4; ++j)
    EXPECT_NEAR(y(0, j), (j % 2 ? -1 : 1) * g(j), 1e-5) << "big = " << big;
  // Row 1: rms = big sqrt(25 / 4) = 2.5 big.
  const T want[4] = {T(1 / 2.5), T(2 * 2 / 2.5), T(-2 * 3 / 2.5), T(4 * 4 / 2.5)};
  for (Index j = 0; j < 4; ++j) EXPECT_NEAR(y(1, j), want[j], 1e-5) << "big = " << big;
  // eps = 0 as well.
  const RowMatrix<T> y0 = RMSNorm<T>(g, 0.0)(x);
  for (Index j = 0; j < 4; ++j) EXPECT_NEAR(y0(1, j), want[j], 1e-5) << "big = " << big;
}

TEST(RMSNorm, HugeRowsDoNotOverflowToZero) {
  expect_scale_invariant<float>(1e20f);
  expect_scale_invariant<float>(3e37f);
  expect_scale_invariant<double>(1e200);
  expect_scale_invariant<double>(1e307);
}

TEST(RMSNorm, TinyRowsWithoutEpsStillNormalize) {
  // eps = 0: 1e-30 squared underflows in float; the result is still x / rms(x).
  const RowMatrix<float> x = RowMatrix<float>::Constant(1, 4, 1e-30f);
  const RowMatrix<float> y = RMSNorm<float>(4, 0.0)(x);
  for (Index j = 0; j < 4; ++j) EXPECT_NEAR(y(0, j), 1.0f, 1e-5f) << y;
  const RowMatrix<double> xd = RowMatrix<double>::Constant(1, 4, 1e-200);
  const RowMatrix<double> yd = RMSNorm<double>(4, 0.0)(xd);
  for (Index j = 0; j < 4; ++j) EXPECT_NEAR(yd(0, j), 1.0, 1e-12) << yd;
  // With eps > 0 the tiny row is x / sqrt(eps): tiny but not NaN.
  const RowMatrix<float> ye = RMSNorm<float>(4, 1e-6)(x);
  EXPECT_TRUE(ye.allFinite());
  EXPECT_NEAR(ye(0, 0), 1e-27f, 1e-30f);
}

TEST(RMSNorm, NonFiniteEpsIsRejected) {
  EXPECT_THROW(RMSNorm<double>(3, std::numeric_limits<double>::infinity()), std::invalid_argument);
  EXPECT_THROW(RMSNorm<double>(3, std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  EXPECT_THROW(RMSNorm<double>(-1), kappa::RangeError);
}

// ---- Feed-forward layers: zero start and seeded random initialization ------------

using testing::expect_projection_init;

TEST(FeedForwardInit, MlpStartsAtZeroAndInitRandomIsSeeded) {
  Mlp<float, GeluTanh> a(64, 256), b(64, 256), other(64, 256);
  const RowMatrix<float> x = seeded_normal_matrix<float>(300, 64, 1, 1.0);
  EXPECT_TRUE(a.forward(x).isZero(0)) << "the documented zero start";
  a.set_weights(RowMatrix<float>::Zero(64, 256), RowVector<float>::Ones(256),
                RowMatrix<float>::Zero(256, 64), RowVector<float>::Ones(64));
  a.init_random(9);
  b.init_random(9);
  other.init_random(10);
  EXPECT_EQ(a.w_1().dense(), b.w_1().dense());
  EXPECT_EQ(a.w_2().dense(), b.w_2().dense());
  EXPECT_GT((a.w_1().dense() - other.w_1().dense()).cwiseAbs().maxCoeff(), 0.1f);
  expect_projection_init("W_1", a.w_1().dense(), 64);
  expect_projection_init("W_2", a.w_2().dense(), 256);
  EXPECT_EQ(a.forward(x), b.forward(x)) << "biases are removed";
  // Outputs of order 1 for inputs of order 1: X W_1 has unit variance, the
  // GELU keeps E[gelu(z)^2] = 0.43 of it (z ~ N(0, 1)), W_2 keeps that:
  // measured mean square in [0.2, 1].
  const RowMatrix<float> y = a.forward(x);
  const double ms = y.cast<double>().squaredNorm() / static_cast<double>(y.size());
  EXPECT_GE(ms, 0.2);
  EXPECT_LE(ms, 1.0);
}

TEST(FeedForwardInit, SwiGluStartsAtZeroAndInitRandomIsSeeded) {
  SwiGlu<double> a(64, 192), b(64, 192), other(64, 192);
  SwiGlu<double, Bf16Weights> half(64, 192);
  const RowMatrix<double> x = seeded_normal_matrix<double>(300, 64, 2, 1.0);
  EXPECT_TRUE(a.forward(x).isZero(0)) << "the documented zero start";
  a.init_random(5);
  b.init_random(5);
  other.init_random(6);
  half.init_random(5);
  EXPECT_EQ(a.w_gate_up().dense(), b.w_gate_up().dense());
  EXPECT_EQ(a.w_down().dense(), b.w_down().dense());
  EXPECT_GT((a.w_down().dense() - other.w_down().dense()).cwiseAbs().maxCoeff(), 0.1);
  expect_projection_init("W_gate", a.w_gate_up().dense().leftCols(192), 64);
  expect_projection_init("W_up", a.w_gate_up().dense().rightCols(192), 64);
  expect_projection_init("W_down", a.w_down().dense(), 192);
  // The same draws whatever the storage (bfloat16 rounds them: 2^-8 relative).
  EXPECT_LE((half.w_down().dense() - a.w_down().dense()).cwiseAbs().maxCoeff(),
            a.w_down().dense().cwiseAbs().maxCoeff() / 128);
  // E[(silu(g) u)^2] = E[silu(g)^2] = 0.36 for g, u ~ N(0, 1) independent;
  // measured mean square in [0.15, 1].
  const RowMatrix<double> y = a.forward(x);
  const double ms = y.squaredNorm() / static_cast<double>(y.size());
  EXPECT_GE(ms, 0.15);
  EXPECT_LE(ms, 1.0);
}

// The constructors from weights: the same layer as GatedMlp(d, d_ff) plus
// set_weights, and the definition silu(X W_gate) * (X W_up) W_down by plain
// loops; a weight of the wrong shape is named with both shapes.
TEST(FeedForwardInit, SwiGluFromWeightsMatchesDefinition) {
  const Index d = 6, f = 10, n = 4;
  const RowMatrix<double> wg = seeded_normal_matrix<double>(d, f, 11, 0.5);
  const RowMatrix<double> wu = seeded_normal_matrix<double>(d, f, 12, 0.5);
  const RowMatrix<double> wd = seeded_normal_matrix<double>(f, d, 13, 0.5);
  const RowMatrix<double> x = seeded_normal_matrix<double>(n, d, 14, 1.0);
  RowMatrix<double> want(n, d);
  for (Index r = 0; r < n; ++r) {
    std::vector<double> h(static_cast<std::size_t>(f));
    for (Index j = 0; j < f; ++j) {
      double g = 0, u = 0;
      for (Index t = 0; t < d; ++t) {
        g += x(r, t) * wg(t, j);
        u += x(r, t) * wu(t, j);
      }
      h[static_cast<std::size_t>(j)] = g / (1 + std::exp(-g)) * u;
    }
    for (Index c = 0; c < d; ++c) {
      double y = 0;
      for (Index j = 0; j < f; ++j) y += h[static_cast<std::size_t>(j)] * wd(j, c);
      want(r, c) = y;
    }
  }
  const SwiGlu<double> fused(wg, wu, wd);
  const SwiGlu<double> apart{WeightMatrix<double>(wg), WeightMatrix<double>(wu),
                             WeightMatrix<double>(wd)};
  SwiGlu<double> set(d, f);
  set.set_weights(wg, wu, wd);
  EXPECT_EQ(fused.d_model(), d);
  EXPECT_EQ(fused.d_ff(), f);
  EXPECT_FALSE(fused.split());
  EXPECT_TRUE(apart.split());
  EXPECT_EQ(fused.forward(x), set.forward(x)) << "the same layer as set_weights";
  EXPECT_LE((fused.forward(x) - want).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_LE((apart.forward(x) - want).cwiseAbs().maxCoeff(), 1e-12);
  const auto message = [&](auto make) {
    try {
      make();
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no ShapeError");
  };
  const std::string up = message([&] { SwiGlu<double>(wg, RowMatrix<double>(d, f + 1), wd); });
  EXPECT_NE(up.find("W_up"), std::string::npos) << up;
  EXPECT_NE(up.find("6 x 11"), std::string::npos) << up;
  EXPECT_NE(up.find("6 x 10"), std::string::npos) << up;
  const std::string down = message([&] {
    SwiGlu<double>(WeightMatrix<double>(wg), WeightMatrix<double>(wu),
                   WeightMatrix<double>(RowMatrix<double>(d, f)));
  });
  EXPECT_NE(down.find("W_down"), std::string::npos) << down;
  EXPECT_NE(down.find("6 x 10"), std::string::npos) << down;
  EXPECT_NE(down.find("10 x 6"), std::string::npos) << down;
}

}  // namespace
}  // namespace kappa
