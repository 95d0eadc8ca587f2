// Tests of the tiled (online-softmax) path of kappa/attention/attention.hpp:
// it equals the blocked path (1e-5 relative in float, 1e-12 in double) and a
// plain-loop long-double reference across shapes, masks, kernels, fully masked
// rows and large logits; its scratch is bounded whatever N_KV; it skips
// fully masked tiles. And the rule that a row's output depends only on the
// keys it can see (NaN / inf in K and V at hidden keys), on every path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {
namespace tiled_test {  // (one TU with the area's other files)

using testing::max_scaled_error;
using testing::random_matrix;
using testing::reference_attention;

template <class T>
class TiledTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TiledTest, Scalars);

/// The tolerance between the paths: 1e-5 relative (float), 1e-12 (double).
template <class T>
constexpr double kPathRel = std::is_same_v<T, float> ? 1e-5 : 1e-12;

template <class T, class K, class M>
RowMatrix<T> run_path(AttentionPath path, const RowMatrix<T>& q, const RowMatrix<T>& k,
                      const RowMatrix<T>& v, const K& kernel, const M& mask) {
  RowMatrix<T> y(q.rows(), v.cols());
  AttentionWorkspace<T> ws;
  ws.path = path;
  attention_into<T>(q, k, v, y, ws, kernel, mask);
  return y;
}

/// Tiled == blocked on one case (and both == the long-double reference).
template <class T, class K, class M>
void check_paths(const RowMatrix<T>& q, const RowMatrix<T>& k, const RowMatrix<T>& v,
                 const K& kernel, const M& mask, const std::string& what) {
  SCOPED_TRACE(what + " N_Q=" + std::to_string(q.rows()) + " N_KV=" + std::to_string(k.rows()));
  const RowMatrix<T> blocked = run_path(AttentionPath::kBlocked, q, k, v, kernel, mask);
  const RowMatrix<T> tiled = run_path(AttentionPath::kTiled, q, k, v, kernel, mask);
  ASSERT_TRUE(tiled.allFinite());
  EXPECT_LE(max_scaled_error(tiled, blocked, kPathRel<T>, 1e-3 * kPathRel<T>), 1.0);
  const RowMatrix<T> autop = run_path(AttentionPath::kAuto, q, k, v, kernel, mask);
  EXPECT_LE(max_scaled_error(autop, blocked, kPathRel<T>, 1e-3 * kPathRel<T>), 1.0);
}

struct Shape {
  Index n_q, n_kv, d, d_v;
};
// Around the tile edges (kTileRows = 128 rows, kTileKeys = 256 keys).
const Shape kShapes[] = {{1, 1, 4, 3},      {3, 300, 8, 5},    {17, 255, 16, 4}, {130, 257, 33, 7},
                         {129, 513, 8, 16}, {300, 200, 12, 9}, {40, 1000, 8, 8}};

TYPED_TEST(TiledTest, EqualsBlockedPathAcrossShapesAndMasks) {
  using T = TypeParam;
  unsigned seed = 1;
  for (const Shape& s : kShapes) {
    const RowMatrix<T> q = random_matrix<T>(s.n_q, s.d, seed++, 1.5);
    const RowMatrix<T> k = random_matrix<T>(s.n_kv, s.d, seed++, 1.5);
    const RowMatrix<T> v = random_matrix<T>(s.n_kv, s.d_v, seed++);
    const kernels::Softmax sm{};
    check_paths(q, k, v, sm, NoMask{}, "none");
    check_paths(q, k, v, sm, CausalMask{}, "causal");
    check_paths(q, k, v, sm, CausalMask{0}, "causal top-left (rows with no key)");
    check_paths(q, k, v, sm, SlidingWindowMask{37}, "window 37");
    std::vector<Index> lengths(static_cast<std::size_t>(s.n_q));
    for (Index i = 0; i < s.n_q; ++i)
      lengths[static_cast<std::size_t>(i)] = (i * 7919) % (s.n_kv + 1);  // includes 0: masked rows
    check_paths(q, k, v, sm, KeyPaddingMask{lengths}, "padding");
    check_paths(q, k, v, sm, all_of(CausalMask{}, KeyPaddingMask{lengths}), "causal+padding");
    BooleanMask b;
    b.allowed.resize(s.n_q, s.n_kv);
    for (Index i = 0; i < s.n_q; ++i)
      for (Index j = 0; j < s.n_kv; ++j)
        b.allowed(i, j) = (i % 5 != 2) && ((i * 31 + j * 17) % 3 != 0);
    check_paths(q, k, v, sm, b, "boolean (rows i % 5 == 2 fully masked)");
    check_paths(q, k, v, sm, all_of(SlidingWindowMask{60}, b), "window+boolean");
  }
}

