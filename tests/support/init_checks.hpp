// tests/support/init_checks.hpp - statistical checks of the seeded random
// initialization (init_random) that the heads, latent and nn tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "kappa/core/matrix.hpp"

namespace kappa::testing {

// Entries of a projection W (fan_in x fan_out) from init_random:
// U(-a, a], a = sqrt(3 / fan_in), mean 0, variance 1 / fan_in. Over n entries
// the mean square has relative standard deviation sqrt(0.8 / n) (for a
// uniform w, Var(w^2) / E[w^2]^2 = 9/5 - 1), the mean sd sqrt(1 / (fan_in n)):
// both are checked to 5 sd.
template <class M>
void expect_projection_init(const char* name, const M& w, Index fan_in) {
  SCOPED_TRACE(name);
  const double n = static_cast<double>(w.size()), var = 1.0 / static_cast<double>(fan_in);
  const auto wd = w.template cast<double>();
  EXPECT_LE(std::abs(wd.mean()), 5 * std::sqrt(var / n));
  EXPECT_NEAR(wd.array().square().mean() / var, 1.0, 5 * std::sqrt(0.8 / n));
  EXPECT_LE(wd.cwiseAbs().maxCoeff(), std::sqrt(3.0 / static_cast<double>(fan_in)));
}

}  // namespace kappa::testing
