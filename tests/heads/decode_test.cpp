// Incremental decoding through the KV cache equals the full causal forward
// pass: prefill, then one token at a time (and chunks), for multi-head,
// grouped-query and multi-query attention, softmax and linear kernels, a
// positional policy, with and without the sliding window.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kappa/attention/bias.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/embed/rope.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/heads_reference.hpp"
#include "support/test_position.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using namespace kappa::testing;

/// The tolerance: 1e-5 relative in float, 1e-12 in double.
template <class T>
constexpr double kDecodeRel = std::is_same_v<T, float> ? 1e-5 : 1e-12;

template <class T>
class DecodeTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DecodeTest, Scalars);

struct Case {
  Index n_heads, n_kv_heads;
  const char* name;
};
const Case kCases[] = {{4, 4, "MHA"}, {4, 2, "GQA"}, {4, 1, "MQA"}};

/// Runs `steps` (token counts: prefill, then chunks/single tokens) through a
/// cache and returns the stacked outputs.
template <class Attn, class Cache, class T, class Bias = kappa::NoMask>
RowMatrix<T> decode(const Attn& attn, Cache& cache, const RowMatrix<T>& x,
                    const std::vector<Index>& steps, const Bias& bias = {}) {
  RowMatrix<T> y(x.rows(), attn.config().d_out);
  Index r = 0;
  for (Index n : steps) {
    y.middleRows(r, n) = attn.forward_cached(RowMatrix<T>(x.middleRows(r, n)), cache, bias);
    r += n;
  }
  EXPECT_EQ(r, x.rows());
  EXPECT_EQ(cache.length(), x.rows());
  return y;
}

/// prefill 7, then 1 token at a time up to 20; and a chunked schedule.
const std::vector<std::vector<Index>> kSchedules{
    {7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {3, 4, 1, 6, 1, 2, 3},
};

template <class T, class Kernel, class Mask, class Retention, class Position = FirstPairRotation>
void check_decode(const Kernel& kernel, const Mask& mask, const Retention& retention,
                  bool positive_inputs, const Position& position = FirstPairRotation{0.25}) {
  const Index d = 8, dh = 4, n = 20;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto w = random_heads_weights<T>(d, d, c.n_heads, c.n_kv_heads, dh, dh, d, true, 7, 0.5,
                                           positive_inputs ? 0.0 : -0.5);
    kappa::GroupedQueryAttention<T, Kernel, Position> attn(
        {.d_in = d, .n_heads = c.n_heads, .d_head = dh, .n_kv_heads = c.n_kv_heads}, kernel,
        position);
    attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
    attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
    RowMatrix<T> x = random_matrix<T>(n, d, 3, positive_inputs ? 0.5 : 1.0);
    if (positive_inputs) x.array() += T(0.5);
    const RowMatrix<T> full = attn.forward(x, mask);
    for (std::size_t s = 0; s < kSchedules.size(); ++s) {
      SCOPED_TRACE("schedule " + std::to_string(s));
      kappa::KVCache<T, Retention> cache(attn.kv_cache_config(), retention);
      const RowMatrix<T> inc = decode(attn, cache, x, kSchedules[s]);
      EXPECT_LE(max_scaled_error(inc, full, kDecodeRel<T>, 0.0), 1.0) << "incremental\n"
                                                                      << inc << "\nfull\n"
                                                                      << full;
    }
  }
}

TYPED_TEST(DecodeTest, SoftmaxGrowableCacheEqualsFullCausalPass) {
  check_decode<TypeParam>(kappa::kernels::Softmax{}, kappa::CausalMask{}, kappa::cache::Growable{4},
                          false);
}

TYPED_TEST(DecodeTest, SoftmaxFixedCacheEqualsFullCausalPass) {
  check_decode<TypeParam>(kappa::kernels::Softmax{}, kappa::CausalMask{},
                          kappa::cache::FixedCapacity{20}, false);
}

