// The KV cache and the TokenStore under it: append, views, growth, a fixed
// capacity, truncate, reset, the sliding-window ring and memory accounting.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kappa/cache/kv_cache.hpp"
#include "kappa/cache/token_store.hpp"
#include "support/reference.hpp"

namespace {

using kappa::Index;
using kappa::KVCache;
using kappa::RowMatrix;
namespace cache = kappa::cache;

template <class T>
class CacheTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CacheTest, Scalars);

/// Token p's K row is p * 100 + column, V row is -(p * 100 + column), so any
/// misplaced row shows.
template <class T>
void tokens(Index first, Index n, Index h_kv, Index dh, RowMatrix<T>& k, RowMatrix<T>& v) {
  k.resize(n, h_kv * dh);
  v.resize(n, h_kv * dh);
  for (Index i = 0; i < n; ++i)
    for (Index c = 0; c < h_kv * dh; ++c) {
      k(i, c) = static_cast<T>((first + i) * 100 + c);
      v(i, c) = -k(i, c);
    }
}

TYPED_TEST(CacheTest, AppendStoresEachKvHeadAsAViewOfItsColumns) {
  using T = TypeParam;
  KVCache<T> c({.n_kv_heads = 2, .d_head = 3}, cache::Growable{2});
  RowMatrix<T> k, v;
  tokens<T>(0, 5, 2, 3, k, v);
  c.append(k, v);
  EXPECT_EQ(c.length(), 5);
  EXPECT_EQ(c.stored(), 5);
  EXPECT_GE(c.capacity(), 5);
  for (Index g = 0; g < 2; ++g) {
    EXPECT_EQ(RowMatrix<T>(c.keys(g)), RowMatrix<T>(k.middleCols(g * 3, 3)));
    EXPECT_EQ(RowMatrix<T>(c.values(g)), RowMatrix<T>(v.middleCols(g * 3, 3)));
  }
  // A view, not a copy: two calls see the same storage.
  EXPECT_EQ(c.keys(1).data(), c.keys(1).data());
  EXPECT_EQ(c.keys(0).rows(), 5);
  EXPECT_THROW((void)c.keys(2), kappa::RangeError);
}

TYPED_TEST(CacheTest, GrowthKeepsTheRowsAndDoublesTheCapacity) {
  using T = TypeParam;
  KVCache<T> c({.n_kv_heads = 1, .d_head = 2}, cache::Growable{16});
  RowMatrix<T> k, v;
  for (Index p = 0; p < 40; ++p) {
    tokens<T>(p, 1, 1, 2, k, v);
    c.append(k, v);
  }
  EXPECT_EQ(c.length(), 40);
  EXPECT_EQ(c.capacity(), 64);  // 16 -> 32 -> 64
  RowMatrix<T> all_k, all_v;
  tokens<T>(0, 40, 1, 2, all_k, all_v);
  EXPECT_EQ(RowMatrix<T>(c.keys(0)), all_k);
  EXPECT_EQ(RowMatrix<T>(c.values(0)), all_v);
  // Reserve: no reallocation afterwards.
  c.reserve(200);
  const T* before = c.keys(0).data();
  for (Index p = 40; p < 200; ++p) {
    tokens<T>(p, 1, 1, 2, k, v);
    c.append(k, v);
  }
  EXPECT_EQ(c.keys(0).data(), before);
}

