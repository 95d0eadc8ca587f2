// The decode kernel (kappa/cache/decode.hpp) against a plain-loop reference
// in long double over the decoded rows, for every storage format: masks,
// chunks, GQA groups, score biases, one to a few query rows, widths that are
// not multiples of the SIMD width, rows wider than one register panel, and
// keys no row may see. CMake builds this file three times: for the default
// target, with -march=native (kappa_decode_native_tests: the register loops of
// decode_simd.hpp at the machine's widest vectors, 16 lanes with AVX-512) and
// for x86-64-v3 (kappa_decode_avx2_tests: 8 lanes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kappa/attention/bias.hpp"
#include "kappa/cache/decode.hpp"
#include "kappa/cache/formats.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/latent.hpp"
#include "support/reference.hpp"

namespace {

using kappa::Index;
using kappa::KVCache;
using kappa::RowMatrix;
namespace cache = kappa::cache;

// ---- the decode kernel ----------------------------------------------------------

/// Plain-loop reference in long double over already decoded rows: row r of
/// q sees keys [begin(r / group), end(r / group)), scores s q.k + bias(r / group, j).
template <class Range, class Bias>
RowMatrix<float> reference_decode(const RowMatrix<float>& q, const RowMatrix<float>& k,
                                  const RowMatrix<float>& v, double scale, Index group,
                                  const Range& range, const Bias& bias) {
  RowMatrix<float> y = RowMatrix<float>::Zero(q.rows(), v.cols());
  for (Index r = 0; r < q.rows(); ++r) {
    const auto [b, e] = range(r / group);
    if (e <= b) continue;
    std::vector<long double> x(static_cast<std::size_t>(e - b));
    long double mx = -INFINITY;
    // (raw rows: Eigen's accessors made this loop most of the test's time
    // at -O0 under the sanitizers)
    const float* qr = q.data() + r * q.cols();
    for (Index j = b; j < e; ++j) {
      const float* kj = k.data() + j * k.cols();
      long double dot = 0;
      for (Index c = 0; c < q.cols(); ++c) dot += (long double)qr[c] * kj[c];
      x[static_cast<std::size_t>(j - b)] = scale * dot + bias(r / group, j);
      mx = std::max(mx, x[static_cast<std::size_t>(j - b)]);
    }
    long double z = 0;
    std::vector<long double> acc(static_cast<std::size_t>(v.cols()), 0);
    for (Index j = b; j < e; ++j) {
      const long double a = std::exp(x[static_cast<std::size_t>(j - b)] - mx);
      z += a;
      const float* vj = v.data() + j * v.cols();
      for (Index c = 0; c < v.cols(); ++c) acc[static_cast<std::size_t>(c)] += a * vj[c];
    }
    for (Index c = 0; c < v.cols(); ++c)
      y(r, c) = static_cast<float>(acc[static_cast<std::size_t>(c)] / z);
  }
  return y;
}

/// A test-local score bias: b_ij = -slope (i + 1) |j - 7| (ALiBi-like), plus
/// the causal range of CausalMask with the cache alignment.
struct TestBias {
  double slope;
  struct Bound {
    static constexpr bool kHasHoles = false;
    static constexpr bool kHasBias = true;
    double slope;
    Index offset, n_kv;
    [[nodiscard]] kappa::KeyRange range(Index i) const {
      return {0, std::min(offset + i + 1, n_kv)};
    }
    [[nodiscard]] double bias(Index i, Index j) const {
      return -slope * static_cast<double>(i + 1) * std::abs(static_cast<double>(j - 7));
    }
    void add_bias(Index i, Index j0, float* scores, Index len) const {
      for (Index t = 0; t < len; ++t) scores[t] += static_cast<float>(bias(i, j0 + t));
    }
  };
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const { return {slope, n_kv - n_q, n_kv}; }
};

/// No score bias (the reference's bias argument).
double no_bias(Index, Index) {
  return 0.0;
}

/// One kv head stored in format F: n_kv random keys (d wide, entries up to
/// +-2) and values (d_v wide, seeds seed and seed + 1), the stored rows, the
/// same rows decoded for the reference, the kernel's workspace and the
/// softmax scale 1 / sqrt(d).
template <class F>
struct StoredHead {
  KVCache<float, cache::Growable, F> cache;
  cache::StoredRows<float, F> kr, vr;
  RowMatrix<float> kd, vd;
  kappa::DecodeWorkspace<float> ws;
  double s;

