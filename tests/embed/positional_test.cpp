// Sinusoidal and learned positions and their combination with E (hand values).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kappa/embed/positional.hpp"
#include "support/reference.hpp"

using kappa::Index;
using kappa::RowMatrix;
using kappa::TokenId;

template <class T>
class PositionalTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PositionalTest, Scalars);

TYPED_TEST(PositionalTest, SinusoidalHandValues) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-7 : 1e-15;
  const kappa::SinusoidalPositions<T> pe(4);  // theta = 1, 1/100 (10000^(2/4) = 100)
  const RowMatrix<T> p = pe.encode(3);
  for (Index r = 0; r < 3; ++r) {
    const auto x = static_cast<double>(r);
    EXPECT_NEAR(p(r, 0), std::sin(x), tol);
    EXPECT_NEAR(p(r, 1), std::cos(x), tol);
    EXPECT_NEAR(p(r, 2), std::sin(x / 100.0), tol);
    EXPECT_NEAR(p(r, 3), std::cos(x / 100.0), tol);
  }
  EXPECT_EQ(p.row(0), (RowMatrix<T>(1, 4) << 0, 1, 0, 1).finished());
  // With an offset, row r is position offset + r.
  EXPECT_EQ(pe.encode(2, 5).row(1), pe.encode(7).row(6));
  EXPECT_THROW((void)pe.encode(2, -1), kappa::RangeError);
}

TYPED_TEST(PositionalTest, LearnedPositionsAreRowsOfATable) {
  using T = TypeParam;
  const kappa::LearnedPositions<T> lp(10, 4, 9);
  EXPECT_EQ(lp.encode(3, 7), lp.table().middleRows(7, 3));
  try {
    (void)lp.encode(4, 7);
    FAIL() << "no exception";
  } catch (const kappa::RangeError& e) {
    EXPECT_STREQ(e.what(),
                 "kappa: 11 tokens exceed the context length of 10 (the learned position table "
                 "holds positions 0 .. 9; position 10 was asked for)");
  }
}

TYPED_TEST(PositionalTest, AddAndConcatenateAreCompileTimeChoices) {
  using T = TypeParam;
  const auto emb = kappa::Embedding<T>::random(20, 6, 1);
  const std::vector<TokenId> ids = {3, 1, 4, 1, 5};
  const kappa::InputEmbedding<T, kappa::SinusoidalPositions<T>, kappa::AddPositions> add(
      emb, kappa::SinusoidalPositions<T>(6));
  const RowMatrix<T> x_add = add(ids, 2);
  const RowMatrix<T> x = emb.lookup(ids);
  const RowMatrix<T> p = kappa::SinusoidalPositions<T>(6).encode(5, 2);
  EXPECT_EQ(add.dim(), 6);
  EXPECT_EQ(x_add, RowMatrix<T>(x + p));

  const kappa::InputEmbedding<T, kappa::LearnedPositions<T>, kappa::ConcatPositions> cat(
      emb, kappa::LearnedPositions<T>(16, 3, 2));
  const RowMatrix<T> x_cat = cat(ids, 1);
  ASSERT_EQ(x_cat.cols(), 9);
  EXPECT_EQ(cat.dim(), 9);
  EXPECT_EQ(RowMatrix<T>(x_cat.leftCols(6)), x);
  EXPECT_EQ(RowMatrix<T>(x_cat.rightCols(3)), cat.positions().table().middleRows(1, 5));

  // One token at position `offset`: the row of the sequence's result.
  EXPECT_EQ(add(TokenId{4}, 4), RowMatrix<T>(x_add.row(2)));
  EXPECT_EQ(cat(TokenId{5}, 5), RowMatrix<T>(x_cat.row(4)));
  EXPECT_THROW((void)add(TokenId{20}), kappa::RangeError);

  using Mismatch = kappa::InputEmbedding<T, kappa::SinusoidalPositions<T>, kappa::AddPositions>;
  EXPECT_THROW(Mismatch(emb, kappa::SinusoidalPositions<T>(4)), kappa::ShapeError);
}

TYPED_TEST(PositionalTest, OffsetsAndSizesThatWouldOverflowAreRangeErrors) {
  using T = TypeParam;
  constexpr Index kMax = std::numeric_limits<Index>::max();
  const kappa::SinusoidalPositions<T> sin(4);
  EXPECT_THROW((void)sin.encode(3, kMax - 1), kappa::RangeError);
  EXPECT_THROW((void)sin.encode(-1), kappa::RangeError);
  EXPECT_THROW((void)sin.encode(Index{1} << 62), kappa::RangeError);
  EXPECT_NO_THROW((void)sin.encode(3, kMax - 3));
  EXPECT_THROW((kappa::SinusoidalPositions<T>(-2)), kappa::RangeError);
  const kappa::LearnedPositions<T> learned(8, 4, 1);
  // offset + n - 1 overflows: a RangeError, not UB.
  EXPECT_THROW((void)learned.encode(kMax, 5), kappa::RangeError);
  EXPECT_THROW((void)learned.encode(-1, 0), kappa::RangeError);
  EXPECT_THROW((void)learned.encode(-2), kappa::RangeError);
  EXPECT_THROW((kappa::LearnedPositions<T>(Index{1} << 62, 4, 1)), kappa::RangeError);
  EXPECT_THROW((kappa::LearnedPositions<T>(-1, 4, 1)), kappa::RangeError);
}