// Kernels that are not shift-invariant get no maximum and no rescaling.
struct Quadratic {  // a user's kernel: f(x) = x^2 + x + 1 > 0, no vector form
  [[nodiscard]] double scale_for(Index /*d*/) const { return 0.5; }
  template <Scalar T>
  T operator()(T x) const {
    return x * x + x + T(1);
  }
};

TYPED_TEST(TiledTest, NonShiftInvariantKernelsEqualBlockedPath) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(150, 8, 11);
  const RowMatrix<T> k = random_matrix<T>(600, 8, 12);
  const RowMatrix<T> v = random_matrix<T>(600, 6, 13);
  check_paths(q, k, v, kernels::ReLU{}, CausalMask{}, "relu");
  check_paths(q, k, v, kernels::Polynomial{2, 1.0}, SlidingWindowMask{300}, "polynomial");
  check_paths(q, k, v, Quadratic{}, CausalMask{}, "user quadratic");
  // Linear: positive inputs keep Z away from zero, so the relative bound holds.
  const RowMatrix<T> qp = (random_matrix<T>(150, 8, 14).array() + T(1.5)).matrix();
  const RowMatrix<T> kp = (random_matrix<T>(600, 8, 15).array() + T(1.5)).matrix();
  check_paths(qp, kp, v, kernels::Linear{}, CausalMask{}, "linear");
}

TYPED_TEST(TiledTest, EqualsLongDoubleReference) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(140, 16, 21, 2.0);
  const RowMatrix<T> k = random_matrix<T>(700, 16, 22, 2.0);
  const RowMatrix<T> v = random_matrix<T>(700, 5, 23);
  const SlidingWindowMask mask{300};
  const auto bound = mask.bind(140, 700);
  const RowMatrix<T> want = reference_attention<T>(
      q, k, v, 0.25, [](long double x) { return std::exp(x); }, true,
      [&](Index i, Index j) { return j >= bound.range(i).begin && j < bound.range(i).end; });
  const RowMatrix<T> got = run_path(AttentionPath::kTiled, q, k, v, kernels::Softmax{}, mask);
  EXPECT_LE(max_scaled_error(got, want, testing::Tolerance<T>::kRel, testing::Tolerance<T>::kAbs),
            1.0);
}

// Logits of 1e4: the running maximum keeps exp finite, tile after tile (the
// largest logit of each row sits in a late tile, so earlier partial sums are
// rescaled by e^{-1e4} = 0 and must not become NaN).
TYPED_TEST(TiledTest, LargeLogitsStayFiniteAndExact) {
  using T = TypeParam;
  const Index n_kv = 900, d = 4;
  RowMatrix<T> q = random_matrix<T>(20, d, 31);
  RowMatrix<T> k = random_matrix<T>(n_kv, d, 32);
  q *= T(100);
  k *= T(100);  // s q.k up to ~1e4 with s = 1/2
  for (Index j = 0; j < n_kv; ++j) k.row(j) *= T(0.5) + T(0.5) * T(j) / T(n_kv);
  const RowMatrix<T> v = random_matrix<T>(n_kv, 3, 33);
  check_paths(q, k, v, kernels::Softmax{}, NoMask{}, "large logits");
  check_paths(q, k, v, kernels::Softmax{}, CausalMask{}, "large logits causal");
  const RowMatrix<T> y = run_path(AttentionPath::kTiled, q, k, v, kernels::Softmax{}, NoMask{});
  const RowMatrix<T> want = reference_attention<T>(
      q, k, v, 0.5, [](long double x) { return std::exp(x); }, true,
      [](Index, Index) { return true; });
  EXPECT_LE(max_scaled_error(y, want, 1e3 * kPathRel<T>, 1e-3 * kPathRel<T>), 1.0);
}