  StoredHead(Index n_kv, Index d, Index dv, unsigned seed)
      : cache({.n_kv_heads = 1, .d_head = d, .d_v = dv}), s(1.0 / std::sqrt(double(d))) {
    cache.append(kappa::testing::random_matrix<float>(n_kv, d, seed, 2.0),
                 kappa::testing::random_matrix<float>(n_kv, dv, seed + 1));
    kr = cache.key_rows(0);
    vr = cache.value_rows(0);
    kd = kr.decoded();
    vd = vr.decoded();
  }
};

template <class F>
class DecodeKernelTest : public ::testing::Test {};
using Formats = ::testing::Types<cache::Native, cache::BF16, cache::F16, cache::Int8>;
TYPED_TEST_SUITE(DecodeKernelTest, Formats);

TYPED_TEST(DecodeKernelTest, MatchesTheReferenceOverTheStoredRows) {
  using F = TypeParam;
  // 5000 keys: three chunks of kDecodeChunk; d 40, d_v 24.
  const Index n_kv = 5000, d = 40, dv = 24;
  StoredHead<F> h(n_kv, d, dv, 1);
  auto& [c, kr, vr, kd, vd, ws, s] = h;
  const kappa::kernels::Softmax sm{};
  // One query, no mask; 3 queries x group 4 = 12 rows, causal (different ranges);
  // 20 rows (two blocks), sliding window.
  {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(1, d, 3);
    RowMatrix<float> y(1, dv);
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, kappa::NoMask{});
    const auto want = reference_decode(
        q, kd, vd, s, 1, [&](Index) { return std::pair<Index, Index>(0, n_kv); }, no_bias);
    EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0);
  }
  {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(12, d, 4);
    RowMatrix<float> y(12, dv);
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, kappa::CausalMask{}, 4);
    const auto want = reference_decode(
        q, kd, vd, s, 4, [&](Index i) { return std::pair<Index, Index>(0, n_kv - 3 + i + 1); },
        no_bias);
    EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0);
  }
  {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(20, d, 5);
    RowMatrix<float> y(20, dv);
    const kappa::SlidingWindowMask win{.window = 2500, .offset = 100};
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, win, 2);
    const auto want = reference_decode(
        q, kd, vd, s, 2,
        [&](Index i) {
          return std::pair<Index, Index>(std::max<Index>(0, 100 + i - 2499), 100 + i + 1);
        },
        no_bias);
    EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0);
  }
  {  // A score bias (kHasBias) is added before the maximum and the exp.
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(4, d, 6);
    RowMatrix<float> y(4, dv);
    const TestBias tb{0.01};
    const auto bound = tb.bind(2, n_kv);
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, tb, 2);
    const auto want = reference_decode(
        q, kd, vd, s, 2, [&](Index i) { return std::pair<Index, Index>(0, n_kv - 2 + i + 1); },
        [&](Index i, Index j) { return bound.bias(i, j); });
    EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0);
  }
}

#ifdef KAPPA_EXPECT_DECODE_SIMD
// These targets exist to test the register loops: if the build did not enable
// them, every comparison here would test the portable path again.
TEST(DecodeKernel, RegisterLoopsAreBuilt) {
  EXPECT_EQ(KAPPA_DECODE_SIMD, 1);
#ifdef KAPPA_EXPECT_SIMD_LANES
  EXPECT_EQ(KAPPA_SIMD_LANES, KAPPA_EXPECT_SIMD_LANES);
#endif
}
#endif

