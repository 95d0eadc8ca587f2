// Tests for kappa/attention/approximation.hpp: compare_to_exact() reports the
// relative Frobenius errors of Y and of Z^-1 A against hand-computed values
// and the long-double reference attention, times the calls, and measures
// the peak memory of a call that is known to allocate a given amount.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "kappa/attention/approximation.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::random_matrix;

TEST(RelativeFrobeniusError, HandComputed) {
  RowMatrix<double> a(2, 2), b(2, 2);
  a << 1, 2, 3, 4;
  b << 1, 2, 3, 3;  // ||a - b|| = 1, ||b||^2 = 1 + 4 + 9 + 9 = 23
  EXPECT_NEAR(relative_frobenius_error(a, b), 1.0 / std::sqrt(23.0), 1e-15);
  EXPECT_EQ(relative_frobenius_error(b, b), 0.0);
  const RowMatrix<float> af = a.cast<float>(), bf = b.cast<float>();
  EXPECT_NEAR(relative_frobenius_error(af, bf), 1.0 / std::sqrt(23.0), 1e-7);
}

TEST(RelativeFrobeniusError, ZeroReferenceAndNonFinite) {
  const RowMatrix<double> zero = RowMatrix<double>::Zero(2, 3);
  RowMatrix<double> one = RowMatrix<double>::Ones(2, 3);
  EXPECT_EQ(relative_frobenius_error(zero, zero), 0.0);
  EXPECT_EQ(relative_frobenius_error(one, zero), std::numeric_limits<double>::infinity());
  one(1, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(relative_frobenius_error(one, RowMatrix<double>::Ones(2, 3).eval()),
            std::numeric_limits<double>::infinity());
  EXPECT_THROW(relative_frobenius_error(zero, RowMatrix<double>::Zero(3, 2).eval()), ShapeError);
}

TEST(CompareToExact, ExactAgainstItselfIsZeroAndWeightsAreAbsentForAPlainCallable) {
  const RowMatrix<float> q = random_matrix<float>(20, 8, 1), k = random_matrix<float>(30, 8, 2);
  const RowMatrix<float> v = random_matrix<float>(30, 5, 3);
  const auto r = compare_to_exact(q, k, v, [](const auto& q_, const auto& k_, const auto& v_) {
    return attention(q_, k_, v_);
  });
  EXPECT_EQ(r.output_error, 0.0);
  EXPECT_TRUE(std::isnan(r.weights_error));  // a plain callable has no weights
  EXPECT_EQ(r.runs, 3);
  EXPECT_GT(r.approx_seconds, 0.0);
  EXPECT_GT(r.exact_seconds, 0.0);
  EXPECT_TRUE(std::isfinite(r.speedup()));
}

TEST(CompareToExact, ScaledOutputHasThatRelativeError) {
  // Y~ = 1.01 Y has relative error exactly 0.01; the reference Y is the
  // long-double definition, so this also checks that the default exact side
  // is softmax with s = 1/sqrt(d_QK).
  const RowMatrix<double> q = random_matrix<double>(16, 8, 4), k = random_matrix<double>(24, 8, 5);
  const RowMatrix<double> v = random_matrix<double>(24, 6, 6);
  const RowMatrix<double> y_ref = testing::reference_attention<double>(
      q, k, v, 1.0 / std::sqrt(8.0), nullptr, true, [](Index, Index) { return true; });
  const auto r = compare_to_exact(q, k, v, [&](const auto&, const auto&, const auto&) {
    return RowMatrix<double>(1.01 * y_ref);
  });
  EXPECT_NEAR(r.output_error, 0.01, 1e-12);
}

TEST(CompareToExact, WeightsErrorOfUniformWeightsAgainstAPlainLoop) {
  // The approximation "every key gets weight 1/N_KV": W~ = 1/N_KV, Y~ = mean
  // of V. Both errors are checked against the long-double reference.
  const Index n_q = 12, n_kv = 18;
  const RowMatrix<double> q = random_matrix<double>(n_q, 4, 7, 2.0);
  const RowMatrix<double> k = random_matrix<double>(n_kv, 4, 8, 2.0);
  const RowMatrix<double> v = random_matrix<double>(n_kv, 3, 9);
  RowMatrix<double> w_ref;
  const RowMatrix<double> y_ref = testing::reference_attention<double>(
      q, k, v, 0.5, nullptr, true, [](Index, Index) { return true; }, &w_ref);
  const RowMatrix<double> w_uniform = RowMatrix<double>::Constant(n_q, n_kv, 1.0 / n_kv);
  const RowMatrix<double> y_uniform = w_uniform * v;
  const auto approx =
      with_weights([&](const auto&, const auto&, const auto&) { return y_uniform; },
                   [&](const auto&, const auto&, const auto&) { return w_uniform; });
  const auto r = compare_to_exact(q, k, v, approx);
  const double want_y = (y_uniform - y_ref).norm() / y_ref.norm();
  const double want_w = (w_uniform - w_ref).norm() / w_ref.norm();
  EXPECT_GT(want_w, 0.1);  // the case is not trivial
  EXPECT_NEAR(r.output_error, want_y, 1e-12);
  EXPECT_NEAR(r.weights_error, want_w, 1e-12);
  const auto r_off = compare_to_exact(q, k, v, approx, ExactAttention<>{}, {.weights = false});
  EXPECT_TRUE(std::isnan(r_off.weights_error));
}

TEST(CompareToExact, AReusedExactRunGivesTheSameErrors) {
  const RowMatrix<double> q = random_matrix<double>(12, 8, 19),
                          k = random_matrix<double>(14, 8, 20);
  const RowMatrix<double> v = random_matrix<double>(14, 3, 21);
  const auto approx =
      with_weights([](const auto& q_, const auto& k_,
                      const auto& v_) { return attention(q_, k_, v_, kernels::Softmax{0.3}); },
                   [](const auto& q_, const auto& k_, const auto& v_) {
                     return attention_details(q_, k_, v_, kernels::Softmax{0.3}).weights;
                   });
  const ExactRun<double> run = run_exact(q, k, v);
  ASSERT_TRUE(run.weights.has_value());
  const auto fresh = compare_to_exact(q, k, v, approx);
  const auto reused = compare_to_exact(q, k, v, approx, run);
  EXPECT_GT(fresh.output_error, 0.01);
  EXPECT_EQ(reused.output_error, fresh.output_error);
  EXPECT_EQ(reused.weights_error, fresh.weights_error);
  EXPECT_EQ(reused.exact_seconds, run.seconds);
  // A run made from other inputs is refused.
  const ExactRun<double> other = run_exact(q.topRows(5).eval(), k, v);
  EXPECT_THROW(compare_to_exact(q, k, v, approx, other), ShapeError);
}

TEST(CompareToExact, MaskedReference) {
  // The exact side with a causal mask: the causal output compared with the
  // unmasked one has a nonzero error, and with the causal one zero.
  const RowMatrix<float> q = random_matrix<float>(10, 8, 10), k = random_matrix<float>(10, 8, 11);
  const RowMatrix<float> v = random_matrix<float>(10, 4, 12);
  const auto causal = exact_attention(kernels::Softmax{}, CausalMask{});
  const auto same = compare_to_exact(q, k, v, causal, causal);
  EXPECT_EQ(same.output_error, 0.0);
  EXPECT_EQ(same.weights_error, 0.0);
  const auto unmasked = compare_to_exact(q, k, v, ExactAttention<>{}, causal);
  const RowMatrix<float> y_c = attention(q, k, v, kernels::Softmax{}, CausalMask{});
  const RowMatrix<float> y_u = attention(q, k, v);
  EXPECT_NEAR(unmasked.output_error, (y_u - y_c).norm() / y_c.norm(), 1e-6);
  EXPECT_GT(unmasked.output_error, 0.05);
}

TEST(CompareToExact, TimesTheCalls) {
  const RowMatrix<double> q = random_matrix<double>(4, 4, 13), k = q, v = q;
  const auto r = compare_to_exact(q, k, v,
                                  [](const auto& q_, const auto& k_, const auto& v_) {
                                    std::this_thread::sleep_for(std::chrono::milliseconds(15));
                                    return attention(q_, k_, v_);
                                  },
                                  ExactAttention<>{}, {.runs = 2});
  EXPECT_EQ(r.runs, 2);
  EXPECT_GE(r.approx_seconds, 0.015);
  EXPECT_LT(r.exact_seconds, r.approx_seconds);
  EXPECT_LT(r.speedup(), 1.0);
}

TEST(CompareToExact, PeakMemoryOfAKnownAllocation) {
  if (!peak_memory_supported()) GTEST_SKIP() << "no /proc/self/clear_refs here";
  // The approximation touches a 16 MiB scratch matrix; the exact side on 8 x 8
  // inputs needs almost nothing.
  const RowMatrix<double> q = random_matrix<double>(8, 8, 14), k = q, v = q;
  constexpr Index kRows = 256, kCols = 8192;  // 2 Mi doubles = 16 MiB
  const auto r = compare_to_exact(q, k, v,
                                  [&](const auto& q_, const auto& k_, const auto& v_) {
                                    RowMatrix<double> scratch =
                                        RowMatrix<double>::Constant(kRows, kCols, 1.0);
                                    RowMatrix<double> y = attention(q_, k_, v_);
                                    y(0, 0) += 1e-300 * scratch.sum();
                                    return y;
                                  },
                                  ExactAttention<>{}, {.runs = 1});
  ASSERT_TRUE(r.approx_peak_bytes.has_value());
  ASSERT_TRUE(r.exact_peak_bytes.has_value());
  const double mib = 1024.0 * 1024.0;
  EXPECT_GE(static_cast<double>(*r.approx_peak_bytes) / mib, 15.0);
  EXPECT_LE(static_cast<double>(*r.approx_peak_bytes) / mib, 20.0);
  EXPECT_LE(static_cast<double>(*r.exact_peak_bytes) / mib, 4.0);
  const auto off = compare_to_exact(q, k, v, ExactAttention<>{}, ExactAttention<>{},
                                    {.runs = 1, .memory = false});
  EXPECT_FALSE(off.approx_peak_bytes.has_value());
}

TEST(CompareToExact, BadInputThrows) {
  const RowMatrix<float> q = random_matrix<float>(4, 8, 15), k = random_matrix<float>(5, 8, 16);
  const RowMatrix<float> v = random_matrix<float>(5, 3, 17);
  const auto exact = [](const auto& q_, const auto& k_, const auto& v_) {
    return attention(q_, k_, v_);
  };
  EXPECT_THROW(compare_to_exact(q, k, random_matrix<float>(6, 3, 18), exact), ShapeError);
  EXPECT_THROW(compare_to_exact(q, k, v, exact, ExactAttention<>{}, {.runs = 0}), RangeError);
  EXPECT_THROW(compare_to_exact(q, k, v,
                                [](const auto&, const auto&, const auto&) {
                                  return RowMatrix<float>::Zero(4, 2).eval();
                                }),
               ShapeError);
}

}  // namespace
}  // namespace kappa
