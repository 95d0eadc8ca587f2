// Tests for kappa/heads/latent.hpp: multi-head latent attention (DeepSeek-V2)
// against PyTorch golden data (tests/reference/make_latent_golden.py), naive
// against absorbed, decoding through the latent cache against the full pass,
// and the cache memory against the formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/random.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/io/npy.hpp"
#include "support/init_checks.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;
using testing::random_matrix;

template <class T>
RowMatrix<T> npy(const std::string& name) {
  return io::read_npy_matrix<T>(std::string(KAPPA_TEST_DATA_DIR) + "/latent/" + name + ".npy");
}

// The golden case's sizes (tests/reference/make_latent_golden.py).
LatentConfig golden_config(bool compressed) {
  return {.d_model = 16,
          .n_heads = 4,
          .d_head = 8,
          .d_rope = 4,
          .d_v = 6,
          .d_latent = 10,
          .d_q_latent = compressed ? 12 : 0};
}
constexpr Index kGoldenOffset = 3;

template <class T>
LatentWeights<T> golden_weights(bool compressed) {
  LatentWeights<T> w;
  if (compressed) {
    w.w_dq = npy<T>("w_dq");
    w.q_norm = npy<T>("q_norm");
    w.w_uq = npy<T>("w_uq");
    w.w_qr = npy<T>("w_qr");
  } else {
    w.w_uq = npy<T>("w_q");
    w.w_qr = npy<T>("w_qr_x");
  }
  w.w_dkv = npy<T>("w_dkv");
  w.kv_norm = npy<T>("kv_norm");
  w.w_uk = npy<T>("w_uk");
  w.w_uv = npy<T>("w_uv");
  w.w_kr = npy<T>("w_kr");
  w.w_o = npy<T>("w_o");
  return w;
}

template <class T>
struct Tol;
template <>
struct Tol<float> {
  static constexpr double kRel = 1e-5, kAbs = 1e-6;
};
template <>
struct Tol<double> {
  static constexpr double kRel = 1e-12, kAbs = 1e-14;
};

template <class T>
void expect_close(const RowMatrix<T>& got, const RowMatrix<T>& want, double factor = 1.0) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  EXPECT_LE(max_scaled_error(got, want, factor * Tol<T>::kRel, factor * Tol<T>::kAbs), 1.0)
      << "got\n"
      << got << "\nwant\n"
      << want;
}

template <class T, class Path>
struct Combo {
  using Scalar = T;
  using PathT = Path;
};
template <class C>
class LatentTest : public ::testing::Test {};
using Combos = ::testing::Types<Combo<float, NaiveLatent>, Combo<float, AbsorbedLatent>,
                                Combo<double, NaiveLatent>, Combo<double, AbsorbedLatent>>;
TYPED_TEST_SUITE(LatentTest, Combos);

TYPED_TEST(LatentTest, MatchesPyTorchGolden) {
  using T = typename TypeParam::Scalar;
  using Path = typename TypeParam::PathT;
  const RowMatrix<T> x = npy<T>("x");
  for (bool compressed : {true, false}) {
    SCOPED_TRACE(compressed ? "with query compression" : "without query compression");
    LatentAttention<T, Path, RotateHalf> mla(golden_config(compressed));
    mla.set_weights(golden_weights<T>(compressed));
    // Float inputs are the rounded double ones: compare with a float-sized bound.
    const double f = std::is_same_v<T, float> ? 20.0 : 1.0;
    expect_close<T>(mla.forward(x, kGoldenOffset),
                    npy<T>(compressed ? "y_compressed_q" : "y_plain_q"), f);
    const RowMatrix<T> rows = mla.latent_rows(x, kGoldenOffset);
    expect_close<T>(RowMatrix<T>(rows.leftCols(10)), npy<T>("c_kv"), f);
    expect_close<T>(RowMatrix<T>(rows.rightCols(4)), npy<T>("k_rope"), f);
  }
}

