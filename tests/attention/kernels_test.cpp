// Tests for kappa/attention/kernels.hpp: each f_kappa against its formula,
// scalar and vectorized forms agree, default and custom scales.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/kernels.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

template <class T>
class KernelsTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelsTest, Scalars);

template <class K, class T>
std::vector<T> vectorized(const K& k, std::vector<T> x) {
  k.apply(x.data(), static_cast<Index>(x.size()));
  return x;
}

TYPED_TEST(KernelsTest, SoftmaxIsExpWithInverseSqrtScale) {
  using T = TypeParam;
  kernels::Softmax k;
  EXPECT_DOUBLE_EQ(k.scale_for(64), 0.125);
  EXPECT_DOUBLE_EQ(k.scale_for(4), 0.5);
  EXPECT_NEAR(static_cast<double>(k(T(1))), std::exp(1.0), 1e-6);
  k.scale = 2.0;
  EXPECT_DOUBLE_EQ(k.scale_for(64), 2.0);
  const std::vector<T> x{T(-3), T(0), T(0.5), T(7)};
  const auto y = vectorized(k, x);
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::exp(x[i]), 1e-6 * std::exp(x[i]));
  static_assert(ShiftInvariantKernel<kernels::Softmax>);
}

// Gemma 2's soft-capped scores: f(x) = exp(c tanh(x / c)); attention with it
// equals softmax(c tanh(s Q K^T / c)) by the definition, causal mask too.
TYPED_TEST(KernelsTest, SoftCappedIsSoftmaxOfCappedScores) {
  using T = TypeParam;
  const kernels::SoftCapped k(5.0, 0.25);
  EXPECT_DOUBLE_EQ(k.scale_for(64), 0.25);
  EXPECT_DOUBLE_EQ(kernels::SoftCapped(50.0).scale_for(64), 0.125);
  EXPECT_NEAR(static_cast<double>(k(T(100))), std::exp(5.0 * std::tanh(20.0)), 1e-4);
  const std::vector<T> x{T(-30), T(0), T(0.5), T(7)};
  const auto y = vectorized(k, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(5.0 * std::tanh(static_cast<double>(x[i]) / 5.0));
    EXPECT_NEAR(static_cast<double>(y[i]), want, 1e-5 * want);
    EXPECT_NEAR(static_cast<double>(k(x[i])), want, 1e-5 * want);
  }
  static_assert(!ShiftInvariantKernel<kernels::SoftCapped>);
  // Scores large enough that the cap matters: q, k of amplitude 3, d 8;
  // N_Q = N_KV, so the causal mask is j <= i.
  const RowMatrix<T> q = testing::random_matrix<T>(9, 8, 1, 3.0),
                     kk = testing::random_matrix<T>(9, 8, 2, 3.0),
                     v = testing::random_matrix<T>(9, 5, 3);
  const auto f = [](long double s) { return std::exp(5.0L * std::tanh(s / 5.0L)); };
  using Tol = testing::Tolerance<T>;
  EXPECT_LE(
      testing::max_scaled_error(attention(q, kk, v, k),
                                testing::reference_attention<T>(q, kk, v, 0.25, f, false,
                                                                [](Index, Index) { return true; }),
                                Tol::kRel, Tol::kAbs),
      1.0);
  EXPECT_LE(testing::max_scaled_error(
                attention(q, kk, v, k, CausalMask{}),
                testing::reference_attention<T>(q, kk, v, 0.25, f, false,
                                                [](Index i, Index j) { return j <= i; }),
                Tol::kRel, Tol::kAbs),
            1.0);
  EXPECT_THROW(kernels::SoftCapped(0.0), std::invalid_argument);
  EXPECT_THROW(kernels::SoftCapped(81.0), std::invalid_argument);
}

TYPED_TEST(KernelsTest, LinearIsIdentityWithUnitScale) {
  using T = TypeParam;
  kernels::Linear k;
  EXPECT_DOUBLE_EQ(k.scale_for(64), 1.0);
  EXPECT_EQ(k(T(-2.5)), T(-2.5));
  EXPECT_EQ(vectorized(k, std::vector<T>{T(-1), T(3), T(2), T(4), T(5)}),
            (std::vector<T>{T(-1), T(3), T(2), T(4), T(5)}));
  static_assert(!ShiftInvariantKernel<kernels::Linear>);
}

TYPED_TEST(KernelsTest, ReluClampsNegatives) {
  using T = TypeParam;
  kernels::ReLU k;
  EXPECT_DOUBLE_EQ(k.scale_for(16), 0.25);
  EXPECT_EQ(k(T(-2)), T(0));
  EXPECT_EQ(k(T(2)), T(2));
  // (5 entries: GCC 12 warns -Warray-bounds on Eigen packets over a 3-float array)
  EXPECT_EQ(vectorized(k, std::vector<T>{T(-1), T(0), T(3), T(-4), T(5)}),
            (std::vector<T>{T(0), T(0), T(3), T(0), T(5)}));
}

