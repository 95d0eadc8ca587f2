// Tests of the register-blocked float kernels of the tiled path
// (kappa/attention/tile_simd.hpp), built for AVX-512 (-march=native on this
// machine) and again for AVX2 + FMA: the SIMD tiled path equals the blocked
// path (Eigen's GEMMs; 1e-5 relative) and a long-double plain-loop reference
// across block and tile edges, masks of key ranges, fully masked rows and
// large logits; hidden keys' NaN / inf never reach rows that cannot see them;
// score biases (a bias matrix, ALiBi, T5 buckets, -inf as a mask) equal the
// blocked path; and kAuto dispatches to it from kSimdMinRows query rows on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/bias.hpp"
#include "kappa/core/threading.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;
using testing::random_matrix;
using testing::reference_attention;

#ifdef KAPPA_TILE_SIMD
constexpr bool kSimdBuilt = true;
#else
constexpr bool kSimdBuilt = false;
#endif

RowMatrix<float> run_path(AttentionPath path, const RowMatrix<float>& q, const RowMatrix<float>& k,
                          const RowMatrix<float>& v, const auto& mask) {
  RowMatrix<float> y(q.rows(), v.cols());
  AttentionWorkspace<float> ws;
  ws.path = path;
  attention_into<float>(q, k, v, y, ws, kernels::Softmax{}, mask);
  return y;
}

// This target exists to test the SIMD kernels: if the build did not enable
// them, every comparison below would compare the generic path with itself.
TEST(TiledSimd, KernelsAreBuiltAndChosen) {
  ASSERT_TRUE(kSimdBuilt) << "this test must be compiled for AVX-512 or AVX2 + FMA";
  EXPECT_TRUE((detail::simd_tiled<float, kernels::Softmax, NoMask::Bound>(64)));
  EXPECT_TRUE((detail::simd_tiled<float, kernels::Softmax, CausalMask::Bound>(16)));
  EXPECT_FALSE((detail::simd_tiled<float, kernels::Softmax, NoMask::Bound>(20)));  // d_V % 8 != 0
  EXPECT_FALSE((detail::simd_tiled<double, kernels::Softmax, NoMask::Bound>(64)));
  EXPECT_FALSE((detail::simd_tiled<float, kernels::Linear, NoMask::Bound>(64)));
  EXPECT_FALSE((detail::simd_tiled<float, kernels::Softmax, BooleanMask::Bound>(64)));
}

struct Shape {
  Index n_q, n_kv, d, d_v;
};
// Around the edges: 96-row blocks, 256-key tiles, score panels of 8 (4) keys
// x 48 (24) queries, P V panels of 6 rows x 64 (16) columns.
const Shape kShapes[] = {{32, 1, 1, 16},     {33, 7, 3, 32},      {47, 255, 8, 48},
                         {96, 256, 64, 64},  {97, 257, 33, 80},   {191, 513, 128, 128},
                         {200, 700, 16, 16}, {300, 1000, 72, 96}, {40, 9000, 8, 16},
                         {800, 300, 16, 32}};  // 9 blocks: passes of two blocks on 1 or 2 threads

/// The SIMD tiled path (kTiled and kAuto) against the blocked path, and with
/// `reference` also against the long-double plain loop. The loop is the slow
/// part under ASan, so the tests ask for it on two masks per shape (causal
/// and padding, which cover full, ragged and empty rows) and it runs for
/// shapes up to 1e7 multiply-adds.
void check_simd(const RowMatrix<float>& q, const RowMatrix<float>& k, const RowMatrix<float>& v,
                const auto& mask, const std::string& what, bool reference = false) {
  SCOPED_TRACE(what + " N_Q=" + std::to_string(q.rows()) + " N_KV=" + std::to_string(k.rows()) +
               " d=" + std::to_string(q.cols()) + " d_V=" + std::to_string(v.cols()));
  const RowMatrix<float> blocked = run_path(AttentionPath::kBlocked, q, k, v, mask);
  const RowMatrix<float> tiled = run_path(AttentionPath::kTiled, q, k, v, mask);
  ASSERT_TRUE(tiled.allFinite());
  EXPECT_LE(max_scaled_error(tiled, blocked, 1e-5, 1e-8), 1.0);
  const RowMatrix<float> autop = run_path(AttentionPath::kAuto, q, k, v, mask);
  EXPECT_LE(max_scaled_error(autop, blocked, 1e-5, 1e-8), 1.0);
  if (!reference || q.rows() * k.rows() * (q.cols() + v.cols()) > 10'000'000) return;
  const auto bound = mask.bind(q.rows(), k.rows());
  const RowMatrix<float> want = reference_attention<float>(
      q, k, v, 1.0 / std::sqrt(static_cast<double>(q.cols())),
      [](long double x) { return std::exp(x); }, true,
      [&](Index i, Index j) { return j >= bound.range(i).begin && j < bound.range(i).end; });
  EXPECT_LE(max_scaled_error(tiled, want, testing::Tolerance<float>::kRel,
                             testing::Tolerance<float>::kAbs),
            1.0);
}