TYPED_TEST(DecodeKernelTest, HeadWidthsOfEveryRegisterLoop) {
  using F = TypeParam;
  // The score loop holds the query rows in registers when d has 4 or 8
  // vectors (d 68 and 128 with 16 lanes, d 35 with 8; tails of 4 and 3
  // values) and reads them from L1 otherwise (d 144); the accumulation holds
  // up to 8 vectors of y, so d_v 200 takes two panels and a tail. 1, 2 and 5
  // rows (a pair and a single row), causal ranges ending inside 64-key blocks.
  // 5 and 16 rows over whole vectors that are not 4 or 8 of them take the
  // wide loops: d 144 (9 or 18 vectors) and the DeepSeek-V2 latent rows, d
  // 576 and d_v 512 under 16 stacked heads.
  const Index n_kv = 700;
  struct Width {
    Index d, dv;
  };
  for (const Width w :
       {Width{144, 200}, Width{128, 128}, Width{68, 64}, Width{35, 24}, Width{576, 512}}) {
    StoredHead<F> h(n_kv, w.d, w.dv, 31);
    auto& [c, kr, vr, kd, vd, ws, s] = h;
    for (const Index rows : {1, 2, 5, 16}) {
      const RowMatrix<float> q =
          kappa::testing::random_matrix<float>(rows, w.d, 33 + unsigned(rows));
      RowMatrix<float> y(rows, w.dv);
      kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, kappa::kernels::Softmax{},
                                             kappa::CausalMask{});
      const auto causal = [&](Index i) { return std::pair<Index, Index>(0, n_kv - rows + i + 1); };
      EXPECT_LE(kappa::testing::max_scaled_error(
                    y, reference_decode(q, kd, vd, s, 1, causal, no_bias), 1e-5, 1e-6),
                1.0)
          << "d " << w.d << ", d_v " << w.dv << ", " << rows << " rows";
    }
  }
}

#if KAPPA_DECODE_SIMD
TYPED_TEST(DecodeKernelTest, RowsTogetherEqualEachRowAloneBitForBit) {
  using F = TypeParam;
  using kappa::cache::simd::kLanes;
  // Several rows share each loaded key: two rows go as a pair, and from 3
  // rows on both loops go key-major (the accumulation over the keys all rows
  // see, the keys before and after them row by row). None of this may change
  // a row's arithmetic: every row must equal the same row run alone, bit for
  // bit (a tail key's score included).
  // d_v of 4 and 8 vectors (the key-major widths), 3 and 5 (the wide loops,
  // which also take d of 36 vectors and d_v of 32: the latent rows); ranges
  // with keys before and after the common ones, lengths that leave tails of
  // the key-major step, and a row that sees no key of the chunk.
  const Index n = 301;
  struct Width {
    Index d, dv;
  };
  for (const Width wd : {Width{8, 8}, Width{4, 4}, Width{3, 3}, Width{5, 5}, Width{36, 32}}) {
    const Index d = wd.d * Index{kLanes}, dv = wd.dv * Index{kLanes};
    StoredHead<F> h(n, d, dv, 41 + unsigned(dv));
    const auto& kr = h.kr;
    const auto& vr = h.vr;
    for (const Index m : {2, 3, 8, 16}) {
      const RowMatrix<float> q = kappa::testing::random_matrix<float>(m, d, 43 + unsigned(m));
      RowMatrix<float> sc(m, n), sc1(1, n);
      cache::simd::scores<F>(q.data(), m, kr, 0, n, sc.data(), n);
      for (Index r = 0; r < m; ++r) {
        cache::simd::scores<F>(q.row(r).data(), 1, kr, 0, n, sc1.data(), n);
        ASSERT_TRUE((sc.row(r).array() == sc1.array()).all())
            << "scores: " << m << " rows, d " << d << ", row " << r;
      }
      const RowMatrix<float> w = kappa::testing::random_matrix<float>(m, n, 47);
      for (const bool empty_row : {false, true}) {
        Index begin[16], end[16];
        for (Index r = 0; r < m; ++r) {
          begin[r] = (r * 7) % 23;                               // 0 .. 22
          end[r] = n - (r * 5) % 19;                             // 283 .. 301
          if (empty_row && r == m - 1) begin[r] = end[r] = 150;  // sees nothing
        }
        RowMatrix<float> y = RowMatrix<float>::Zero(m, dv), y1(1, dv);
        cache::simd::accumulate<F>(w.data(), n, m, begin, end, vr, 0, y.data());
        for (Index r = 0; r < m; ++r) {
          y1.setZero();
          cache::simd::accumulate<F>(w.row(r).data(), n, 1, begin + r, end + r, vr, 0, y1.data());
          ASSERT_TRUE((y.row(r).array() == y1.array()).all())
              << "values: " << m << " rows, d_v " << dv << ", row " << r
              << (empty_row ? ", one row sees no key" : "");
        }
      }
    }
  }
}
#endif