TYPED_TEST(KernelsTest, PolynomialIsPowerOfShiftedScore) {
  using T = TypeParam;
  const kernels::Polynomial cube(3, 1.0);
  EXPECT_EQ(cube.degree(), 3);
  EXPECT_EQ(cube(T(2)), T(27));      // (2 + 1)^3
  EXPECT_EQ(cube(T(-3)), T(-8));     // (-3 + 1)^3
  const kernels::Polynomial square;  // degree 2, offset 0
  EXPECT_EQ(square(T(-3)), T(9));
  const std::vector<T> x{T(-3), T(0), T(2), T(0.5)};
  const auto y = vectorized(cube, x);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], cube(x[i]), 1e-6);
  EXPECT_THROW(kernels::Polynomial(0), std::invalid_argument);
}

TYPED_TEST(KernelsTest, EluPlusOneFeatureMapIsPositive) {
  using T = TypeParam;
  RowMatrix<T> x(2, 3);
  x << T(-2), T(0), T(1.5), T(-0.5), T(3), T(-30);
  const RowMatrix<T> phi = kernels::EluPlusOne{}.feature_map<T>(x, FeatureRole::kQuery);
  ASSERT_EQ(phi.rows(), 2);
  ASSERT_EQ(phi.cols(), 3);
  const double expect[2][3] = {{std::exp(-2.0), 1.0, 2.5}, {std::exp(-0.5), 4.0, std::exp(-30.0)}};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(static_cast<double>(phi(i, j)), expect[i][j], 1e-6 * expect[i][j] + 1e-30);
      EXPECT_GT(phi(i, j), T(0));
    }
}

// ---- Hardening ------------------------------------------------------------------

TYPED_TEST(KernelsTest, PolynomialCostDoesNotGrowWithTheDegree) {
  using T = TypeParam;
  const auto t0 = std::chrono::steady_clock::now();
  const kernels::Polynomial huge(std::numeric_limits<int>::max());  // odd
  EXPECT_EQ(huge(T(1)), T(1));
  EXPECT_EQ(huge(T(-1)), T(-1));
  EXPECT_EQ(huge(T(0.5)), T(0));
  const auto y = vectorized(huge, std::vector<T>{T(1), T(-1), T(0.5), T(0)});
  EXPECT_EQ(y, (std::vector<T>{T(1), T(-1), T(0), T(0)}));
  // A 2 x 3 problem with that kernel returns at once.
  const RowMatrix<T> q = RowMatrix<T>::Constant(2, 3, T(0.1));
  (void)attention(q, q, q, huge, NoMask{});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
  // Moderate degrees match the power to rounding, scalar and vectorized alike.
  const kernels::Polynomial p7(7, 0.25);
  const std::vector<T> x{T(-1.5), T(0.3), T(0.9), T(2)};
  const auto v7 = vectorized(p7, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::pow(static_cast<double>(x[i]) + 0.25, 7);
    EXPECT_NEAR(static_cast<double>(p7(x[i])), want, 1e-5 * std::abs(want));
    EXPECT_EQ(v7[i], p7(x[i]));
  }
}

TYPED_TEST(KernelsTest, NonFiniteScaleOrOffsetIsRejectedNamingTheValue) {
  using T = TypeParam;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const RowMatrix<T> q = RowMatrix<T>::Constant(2, 3, T(0.1));
  EXPECT_THROW((void)attention(q, q, q, kernels::Softmax{nan}), std::invalid_argument);
  EXPECT_THROW((void)attention(q, q, q, kernels::Softmax{inf}), std::invalid_argument);
  EXPECT_THROW((void)attention(q, q, q, kernels::Linear{-inf}), std::invalid_argument);
  EXPECT_THROW((void)attention(q, q, q, kernels::ReLU{nan}, CausalMask{}), std::invalid_argument);
  EXPECT_THROW((void)attention_details(q, q, q, kernels::Softmax{nan}), std::invalid_argument);
  // One query row takes the decode path; it is checked as well.
  EXPECT_THROW((void)attention(RowMatrix<T>(q.topRows(1)), q, q, kernels::Softmax{nan}),
               std::invalid_argument);
  EXPECT_THROW(kernels::Polynomial(2, nan), std::invalid_argument);
  EXPECT_THROW(kernels::Polynomial(2, 0.0, inf), std::invalid_argument);
  std::string msg;
  try {
    (void)attention(q, q, q, kernels::Softmax{nan});
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
  EXPECT_NE(msg.find("softmax"), std::string::npos) << msg;
  // Large finite scales are fine (softmax subtracts the row maximum).
  const RowMatrix<T> y = attention(q, q, q, kernels::Softmax{1e30});
  EXPECT_TRUE(y.allFinite());
}

// The concepts accept the built-in kernels and reject what is not a kernel.
static_assert(Kernel<kernels::Softmax> && ScoreKernel<kernels::Softmax>);
static_assert(Kernel<kernels::Linear> && Kernel<kernels::ReLU> && Kernel<kernels::Polynomial>);
static_assert(Kernel<kernels::EluPlusOne> && FeatureMapKernel<kernels::EluPlusOne>);
static_assert(!ScoreKernel<kernels::EluPlusOne>);
static_assert(!Kernel<int>);
struct OnlyScale {
  double scale_for(Index) const { return 1; }
};
static_assert(!Kernel<OnlyScale>);
struct NoScale {
  template <Scalar T>
  T operator()(T x) const {
    return x;
  }
};
static_assert(!Kernel<NoScale>);

}  // namespace
}  // namespace kappa