TEST(TiledSimd, EqualsBlockedPathAndReferenceAcrossShapesAndMasks) {
  unsigned seed = 100;
  for (const Shape& s : kShapes) {
    const RowMatrix<float> q = random_matrix<float>(s.n_q, s.d, seed++, 1.5);
    const RowMatrix<float> k = random_matrix<float>(s.n_kv, s.d, seed++, 1.5);
    const RowMatrix<float> v = random_matrix<float>(s.n_kv, s.d_v, seed++);
    check_simd(q, k, v, NoMask{}, "none");
    check_simd(q, k, v, CausalMask{}, "causal", true);
    check_simd(q, k, v, CausalMask{0}, "causal top-left (rows with no key)");
    check_simd(q, k, v, SlidingWindowMask{37}, "window 37");
    std::vector<Index> lengths(static_cast<std::size_t>(s.n_q));
    for (Index i = 0; i < s.n_q; ++i)
      lengths[static_cast<std::size_t>(i)] = (i * 7919) % (s.n_kv + 1);  // includes 0
    check_simd(q, k, v, KeyPaddingMask{lengths}, "padding", true);
    check_simd(q, k, v, all_of(CausalMask{}, KeyPaddingMask{lengths}), "causal+padding");
  }
}

// Score biases take the SIMD path too (every tile as a ragged one); the
// blocked path is the reference (tests/attention/bias_test.cpp checks it
// against a long-double loop and PyTorch's golden data).
TEST(TiledSimd, ScoreBiasesEqualBlockedPath) {
  EXPECT_TRUE((detail::simd_tiled<float, kernels::Softmax,
                                  decltype(all_of(CausalMask{}, AlibiBias{0.5}).bind(1, 1))>(16)));
  unsigned seed = 300;
  for (const Shape& s : {Shape{97, 257, 33, 32}, Shape{200, 700, 16, 64}, Shape{40, 1000, 8, 16}}) {
    const RowMatrix<float> q = random_matrix<float>(s.n_q, s.d, seed++, 1.5);
    const RowMatrix<float> k = random_matrix<float>(s.n_kv, s.d, seed++, 1.5);
    const RowMatrix<float> v = random_matrix<float>(s.n_kv, s.d_v, seed++);
    const auto check = [&](const auto& mask, const std::string& what) {
      SCOPED_TRACE(what + " N_Q=" + std::to_string(s.n_q) + " N_KV=" + std::to_string(s.n_kv));
      const RowMatrix<float> blocked = run_path(AttentionPath::kBlocked, q, k, v, mask);
      for (AttentionPath path : {AttentionPath::kTiled, AttentionPath::kAuto}) {
        const RowMatrix<float> y = run_path(path, q, k, v, mask);
        ASSERT_TRUE(y.allFinite());
        EXPECT_LE(max_scaled_error(y, blocked, 1e-5, 1e-8), 1.0);
      }
    };
    ScoreBias<float> b{random_matrix<float>(s.n_q, s.n_kv, seed++, 3.0)};
    check(b, "bias matrix");
    check(all_of(CausalMask{}, b), "causal + bias matrix");
    check(all_of(CausalMask{}, AlibiBias{0.0625}), "ALiBi");
    check(all_of(SlidingWindowMask{50}, AlibiBias{0.25}), "window + ALiBi");
    const T5RelativeBias<float> t5{random_matrix<float>(32, 1, seed++), true, 128, {}};
    check(t5.head(0), "T5 buckets, bidirectional");
    // -inf hides keys: every third key for every row, and all keys of row 3.
    ScoreBias<float> hide{RowMatrix<float>::Zero(s.n_q, s.n_kv)};
    for (Index i = 0; i < s.n_q; ++i)
      for (Index j = 0; j < s.n_kv; ++j)
        if (j % 3 == 1 || i == 3) hide.bias(i, j) = -std::numeric_limits<float>::infinity();
    check(hide, "-inf bias");
    const RowMatrix<float> y = run_path(AttentionPath::kAuto, q, k, v, hide);
    EXPECT_TRUE(y.row(3).isZero(0)) << "a row of -inf scores is a zero row";
  }
}