TYPED_TEST(CacheTest, FixedCapacityThrowsAClearErrorAndStaysUnchanged) {
  using T = TypeParam;
  KVCache<T, cache::FixedCapacity> c({.n_kv_heads = 2, .d_head = 2}, {4});
  RowMatrix<T> k, v;
  tokens<T>(0, 3, 2, 2, k, v);
  c.append(k, v);
  const T* data = c.keys(0).data();
  tokens<T>(3, 2, 2, 2, k, v);
  try {
    c.append(k, v);
    FAIL() << "no exception";
  } catch (const kappa::RangeError& e) {
    EXPECT_NE(std::string(e.what()).find("appending 2 tokens to 3 would exceed the fixed capacity "
                                         "of 4 tokens"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.length(), 3);
  EXPECT_EQ(c.keys(0).data(), data);
  tokens<T>(3, 1, 2, 2, k, v);
  c.append(k, v);
  EXPECT_EQ(c.length(), 4);
  EXPECT_THROW(c.reserve(5), kappa::RangeError);
}

TYPED_TEST(CacheTest, AppendShapeErrorsNameBothShapes) {
  using T = TypeParam;
  KVCache<T> c({.n_kv_heads = 2, .d_head = 3, .d_v = 4});
  try {
    c.append(RowMatrix<T>(2, 6), RowMatrix<T>(2, 6));
    FAIL() << "no exception";
  } catch (const kappa::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("v is (2 x 6) but the expected shape is (2 x 8)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.append(RowMatrix<T>(2, 5), RowMatrix<T>(2, 8)), kappa::ShapeError);
  EXPECT_THROW(c.append(RowMatrix<T>(2, 6), RowMatrix<T>(3, 8)), kappa::ShapeError);
  EXPECT_EQ(c.length(), 0);
}

TYPED_TEST(CacheTest, TruncateAndReset) {
  using T = TypeParam;
  KVCache<T> c({.n_kv_heads = 1, .d_head = 2});
  RowMatrix<T> k, v;
  tokens<T>(0, 6, 1, 2, k, v);
  c.append(k, v);
  c.truncate(4);
  EXPECT_EQ(c.length(), 4);
  EXPECT_EQ(c.keys(0).rows(), 4);
  tokens<T>(40, 1, 1, 2, k, v);  // a different token at position 4
  c.append(k, v);
  EXPECT_EQ(c.keys(0)(4, 0), T(4000));
  EXPECT_EQ(c.keys(0)(3, 0), T(300));
  EXPECT_THROW(c.truncate(6), kappa::RangeError);
  EXPECT_THROW(c.truncate(-1), kappa::RangeError);
  const std::size_t cap = c.capacity_bytes();
  c.reset();
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.bytes(), 0u);
  EXPECT_EQ(c.capacity_bytes(), cap);
}

TYPED_TEST(CacheTest, SlidingWindowKeepsTheLastWTokensInARing) {
  using T = TypeParam;
  KVCache<T, cache::SlidingWindow> c({.n_kv_heads = 2, .d_head = 2}, {4});
  EXPECT_EQ(c.capacity(), 4);
  RowMatrix<T> k, v;
  tokens<T>(0, 3, 2, 2, k, v);
  c.append(k, v);
  EXPECT_EQ(c.stored(), 3);
  tokens<T>(3, 3, 2, 2, k, v);  // positions 3, 4, 5: 4 and 5 overwrite 0 and 1
  c.append(k, v);
  EXPECT_EQ(c.length(), 6);
  EXPECT_EQ(c.stored(), 4);
  EXPECT_EQ(c.first_position(), 2);
  // Ring order: slot p mod 4.
  EXPECT_EQ(c.keys(1)(0, 0), T(402));
  EXPECT_EQ(c.keys(1)(1, 0), T(502));
  EXPECT_EQ(c.keys(1)(2, 0), T(202));
  EXPECT_EQ(c.values(0)(3, 1), T(-301));
  // Chronological copy across the wrap.
  RowMatrix<T> out(4, 2);
  c.copy_keys(1, 2, 4, out);
  for (Index i = 0; i < 4; ++i) EXPECT_EQ(out(i, 0), T((2 + i) * 100 + 2));
  EXPECT_THROW(c.copy_keys(0, 1, 2, out.topRows(2)), kappa::RangeError);
  // A chunk longer than the window keeps only its last W rows.
  tokens<T>(6, 9, 2, 2, k, v);
  c.append(k, v);
  EXPECT_EQ(c.first_position(), 11);
  c.copy_values(0, 11, 4, out);
  for (Index i = 0; i < 4; ++i) EXPECT_EQ(out(i, 0), -T((11 + i) * 100));
  EXPECT_EQ(c.bytes(), 4u * 2 * 2 * 2 * sizeof(T));
}

TYPED_TEST(CacheTest, SlidingWindowRollbackWorksOnlyWhileNothingNeededWasEvicted) {
  using T = TypeParam;
  KVCache<T, cache::SlidingWindow> c({.n_kv_heads = 1, .d_head = 1}, {4});
  RowMatrix<T> k, v;
  tokens<T>(0, 3, 1, 1, k, v);
  c.append(k, v);
  c.truncate(1);  // not wrapped yet: fine
  EXPECT_EQ(c.length(), 1);
  tokens<T>(1, 5, 1, 1, k, v);
  c.append(k, v);                                  // positions 0..5 seen, 2..5 stored
  EXPECT_THROW(c.truncate(5), kappa::RangeError);  // would need position 1
  EXPECT_NO_THROW(c.truncate(6));
  EXPECT_EQ(c.length(), 6);
}

TEST(CacheMemory, BytesPerTokenIsTwoHkvDheadLayersSizeof) {
  // LLaMA-3-70B: 80 layers, 8 kv heads of d_head 128, bf16 (2 bytes).
  const kappa::KVCacheConfig gqa{.n_kv_heads = 8, .d_head = 128};
  using C = KVCache<float>;
  EXPECT_EQ(C::bytes_per_token(gqa, 80, 2), 2u * 8 * 128 * 80 * 2);  // 320 KiB
  EXPECT_EQ(C::bytes_per_token(gqa, 80, 2), 327680u);
  const kappa::KVCacheConfig mha{.n_kv_heads = 64, .d_head = 128};
  const kappa::KVCacheConfig mqa{.n_kv_heads = 1, .d_head = 128};
  EXPECT_EQ(C::bytes_per_token(mha, 80, 2), 8 * C::bytes_per_token(gqa, 80, 2));
  EXPECT_EQ(C::bytes_per_token(gqa, 80, 2), 8 * C::bytes_per_token(mqa, 80, 2));
  // Without bytes_per_scalar the cache's own scalar, without layers one layer.
  EXPECT_EQ(C::bytes_per_token(gqa, 80), 2u * 8 * 128 * 80 * 4);
  EXPECT_EQ(KVCache<double>::bytes_per_token(gqa, 80), 2u * 8 * 128 * 80 * 8);
  EXPECT_EQ(C::bytes_per_token(gqa), 2u * 8 * 128 * 4);
  // d_v may differ from d_head.
  EXPECT_EQ(KVCache<double>::bytes_per_token({.n_kv_heads = 2, .d_head = 3, .d_v = 5}), 2u * 8 * 8);
}

// One name for one quantity: a cache object's bytes_per_token() is the static
// one for one layer in its own scalar, and bytes() is stored() times it.
TEST(CacheMemory, MemberBytesPerTokenAgreesWithTheStaticOneAndBytes) {
  const kappa::KVCacheConfig cfg{.n_kv_heads = 3, .d_head = 4, .d_v = 6};
  KVCache<float> f(cfg);
  KVCache<double, cache::SlidingWindow> w(cfg, {2});
  EXPECT_EQ(f.bytes_per_token(), 3u * (4 + 6) * sizeof(float));
  EXPECT_EQ(f.bytes_per_token(), KVCache<float>::bytes_per_token(cfg));
  EXPECT_EQ(f.bytes_per_token(), f.store().bytes_per_token());
  EXPECT_EQ(w.bytes_per_token(), 3u * (4 + 6) * sizeof(double));
  f.append(RowMatrix<float>::Zero(5, 12), RowMatrix<float>::Zero(5, 18));
  w.append(RowMatrix<double>::Zero(5, 12), RowMatrix<double>::Zero(5, 18));
  EXPECT_EQ(f.bytes(), 5 * f.bytes_per_token());
  EXPECT_EQ(w.bytes(), 2 * w.bytes_per_token());  // the window holds 2 tokens
}

TEST(CacheMemory, LiveBytesFollowTheLength) {
  KVCache<float> c({.n_kv_heads = 2, .d_head = 4}, cache::Growable{8});
  EXPECT_EQ(c.bytes(), 0u);
  EXPECT_EQ(c.capacity_bytes(), 8u * 2 * 2 * 4 * 4);
  c.append(RowMatrix<float>::Zero(3, 8), RowMatrix<float>::Zero(3, 8));
  EXPECT_EQ(c.bytes(), 3 * KVCache<float>::bytes_per_token(c.config()));
}

TEST(TokenStore, LatentStyleStreamsOfDifferentWidths) {
  // The shape of a latent cache: c_KV (d_c = 6) and k^R (d_R = 2) per token.
  cache::TokenStore<double, cache::Growable> s({6, 2}, {});
  const RowMatrix<double> c_kv = kappa::testing::random_matrix<double>(3, 6, 1);
  const RowMatrix<double> k_r = kappa::testing::random_matrix<double>(3, 2, 2);
  const std::vector<kappa::ConstMatrixRef<double>> rows{c_kv, k_r};
  s.append(rows);
  EXPECT_EQ(s.length(), 3);
  EXPECT_EQ(RowMatrix<double>(s.stream(0)), c_kv);
  EXPECT_EQ(RowMatrix<double>(s.stream(1)), k_r);
  EXPECT_EQ(s.bytes_per_token(), 8 * sizeof(double));
  const std::vector<kappa::ConstMatrixRef<double>> bad{c_kv, c_kv};
  EXPECT_THROW(s.append(bad), kappa::ShapeError);
  EXPECT_THROW((cache::TokenStore<double, cache::SlidingWindow>({2}, {0})), std::invalid_argument);
}

// ---- Hardening: bad arguments throw kappa errors, never UB ------------------------

TYPED_TEST(CacheTest, CopyChronologicalChecksHeadCountAndOutputShape) {
  using T = TypeParam;
  KVCache<T, cache::SlidingWindow> c({.n_kv_heads = 2, .d_head = 2}, {4});
  RowMatrix<T> k, v;
  tokens<T>(0, 6, 2, 2, k, v);
  c.append(k, v);  // positions 2..5 stored
  RowMatrix<T> out(4, 2);
  // A head past the cache's kv heads: a RangeError naming it, no read past the streams.
  EXPECT_THROW(c.copy_keys(2, 2, 4, out), kappa::RangeError);
  EXPECT_THROW(c.copy_keys(4, 2, 4, out), kappa::RangeError);
  EXPECT_THROW(c.copy_values(-1, 2, 4, out), kappa::RangeError);
  EXPECT_THROW(c.copy_values(2, 2, 4, out), kappa::RangeError);
  // More rows than out holds: a ShapeError, no write past out.
  RowMatrix<T> small = RowMatrix<T>::Constant(2, 2, T(7));
  EXPECT_THROW(c.copy_keys(0, 2, 4, small), kappa::ShapeError);
  EXPECT_EQ(small, RowMatrix<T>::Constant(2, 2, T(7)));
  // A wrong width is a ShapeError too.
  RowMatrix<T> wide(4, 3);
  EXPECT_THROW(c.copy_keys(0, 2, 4, wide), kappa::ShapeError);
  // A negative count must not leave out silently unwritten.
  EXPECT_THROW(c.copy_keys(0, 2, -1, out), kappa::RangeError);
  // first + count overflowing is a RangeError, not UB.
  EXPECT_THROW(c.copy_keys(0, std::numeric_limits<Index>::max(), 2, out.topRows(2)),
               kappa::RangeError);
  std::string msg;
  try {
    c.copy_keys(5, 2, 4, out);
  } catch (const kappa::RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("kv head 5"), std::string::npos) << msg;
  // The valid call still works.
  c.copy_values(1, 2, 4, out);
  for (Index i = 0; i < 4; ++i) EXPECT_EQ(out(i, 0), -T((2 + i) * 100 + 2));
}

TEST(CacheHardening, ExtremeSizesAreRangeErrorsNotOverflowOrBadAlloc) {
  constexpr Index kBig = Index{1} << 62;
  // H_kv d_head overflows int64: rejected at construction, before append can overflow.
  EXPECT_THROW((KVCache<float>({.n_kv_heads = 4, .d_head = kBig})), kappa::RangeError);
  EXPECT_THROW((KVCache<float>({.n_kv_heads = kBig, .d_head = 4})), kappa::RangeError);
  EXPECT_THROW((KVCache<float>({.n_kv_heads = 2, .d_head = 4, .d_v = kBig})), kappa::RangeError);
  // Capacities whose storage cannot exist: RangeError, not std::bad_alloc.
  EXPECT_THROW((KVCache<float, cache::FixedCapacity>({.n_kv_heads = 1, .d_head = 64}, {kBig})),
               kappa::RangeError);
  EXPECT_THROW((KVCache<float>({.n_kv_heads = 1, .d_head = 64}, cache::Growable{kBig})),
               kappa::RangeError);
  EXPECT_THROW((KVCache<float, cache::SlidingWindow>({.n_kv_heads = 1, .d_head = 64}, {kBig})),
               kappa::RangeError);
  KVCache<float> c({.n_kv_heads = 1, .d_head = 64});
  EXPECT_THROW(c.reserve(kBig), kappa::RangeError);
  // Bytes per token that do not fit: RangeError, not a wrapped size_t.
  EXPECT_THROW((void)KVCache<float>::bytes_per_token({.n_kv_heads = kBig, .d_head = 4}, 80, 2),
               kappa::RangeError);
  EXPECT_THROW((void)KVCache<float>::bytes_per_token({.n_kv_heads = 8, .d_head = 4}, -1, 2),
               kappa::RangeError);
}

TEST(CacheHardening, HugeHeadCountsFailFastInsteadOfLoopingForSeconds) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW((KVCache<float>({.n_kv_heads = Index{1} << 40, .d_head = 1}, cache::Growable{0})),
               kappa::RangeError);
  EXPECT_THROW((KVCache<float>({.n_kv_heads = Index{1} << 30, .d_head = 1}, cache::Growable{0})),
               kappa::RangeError);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
  std::string msg;
  try {
    KVCache<float> big({.n_kv_heads = Index{1} << 40, .d_head = 1});
  } catch (const kappa::RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("1099511627776"), std::string::npos) << msg;
}

TEST(TokenStore, StreamIndexAndCopyAreChecked) {
  cache::TokenStore<double, cache::Growable> s({3, 2}, {});
  const RowMatrix<double> a = RowMatrix<double>::Ones(2, 3), b = RowMatrix<double>::Ones(2, 2);
  const std::vector<kappa::ConstMatrixRef<double>> rows{a, b};
  s.append(rows);
  RowMatrix<double> out(2, 3);
  EXPECT_THROW(s.copy_chronological(2, 0, 2, out), kappa::RangeError);
  EXPECT_THROW(s.copy_chronological(1, 0, 2, out), kappa::ShapeError);  // stream 1 is 2 wide
  EXPECT_THROW((void)s.stream(2), kappa::RangeError);
  EXPECT_THROW((cache::TokenStore<double, cache::Growable>({Index{1} << 40, 2}, {16})),
               kappa::RangeError);
}

// A window from a config (Phi-4-mini: 262144) must not allocate up front:
// the ring grows to the window as tokens arrive, and behaves as a ring after.
TEST(TokenStoreWindow, GrowsToTheWindowBeforeItWraps) {
  using Store = cache::TokenStore<double, cache::SlidingWindow>;
  const Store big(std::vector<Index>{2}, cache::SlidingWindow{Index{1} << 30});
  EXPECT_LE(big.capacity(), 256);
  Store c(std::vector<Index>{1}, cache::SlidingWindow{600});
  RowMatrix<double> rows(700, 1);
  for (Index i = 0; i < 700; ++i) rows(i, 0) = static_cast<double>(i);
  const auto add_rows = [&](Index first, Index n) {
    const kappa::ConstMatrixRef<double> r = rows.middleRows(first, n);
    c.append(std::span<const kappa::ConstMatrixRef<double>>(&r, 1));
  };
  add_rows(0, 300);
  EXPECT_GE(c.capacity(), 300);
  EXPECT_LT(c.capacity(), 600);
  add_rows(300, 400);  // wraps: keeps positions 100..699
  EXPECT_EQ(c.capacity(), 600);
  EXPECT_EQ(c.stored(), 600);
  RowMatrix<double> out(600, 1);
  c.copy_chronological(0, 100, 600, out);
  for (Index i = 0; i < 600; ++i) EXPECT_EQ(out(i, 0), static_cast<double>(100 + i));
}

}  // namespace