TYPED_TEST(LatentTest, HuggingFaceLayoutGivesTheSameLayer) {
  using T = typename TypeParam::Scalar;
  using Path = typename TypeParam::PathT;
  const RowMatrix<T> x = npy<T>("x");
  const double f = std::is_same_v<T, float> ? 20.0 : 1.0;
  for (bool compressed : {true, false}) {
    HfDeepSeekV2AttentionWeights<T> hf;
    if (compressed) {
      hf.q_a_proj = npy<T>("hf_q_a_proj");
      hf.q_a_layernorm = npy<T>("hf_q_a_layernorm");
      hf.q_b_proj = npy<T>("hf_q_b_proj");
    } else {
      hf.q_proj = npy<T>("hf_q_proj");
    }
    hf.kv_a_proj_with_mqa = npy<T>("hf_kv_a_proj_with_mqa");
    hf.kv_a_layernorm = npy<T>("hf_kv_a_layernorm");
    hf.kv_b_proj = npy<T>("hf_kv_b_proj");
    hf.o_proj = npy<T>("hf_o_proj");
    // This golden rotates pairs (j, j + d_R/2) of the stored weights (rotate-half);
    // DeepSeek's own checkpoints need the default Interleaved (tests/transformer).
    LatentAttention<T, Path, RotateHalf> mla(golden_config(compressed));
    mla.set_weights_from_hf(hf);
    expect_close<T>(mla.forward(x, kGoldenOffset),
                    npy<T>(compressed ? "y_compressed_q" : "y_plain_q"), f);
  }
}

// A random layer of another shape (d_v != d_h, more heads, longer sequence).
LatentConfig random_config(bool compressed) {
  return {.d_model = 24,
          .n_heads = 6,
          .d_head = 5,
          .d_rope = 6,
          .d_v = 7,
          .d_latent = 9,
          .d_q_latent = compressed ? 11 : 0};
}

template <class T>
LatentWeights<T> random_weights(const LatentConfig& c, unsigned seed) {
  const Index q_in = c.query_compression() ? c.d_q_latent : c.d_model;
  LatentWeights<T> w;
  const double a = 0.5;
  if (c.query_compression()) {
    w.w_dq = random_matrix<T>(c.d_model, c.d_q_latent, seed + 1, a);
    w.q_norm = (random_matrix<T>(1, c.d_q_latent, seed + 2, 0.2).array() + T(1)).matrix();
  }
  w.w_uq = random_matrix<T>(q_in, c.n_heads * c.d_head, seed + 3, a);
  w.w_qr = random_matrix<T>(q_in, c.n_heads * c.d_rope, seed + 4, a);
  w.w_dkv = random_matrix<T>(c.d_model, c.d_latent, seed + 5, a);
  w.kv_norm = (random_matrix<T>(1, c.d_latent, seed + 6, 0.2).array() + T(1)).matrix();
  w.w_uk = random_matrix<T>(c.d_latent, c.n_heads * c.d_head, seed + 7, a);
  w.w_uv = random_matrix<T>(c.d_latent, c.n_heads * c.value_width(), seed + 8, a);
  w.w_kr = random_matrix<T>(c.d_model, c.d_rope, seed + 9, a);
  w.w_o = random_matrix<T>(c.n_heads * c.value_width(), c.d_model, seed + 10, a);
  return w;
}

TYPED_TEST(LatentTest, NaiveAndAbsorbedAgree) {
  using T = typename TypeParam::Scalar;
  for (bool compressed : {true, false}) {
    const LatentConfig c = random_config(compressed);
    LatentAttention<T, NaiveLatent> naive(c);
    LatentAttention<T, AbsorbedLatent> absorbed(c);
    const auto w = random_weights<T>(c, 40);
    naive.set_weights(w);
    absorbed.set_weights(w);
    for (Index n : {1, 9, 40}) {
      const RowMatrix<T> x = random_matrix<T>(n, c.d_model, 77 + static_cast<unsigned>(n));
      expect_close<T>(absorbed.forward(x, 5), naive.forward(x, 5));
    }
  }
}