TEST(DecodeKernel, AKeyNoRowSeesCannotPoisonTheOutputAndBadShapesThrow) {
  const Index n = 3000, d = 8;
  RowMatrix<float> k = kappa::testing::random_matrix<float>(n, d, 7);
  RowMatrix<float> v = kappa::testing::random_matrix<float>(n, d, 8);
  v(n - 1, 2) = std::numeric_limits<float>::quiet_NaN();  // only the last query sees it
  k(n - 1, 0) = std::numeric_limits<float>::infinity();
  KVCache<float> c({.n_kv_heads = 1, .d_head = d});
  c.append(k, v);
  const RowMatrix<float> q = kappa::testing::random_matrix<float>(2, d, 9);
  RowMatrix<float> y(2, d);
  kappa::DecodeWorkspace<float> ws;
  kappa::decode_attention_into<float, cache::Native>(
      q, c.key_rows(0), c.value_rows(0), y, ws, kappa::kernels::Softmax{}, kappa::CausalMask{});
  EXPECT_TRUE(y.row(0).allFinite());  // row 0 sees keys 0 .. n - 2
  RowMatrix<float> bad(2, d + 1);
  EXPECT_THROW((kappa::decode_attention_into<float, cache::Native>(q, c.key_rows(0),
                                                                   c.value_rows(0), bad, ws)),
               kappa::ShapeError);
  RowMatrix<float> y3(3, d);
  const RowMatrix<float> q3 = kappa::testing::random_matrix<float>(3, d, 9);
  EXPECT_THROW((kappa::decode_attention_into<float, cache::Native>(
                   q3, c.key_rows(0), c.value_rows(0), y3, ws, kappa::kernels::Softmax{},
                   kappa::NoMask{}, 2)),
               kappa::ShapeError);
}

TYPED_TEST(DecodeKernelTest, FewRowsOddWidthsAndRangesInsideChunks) {
  using F = TypeParam;
  // d 37 and d_v 13: every SIMD loop has a tail; 4100 keys: the last chunk
  // holds 4 keys. 1, 2 and 3 query rows (the register-widening loops of
  // decode_simd.hpp take them two at a time) with ranges that start and end
  // inside chunks and inside groups of four keys.
  const Index n_kv = 4100, d = 37, dv = 13;
  StoredHead<F> h(n_kv, d, dv, 11);
  auto& [c, kr, vr, kd, vd, ws, s] = h;
  const kappa::kernels::Softmax sm{};
  for (const Index rows : {1, 2, 3}) {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(rows, d, 13 + unsigned(rows));
    RowMatrix<float> y(rows, dv);
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, kappa::NoMask{});
    const auto all = [&](Index) { return std::pair<Index, Index>(0, n_kv); };
    EXPECT_LE(kappa::testing::max_scaled_error(y, reference_decode(q, kd, vd, s, 1, all, no_bias),
                                               1e-5, 1e-6),
              1.0)
        << rows << " rows, no mask";
    const kappa::SlidingWindowMask win{.window = 1031, .offset = 3001};  // keys 1971 + i ..
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, sm, win);
    const auto in_window = [&](Index i) {
      return std::pair<Index, Index>(3001 + i - 1030, 3001 + i + 1);
    };
    EXPECT_LE(kappa::testing::max_scaled_error(
                  y, reference_decode(q, kd, vd, s, 1, in_window, no_bias), 1e-5, 1e-6),
              1.0)
        << rows << " rows, sliding window";
  }
}

