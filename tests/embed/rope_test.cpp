// RoPE: hand values, the relative-position property, offsets for decoding,
// heads and column blocks, errors. Golden comparisons are in golden_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kappa/embed/rope.hpp"
#include "support/reference.hpp"

using kappa::Index;
using kappa::RowMatrix;

template <class C>
struct Conv {};
template <class T>
class RopeTest : public ::testing::Test {};
using Cases =
    ::testing::Types<std::pair<float, kappa::RotateHalf>, std::pair<float, kappa::Interleaved>,
                     std::pair<double, kappa::RotateHalf>, std::pair<double, kappa::Interleaved>>;
TYPED_TEST_SUITE(RopeTest, Cases);

TYPED_TEST(RopeTest, HandValues) {
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
  const kappa::Rope<T, C> rope(4);  // theta_0 = 1, theta_1 = 10000^(-2/4) = 0.01
  EXPECT_DOUBLE_EQ(rope.theta(0), 1.0);
  EXPECT_NEAR(rope.theta(1), 0.01, 1e-17);
  RowMatrix<T> x(3, 4);
  x.setZero();
  x(0, 0) = 1;  // position 0: unchanged
  x(2, 0) = 1;  // position 2: first pair turns by 2 rad
  rope.apply(x);
  EXPECT_EQ(x.row(0), (RowMatrix<T>(1, 4) << 1, 0, 0, 0).finished());
  const Index partner = std::is_same_v<C, kappa::RotateHalf> ? 2 : 1;  // (0, 2) or (0, 1)
  EXPECT_NEAR(x(2, 0), std::cos(2.0), tol);
  EXPECT_NEAR(x(2, partner), std::sin(2.0), tol);
  EXPECT_NEAR(x.row(2).squaredNorm(), 1.0, tol);
  // the second pair at position 2 turns by 0.02 rad
  RowMatrix<T> y = RowMatrix<T>::Zero(1, 4);
  const Index second = std::is_same_v<C, kappa::RotateHalf> ? 1 : 2, second_partner = 3;
  y(0, second) = 1;
  rope.apply(y, 2);
  EXPECT_NEAR(y(0, second), std::cos(0.02), tol);
  EXPECT_NEAR(y(0, second_partner), std::sin(0.02), tol);
}

TYPED_TEST(RopeTest, DotProductDependsOnlyOnRelativePosition) {
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  const kappa::Rope<T, C> rope(16, 10000.0);
  const RowMatrix<T> q = kappa::testing::random_matrix<T>(1, 16, 1),
                     k = kappa::testing::random_matrix<T>(1, 16, 2);
  auto score = [&](Index m, Index n) {
    return static_cast<double>(rope.rotated(q, m).row(0).dot(rope.rotated(k, n).row(0)));
  };
  for (Index delta : {-7, 0, 3, 50}) {
    const double at_zero = score(std::max<Index>(delta, 0), std::max<Index>(-delta, 0));
    for (Index shift : {1, 10, 123, 4000}) {
      const Index m = shift + std::max<Index>(delta, 0), n = shift + std::max<Index>(-delta, 0);
      EXPECT_NEAR(score(m, n), at_zero, tol * 16) << "m - n = " << delta << ", shift " << shift;
    }
  }
  // and it does depend on m - n (the rotation is not trivial)
  EXPECT_GT(std::abs(score(5, 0) - score(0, 0)), 1e-3);
}

TYPED_TEST(RopeTest, OffsetMatchesTheFullSequence) {
  // Decoding with a cache: rows t.. of a prefix rotated with offset t equal
  // the same rows rotated as part of the whole sequence.
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  const kappa::Rope<T, C> rope(8);
  const RowMatrix<T> x = kappa::testing::random_matrix<T>(10, 8, 5);
  const RowMatrix<T> full = rope.rotated(x, 0);
  RowMatrix<T> tail = x.bottomRows(4);
  rope.apply(tail, 6);
  EXPECT_EQ(tail, RowMatrix<T>(full.bottomRows(4)));
  RowMatrix<T> by_pos = x.bottomRows(4);
  const std::vector<Index> positions = {6, 7, 8, 9};
  rope.apply(by_pos, positions);
  EXPECT_EQ(by_pos, tail);
}

TYPED_TEST(RopeTest, HeadsAndColumnBlocksInPlace) {
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  const Index n_heads = 3, d_head = 6;
  const kappa::Rope<T, C> rope(4);  // partial rotary: 4 of 6 columns per head
  const RowMatrix<T> q = kappa::testing::random_matrix<T>(5, n_heads * d_head, 8);
  RowMatrix<T> all = q;
  rope.apply_heads(all, n_heads, 2);
  RowMatrix<T> blocks = q;
  for (Index h = 0; h < n_heads; ++h)
    rope.apply(blocks.middleCols(h * d_head, d_head), 2);  // a view, no copy
  EXPECT_EQ(all, blocks);
  for (Index h = 0; h < n_heads; ++h)  // the non-rotary columns are untouched
    EXPECT_EQ(RowMatrix<T>(all.middleCols(h * d_head + 4, 2)),
              RowMatrix<T>(q.middleCols(h * d_head + 4, 2)));
  EXPECT_NE(RowMatrix<T>(all.middleCols(0, 4)), RowMatrix<T>(q.middleCols(0, 4)));
}