// Prefill 6 tokens, then decode one at a time (and a chunk of 3) through the
// latent cache: equal to the causal forward pass over the whole sequence.
TYPED_TEST(LatentTest, DecodingThroughTheCacheEqualsFullForward) {
  using T = typename TypeParam::Scalar;
  using Path = typename TypeParam::PathT;
  for (bool compressed : {true, false}) {
    const LatentConfig c = random_config(compressed);
    LatentAttention<T, Path> mla(c);
    mla.set_weights(random_weights<T>(c, 90));
    const Index n = 16;
    const RowMatrix<T> x = random_matrix<T>(n, c.d_model, 123);
    const RowMatrix<T> full = mla.forward(x);
    LatentCache<T> cache(c);
    RowMatrix<T> y(n, c.d_model);
    y.topRows(6) = mla.forward_cached(x.topRows(6), cache);
    for (Index t = 6; t < 13; ++t) y.row(t) = mla.forward_cached(x.row(t), cache);
    y.bottomRows(3) = mla.forward_cached(x.bottomRows(3), cache);
    EXPECT_EQ(cache.length(), n);
    expect_close<T>(y, full, 2.0);
    // The cache holds exactly latent_rows(x): [c_KV | k^R] at positions 0..n-1.
    expect_close<T>(RowMatrix<T>(cache.rows()), mla.latent_rows(x, 0));
  }
}

TYPED_TEST(LatentTest, RollbackThenRedecode) {
  using T = typename TypeParam::Scalar;
  using Path = typename TypeParam::PathT;
  const LatentConfig c = random_config(true);
  LatentAttention<T, Path> mla(c);
  mla.set_weights(random_weights<T>(c, 7));
  const RowMatrix<T> x = random_matrix<T>(10, c.d_model, 8);
  const RowMatrix<T> draft = random_matrix<T>(3, c.d_model, 9);
  LatentCache<T> cache(c);
  (void)mla.forward_cached(x.topRows(7), cache);
  (void)mla.forward_cached(draft, cache);  // speculative tokens, rejected
  cache.truncate(7);
  const RowMatrix<T> y = mla.forward_cached(x.bottomRows(3), cache);
  expect_close<T>(y, RowMatrix<T>(mla.forward(x).bottomRows(3)), 2.0);
}

TEST(LatentCache, BytesMatchTheFormula) {
  const LatentConfig c = random_config(false);
  LatentCache<float> f(c);
  LatentCache<double, cache::FixedCapacity> d(c, cache::FixedCapacity{.capacity = 8});
  EXPECT_EQ(f.bytes(), 0u);
  f.append(RowMatrix<float>::Zero(5, c.d_latent + c.d_rope));
  d.append(RowMatrix<double>::Zero(8, c.d_latent + c.d_rope));
  EXPECT_EQ(f.bytes(), 5u * (9 + 6) * sizeof(float));
  EXPECT_EQ(d.bytes(), 8u * (9 + 6) * sizeof(double));
  EXPECT_EQ(f.bytes_per_token(), LatentCache<float>::bytes_per_token(c, 1));
  EXPECT_EQ(LatentCache<float>::bytes_per_token(c, 3, 2), 3u * 15u * 2u);  // 16-bit storage
  // The same name and shape as KVCache's: layers defaults to 1, scalars to T.
  EXPECT_EQ(LatentCache<double>::bytes_per_token(c), d.bytes_per_token());
  EXPECT_EQ(d.bytes(), 8 * d.bytes_per_token());
  EXPECT_THROW((void)LatentCache<float>::bytes_per_token(c, 2, std::size_t{1} << 62), RangeError);
  EXPECT_THROW(d.append(RowMatrix<double>::Zero(1, 15)), RangeError);
  EXPECT_THROW(f.append(RowMatrix<float>::Zero(1, 14)), ShapeError);
  f.truncate(2);
  EXPECT_EQ(f.length(), 2);
  EXPECT_EQ(f.bytes(), 2u * 15u * sizeof(float));
  f.reset();
  EXPECT_EQ(f.length(), 0);
}