// A mask with holes (BooleanMask): each row sees scattered keys, a row sees
// none, and K and V hold NaN and infinity (Int8: 1e30) at keys no row sees. Every format,
// 1 row and 5 rows (the GEMM tiles), chunks of kDecodeChunk with keys hidden
// across their edges, softmax and the linear kernel (whose f(-inf) is not
// 0). Against the plain-loop reference over the visible keys.
TYPED_TEST(DecodeKernelTest, MaskWithHolesSkipsHiddenKeysEvenNaN) {
  using F = TypeParam;
  const Index n_kv = 4300, d = 24, dv = 20;
  for (const Index rows : {1, 5}) {
    kappa::BooleanMask mask;
    mask.allowed.resize(rows, n_kv);
    std::vector<bool> seen(static_cast<std::size_t>(n_kv), false);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < n_kv; ++j) {
        const bool ok = rows > 1 && i == 2 ? false : ((j * 7 + i * 3) % 5 == 0 || j % 97 == i);
        mask.allowed(i, j) = ok;
        if (ok) seen[static_cast<std::size_t>(j)] = true;
      }
    // Positive keys (and, for the linear kernel, queries): its sums of
    // weights stay far from 0.
    RowMatrix<float> k = kappa::testing::random_matrix<float>(n_kv, d, 61, 2.0).cwiseAbs();
    RowMatrix<float> v = kappa::testing::random_matrix<float>(n_kv, dv, 62);
    RowMatrix<float> v_clean = v;
    Index poisoned = 0;
    for (Index j = 0; j < n_kv; ++j) {
      if (seen[static_cast<std::size_t>(j)]) continue;
      // Int8 cannot store NaN or infinity (append refuses them): a huge value.
      const float bad = F::kScaled     ? 1e30f
                        : poisoned % 2 ? std::numeric_limits<float>::quiet_NaN()
                                       : std::numeric_limits<float>::infinity();
      ++poisoned;
      k(j, j % d) = bad;
      v(j, j % dv) = bad;
      v_clean.row(j).setZero();
    }
    ASSERT_GT(poisoned, 100);
    KVCache<float, cache::Growable, F> c({.n_kv_heads = 1, .d_head = d, .d_v = dv});
    c.append(k, v);
    const auto kr = c.key_rows(0);
    const auto vr = c.value_rows(0);
    RowMatrix<float> kd = kr.decoded(), vd = vr.decoded();
    for (Index j = 0; j < n_kv; ++j) {
      if (!seen[static_cast<std::size_t>(j)]) {
        kd.row(j).setZero();
        vd.row(j).setZero();
      }
    }
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(rows, d, 63);
    const double s = 1.0 / std::sqrt(double(d));
    const auto all = [&](Index) { return std::pair<Index, Index>(0, n_kv); };
    const auto hidden = [&](Index i, Index j) {
      return mask.allowed(i, j) ? 0.0 : -std::numeric_limits<double>::infinity();
    };
    kappa::DecodeWorkspace<float> ws;
    RowMatrix<float> y(rows, dv);
    kappa::decode_attention_into<float, F>(q, kr, vr, y, ws, kappa::kernels::Softmax{}, mask);
    ASSERT_TRUE(y.allFinite()) << rows << " rows";
    RowMatrix<float> want = reference_decode(q, kd, vd, s, 1, all, hidden);
    if (rows > 1) want.row(2).setZero();  // sees no key: a zero output
    EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0) << rows << " rows";

    // The linear kernel f(x) = x: y_i = sum_j x_ij v_j / sum_j x_ij over the
    // visible keys, in long double.
    const RowMatrix<float> qp = q.cwiseAbs();
    kappa::decode_attention_into<float, F>(qp, kr, vr, y, ws, kappa::kernels::Linear{}, mask);
    for (Index i = 0; i < rows; ++i) {
      if (rows > 1 && i == 2) {
        EXPECT_TRUE(y.row(i).isZero()) << "the row that sees no key";
        continue;
      }
      long double z = 0;
      std::vector<long double> acc(static_cast<std::size_t>(dv), 0);
      for (Index j = 0; j < n_kv; ++j) {
        if (!mask.allowed(i, j)) continue;
        long double x = 0;
        for (Index t = 0; t < d; ++t) x += (long double)qp(i, t) * kd(j, t);
        x *= static_cast<long double>(kappa::kernels::Linear{}.scale_for(d));
        z += x;
        for (Index t = 0; t < dv; ++t) acc[static_cast<std::size_t>(t)] += x * vd(j, t);
      }
      for (Index t = 0; t < dv; ++t) {
        const double w = static_cast<double>(acc[static_cast<std::size_t>(t)] / z);
        EXPECT_NEAR(y(i, t), w, 1e-3 * (1.0 + std::abs(w))) << "linear, row " << i << ", col " << t;
      }
    }
  }
}

