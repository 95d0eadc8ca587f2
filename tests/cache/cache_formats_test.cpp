// Cache storage formats: the BF16 / F16 conversions (exhaustively against a
// decoding by the definition in double), Int8 rows, and the error of each format against the float
// cache for real text through a GPT-2-shaped layer and a DeepSeek-V2-shaped latent layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kappa/cache/decode.hpp"
#include "kappa/cache/formats.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "support/reference.hpp"

namespace {

using kappa::Index;
using kappa::KVCache;
using kappa::RowMatrix;
namespace cache = kappa::cache;

// ---- conversions --------------------------------------------------------------

/// bfloat16 by the definition: sign, 8 exponent bits (bias 127), 7 mantissa bits.
double bf16_value(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
  double v;
  if (e == 0xff) return m ? std::nan("") : (s ? -INFINITY : INFINITY);
  if (e == 0)
    v = std::ldexp(m, -126 - 7);
  else
    v = std::ldexp(128 + m, e - 127 - 7);
  return s ? -v : v;
}

/// IEEE binary16 by the definition: 5 exponent bits (bias 15), 10 mantissa bits.
double f16_value(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0x1f) return m ? std::nan("") : (s ? -INFINITY : INFINITY);
  if (e == 0)
    v = std::ldexp(m, -14 - 10);
  else
    v = std::ldexp(1024 + m, e - 15 - 10);
  return s ? -v : v;
}

TEST(CacheFormats, Bf16DecodesEveryPatternAndRoundTrips) {
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const auto b = static_cast<std::uint16_t>(p);
    const float f = kappa::float_from_bf16(b);
    const double want = bf16_value(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << p;
      const std::uint16_t back = kappa::bf16_from_float(f);
      ASSERT_TRUE(std::isnan(kappa::float_from_bf16(back))) << p;  // NaN stays NaN, never inf
      ASSERT_EQ(back & 0x8000, b & 0x8000) << p;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << p;
    ASSERT_EQ(kappa::bf16_from_float(f), b) << p;
  }
}

