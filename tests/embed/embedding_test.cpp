// Embedding<T>: lookup X_j = E_{i_j}, tied logits X E^T, seeded init, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kappa/embed/embedding.hpp"
#include "support/reference.hpp"

using kappa::Index;
using kappa::RowMatrix;
using kappa::TokenId;

template <class T>
class EmbeddingTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmbeddingTest, Scalars);

TYPED_TEST(EmbeddingTest, LookupCopiesRows) {
  using T = TypeParam;
  RowMatrix<T> e(5, 3);
  e << 0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42;
  const kappa::Embedding<T> emb(e);
  EXPECT_EQ(emb.vocab_size(), 5);
  EXPECT_EQ(emb.dim(), 3);
  const std::vector<TokenId> ids = {4, 0, 4, 2};
  const RowMatrix<T> x = emb.lookup(ids);
  RowMatrix<T> want(4, 3);
  want << 40, 41, 42, 0, 1, 2, 40, 41, 42, 20, 21, 22;
  EXPECT_EQ(x, want);  // exact copies
  EXPECT_EQ(emb.lookup(std::vector<TokenId>{}).rows(), 0);
  EXPECT_EQ(RowMatrix<T>(emb.row(3)), (RowMatrix<T>(1, 3) << 30, 31, 32).finished());
}

TYPED_TEST(EmbeddingTest, OutOfRangeIdsNameTheIdAndVocabularySize) {
  using T = TypeParam;
  const kappa::Embedding<T> emb(5, 3);
  try {
    (void)emb.lookup(std::vector<TokenId>{1, 5});
    FAIL() << "no exception";
  } catch (const kappa::RangeError& e) {
    EXPECT_STREQ(e.what(),
                 "kappa: token id 5 is out of range for the embedding table E (N_T) of size 5");
  }
  EXPECT_THROW((void)emb.lookup(std::vector<TokenId>{-1}), kappa::RangeError);
  EXPECT_THROW((void)emb.row(7), kappa::RangeError);
  RowMatrix<T> wrong(2, 4);
  EXPECT_THROW(emb.lookup_into(std::vector<TokenId>{1, 2}, wrong), kappa::ShapeError);
}

TYPED_TEST(EmbeddingTest, TiedLogitsAreXETranspose) {
  using T = TypeParam;
  using Tol = kappa::testing::Tolerance<T>;
  const auto emb = kappa::Embedding<T>::random(11, 6, 3);
  const std::vector<TokenId> ids = {3, 3, 10, 0};
  const RowMatrix<T> x = emb.lookup(ids);
  const RowMatrix<T> logits = emb.logits(x);
  ASSERT_EQ(logits.rows(), 4);
  ASSERT_EQ(logits.cols(), 11);
  RowMatrix<T> ref(4, 11);
  for (Index j = 0; j < 4; ++j)
    for (Index t = 0; t < 11; ++t) {
      long double acc = 0;
      for (Index c = 0; c < 6; ++c) acc += (long double)x(j, c) * (long double)emb.table()(t, c);
      ref(j, t) = static_cast<T>(acc);
    }
  EXPECT_LE(kappa::testing::max_scaled_error(logits, ref, Tol::kRel, Tol::kAbs), 1.0);
  // logits_{j, i_j} = ||E_{i_j}||^2
  for (Index j = 0; j < 4; ++j)
    EXPECT_NEAR(logits(j, ids[static_cast<std::size_t>(j)]),
                emb.table().row(ids[static_cast<std::size_t>(j)]).squaredNorm(),
                10 * Tol::kRel * logits.cwiseAbs().maxCoeff());
  EXPECT_THROW((void)emb.logits(RowMatrix<T>(2, 5)), kappa::ShapeError);
}