TEST(DecodeKernel, OneRowHiddenNaNAndInfinityInEveryFormat) {
  // One query row sees keys 0 .. 2997 of 3000 (causal, offset); keys 2998
  // and 2999 hold NaN / inf in V and K. They must not reach the output, in
  // any storage format that can hold them (Int8 rejects them on append).
  const Index n = 3000, d = 16;
  RowMatrix<float> k = kappa::testing::random_matrix<float>(n, d, 21);
  RowMatrix<float> v = kappa::testing::random_matrix<float>(n, d, 22);
  v(n - 2, 3) = std::numeric_limits<float>::quiet_NaN();
  k(n - 1, 5) = std::numeric_limits<float>::infinity();
  const RowMatrix<float> q = kappa::testing::random_matrix<float>(1, d, 23);
  const kappa::SlidingWindowMask win{.window = n, .offset = n - 3};  // keys 0 .. n - 3
  const auto check = [&](auto format) {
    using F = decltype(format);
    KVCache<float, cache::Growable, F> c({.n_kv_heads = 1, .d_head = d});
    c.append(k, v);
    RowMatrix<float> y(1, d);
    kappa::DecodeWorkspace<float> ws;
    kappa::decode_attention_into<float, F>(q, c.key_rows(0), c.value_rows(0), y, ws,
                                           kappa::kernels::Softmax{}, win);
    EXPECT_TRUE(y.allFinite()) << F::kName;
  };
  check(cache::Native{});
  check(cache::BF16{});
  check(cache::F16{});
}

// ---- a float cache through grouped_attention_into -------------------------------

TEST(DecodeKernel, FloatCacheDecodesLikeTheWholeSequence) {
  // grouped_attention_into(q, cache) over a float cache (the decode kernel
  // for up to kDecodeRows rows per kv head where its register loops are
  // built, attention_into otherwise) against grouped_attention_into(q, k, v)
  // on the same rows (attention_into): 8 heads over 2 kv heads (G = 4), 1 and
  // 3 new queries (4 and 12 rows per kv head), 5 (20 rows: the other path),
  // over 2500 cached tokens; causal, per-head ALiBi and a boolean mask (holes:
  // never the decode kernel).
  const Index n_ctx = 2500, h = 8, h_kv = 2, d = 64;
  const RowMatrix<float> k = kappa::testing::random_matrix<float>(n_ctx, h_kv * d, 41);
  const RowMatrix<float> v = kappa::testing::random_matrix<float>(n_ctx, h_kv * d, 42);
  KVCache<float> c({.n_kv_heads = h_kv, .d_head = d});
  c.append(k, v);
  EXPECT_EQ(
      (kappa::detail::native_cache_decodable<float, kappa::kernels::Softmax, kappa::CausalMask>()),
      KAPPA_DECODE_SIMD == 1);
  EXPECT_FALSE((
      kappa::detail::native_cache_decodable<float, kappa::kernels::Softmax, kappa::BooleanMask>()));
  EXPECT_FALSE((
      kappa::detail::native_cache_decodable<double, kappa::kernels::Softmax, kappa::CausalMask>()));
  for (const Index n : {1, 3, 5}) {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(n, h * d, 43 + unsigned(n));
    RowMatrix<float> y(n, h * d), want(n, h * d);
    const auto check = [&](const auto& mask, const char* what) {
      kappa::grouped_attention_into<float>(q, c, y, h, kappa::kernels::Softmax{}, mask);
      kappa::grouped_attention_into<float>(q, k, v, want, h, h_kv, kappa::kernels::Softmax{}, mask);
      EXPECT_LE(kappa::testing::max_scaled_error(y, want, 1e-5, 1e-6), 1.0)
          << n << " queries, " << what;
    };
    check(kappa::CausalMask{}, "causal");
    check(kappa::Alibi(h), "ALiBi");
    kappa::BooleanMask holes{kappa::BooleanMask::Matrix::Constant(n, n_ctx, true)};
    for (Index j = 0; j < n_ctx; j += 3) holes.allowed(0, j) = false;
    check(holes, "boolean mask");
  }
}