// Blocks that share a pass over K and V (detail::simd_tiled_pass) give the
// same bits as each block alone, so results do not depend on the pairing
// (which depends on the thread count); a block refused for a hidden
// non-finite value leaves its rows untouched and the other block of its
// pass unharmed.
TEST(TiledSimd, PassesOfTwoBlocksEqualBlocksAlone) {
  constexpr Index kBlock = kSimdTileRows;
  static_assert(kSimdPassBlocks == 2);
  const Index n_q = 5 * kBlock + 41, n_kv = 900, d = 24, d_v = 32;
  const RowMatrix<float> q = random_matrix<float>(n_q, d, 171, 1.5);
  const RowMatrix<float> k = random_matrix<float>(n_kv, d, 172, 1.5);
  RowMatrix<float> v = random_matrix<float>(n_kv, d_v, 173);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto check = [&](const auto& mask, const std::string& what, unsigned want_refused) {
    SCOPED_TRACE(what);
    const auto bound = mask.bind(n_q, n_kv);
    RowMatrix<float> paired = RowMatrix<float>::Constant(n_q, d_v, -7.0f);
    RowMatrix<float> alone = paired;
    MatrixRef<float> paired_ref(paired), alone_ref(alone);
    std::vector<float> qt, st, y, mla;
    const detail::SimdTileScratch ws{qt, st, y, mla};
    const Index n_tb = (n_q + kBlock - 1) / kBlock;
    unsigned refused = 0;
    for (Index b0 = 0; b0 < n_tb; b0 += 2) {
      const int n = static_cast<int>(std::min<Index>(2, n_tb - b0));
      const Index last = std::min(kBlock, n_q - (b0 + n - 1) * kBlock);
      const unsigned r =
          detail::simd_tiled_pass(bound, q, scale, k, v, paired_ref, b0 * kBlock, n, last, ws);
      refused |= r << b0;
      for (int b = 0; b < n; ++b) {
        const Index r0 = (b0 + b) * kBlock;
        const unsigned r1 = detail::simd_tiled_pass(bound, q, scale, k, v, alone_ref, r0, 1,
                                                    std::min(kBlock, n_q - r0), ws);
        EXPECT_EQ(r1, (r >> b) & 1u) << "block " << b0 + b;
      }
    }
    EXPECT_EQ(refused, want_refused);
    for (Index i = 0; i < n_q; ++i)
      for (Index c = 0; c < d_v; ++c)
        ASSERT_TRUE(paired(i, c) == alone(i, c) ||
                    (std::isnan(paired(i, c)) && std::isnan(alone(i, c))))
            << "row " << i << " column " << c << ": " << paired(i, c) << " vs " << alone(i, c);
    if (want_refused != 0) return;
    const RowMatrix<float> blocked = run_path(AttentionPath::kBlocked, q, k, v, mask);
    EXPECT_LE(max_scaled_error(paired, blocked, 1e-5, 1e-8), 1.0);
  };
  check(NoMask{}, "none", 0);
  check(CausalMask{}, "causal", 0);
  check(CausalMask{0}, "top-left causal", 0);
  check(SlidingWindowMask{37}, "window 37 (blocks begin at different keys)", 0);
  check(SlidingWindowMask{300}, "window 300", 0);
  std::vector<Index> lengths(static_cast<std::size_t>(n_q));
  for (Index i = 0; i < n_q; ++i) lengths[static_cast<std::size_t>(i)] = (i * 7919) % (n_kv + 1);
  check(KeyPaddingMask{lengths}, "padding", 0);
  check(all_of(CausalMask{}, AlibiBias{0.0625}), "causal + ALiBi", 0);
  // A NaN in V at key 150 under a top-left causal mask (row i sees keys
  // 0..i): block 1 (rows 96..191) holds rows that see it and rows that do
  // not, so it is refused; block 0 (keys 0..95) never meets it.
  v.row(150).setConstant(std::numeric_limits<float>::quiet_NaN());
  check(CausalMask{0}, "top-left causal, NaN at key 150", 0b10u);
}

// The pairing of blocks into passes depends on the thread count; the bits
// of the result do not. Six blocks: three passes on 1 thread, two passes
// and two single blocks on 2. (Only 1 and 2 threads: with more threads than
// cores, the OpenMP runtime's thread pool shows up as a leak under ASan.)
TEST(TiledSimd, ResultsAreIndependentOfTheThreadCount) {
  const Index n_q = 5 * kSimdTileRows + 5, n_kv = 1500;
  const RowMatrix<float> q = random_matrix<float>(n_q, 32, 181, 1.5);
  const RowMatrix<float> k = random_matrix<float>(n_kv, 32, 182, 1.5);
  const RowMatrix<float> v = random_matrix<float>(n_kv, 48, 183);
  const int saved = num_threads();
  const auto run = [&](int threads, const auto& mask) {
    set_num_threads(threads);
    return run_path(AttentionPath::kAuto, q, k, v, mask);
  };
  const auto check = [&](const auto& mask, const std::string& what) {
    SCOPED_TRACE(what);
    const RowMatrix<float> one = run(1, mask);
    const RowMatrix<float> two = run(2, mask);
    EXPECT_TRUE((two.array() == one.array()).all());
  };
  check(NoMask{}, "none");
  check(SlidingWindowMask{600}, "window 600 (blocks begin at different keys)");
  check(all_of(CausalMask{0}, AlibiBias{0.125}), "top-left causal + ALiBi");
  set_num_threads(saved);
}