TEST(CacheFormats, Bf16RoundsToNearestTiesToEven) {
  // Between every pair of adjacent finite positive bf16 values b, b + 1: the
  // midpoint goes to the even one, a float ulp either side to the nearer.
  for (std::uint32_t b = 0; b + 1 < 0x7f80; ++b) {
    const double lo = bf16_value(static_cast<std::uint16_t>(b));
    const double hi = bf16_value(static_cast<std::uint16_t>(b + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: 9 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const std::uint16_t even =
        (b & 1u) ? static_cast<std::uint16_t>(b + 1) : static_cast<std::uint16_t>(b);
    ASSERT_EQ(kappa::bf16_from_float(mid), even) << b;
    ASSERT_EQ(kappa::bf16_from_float(std::nextafter(mid, 0.0f)), b) << b;
    ASSERT_EQ(kappa::bf16_from_float(std::nextafter(mid, INFINITY)), b + 1) << b;
    ASSERT_EQ(kappa::bf16_from_float(-mid), even | 0x8000u) << b;
  }
  // Beyond the largest bf16 (0x7f7f) rounding reaches inf, as IEEE says.
  EXPECT_EQ(kappa::bf16_from_float(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(kappa::bf16_from_float(-INFINITY), 0xff80u);
}

TEST(CacheFormats, F16DecodesEveryPatternAndRoundTrips) {
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const auto h = static_cast<std::uint16_t>(p);
    const float f = kappa::float_from_f16(h);
    const double want = f16_value(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << p;
      const std::uint16_t back = kappa::f16_from_float(f);
      ASSERT_TRUE(std::isnan(f16_value(back))) << p;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << p;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << p;
    ASSERT_EQ(kappa::f16_from_float(f), h) << p;
  }
}

TEST(CacheFormats, F16RoundsToNearestTiesToEvenWithSubnormalsAndOverflow) {
  for (std::uint32_t h = 0; h + 1 < 0x7c00; ++h) {  // every adjacent pair of finite halves
    const double lo = f16_value(static_cast<std::uint16_t>(h));
    const double hi = f16_value(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const std::uint32_t even = (h & 1u) ? h + 1 : h;
    ASSERT_EQ(kappa::f16_from_float(mid), even) << h;
    ASSERT_EQ(kappa::f16_from_float(std::nextafter(mid, 0.0f)), h) << h;
    ASSERT_EQ(kappa::f16_from_float(std::nextafter(mid, INFINITY)), h + 1) << h;
    ASSERT_EQ(kappa::f16_from_float(-mid), even | 0x8000u) << h;
  }
  // Below the smallest subnormal 2^-24: 2^-25 is a tie (to 0), above it 2^-24.
  EXPECT_EQ(kappa::f16_from_float(0x1p-25f), 0u);
  EXPECT_EQ(kappa::f16_from_float(std::nextafter(0x1p-25f, 1.0f)), 1u);
  EXPECT_EQ(kappa::f16_from_float(1e-30f), 0u);
  EXPECT_EQ(kappa::f16_from_float(-1e-30f), 0x8000u);
  // 65504 is the largest half; from the midpoint 65520 on, inf.
  EXPECT_EQ(kappa::f16_from_float(65504.0f), 0x7bffu);
  EXPECT_EQ(kappa::f16_from_float(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(kappa::f16_from_float(65520.0f), 0x7c00u);
  EXPECT_EQ(kappa::f16_from_float(-1e10f), 0xfc00u);
}

TEST(CacheFormats, F16CacheSaturatesAndInt8RowsUseOneScalePerRow) {
  const kappa::KVCacheConfig cfg{.n_kv_heads = 2, .d_head = 3};
  RowMatrix<float> k(1, 6), v(1, 6);
  k << 1e6f, -1e6f, 1.0f, 0.0f, 0.0f, 0.0f;
  v << 1.0f, -2.0f, 0.5f, 0.25f, -0.125f, 0.0625f;
  KVCache<float, cache::Growable, cache::F16> h(cfg);
  h.append(k, v);
  const RowMatrix<float> hk = h.key_rows(0).decoded();
  EXPECT_EQ(hk(0, 0), 65504.0f);  // saturated, not inf
  EXPECT_EQ(hk(0, 1), -65504.0f);
  EXPECT_EQ(hk(0, 2), 1.0f);
  EXPECT_EQ(RowMatrix<float>(h.key_rows(1).decoded()), RowMatrix<float>::Zero(1, 3));

  KVCache<float, cache::Growable, cache::Int8> q(cfg);
  q.append(k, v);
  // Row [1, -2, 0.5]: scale 2/127, q = round(x 127/2) = 64 (63.5 rounds to even), -127, 32.
  const auto v0 = q.value_rows(0);
  EXPECT_FLOAT_EQ(v0.scale(0), 2.0f / 127.0f);
  EXPECT_EQ(v0.row(0)[0], 64);
  EXPECT_EQ(v0.row(0)[1], -127);
  EXPECT_EQ(v0.row(0)[2], 32);
  const RowMatrix<float> dv0 = v0.decoded();
  for (Index c = 0; c < 3; ++c) EXPECT_LE(std::abs(dv0(0, c) - v(0, c)), 0.5f * 2.0f / 127.0f);
  EXPECT_EQ(q.key_rows(1).scale(0), 0.0f);  // an all-zero row: scale 0, values 0
  EXPECT_EQ(RowMatrix<float>(q.key_rows(1).decoded()), RowMatrix<float>::Zero(1, 3));
  // Bytes: 12 values of 1 byte + 4 rows (K and V of 2 heads) of 4-byte scales.
  EXPECT_EQ(q.bytes_per_token(), 12u * 1u + 4u * 4u);
  EXPECT_EQ(h.bytes_per_token(), 12u * 2u);
  // A NaN cannot be stored in Int8: clear error, cache unchanged.
  RowMatrix<float> bad = v;
  bad(0, 4) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(q.append(k, bad), std::invalid_argument);
  EXPECT_EQ(q.length(), 1);
}

TEST(CacheFormats, BytesPerTokenOfLlama3And70BDeepSeekV2) {
  const kappa::KVCacheConfig llama{.n_kv_heads = 8, .d_head = 128};
  using C = KVCache<float>;
  EXPECT_EQ(C::bytes_per_token(llama, 80, cache::Native{}), 80u * 8u * 256u * 4u);  // 655360
  EXPECT_EQ(C::bytes_per_token(llama, 80, cache::BF16{}), 327680u);
  EXPECT_EQ(C::bytes_per_token(llama, 80, cache::F16{}), 327680u);
  EXPECT_EQ(C::bytes_per_token(llama, 80, cache::Int8{}), 163840u + 80u * 16u * 4u);  // 168960
  kappa::LatentConfig ds;
  ds.d_latent = 512;
  ds.d_rope = 64;
  using L = kappa::LatentCache<float>;
  EXPECT_EQ(L::bytes_per_token(ds, 60, cache::Native{}), 576u * 60u * 4u);  // 138240
  EXPECT_EQ(L::bytes_per_token(ds, 60, cache::BF16{}), 69120u);
  EXPECT_EQ(L::bytes_per_token(ds, 60, cache::Int8{}), 34560u + 240u);
}

// ---- layers over every format ---------------------------------------------------

/// Real text: the English corpus file encoded with the GPT-2-layout tokenizer
/// of the tiny checkpoint, embedded with that checkpoint's token embedding
/// (wte) rows: n x 32.
RowMatrix<float> text_embeddings(Index max_tokens) {
  const std::string dir = std::string(KAPPA_TEST_DATA_DIR) + "/models/gpt2";
  const auto tok = kappa::tokenize::HfTokenizer::from_directory(dir);
  std::ifstream in(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus/english.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto ids = tok.encode(ss.str(), kappa::tokenize::AddSpecial::kNo);
  const kappa::io::SafetensorsFile st(dir + "/model.safetensors");
  const RowMatrix<float> wte = st.matrix<float>("wte.weight");
  const Index n = std::min<Index>(max_tokens, static_cast<Index>(ids.size()));
  RowMatrix<float> x(n, wte.cols());
  for (Index i = 0; i < n; ++i)
    x.row(i) = wte.row(static_cast<Index>(ids[static_cast<std::size_t>(i)]));
  return x;
}

double relative_error(const RowMatrix<float>& a, const RowMatrix<float>& b) {
  return (a - b).norm() / b.norm();
}

template <class F>
double gqa_error(const RowMatrix<float>& x, RowMatrix<float>* prefill_gap = nullptr) {
  // GPT-2's head width 64; 8 query heads over 2 kv heads; seeded weights.
  kappa::GroupedQueryAttention<float> layer(
      {.d_in = x.cols(), .n_heads = 8, .d_head = 64, .n_kv_heads = 2});
  layer.init_random(42);
  const kappa::KVCacheConfig cc = layer.kv_cache_config();
  KVCache<float> ref_cache(cc);
  KVCache<float, cache::Growable, F> cache(cc);
  RowMatrix<float> want(x.rows(), x.cols()), got(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    want.row(i) = layer.forward_cached(x.row(i), ref_cache);
    got.row(i) = layer.forward_cached(x.row(i), cache);
  }
  if (prefill_gap) {  // the whole sequence in one call reads the same stored rows
    KVCache<float, cache::Growable, F> again(cc);
    *prefill_gap = layer.forward_cached(x, again) - got;
  }
  return relative_error(got, want);
}

TEST(CacheFormats, GroupedAttentionErrorOfEachFormatOnRealText) {
  const RowMatrix<float> x = text_embeddings(160);
  ASSERT_GE(x.rows(), 100);
  RowMatrix<float> gap;
  EXPECT_EQ(gqa_error<cache::Native>(x, &gap), 0.0);
  EXPECT_LE(gap.cwiseAbs().maxCoeff(), 1e-5f);
  const double e_bf16 = gqa_error<cache::BF16>(x, &gap);
  EXPECT_LE(gap.cwiseAbs().maxCoeff(), 1e-5f);
  const double e_f16 = gqa_error<cache::F16>(x);
  const double e_int8 = gqa_error<cache::Int8>(x);
  std::printf("GQA layer, relative output error vs float cache: bf16 %.3g f16 %.3g int8 %.3g\n",
              e_bf16, e_f16, e_int8);
  // Bounds stated in kv_cache.hpp and the README (measured, with headroom).
  EXPECT_LE(e_bf16, 5e-3);
  EXPECT_LE(e_f16, 1e-3);
  EXPECT_LE(e_int8, 2e-2);
  EXPECT_GT(e_bf16, 0.0);  // the format does change the stored values
}

template <class Path, class F>
double latent_error(const RowMatrix<float>& x) {
  kappa::LatentConfig c;
  c.d_model = x.cols();
  c.n_heads = 4;
  c.d_head = 32;
  c.d_rope = 16;
  c.d_latent = 64;
  kappa::LatentAttention<float, Path> layer(c);
  layer.init_random(7);
  kappa::LatentCache<float> ref_cache(c);
  kappa::LatentCache<float, cache::Growable, F> cache(c);
  RowMatrix<float> want(x.rows(), x.cols()), got(x.rows(), x.cols());
  want.topRows(4) = layer.forward_cached(x.topRows(4), ref_cache);
  got.topRows(4) = layer.forward_cached(x.topRows(4), cache);
  for (Index i = 4; i < x.rows(); ++i) {
    want.row(i) = layer.forward_cached(x.row(i), ref_cache);
    got.row(i) = layer.forward_cached(x.row(i), cache);
  }
  return relative_error(got, want);
}

TEST(CacheFormats, LatentAttentionErrorOfEachFormatOnRealText) {
  const RowMatrix<float> x = text_embeddings(120);
  const double b_abs = latent_error<kappa::AbsorbedLatent, cache::BF16>(x);
  const double b_nai = latent_error<kappa::NaiveLatent, cache::BF16>(x);
  const double f_abs = latent_error<kappa::AbsorbedLatent, cache::F16>(x);
  const double i_abs = latent_error<kappa::AbsorbedLatent, cache::Int8>(x);
  const double i_nai = latent_error<kappa::NaiveLatent, cache::Int8>(x);
  std::printf(
      "latent layer, relative output error vs float cache: bf16 %.3g (naive %.3g) f16 %.3g "
      "int8 %.3g (naive %.3g)\n",
      b_abs, b_nai, f_abs, i_abs, i_nai);
  EXPECT_LE(b_abs, 1e-2);
  EXPECT_LE(b_nai, 1e-2);
  EXPECT_LE(f_abs, 2e-3);
  EXPECT_LE(i_abs, 3e-2);
  EXPECT_LE(i_nai, 3e-2);
  EXPECT_NEAR(b_abs, b_nai, 0.5 * b_abs + 1e-4);  // both paths read the same stored rows
}

}  // namespace