TYPED_TEST(TiledTest, FullyMaskedRowsAreZero) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(9, 4, 41);
  const RowMatrix<T> k = random_matrix<T>(600, 4, 42);
  const RowMatrix<T> v = random_matrix<T>(600, 3, 43);
  std::vector<Index> lengths{0, 600, 0, 1, 0, 599, 257, 0, 256};
  const RowMatrix<T> y =
      run_path(AttentionPath::kTiled, q, k, v, kernels::Softmax{}, KeyPaddingMask{lengths});
  for (Index i : {0, 2, 4, 7}) EXPECT_TRUE(y.row(i).isZero(0)) << "row " << i;
  // A row seeing one key returns that key's value.
  EXPECT_LE((y.row(3) - v.row(0)).cwiseAbs().maxCoeff(), 1e-6);
}

// Auto dispatch: past kTiledMinRowBytes per row of scores the tiled path runs,
// and its scratch does not grow with N_KV (the blocked path's would).
TYPED_TEST(TiledTest, AutoDispatchUsesBoundedScratchForLongKeys) {
  using T = TypeParam;
  const Index n_kv = 2 * kTiledMinRowBytes / static_cast<Index>(sizeof(T)) + 5, n_q = 40;
  const RowMatrix<T> q = random_matrix<T>(n_q, 8, 51);
  const RowMatrix<T> k = random_matrix<T>(n_kv, 8, 52);
  const RowMatrix<T> v = random_matrix<T>(n_kv, 4, 53);
  AttentionWorkspace<T> ws;
  RowMatrix<T> y(n_q, 4);
  attention_into<T>(q, k, v, y, ws, kernels::Softmax{}, CausalMask{});
  EXPECT_LE(static_cast<Index>(ws.scores.size()), kTileRows * kTileKeys);
  EXPECT_LE(
      static_cast<Index>((ws.scores.size() + ws.tile_q.size() + ws.tile_m.size()) * sizeof(T)),
      detail::tiled_scratch_bytes<T>(8));
  const RowMatrix<T> blocked =
      run_path(AttentionPath::kBlocked, q, k, v, kernels::Softmax{}, CausalMask{});
  EXPECT_LE(max_scaled_error(y, blocked, kPathRel<T>, 1e-3 * kPathRel<T>), 1.0);
  EXPECT_GT(detail::blocked_scratch_bytes<T>(n_q, n_kv), 16 * n_kv * static_cast<Index>(sizeof(T)));
  EXPECT_FALSE(detail::prefer_tiled<T>(kTiledMinRowBytes / static_cast<Index>(sizeof(T))));
  EXPECT_TRUE(detail::prefer_tiled<T>(kTiledMinRowBytes / static_cast<Index>(sizeof(T)) + 1));
}

// The kernel is evaluated only on visible scores (fully masked tiles are
// skipped, partly masked ones evaluate their visible part): a counting kernel
// over a causal 512 x 512 problem runs exactly n (n + 1) / 2 times.
struct CountingExp {
  static constexpr bool kShiftInvariant = true;
  long long* calls;
  [[nodiscard]] double scale_for(Index /*d*/) const { return 1.0; }
  template <Scalar T>
  T operator()(T x) const {
    ++*calls;
    return std::exp(x);
  }
};