TYPED_TEST(DecodeTest, LinearKernelEqualsFullCausalPass) {
  check_decode<TypeParam>(kappa::kernels::Linear{}, kappa::CausalMask{}, kappa::cache::Growable{},
                          true);
}

TYPED_TEST(DecodeTest, FeatureMapKernelEqualsFullCausalPass) {
  check_decode<TypeParam>(kappa::kernels::EluPlusOne{}, kappa::CausalMask{},
                          kappa::cache::Growable{}, false);
}

TYPED_TEST(DecodeTest, SoftmaxSlidingWindowRingEqualsFullWindowedPass) {
  for (Index w : {1, 3, 5, 8}) {
    SCOPED_TRACE("window " + std::to_string(w));
    check_decode<TypeParam>(kappa::kernels::Softmax{}, kappa::SlidingWindowMask{w},
                            kappa::cache::SlidingWindow{w}, false);
  }
}

TYPED_TEST(DecodeTest, LinearSlidingWindowRingEqualsFullWindowedPass) {
  check_decode<TypeParam>(kappa::kernels::Linear{}, kappa::SlidingWindowMask{5},
                          kappa::cache::SlidingWindow{5}, true);
}

// The real rotary embedding (both conventions) as the positional policy.
TYPED_TEST(DecodeTest, RopeGrowableAndWindowedEqualFullPass) {
  using T = TypeParam;
  check_decode<T>(kappa::kernels::Softmax{}, kappa::CausalMask{}, kappa::cache::Growable{}, false,
                  kappa::Rope<T>(4, 100.0));
  check_decode<T>(kappa::kernels::Softmax{}, kappa::SlidingWindowMask{6},
                  kappa::cache::SlidingWindow{6}, false, kappa::Rope<T, kappa::Interleaved>(2));
}

// A growable cache with the window mask applied by the full pass would not
// match a causal decode: check the test can fail (the window matters).
TYPED_TEST(DecodeTest, WindowChangesTheResult) {
  using T = TypeParam;
  const Index d = 8;
  const auto w = random_heads_weights<T>(d, d, 2, 2, 4, 4, d, false, 5);
  kappa::MultiHeadAttention<T> attn({.d_in = d, .n_heads = 2});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  const RowMatrix<T> x = random_matrix<T>(12, d, 1);
  kappa::KVCache<T, kappa::cache::SlidingWindow> ring(attn.kv_cache_config(), {4});
  const RowMatrix<T> inc = decode(attn, ring, x, {12});
  EXPECT_GT(max_scaled_error(inc, attn.forward(x, kappa::CausalMask{}), kDecodeRel<T>, 0.0), 10.0);
  EXPECT_EQ(ring.stored(), 4);
}

TYPED_TEST(DecodeTest, TruncateRollsBackForSpeculativeDecoding) {
  using T = TypeParam;
  const Index d = 8, dh = 2;
  const auto w = random_heads_weights<T>(d, d, 4, 2, dh, dh, d, true, 13);
  kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, FirstPairRotation> attn(
      {.d_in = d, .n_heads = 4, .d_head = dh, .n_kv_heads = 2});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  const RowMatrix<T> x = random_matrix<T>(10, d, 2);
  RowMatrix<T> draft = random_matrix<T>(3, d, 99);
  kappa::KVCache<T> cache(attn.kv_cache_config());
  attn.forward_cached(RowMatrix<T>(x.topRows(6)), cache);
  attn.forward_cached(draft, cache);  // rejected draft tokens
  ASSERT_EQ(cache.length(), 9);
  cache.truncate(6);
  const RowMatrix<T> rest = attn.forward_cached(RowMatrix<T>(x.bottomRows(4)), cache);
  const RowMatrix<T> full = attn.forward(x, kappa::CausalMask{});
  EXPECT_LE(max_scaled_error(rest, RowMatrix<T>(full.bottomRows(4)), kDecodeRel<T>, 0.0), 1.0);
}