TYPED_TEST(EmbeddingTest, SeededInitializationIsDeterministic) {
  using T = TypeParam;
  const auto a = kappa::Embedding<T>::random(200, 100, 42, 0.5);
  const auto b = kappa::Embedding<T>::random(200, 100, 42, 0.5);
  const auto c = kappa::Embedding<T>::random(200, 100, 43, 0.5);
  EXPECT_EQ(a.table(), b.table());
  EXPECT_NE(a.table(), c.table());
  // 20000 draws of N(0, 0.25): mean within 4 standard errors (0.5/sqrt(20000) = 0.0035),
  // standard deviation within 2%.
  const double mean = a.table().template cast<double>().mean();
  const double sd = std::sqrt((a.table().template cast<double>().array() - mean).square().mean());
  EXPECT_NEAR(mean, 0.0, 0.014);
  EXPECT_NEAR(sd, 0.5, 0.01);
}

// Embedding(N_T, d) is E = 0 until set; init_random() draws it in place from
// the same stream as random().
TYPED_TEST(EmbeddingTest, ZeroStartAndInitRandomInPlace) {
  using T = TypeParam;
  kappa::Embedding<T> emb(200, 100);
  EXPECT_TRUE(emb.table().isZero(0));
  emb.init_random(42, 0.5);
  EXPECT_EQ(emb.table(), kappa::Embedding<T>::random(200, 100, 42, 0.5).table());
  emb.init_random(43);
  EXPECT_EQ(emb.table(), kappa::Embedding<T>::random(200, 100, 43).table());
  EXPECT_EQ(emb.vocab_size(), 200);
  EXPECT_EQ(emb.dim(), 100);
}

// A single id gives its row as a 1 x d matrix (what a decode step feeds to a
// layer's forward), equal to the lookup of a one-element sequence.
TYPED_TEST(EmbeddingTest, SingleTokenLookup) {
  using T = TypeParam;
  const auto emb = kappa::Embedding<T>::random(7, 4, 9);
  for (TokenId id = 0; id < 7; ++id) {
    const RowMatrix<T> x = emb.lookup(id);
    ASSERT_EQ(x.rows(), 1);
    ASSERT_EQ(x.cols(), 4);
    EXPECT_EQ(x, RowMatrix<T>(emb.table().row(id)));
    EXPECT_EQ(x, emb.lookup(std::vector<TokenId>{id}));
  }
  for (TokenId bad : {TokenId{7}, TokenId{-1}}) {
    try {
      (void)emb.lookup(bad);
      FAIL() << "no exception for id " << bad;
    } catch (const kappa::RangeError& e) {
      EXPECT_EQ(std::string(e.what()), "kappa: token id " + std::to_string(bad) +
                                           " is out of range for the embedding table E (N_T) of "
                                           "size 7");
    }
  }
}

// ---- Hardening: sizes are validated where they enter --------------------------------

TYPED_TEST(EmbeddingTest, NegativeAndImpossibleSizesAreRangeErrors) {
  using T = TypeParam;
  EXPECT_THROW((kappa::Embedding<T>(-1, 4)), kappa::RangeError);
  EXPECT_THROW((kappa::Embedding<T>(4, -1)), kappa::RangeError);
  // N_T d overflows int64, or exceeds what kappa allocates: a RangeError
  // naming the sizes, not std::bad_alloc / std::length_error.
  constexpr Index kBig = Index{1} << 62;
  EXPECT_THROW((kappa::Embedding<T>(kBig, 4)), kappa::RangeError);
  EXPECT_THROW((kappa::Embedding<T>(Index{1} << 32, Index{1} << 32)), kappa::RangeError);
  EXPECT_THROW((void)kappa::Embedding<T>::random(kBig, 4, 1), kappa::RangeError);
  EXPECT_THROW((void)kappa::Embedding<T>::random(-3, 4, 1), kappa::RangeError);
  std::string msg;
  try {
    kappa::Embedding<T> e(-1, 4);
  } catch (const kappa::RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
  EXPECT_NO_THROW((kappa::Embedding<T>(0, 0)));
}
