// Tests for kappa/nn/norms.hpp: RMSNorm against its definition.
#include <gtest/gtest.h>

#include <cmath>

#include "kappa/nn/norms.hpp"

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

}  // namespace
}  // namespace kappa