TYPED_TEST(RopeTest, Errors) {
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  EXPECT_THROW((kappa::Rope<T, C>(5)), kappa::ShapeError);
  EXPECT_THROW((kappa::Rope<T, C>(-2)), kappa::ShapeError);
  RowMatrix<T> any = kappa::testing::random_matrix<T>(2, 3, 4);
  const RowMatrix<T> before = any;
  kappa::Rope<T, C>(0).apply(any, 7);  // d_R = 0 rotates nothing
  EXPECT_EQ(any, before);
  EXPECT_THROW((kappa::Rope<T, C>(4, 0.0)), std::invalid_argument);
  const kappa::Rope<T, C> rope(8);
  RowMatrix<T> narrow(2, 6);
  EXPECT_THROW(rope.apply(narrow), kappa::ShapeError);
  RowMatrix<T> x(2, 16);
  EXPECT_THROW(rope.apply_heads(x, 3), kappa::ShapeError);
  EXPECT_THROW(rope.apply_heads(x, 4), kappa::ShapeError);  // d_head 4 < d_R 8
  EXPECT_THROW(rope.apply(x, Index{-1}), kappa::RangeError);
  EXPECT_THROW(rope.apply(x, std::vector<Index>{1}), kappa::ShapeError);
}

TYPED_TEST(RopeTest, PositionsThatWouldOverflowAreRangeErrors) {
  using T = typename TypeParam::first_type;
  using C = typename TypeParam::second_type;
  constexpr Index kMax = std::numeric_limits<Index>::max();
  const kappa::Rope<T, C> rope(4);
  RowMatrix<T> x = kappa::testing::random_matrix<T>(3, 8, 5);
  const RowMatrix<T> before = x;
  // offset + r overflows for the last rows.
  EXPECT_THROW(rope.apply(x, kMax - 1), kappa::RangeError);
  EXPECT_THROW(rope.apply_heads(x, 2, kMax), kappa::RangeError);
  EXPECT_THROW(rope.apply_heads(x, 2, Index{-1}), kappa::RangeError);
  EXPECT_THROW((void)rope.rotated(x, kMax), kappa::RangeError);
  EXPECT_THROW(rope.apply(x, std::vector<Index>{kMax, 0, 1}), kappa::RangeError);
  EXPECT_EQ(x, before);  // nothing was rotated
  std::string msg;
  try {
    rope.apply(x, kMax);
  } catch (const kappa::RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(std::to_string(kMax)), std::string::npos) << msg;
  // The last offset that fits is fine.
  EXPECT_NO_THROW(rope.apply(x, kMax - 3));
  EXPECT_TRUE(x.allFinite());
  // A non-finite base is rejected like a non-positive one.
  EXPECT_THROW((kappa::Rope<T, C>(4, std::numeric_limits<double>::infinity())),
               std::invalid_argument);
}

// LongRoPE (Phi-3): theta'_i = b^(-2i/d) / e_i with the short factors up to
// the original context L_0 and the long ones past it; cos and sin times
// sqrt(1 + ln s / ln L_0). By hand for d_R = 4, b = 100, L_0 = 8, s = 8.
TEST(RopeScalingRules, LongRopePicksTheFactorsByLength) {
  kappa::RopeScaling r;
  r.kind = kappa::RopeScaling::Kind::kLongRope;
  r.original_context = 8;
  r.factor = 8.0;
  r.short_factor = {1.0, 2.0};
  r.long_factor = {4.0, 16.0};
  r.validate();
  const std::vector<double> s = kappa::rope_frequencies(4, 100.0, r, 8);
  const std::vector<double> l = kappa::rope_frequencies(4, 100.0, r, 9);
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  EXPECT_DOUBLE_EQ(s[1], 0.1 / 2.0);
  EXPECT_DOUBLE_EQ(l[0], 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(l[1], 0.1 / 16.0);
  EXPECT_DOUBLE_EQ(kappa::rope_attention_factor(r), std::sqrt(1.0 + std::log(8.0) / std::log(8.0)));
  // A sequence of 9 positions rotates position 1 by the long angles.
  const kappa::Rope<double> rope(4, 100.0, r);
  RowMatrix<double> x = RowMatrix<double>::Zero(9, 4);
  x(1, 0) = 1.0;  // pairs (0, 2) and (1, 3)
  rope.apply(x, 0);
  EXPECT_NEAR(x(1, 0), std::sqrt(2.0) * std::cos(0.25), 1e-15);
  EXPECT_NEAR(x(1, 2), std::sqrt(2.0) * std::sin(0.25), 1e-15);
  // Wrong counts are named.
  r.long_factor = {1.0};
  EXPECT_THROW(r.validate(), std::invalid_argument);
}