/// forward_cached with a score bias equals the full pass with the same bias
/// on top of the causal mask (that pass is checked against BLOOM's ALiBi and
/// T5's relative buckets in tests/attention/bias_test.cpp), within
/// rel * max|y| + abs; and the bias changes the result by over 5 times that.
template <class T, class Format, class Bias>
void check_biased_decode(const Bias& bias, double rel, double abs) {
  const Index d = 8, dh = 4, n = 20;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto w =
        random_heads_weights<T>(d, d, c.n_heads, c.n_kv_heads, dh, dh, d, true, 7, 0.5, -0.5);
    kappa::GroupedQueryAttention<T> attn(
        {.d_in = d, .n_heads = c.n_heads, .d_head = dh, .n_kv_heads = c.n_kv_heads});
    attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
    attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
    const RowMatrix<T> x = random_matrix<T>(n, d, 3, 1.0);
    const RowMatrix<T> full = attn.forward(x, kappa::all_of(kappa::CausalMask{}, bias));
    const RowMatrix<T> unbiased = attn.forward(x, kappa::CausalMask{});
    EXPECT_GT(max_scaled_error(unbiased, full, rel, abs), 5.0) << "the bias must matter";
    for (std::size_t s = 0; s < kSchedules.size(); ++s) {
      SCOPED_TRACE("schedule " + std::to_string(s));
      kappa::KVCache<T, kappa::cache::Growable, Format> cache(attn.kv_cache_config());
      const RowMatrix<T> inc = decode(attn, cache, x, kSchedules[s], bias);
      EXPECT_LE(max_scaled_error(inc, full, rel, abs), 1.0) << "incremental\n"
                                                            << inc << "\nfull\n"
                                                            << full;
    }
  }
}

TYPED_TEST(DecodeTest, AlibiCachedEqualsTheFullBiasedPass) {
  check_biased_decode<TypeParam, kappa::cache::Native>(kappa::Alibi(4), kDecodeRel<TypeParam>, 0);
}

TYPED_TEST(DecodeTest, T5DecoderBiasCachedEqualsTheFullBiasedPass) {
  // 8 buckets x 4 heads, causal (decoder) bucketing, max distance 6.
  const kappa::T5RelativeBias<TypeParam> t5{random_matrix<TypeParam>(8, 4, 5, 2.0), false, 6};
  check_biased_decode<TypeParam, kappa::cache::Native>(t5, kDecodeRel<TypeParam>, 0);
}

TYPED_TEST(DecodeTest, OneBiasForEveryHeadCachedEqualsTheFullBiasedPass) {
  check_biased_decode<TypeParam, kappa::cache::Native>(kappa::AlibiBias{0.5}, kDecodeRel<TypeParam>,
                                                       0);
}

// Stored formats take the decode kernel, a per-head bias head by head. The
// tolerance is each format's rounding of K and V (inputs and outputs of
// order 1).
TEST(BiasedDecode, StoredFormatsApplyTheBias) {
  const kappa::Alibi alibi(4);
  {
    SCOPED_TRACE("BF16");
    check_biased_decode<float, kappa::cache::BF16>(alibi, 0, 2e-2);
  }
  {
    SCOPED_TRACE("F16");
    check_biased_decode<float, kappa::cache::F16>(alibi, 0, 3e-3);
  }
  {
    SCOPED_TRACE("Int8");
    check_biased_decode<float, kappa::cache::Int8>(alibi, 0, 2e-2);
  }
  SCOPED_TRACE("BF16, one bias for every head");
  check_biased_decode<float, kappa::cache::BF16>(kappa::AlibiBias{0.5}, 0, 2e-2);
}