// A per-head bias (ALiBi) over a GQA cache: the G heads of a kv head are
// stacked as the rows of one decode call, each with its own head's bias
// (K and V read once per group, not once per head). Each head's output must
// equal that head decoded alone with its bias, to float rounding: the
// register loops give a row the same bits in any company, but the softmax
// pass's vectorized sums start on other alignments, and the portable path
// uses small GEMMs from 4 rows on.
TYPED_TEST(DecodeKernelTest, PerHeadBiasStackedEqualsEachHeadAlone) {
  using F = TypeParam;
  const Index n_ctx = 2300, h = 8, h_kv = 2, grp = h / h_kv, d = 64;
  KVCache<float, cache::Growable, F> c({.n_kv_heads = h_kv, .d_head = d});
  c.append(kappa::testing::random_matrix<float>(n_ctx, h_kv * d, 71),
           kappa::testing::random_matrix<float>(n_ctx, h_kv * d, 72));
  const kappa::Alibi alibi(h);
  for (const Index n : {1, 3}) {
    const RowMatrix<float> q = kappa::testing::random_matrix<float>(n, h * d, 73 + unsigned(n));
    RowMatrix<float> y(n, h * d), alone(n, d);
    kappa::detail::decode_cache_heads<float>(q, c, y, h, kappa::kernels::Softmax{}, alibi);
    kappa::DecodeWorkspace<float> ws;
    for (Index head = 0; head < h; ++head) {
      const RowMatrix<float> qh = q.middleCols(head * d, d);
      kappa::decode_attention_into<float, F>(qh, c.key_rows(head / grp), c.value_rows(head / grp),
                                             alone, ws, kappa::kernels::Softmax{},
                                             alibi.head(head));
      EXPECT_LE(kappa::testing::max_scaled_error(RowMatrix<float>(y.middleCols(head * d, d)), alone,
                                                 2e-6, 2e-7),
                1.0)
          << n << " queries, head " << head;
    }
  }
}

// Latent attention (DeepSeek-V2's MLA) with latent rows of whole vectors
// that are not 4 or 8 of them (d_c + d_R = 112, d_c = 96), 16 heads: a float
// decode step over a float or BF16 cache goes through the wide register
// loops (16 stacked rows), over enough tokens for several 64-key blocks and
// a ragged end. Equal to the causal forward pass (BF16: to the forward pass
// over the BF16-rounded rows' error bound, checked against float decoding).
TEST(DecodeKernel, LatentDecodeStepsThroughTheWideLoopsEqualTheForwardPass) {
  const kappa::LatentConfig c{
      .d_model = 64, .n_heads = 16, .d_head = 16, .d_rope = 16, .d_latent = 96};
  kappa::LatentAttention<float, kappa::AbsorbedLatent> mla(c);
  mla.init_random(31);
  const Index n = 300, decoded = 9;
  const RowMatrix<float> x = kappa::testing::random_matrix<float>(n, c.d_model, 32);
  const RowMatrix<float> full = mla.forward(x);
  const RowMatrix<float> want = full.bottomRows(decoded);
  const auto decode = [&](auto& cache) {
    (void)mla.forward_cached(x.topRows(n - decoded), cache);
    RowMatrix<float> y(decoded, c.d_model);
    for (Index t = 0; t < decoded; ++t)
      y.row(t) = mla.forward_cached(x.row(n - decoded + t), cache);
    return y;
  };
  kappa::LatentCache<float> f32(c);
  EXPECT_LE(kappa::testing::max_scaled_error(decode(f32), want, 1e-4, 1e-5), 1.0);
  kappa::LatentCache<float, cache::Growable, cache::BF16> bf16(c);
  EXPECT_LE(kappa::testing::max_scaled_error(decode(bf16), want, 2e-2, 2e-3), 1.0);
}

}  // namespace