// DeepSeek-V2 (arXiv 2405.04434): 60 layers, 128 heads, d_h 128, d_c 512,
// d_R 64. MLA's cache equals GQA's with 2.25 groups; 1/56.9 of MHA's.
TEST(LatentCache, DeepSeekV2Table) {
  const auto e = cache_elements_per_token(128, 8, 128, 512, 64, 60);
  EXPECT_EQ(e.mha, 2 * 128 * 128 * 60);  // 1,966,080
  EXPECT_EQ(e.gqa, 2 * 8 * 128 * 60);
  EXPECT_EQ(e.mqa, 2 * 128 * 60);
  EXPECT_EQ(e.mla, 576 * 60);  // 34,560
  EXPECT_NEAR(static_cast<double>(e.mha) / static_cast<double>(e.mla), 56.888, 1e-3);
  EXPECT_EQ(e.mla * 4, 2 * 128 * 60 * 9);  // (d_c + d_R) = 4.5 d_h: GQA with 2.25 groups
  const LatentConfig ds{.d_model = 5120,
                        .n_heads = 128,
                        .d_head = 128,
                        .d_rope = 64,
                        .d_v = 128,
                        .d_latent = 512,
                        .d_q_latent = 1536};
  EXPECT_EQ(latent_cache_elements_per_token(ds, 60), e.mla);
}

// Measured bytes of live caches of small configurations equal the formulas:
// the KV cache (MHA, GQA, MQA) and the latent cache (MLA).
TEST(LatentCache, LiveCachesAgreeWithTable) {
  const Index n_h = 4, d_h = 8, layers = 1, tokens = 11;
  const LatentConfig c{
      .d_model = 32, .n_heads = n_h, .d_head = d_h, .d_rope = 4, .d_v = d_h, .d_latent = 12};
  const auto e = cache_elements_per_token(n_h, 2, d_h, c.d_latent, c.d_rope, layers);
  const auto kv_bytes = [&](Index kv_heads) {
    KVCache<float> cache(KVCacheConfig{.n_kv_heads = kv_heads, .d_head = d_h});
    RowMatrix<float> k = RowMatrix<float>::Zero(tokens, kv_heads * d_h);
    cache.append(k, k);
    return cache.bytes();
  };
  EXPECT_EQ(kv_bytes(n_h), static_cast<std::size_t>(e.mha * tokens) * sizeof(float));
  EXPECT_EQ(kv_bytes(2), static_cast<std::size_t>(e.gqa * tokens) * sizeof(float));
  EXPECT_EQ(kv_bytes(1), static_cast<std::size_t>(e.mqa * tokens) * sizeof(float));
  LatentCache<float> lat(c);
  lat.append(RowMatrix<float>::Zero(tokens, c.cache_width()));
  EXPECT_EQ(lat.bytes(), static_cast<std::size_t>(e.mla * tokens) * sizeof(float));
}