TEST(TiledSkip, EvaluatesOnlyVisibleScores) {
  long long calls = 0;
  const Index n = 512;
  const RowMatrix<double> x = random_matrix<double>(n, 4, 61);
  const RowMatrix<double> y =
      run_path(AttentionPath::kTiled, x, x, x, CountingExp{&calls}, CausalMask{});
  EXPECT_EQ(calls, n * (n + 1) / 2);
  const RowMatrix<double> want =
      run_path(AttentionPath::kBlocked, x, x, x, kernels::Softmax{1.0}, CausalMask{});
  EXPECT_LE(max_scaled_error(y, want, 1e-12, 1e-15), 1.0);
}

// ---- a row depends only on the keys it can see -----------------------------

template <class T, class M>
void check_hidden_nan(const M& mask, Index n_q, Index n_kv, Index bad, const std::string& what) {
  SCOPED_TRACE(what);
  const RowMatrix<T> q = random_matrix<T>(n_q, 8, 71);
  const RowMatrix<T> k = random_matrix<T>(n_kv, 8, 72);
  RowMatrix<T> v = random_matrix<T>(n_kv, 5, 73);
  RowMatrix<T> k_bad = k;  // K poisoned too: the hidden rows use neither
  RowMatrix<T> v_zero = v;
  v_zero.row(bad).setZero();
  const auto bound = mask.bind(n_q, n_kv);
  auto sees = [&](Index i) {
    const KeyRange r = bound.range(i);
    bool ok = bad >= r.begin && bad < r.end;
    if constexpr (std::remove_cvref_t<decltype(bound)>::kHasHoles) ok = ok && bound.allowed(i, bad);
    return ok;
  };
  for (const T poison : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
    v.row(bad).setConstant(poison);
    k_bad.row(bad).setConstant(poison);
    for (AttentionPath path :
         {AttentionPath::kAuto, AttentionPath::kBlocked, AttentionPath::kTiled}) {
      SCOPED_TRACE("path " + std::to_string(static_cast<int>(path)));
      const RowMatrix<T> y = run_path(path, q, k_bad, v, kernels::Softmax{}, mask);
      const RowMatrix<T> clean = run_path(path, q, k, v_zero, kernels::Softmax{}, mask);
      Index hidden = 0;
      for (Index i = 0; i < n_q; ++i) {
        if (sees(i)) {
          EXPECT_FALSE(y.row(i).allFinite()) << "row " << i << " sees the poisoned key";
        } else {
          ++hidden;
          ASSERT_TRUE(y.row(i).allFinite()) << "row " << i << " cannot see key " << bad;
          EXPECT_LE((y.row(i) - clean.row(i)).cwiseAbs().maxCoeff(),
                    100 * std::numeric_limits<T>::epsilon())
              << "row " << i;
        }
      }
      EXPECT_GT(hidden, 0);
    }
  }
}

TYPED_TEST(TiledTest, HiddenKeysValuesDoNotReachOtherRows) {
  using T = TypeParam;
  check_hidden_nan<T>(CausalMask{}, 300, 300, 150, "causal, prefill");
  check_hidden_nan<T>(CausalMask{}, 3, 40, 38, "causal, few queries");
  check_hidden_nan<T>(SlidingWindowMask{20}, 200, 300, 130, "window");
  check_hidden_nan<T>(KeyPaddingMask{Index{270}}, 150, 300, 280, "padding (every row)");
  check_hidden_nan<T>(KeyPaddingMask{Index{5}}, 2, 9, 7, "padding, decode shape");
  std::vector<Index> lengths(150);
  for (Index i = 0; i < 150; ++i) lengths[static_cast<std::size_t>(i)] = 100 + i;
  check_hidden_nan<T>(KeyPaddingMask{lengths}, 150, 300, 180, "padding per row");
  BooleanMask b;
  b.allowed.setConstant(140, 300, true);
  for (Index i = 0; i < 140; i += 3) b.allowed(i, 260) = false;
  check_hidden_nan<T>(b, 140, 300, 260, "boolean");
}

}  // namespace tiled_test
}  // namespace
}  // namespace kappa
