// A kernel written outside kappa plugs in: it only has to satisfy the concept.
// This one has no vectorized form, so kappa falls back to the scalar f(x).
#include <gtest/gtest.h>

#include <cmath>

#include "kappa/attention/attention.hpp"
#include "support/reference.hpp"

namespace user {

/// f(x) = 1 / (1 + x^2)... shifted: a Cauchy kernel peaked at x = 1.
struct Cauchy {
  template <kappa::Scalar T>
  T operator()(T x) const {
    return T(1) / (T(1) + (x - T(1)) * (x - T(1)));
  }
  double scale_for(kappa::Index d) const { return 1.0 / static_cast<double>(d); }
};

}  // namespace user

static_assert(kappa::Kernel<user::Cauchy>);
static_assert(kappa::check_kernel<user::Cauchy>());
static_assert(!kappa::ShiftInvariantKernel<user::Cauchy>);
static_assert(!kappa::HasVectorForm<user::Cauchy, float>);

namespace kappa {
namespace {

TEST(UserKernel, CauchyKernelMatchesReference) {
  const RowMatrix<double> q = testing::random_matrix<double>(6, 4, 1, 2.0);
  const RowMatrix<double> k = testing::random_matrix<double>(8, 4, 2, 2.0);
  const RowMatrix<double> v = testing::random_matrix<double>(8, 3, 3);
  const auto f = [](long double x) { return 1.0L / (1.0L + (x - 1) * (x - 1)); };
  const auto want = testing::reference_attention<double>(
      q, k, v, 0.25, f, false, [](Index i, Index j) { return j <= i + 2; });
  const RowMatrix<double> got = attention(q, k, v, user::Cauchy{}, CausalMask{});
  EXPECT_LE(testing::max_scaled_error(got, want, 1e-12, 1e-14), 1.0);
}

}  // namespace
}  // namespace kappa
