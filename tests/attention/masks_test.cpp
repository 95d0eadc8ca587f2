// Tests for kappa/attention/masks.hpp: each mask's visible set equals its
// definition, on the bound mask itself and through the weights attention
// produces (softmax weights are > 0 exactly where a key is visible).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "kappa/attention/attention.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::random_matrix;

// The set of keys a bound mask lets query i see, as a dense boolean matrix.
template <class M>
Eigen::Matrix<bool, -1, -1> visible_set(const M& mask, Index n_q, Index n_kv) {
  const auto b = mask.bind(n_q, n_kv);
  using B = decltype(b);
  Eigen::Matrix<bool, -1, -1> out = Eigen::Matrix<bool, -1, -1>::Constant(n_q, n_kv, false);
  for (Index i = 0; i < n_q; ++i) {
    const KeyRange r = b.range(i);
    for (Index j = r.begin; j < r.end; ++j) {
      bool ok = true;
      if constexpr (B::kHasHoles) ok = b.allowed(i, j);
      out(i, j) = ok;
    }
  }
  return out;
}

// Checks the visible set against `definition`, and that softmax attention's
// weights are positive exactly on it (and zero rows when nothing is visible).
template <class M>
void expect_mask_matches(const M& mask, Index n_q, Index n_kv,
                         const std::function<bool(Index, Index)>& definition) {
  const auto vis = visible_set(mask, n_q, n_kv);
  const RowMatrix<double> q = random_matrix<double>(n_q, 4, 1);
  const RowMatrix<double> k = random_matrix<double>(n_kv, 4, 2);
  const RowMatrix<double> v = random_matrix<double>(n_kv, 3, 3);
  const auto d = attention_details(q, k, v, kernels::Softmax{}, mask);
  for (Index i = 0; i < n_q; ++i) {
    bool any = false;
    for (Index j = 0; j < n_kv; ++j) {
      const bool want = definition(i, j);
      any = any || want;
      EXPECT_EQ(vis(i, j), want) << "query " << i << " key " << j;
      if (want) {
        EXPECT_GT(d.weights(i, j), 0.0) << "query " << i << " key " << j;
      } else {
        EXPECT_EQ(d.weights(i, j), 0.0) << "query " << i << " key " << j;
      }
    }
    if (any) {
      EXPECT_NEAR(d.weights.row(i).sum(), 1.0, 1e-14);
    } else {
      EXPECT_TRUE(d.output.row(i).isZero(0.0)) << "fully masked row " << i;
      EXPECT_EQ(d.normalizer(i), 0.0);
    }
  }
}

TEST(Masks, NoMaskSeesEverything) {
  expect_mask_matches(NoMask{}, 3, 5, [](Index, Index) { return true; });
}

TEST(Masks, CausalSquareIsLowerTriangular) {
  expect_mask_matches(CausalMask{}, 5, 5, [](Index i, Index j) { return j <= i; });
}

// The trap: with fewer queries than keys (decoding with a KV cache) the
// queries are the LAST positions, so the last query sees every key.
TEST(Masks, CausalDefaultOffsetAlignsQueriesToTheEnd) {
  const Index n_q = 3, n_kv = 8;
  expect_mask_matches(CausalMask{}, n_q, n_kv,
                      [&](Index i, Index j) { return j <= (n_kv - n_q) + i; });
  const auto b = CausalMask{}.bind(n_q, n_kv);
  EXPECT_EQ(b.range(n_q - 1).end, n_kv);  // last query sees all 8 keys
  EXPECT_EQ(b.range(0).end, 6);           // first query sees keys 0..5
  // One query, as in a decode step: it sees the whole cache.
  expect_mask_matches(CausalMask{}, 1, 8, [](Index, Index) { return true; });
}

TEST(Masks, CausalExplicitOffset) {
  // Offset 0 is the top-left alignment: query i sees keys 0..i.
  expect_mask_matches(CausalMask{.offset = 0}, 3, 8, [](Index i, Index j) { return j <= i; });
  // Offset 2 with 4 queries and 4 keys: query 0 at position 2 sees keys 0..2.
  expect_mask_matches(CausalMask{.offset = 2}, 4, 4, [](Index i, Index j) { return j <= i + 2; });
  // More queries than keys: the default offset is negative and the first
  // queries see nothing (zero rows).
  expect_mask_matches(CausalMask{}, 6, 4, [](Index i, Index j) { return j <= i - 2; });
}

TEST(Masks, SlidingWindowSeesTheLastWKeys) {
  const Index w = 3;
  expect_mask_matches(SlidingWindowMask{.window = w}, 7, 7,
                      [&](Index i, Index j) { return j <= i && j > i - w; });
  // With a cache: 2 queries at positions 8, 9 of 10 keys.
  expect_mask_matches(SlidingWindowMask{.window = w}, 2, 10,
                      [&](Index i, Index j) { return j <= 8 + i && j > 8 + i - w; });
  // Window 1: each query sees only itself.
  expect_mask_matches(SlidingWindowMask{.window = 1}, 4, 4,
                      [](Index i, Index j) { return i == j; });
  EXPECT_THROW((void)SlidingWindowMask{.window = 0}.bind(2, 2), std::invalid_argument);
}