TEST(DecodeErrors, BiasOfAnotherHeadCountThrowsAndLeavesCacheUnchanged) {
  kappa::GroupedQueryAttention<float> attn({.d_in = 8, .n_heads = 4, .n_kv_heads = 2});
  kappa::KVCache<float> cache(attn.kv_cache_config());
  kappa::KVCache<float, kappa::cache::Growable, kappa::cache::BF16> bf16(attn.kv_cache_config());
  const RowMatrix<float> x = RowMatrix<float>::Ones(3, 8);
  (void)attn.forward_cached(x, cache, kappa::Alibi(4));
  (void)attn.forward_cached(x, bf16, kappa::Alibi(4));
  try {
    (void)attn.forward_cached(x, cache, kappa::Alibi(3));
    ADD_FAILURE() << "no exception";
  } catch (const kappa::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("3 heads but the layer has n_heads = 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)attn.forward_cached(x, bf16, kappa::Alibi(5)), kappa::ShapeError);
  EXPECT_EQ(cache.length(), 3);
  EXPECT_EQ(bf16.length(), 3);
}

TEST(DecodeErrors, FixedCapacityOverflowThrowsAndLeavesCacheUnchanged) {
  kappa::MultiHeadAttention<double> attn({.d_in = 4, .n_heads = 2});
  kappa::KVCache<double, kappa::cache::FixedCapacity> cache(attn.kv_cache_config(), {5});
  attn.forward_cached(RowMatrix<double>::Ones(4, 4), cache);
  EXPECT_THROW(attn.forward_cached(RowMatrix<double>::Ones(2, 4), cache), kappa::RangeError);
  EXPECT_EQ(cache.length(), 4);
  EXPECT_NO_THROW(attn.forward_cached(RowMatrix<double>::Ones(1, 4), cache));
}

TEST(DecodeErrors, CacheOfAnotherShapeIsRejected) {
  kappa::GroupedQueryAttention<double> attn({.d_in = 8, .n_heads = 4, .n_kv_heads = 2});
  kappa::KVCache<double> cache({.n_kv_heads = 4, .d_head = 2});
  EXPECT_THROW(attn.forward_cached(RowMatrix<double>::Ones(1, 8), cache), kappa::ShapeError);
  kappa::KVCache<double> good(attn.kv_cache_config());
  EXPECT_THROW(attn.forward_cached(RowMatrix<double>::Ones(1, 7), good), kappa::ShapeError);
  EXPECT_EQ(good.length(), 0);
}

}  // namespace

namespace {

using kappa::Index;
using kappa::RowMatrix;
using namespace kappa::testing;

// Several requests decoded together: each sequence with its own cache and
// its own length, equal to decoding each alone.
template <class Retention>
void check_batched_decode(const Retention& retention) {
  using T = double;
  const Index d = 8, dh = 2;
  const auto w = random_heads_weights<T>(d, d, 4, 2, dh, dh, d, true, 17);
  kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, FirstPairRotation> attn(
      {.d_in = d, .n_heads = 4, .d_head = dh, .n_kv_heads = 2});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
  const std::vector<Index> prompt{5, 1, 0, 7};
  std::vector<kappa::KVCache<T, Retention>> batch_caches, alone_caches;
  for (std::size_t b = 0; b < prompt.size(); ++b) {
    batch_caches.emplace_back(attn.kv_cache_config(), retention);
    alone_caches.emplace_back(attn.kv_cache_config(), retention);
  }
  std::vector<kappa::KVCache<T, Retention>*> ptrs;
  for (auto& c : batch_caches) ptrs.push_back(&c);
  unsigned seed = 100;
  for (const std::vector<Index>& step :
       {prompt, std::vector<Index>{1, 1, 1, 1}, std::vector<Index>{0, 2, 1, 1},
        std::vector<Index>{1, 1, 3, 1}}) {
    Index rows = 0;
    for (Index n : step) rows += n;
    const RowMatrix<T> x = random_matrix<T>(rows, d, seed++);
    const RowMatrix<T> y = attn.forward_cached(kappa::SequenceBatch<T>{x, step}, ptrs);
    Index r = 0;
    for (std::size_t b = 0; b < step.size(); ++b) {
      const RowMatrix<T> alone =
          attn.forward_cached(RowMatrix<T>(x.middleRows(r, step[b])), alone_caches[b]);
      EXPECT_LE(max_scaled_error(RowMatrix<T>(y.middleRows(r, step[b])), alone, 1e-12, 0.0), 1.0);
      EXPECT_EQ(batch_caches[b].length(), alone_caches[b].length());
      r += step[b];
    }
  }
}

TEST(BatchedDecode, EachSequenceEqualsDecodingItAlone) {
  check_batched_decode(kappa::cache::Growable{});
  check_batched_decode(kappa::cache::SlidingWindow{3});
}

TEST(BatchedDecode, ErrorsLeaveEveryCacheUnchanged) {
  kappa::MultiHeadAttention<double> attn({.d_in = 4, .n_heads = 2});
  kappa::KVCache<double, kappa::cache::FixedCapacity> a(attn.kv_cache_config(), {4}),
      b(attn.kv_cache_config(), {2});
  const RowMatrix<double> x = RowMatrix<double>::Ones(6, 4);
  std::vector<kappa::KVCache<double, kappa::cache::FixedCapacity>*> both{&a, &b};
  EXPECT_THROW(attn.forward_cached(kappa::SequenceBatch<double>{x, {3, 3}}, both),
               kappa::RangeError);
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  std::vector<kappa::KVCache<double, kappa::cache::FixedCapacity>*> twice{&a, &a};
  EXPECT_THROW(attn.forward_cached(kappa::SequenceBatch<double>{x, {3, 3}}, twice),
               kappa::ShapeError);
  std::vector<kappa::KVCache<double, kappa::cache::FixedCapacity>*> one{&a};
  EXPECT_THROW(attn.forward_cached(kappa::SequenceBatch<double>{x, {3, 3}}, one),
               kappa::ShapeError);
  EXPECT_NO_THROW(attn.forward_cached(kappa::SequenceBatch<double>{x, {4, 2}}, both));
  EXPECT_EQ(a.length(), 4);
  EXPECT_EQ(b.length(), 2);
}

// A mask with holes (BooleanMask) through forward_cached: keys 2, 3 and 4
// hidden from every query (padding inside the sequence), prefill then single
// tokens and a chunk, GQA (2 heads per kv head, stacked in the decode
// kernel), every cache format. Equal to the full forward pass with the same
// holes: 1e-5 relative for the float cache, the format's rounding for the
// others (hidden keys leaking in would move the outputs far more).
template <class F>
void check_holes(double rel) {
  const Index d = 8, dh = 4, n = 20;
  const auto w = random_heads_weights<float>(d, d, 4, 2, dh, dh, d, true, 17, 0.5, -0.5);
  kappa::GroupedQueryAttention<float> attn(
      {.d_in = d, .n_heads = 4, .d_head = dh, .n_kv_heads = 2});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
  const RowMatrix<float> x = random_matrix<float>(n, d, 19);
  const auto holes = [](Index rows, Index cols) {
    kappa::BooleanMask m;
    m.allowed.setConstant(rows, cols, true);
    for (Index j = 2; j < std::min<Index>(5, cols); ++j) m.allowed.col(j).setConstant(false);
    return m;
  };
  const RowMatrix<float> full = attn.forward(x, kappa::all_of(kappa::CausalMask{}, holes(n, n)));
  kappa::KVCache<float, kappa::cache::Growable, F> cache(attn.kv_cache_config());
  RowMatrix<float> y(n, d);
  Index t = 0;
  for (const Index step : {Index{8}, Index{1}, Index{1}, Index{3}, Index{1}, Index{6}}) {
    y.middleRows(t, step) =
        attn.forward_cached(RowMatrix<float>(x.middleRows(t, step)), cache, holes(step, t + step));
    t += step;
  }
  ASSERT_EQ(t, n);
  EXPECT_LE(max_scaled_error(y, full, rel, rel), 1.0) << F::kName;
}

TEST(DecodeHoles, BooleanMaskThroughEveryCacheFormatEqualsTheFullPass) {
  check_holes<kappa::cache::Native>(1e-5);
  check_holes<kappa::cache::BF16>(2e-2);
  check_holes<kappa::cache::F16>(3e-3);
  check_holes<kappa::cache::Int8>(2e-2);
}

}  // namespace