TEST(LatentErrors, ShapesAreNamed) {
  const LatentConfig c = golden_config(true);
  LatentAttention<double> mla(c);
  auto w = golden_weights<double>(true);
  w.w_uk = RowMatrix<double>::Zero(10, 31);
  try {
    mla.set_weights(w);
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("w_uk"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(10 x 31)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(10 x 32)"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)mla.forward(RowMatrix<double>::Zero(2, 16)), std::logic_error);  // no weights
  mla.set_weights(golden_weights<double>(true));
  EXPECT_THROW((void)mla.forward(RowMatrix<double>::Zero(2, 15)), ShapeError);
  HfDeepSeekV2AttentionWeights<double> hf;
  hf.q_a_proj = RowMatrix<double>::Zero(12, 15);
  EXPECT_THROW(mla.set_weights_from_hf(hf), ShapeError);
  LatentCache<double> other(random_config(true));
  EXPECT_THROW((void)mla.forward_cached(RowMatrix<double>::Zero(1, 16), other), ShapeError);
  EXPECT_THROW(LatentAttention<double>(LatentConfig{
                   .d_model = 4, .n_heads = 1, .d_head = 2, .d_rope = 3, .d_latent = 2}),
               std::invalid_argument);
  // The rotary width is d_rope alone (the layer builds its RoPE from it); a
  // bad one is a ShapeError naming it at construction.
  std::string rope_msg;
  try {
    LatentAttention<double> bad(
        LatentConfig{.d_model = 4, .n_heads = 1, .d_head = 2, .d_rope = 7, .d_latent = 2});
  } catch (const ShapeError& e) {
    rope_msg = e.what();
  }
  EXPECT_NE(rope_msg.find("d_rope"), std::string::npos) << rope_msg;
  EXPECT_NE(rope_msg.find("got 7"), std::string::npos) << rope_msg;
}

using testing::expect_projection_init;

TEST(LatentAttention, InitRandomIsSeededWithTheDocumentedVariance) {
  for (bool compressed : {false, true}) {
    SCOPED_TRACE(compressed ? "query compression" : "no query compression");
    const LatentConfig c{.d_model = 64,
                         .n_heads = 4,
                         .d_head = 16,
                         .d_rope = 8,
                         .d_v = 12,
                         .d_latent = 32,
                         .d_q_latent = compressed ? 48 : 0};
    LatentAttention<float, AbsorbedLatent> a(c), b(c), other(c);
    a.init_random(5);
    b.init_random(5);
    other.init_random(6);
    const LatentWeights<float>&wa = a.weights(), &wb = b.weights(), &wo = other.weights();
    // Same seed, same weights (exactly); another seed, other weights.
    EXPECT_EQ(wa.w_uq, wb.w_uq);
    EXPECT_EQ(wa.w_qr, wb.w_qr);
    EXPECT_EQ(wa.w_dkv, wb.w_dkv);
    EXPECT_EQ(wa.w_uk, wb.w_uk);
    EXPECT_EQ(wa.w_uv, wb.w_uv);
    EXPECT_EQ(wa.w_kr, wb.w_kr);
    EXPECT_EQ(wa.w_o, wb.w_o);
    EXPECT_GT((wa.w_uq - wo.w_uq).cwiseAbs().minCoeff(), 0.0f);  // every entry differs
    EXPECT_GT((wa.w_o - wo.w_o).cwiseAbs().maxCoeff(), 0.1f);
    const Index q_in = compressed ? c.d_q_latent : c.d_model;
    if (compressed) {
      EXPECT_EQ(wa.w_dq, wb.w_dq);
      expect_projection_init("W^DQ", wa.w_dq, c.d_model);
      EXPECT_EQ(wa.q_norm, RowVector<float>::Ones(c.d_q_latent));
    }
    expect_projection_init("W^UQ", wa.w_uq, q_in);
    expect_projection_init("W^QR", wa.w_qr, q_in);
    expect_projection_init("W^DKV", wa.w_dkv, c.d_model);
    expect_projection_init("W^UK", wa.w_uk, c.d_latent);
    expect_projection_init("W^UV", wa.w_uv, c.d_latent);
    expect_projection_init("W^KR", wa.w_kr, c.d_model);
    expect_projection_init("W^O", wa.w_o, c.n_heads * c.d_v);
    EXPECT_EQ(wa.kv_norm, RowVector<float>::Ones(c.d_latent));
  }
}

// A randomly initialized layer gives outputs of order 1 for inputs of order 1:
// for one token Y = c_KV W^UV W^O with c_KV normalized, so E[Y_ij^2] = 1;
// measured over 400 single-token calls, the mean square lies in [0.5, 2].
// A longer causal sequence averages values, so its outputs are smaller but
// not zero. Both paths agree.
TEST(LatentAttention, RandomlyInitializedLayerGivesOutputsOfOrderOne) {
  const LatentConfig c{
      .d_model = 64, .n_heads = 4, .d_head = 16, .d_rope = 8, .d_latent = 32, .d_q_latent = 24};
  LatentAttention<double, AbsorbedLatent> absorbed(c);
  LatentAttention<double, NaiveLatent> naive(c);
  EXPECT_THROW((void)absorbed.forward(RowMatrix<double>::Ones(1, 64)), std::logic_error);
  absorbed.init_random(11);
  naive.init_random(11);
  const RowMatrix<double> x = seeded_normal_matrix<double>(400, 64, 3, 1.0);
  double ms = 0;
  for (Index i = 0; i < x.rows(); ++i) ms += absorbed.forward(x.row(i)).squaredNorm();
  ms /= static_cast<double>(x.size());
  EXPECT_GE(ms, 0.5);
  EXPECT_LE(ms, 2.0);
  const RowMatrix<double> y = absorbed.forward(x.topRows(16));
  const double rms = std::sqrt(y.squaredNorm() / static_cast<double>(y.size()));
  EXPECT_GT(rms, 0.05);
  EXPECT_LT(rms, 2.0);
  EXPECT_LE(max_scaled_error(naive.forward(x.topRows(16)), y, 1e-9, 1e-12), 1.0);
}

// ---- Hardening: sizes whose products overflow are RangeErrors, not UB ------------

TEST(LatentHardening, ExtremeSizesAreRangeErrorsNamingTheValue) {
  constexpr Index kBig = Index{1} << 62;
  constexpr Index kMax = std::numeric_limits<Index>::max();
  // d_c + d_R overflows.
  EXPECT_THROW((LatentCache<float>(LatentConfig{.d_rope = kMax - 1, .d_latent = kMax - 1})),
               RangeError);
  // Storage beyond kMaxElements: RangeError, not std::bad_alloc.
  EXPECT_THROW((LatentCache<float>(LatentConfig{.d_rope = 2, .d_latent = Index{1} << 39},
                                   cache::Growable{256})),
               RangeError);
  EXPECT_THROW((LatentCache<float, cache::FixedCapacity>(LatentConfig{.d_rope = 2, .d_latent = 8},
                                                         cache::FixedCapacity{kBig})),
               RangeError);
  const LatentConfig ok{.d_model = 16, .n_heads = 4, .d_head = 8, .d_rope = 4, .d_latent = 10};
  EXPECT_NO_THROW(LatentAttention<float>{ok});
  LatentConfig c = ok;
  c.d_head = kBig;  // H d_h overflows
  EXPECT_THROW(LatentAttention<float>{c}, RangeError);
  c = ok;
  c.n_heads = kBig;
  EXPECT_THROW(LatentAttention<float>{c}, RangeError);
  c = ok;
  c.d_v = kBig;
  EXPECT_THROW(LatentAttention<float>{c}, RangeError);
  c = ok;
  c.d_model = kBig;
  EXPECT_THROW(LatentAttention<float>{c}, RangeError);
  c = ok;
  c.scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(LatentAttention<float>{c}, std::invalid_argument);
  std::string msg;
  try {
    c = ok;
    c.d_head = kBig;
    LatentAttention<float> bad{c};
  } catch (const RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(std::to_string(kBig)), std::string::npos) << msg;
  EXPECT_THROW((void)cache_elements_per_token(kBig, 8, 128, 512, 64, 60), RangeError);
  EXPECT_THROW((void)cache_elements_per_token(128, 8, 128, 512, 64, -1), RangeError);
  EXPECT_THROW((void)latent_cache_elements_per_token(ok, kBig), RangeError);
}

}  // namespace
}  // namespace kappa