TEST(Masks, KeyPaddingPerRowAndBroadcast) {
  const std::vector<Index> len{3, 0, 5, 1};
  expect_mask_matches(KeyPaddingMask{len}, 4, 5,
                      [&](Index i, Index j) { return j < len[static_cast<std::size_t>(i)]; });
  expect_mask_matches(KeyPaddingMask{Index{2}}, 3, 5, [](Index, Index j) { return j < 2; });
}

TEST(Masks, KeyPaddingErrors) {
  EXPECT_THROW(((void)KeyPaddingMask{std::vector<Index>{1, 2}}.bind(3, 5)), ShapeError);
  try {
    (void)KeyPaddingMask{std::vector<Index>{1, 6}}.bind(2, 5);
    FAIL() << "no throw";
  } catch (const RangeError& e) {
    EXPECT_NE(std::string(e.what()).find("6"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)KeyPaddingMask{Index{-1}}.bind(2, 5), RangeError);
}

TEST(Masks, BooleanMaskIsTakenLiterally) {
  BooleanMask m;
  m.allowed.resize(3, 4);
  m.allowed << true, false, true, false,  //
      false, false, false, false,         // fully masked row
      false, true, true, true;
  expect_mask_matches(m, 3, 4, [&](Index i, Index j) { return m.allowed(i, j); });
}

TEST(Masks, BooleanMaskWrongShapeNamesBothShapes) {
  BooleanMask m;
  m.allowed.resize(2, 3);
  try {
    (void)m.bind(4, 5);
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(2 x 3)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(4 x 5)"), std::string::npos) << msg;
  }
}

TEST(Masks, AllOfIntersects) {
  const std::vector<Index> len{2, 4, 4, 1};
  expect_mask_matches(all_of(CausalMask{}, KeyPaddingMask{len}), 4, 4, [&](Index i, Index j) {
    return j <= i && j < len[static_cast<std::size_t>(i)];
  });
  BooleanMask holes;
  holes.allowed = Eigen::Matrix<bool, -1, -1, Eigen::RowMajor>::Constant(4, 4, true);
  holes.allowed(3, 1) = false;
  holes.allowed(2, 2) = false;
  expect_mask_matches(all_of(CausalMask{}, holes), 4, 4,
                      [&](Index i, Index j) { return j <= i && holes.allowed(i, j); });
}

static_assert(Mask<NoMask> && Mask<CausalMask> && Mask<SlidingWindowMask>);
static_assert(Mask<KeyPaddingMask> && Mask<BooleanMask> && Mask<AllOf<CausalMask, BooleanMask>>);
static_assert(!Mask<int>);

// ---- Hardening: offsets and windows near the int64 limits --------------------------

constexpr Index kMaxIndex = std::numeric_limits<Index>::max();
constexpr Index kMinIndex = std::numeric_limits<Index>::min();

TEST(Masks, CausalOffsetsThatWouldOverflowAreARangeErrorAtBind) {
  const RowMatrix<double> q = random_matrix<double>(4, 2, 1), k = random_matrix<double>(3, 2, 2);
  // offset + i + 1 overflows for the last rows: rejected once, at bind.
  EXPECT_THROW((void)CausalMask{kMaxIndex - 1}.bind(4, 3), RangeError);
  EXPECT_THROW((void)attention(q, k, k, kernels::Softmax{}, CausalMask{kMaxIndex}), RangeError);
  std::string msg;
  try {
    (void)CausalMask{kMaxIndex}.bind(4, 3);
  } catch (const RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(std::to_string(kMaxIndex)), std::string::npos) << msg;
  // The largest offset that fits still works: every row sees every key.
  expect_mask_matches(CausalMask{kMaxIndex - 4}, 4, 3, [](Index, Index) { return true; });
  // Very negative offsets see nothing, without overflow.
  expect_mask_matches(CausalMask{kMinIndex}, 4, 3, [](Index, Index) { return false; });
}

TEST(Masks, SlidingWindowOffsetsAndWindowsNearTheLimitsAreCheckedAtBind) {
  const RowMatrix<double> q = random_matrix<double>(3, 2, 1), k = random_matrix<double>(3, 2, 2);
  // p - W + 1 overflows below INT64_MIN.
  EXPECT_THROW((void)SlidingWindowMask({kMaxIndex, -5}).bind(3, 3), RangeError);
  EXPECT_THROW((void)SlidingWindowMask({2, kMinIndex}).bind(3, 3), RangeError);
  // p + 1 overflows above INT64_MAX.
  EXPECT_THROW((void)SlidingWindowMask({3, kMaxIndex - 1}).bind(3, 3), RangeError);
  EXPECT_THROW(
      (void)attention(q, k, k, kernels::Softmax{}, SlidingWindowMask{kMaxIndex, kMinIndex + 1}),
      RangeError);
  // An unbounded window at the default offset is plain causal attention.
  expect_mask_matches(SlidingWindowMask{kMaxIndex}, 3, 3, [](Index i, Index j) { return j <= i; });
  expect_mask_matches(SlidingWindowMask{kMaxIndex, 0}, 3, 5,
                      [](Index i, Index j) { return j <= i; });
}

}  // namespace
}  // namespace kappa