// Logits of about 1e4, the largest of each row in a late tile: earlier
// partial sums are rescaled by e^{-1e4} = 0 and must not turn into NaN.
TEST(TiledSimd, LargeLogitsStayFiniteAndExact) {
  const Index n_q = 100, n_kv = 900, d = 4;
  RowMatrix<float> q = random_matrix<float>(n_q, d, 131);
  RowMatrix<float> k = random_matrix<float>(n_kv, d, 132);
  q *= 100.0f;
  k *= 100.0f;
  for (Index j = 0; j < n_kv; ++j) k.row(j) *= 0.5f + 0.5f * static_cast<float>(j) / n_kv;
  const RowMatrix<float> v = random_matrix<float>(n_kv, 16, 133);
  for (AttentionPath path : {AttentionPath::kTiled, AttentionPath::kAuto}) {
    const RowMatrix<float> y = run_path(path, q, k, v, NoMask{});
    ASSERT_TRUE(y.allFinite());
    const RowMatrix<float> want = reference_attention<float>(
        q, k, v, 0.5, [](long double x) { return std::exp(x); }, true,
        [](Index, Index) { return true; });
    EXPECT_LE(max_scaled_error(y, want, 1e-2, 1e-8), 1.0);
  }
}

TEST(TiledSimd, FullyMaskedRowsAreZeroAndOneKeyGivesItsValue) {
  const Index n_q = 40, n_kv = 600;
  const RowMatrix<float> q = random_matrix<float>(n_q, 8, 141);
  const RowMatrix<float> k = random_matrix<float>(n_kv, 8, 142);
  const RowMatrix<float> v = random_matrix<float>(n_kv, 32, 143);
  std::vector<Index> lengths(static_cast<std::size_t>(n_q));
  for (Index i = 0; i < n_q; ++i) lengths[static_cast<std::size_t>(i)] = (i % 4 == 0) ? 0 : 1 + i;
  lengths[1] = 1;
  const RowMatrix<float> y = run_path(AttentionPath::kAuto, q, k, v, KeyPaddingMask{lengths});
  for (Index i = 0; i < n_q; i += 4) EXPECT_TRUE(y.row(i).isZero(0)) << "row " << i;
  EXPECT_LE((y.row(1) - v.row(0)).cwiseAbs().maxCoeff(), 1e-6);
}

// A NaN or inf at key `bad`, in K and V, reaches exactly the rows that see it.
void check_hidden_poison(const auto& mask, Index n_q, Index n_kv, Index bad,
                         const std::string& what) {
  SCOPED_TRACE(what);
  const RowMatrix<float> q = random_matrix<float>(n_q, 16, 151);
  const RowMatrix<float> k = random_matrix<float>(n_kv, 16, 152);
  RowMatrix<float> v = random_matrix<float>(n_kv, 32, 153);
  RowMatrix<float> k_bad = k;
  RowMatrix<float> v_zero = v;
  v_zero.row(bad).setZero();
  const auto bound = mask.bind(n_q, n_kv);
  for (const float poison :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    v.row(bad).setConstant(poison);
    k_bad.row(bad).setConstant(poison);
    const RowMatrix<float> y = run_path(AttentionPath::kAuto, q, k_bad, v, mask);
    const RowMatrix<float> clean = run_path(AttentionPath::kAuto, q, k, v_zero, mask);
    Index hidden = 0;
    for (Index i = 0; i < n_q; ++i) {
      const KeyRange r = bound.range(i);
      if (bad >= r.begin && bad < r.end) {
        EXPECT_FALSE(y.row(i).allFinite()) << "row " << i << " sees the poisoned key";
      } else {
        ++hidden;
        ASSERT_TRUE(y.row(i).allFinite()) << "row " << i << " cannot see key " << bad;
        EXPECT_LE((y.row(i) - clean.row(i)).cwiseAbs().maxCoeff(), 1e-5f) << "row " << i;
      }
    }
    EXPECT_GT(hidden, 0);
  }
}

TEST(TiledSimd, HiddenKeysValuesDoNotReachOtherRows) {
  check_hidden_poison(CausalMask{}, 300, 300, 150, "causal");
  check_hidden_poison(SlidingWindowMask{20}, 200, 300, 130, "window");
  check_hidden_poison(KeyPaddingMask{Index{500}}, 64, 700, 600, "padded tail");
  check_hidden_poison(CausalMask{}, 800, 800, 400, "causal, passes of two blocks");
}

}  // namespace
}  // namespace kappa
