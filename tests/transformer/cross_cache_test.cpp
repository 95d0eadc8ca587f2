// Tests for the cross-attention cache of the encoder-decoder (issue 26 item
// 3): DecoderLayer's cache holds K = M W^K and V = M W^V of the encoder
// output M, projected once per sequence; cached decoding over it equals the
// full pass and the PyTorch reference; a different memory is an error; empty
// targets and memories behave as models.hpp's file comment says.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using testing::kModelTol;
using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

template <class T>
class CrossCacheTest : public ::testing::Test {};
using CrossCacheScalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CrossCacheTest, CrossCacheScalars);

template <class T>
struct PaperFixture {
  PaperTransformer<T> model = hf::load_paper_transformer<T>(model_dir("transformer"));
  std::vector<TokenId> src = read_ids(model_dir("transformer") / "reference" / "src_ids.npy");
  std::vector<TokenId> tgt = read_ids(model_dir("transformer") / "reference" / "tgt_ids.npy");
};

/// Decodes `tgt` with a prefill of 3 tokens, then one token per call.
template <class T, class Step>
RowMatrix<T> decode_in_steps(Index cols, std::span<const TokenId> tgt, Step&& step) {
  RowMatrix<T> rows(static_cast<Index>(tgt.size()), cols);
  rows.topRows(3) = step(tgt.first(3));
  for (std::size_t i = 3; i < tgt.size(); ++i)
    rows.row(static_cast<Index>(i)) = step(tgt.subspan(i, 1));
  return rows;
}

// Cached decoding over the cross cache - taken on the first call, or set
// beforehand with set_memory and then not passed - equals decode() of the
// whole target and the PyTorch reference.
TYPED_TEST(CrossCacheTest, CachedDecodingMatchesTheFullPassAndTheReference) {
  using T = TypeParam;
  const PaperFixture<T> p;
  const RowMatrix<T> memory = p.model.encode(p.src);
  const RowMatrix<T> full = p.model.decode(memory, p.tgt);
  const std::span<const TokenId> all(p.tgt);
  const double tol = std::is_same_v<T, double> ? 1e-12 : 2e-5;

  auto first = p.model.make_cache();
  const RowMatrix<T> a = decode_in_steps<T>(full.cols(), all, [&](std::span<const TokenId> ids) {
    return p.model.decode_cached(memory, ids, first);
  });
  EXPECT_LE(scaled_error(a, full.template cast<double>()), tol);
  EXPECT_LE(scaled_error(a, read_ref("transformer", "logits")), kModelTol<T>);

  auto set = p.model.make_cache();
  p.model.set_memory(memory, set);
  const RowMatrix<T> b = decode_in_steps<T>(full.cols(), all, [&](std::span<const TokenId> ids) {
    return p.model.decode_cached(ids, set);
  });
  EXPECT_EQ((b - a).cwiseAbs().maxCoeff(), T(0));  // the same computation
  EXPECT_EQ(set[0].length(), static_cast<Index>(p.tgt.size()));
}

// The memory's K and V are computed once: after the first step every layer's
// cache holds N_src rows of K = M W^K + b_K and V = M W^V + b_V, later steps
// leave that storage (same data pointers) and its values alone, and a step
// after M was overwritten in place still attends over the old K and V - it
// equals the step of a cache that never saw the new values.
TYPED_TEST(CrossCacheTest, TheMemoryIsProjectedOncePerSequence) {
  using T = TypeParam;
  const PaperFixture<T> p;
  RowMatrix<T> memory = p.model.encode(p.src);
  const Index n_src = memory.rows(), d = p.model.d_model();
  const std::span<const TokenId> all(p.tgt);
  auto cache = p.model.make_cache();
  for (const auto& c : cache) EXPECT_FALSE(c.has_memory());
  (void)p.model.decode_cached(memory, all.first(1), cache);

  const auto& layers = p.model.decoder_layers();
  std::vector<const T*> keys, values;
  std::vector<RowMatrix<T>> k0;
  for (std::size_t l = 0; l < cache.size(); ++l) {
    const auto& c = cache[l];
    ASSERT_TRUE(c.has_memory());
    EXPECT_EQ(c.memory_rows(), n_src);
    const ProjectedKV<T>& kv = c.memory();
    const auto& cross = layers[l].cross_attention();
    RowMatrix<T> want_k = memory * cross.w_k(), want_v = memory * cross.w_v();
    want_k.rowwise() += cross.b_k();
    want_v.rowwise() += cross.b_v();
    EXPECT_LE((kv.keys - want_k).cwiseAbs().maxCoeff(), 1e-5 * want_k.cwiseAbs().maxCoeff());
    EXPECT_LE((kv.values - want_v).cwiseAbs().maxCoeff(), 1e-5 * want_v.cwiseAbs().maxCoeff());
    EXPECT_EQ(kv.keys.rows(), n_src);
    EXPECT_EQ(kv.values.rows(), n_src);
    // Bytes in use: one target token of self-attention K, V, and N_src rows
    // of cross-attention K, V (d = H d_head columns each).
    EXPECT_EQ(c.bytes(), c.bytes_per_token() + 2 * sizeof(T) * static_cast<std::size_t>(n_src * d));
    keys.push_back(kv.keys.data());
    values.push_back(kv.values.data());
    k0.push_back(kv.keys);
  }
  for (std::size_t i = 1; i + 1 < p.tgt.size(); ++i)
    (void)p.model.decode_cached(memory, all.subspan(i, 1), cache);
  for (std::size_t l = 0; l < cache.size(); ++l) {
    EXPECT_EQ(cache[l].memory().keys.data(), keys[l]);
    EXPECT_EQ(cache[l].memory().values.data(), values[l]);
    EXPECT_EQ((cache[l].memory().keys - k0[l]).cwiseAbs().maxCoeff(), T(0));
  }

  // A twin cache over a copy of the original memory, the same steps, then M
  // overwritten in place: the last step of both is the same, so nothing
  // re-read M (a cache over the new values gives another row).
  const RowMatrix<T> original = memory;
  auto twin = p.model.make_cache();
  for (std::size_t i = 0; i + 1 < p.tgt.size(); ++i)
    (void)p.model.decode_cached(original, all.subspan(i, 1), twin);
  memory.setConstant(T(3));
  const RowMatrix<T> last = p.model.decode_cached(memory, all.last(1), cache);
  const RowMatrix<T> want = p.model.decode_cached(original, all.last(1), twin);
  EXPECT_EQ((last - want).cwiseAbs().maxCoeff(), T(0));
  auto changed = p.model.make_cache();
  const RowMatrix<T> over_new = p.model.decode_cached(memory, all, changed);
  EXPECT_GT((last - over_new.bottomRows(1)).cwiseAbs().maxCoeff(), T(1e-3));
}

// The rule for a changed memory: a cache serves the memory it was made from.
// Another matrix (a copy with equal values included) or another shape throws
// ShapeError naming the shapes, and the cache is unchanged; set_memory()
// replaces the memory explicitly; reset() drops it.
TEST(CrossCache, AnotherMemoryThrowsUnlessSetExplicitly) {
  const PaperFixture<double> p;
  const RowMatrix<double> memory = p.model.encode(p.src);
  const RowMatrix<double> copy = memory;
  const std::span<const TokenId> all(p.tgt);
  auto cache = p.model.make_cache();
  (void)p.model.decode_cached(memory, all.first(3), cache);
  try {
    (void)p.model.decode_cached(copy, all.subspan(3, 1), cache);
    ADD_FAILURE() << "expected a ShapeError for another memory matrix";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("another matrix"), std::string::npos) << what;
    EXPECT_NE(what.find("set_memory"), std::string::npos) << what;
  }
  try {
    (void)p.model.decode_cached(memory.topRows(2), all.subspan(3, 1), cache);
    ADD_FAILURE() << "expected a ShapeError for a memory of another shape";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(" + std::to_string(memory.rows()) + " x 32)"), std::string::npos) << what;
    EXPECT_NE(what.find("(2 x 32)"), std::string::npos) << what;
  }
  EXPECT_EQ(cache[0].length(), 3);  // unchanged by the failed calls
  // A view of the same rows is the same matrix.
  const auto view = memory.topRows(memory.rows());
  const RowMatrix<double> step = p.model.decode_cached(view, all.subspan(3, 1), cache);
  EXPECT_EQ(cache[0].length(), 4);

  // set_memory replaces it: K and V now come from the copy (equal values).
  p.model.set_memory(copy, cache);
  EXPECT_NO_THROW((void)p.model.decode_cached(copy, all.subspan(4, 1), cache));
  EXPECT_THROW((void)p.model.decode_cached(memory, all.subspan(5, 1), cache), ShapeError);

  // reset() drops the tokens and the memory: decoding without a memory is a
  // logic_error, and the cache then takes a new one.
  for (auto& c : cache) c.reset();
  EXPECT_FALSE(cache[0].has_memory());
  EXPECT_EQ(cache[0].bytes(), 0u);
  EXPECT_THROW((void)p.model.decode_cached(all.first(1), cache), std::logic_error);
  const RowMatrix<double> other = p.model.encode(std::span<const TokenId>(p.src).first(4));
  const RowMatrix<double> got = p.model.decode_cached(other, all, cache);
  EXPECT_LE((got - p.model.decode(other, p.tgt)).cwiseAbs().maxCoeff(), 1e-12);
  // truncate() keeps the memory: the same target again gives the same rows.
  for (auto& c : cache) c.truncate(0);
  EXPECT_EQ(cache[0].memory_rows(), 4);
  EXPECT_LE((p.model.decode_cached(all, cache) - got).cwiseAbs().maxCoeff(), 0.0);
  // A cache of another decoder depth is named.
  auto short_cache = p.model.make_cache();
  short_cache.pop_back();
  EXPECT_THROW(p.model.set_memory(memory, short_cache), ShapeError);
  // A memory of another width is a ShapeError before the cache changes.
  auto fresh = p.model.make_cache();
  EXPECT_THROW(p.model.set_memory(RowMatrix<double>::Zero(3, 31), fresh), ShapeError);
  EXPECT_FALSE(fresh[0].has_memory());
}

// An empty target gives 0 rows and leaves the cache without memory; an empty
// memory is held as 0 rows of K and V and cross-attention over it gives zero
// rows, as decode() does.
TEST(CrossCache, EmptyTargetAndEmptyMemory) {
  const PaperFixture<float> p;
  const std::vector<TokenId> none;
  const RowMatrix<float> memory = p.model.encode(p.src);
  auto cache = p.model.make_cache();
  EXPECT_EQ(p.model.decode_cached(memory, none, cache).rows(), 0);
  EXPECT_FALSE(cache[0].has_memory());
  EXPECT_EQ(cache[0].length(), 0);

  const RowMatrix<float> empty = p.model.encode(none);
  ASSERT_EQ(empty.rows(), 0);
  auto over_empty = p.model.make_cache();
  const std::span<const TokenId> all(p.tgt);
  const RowMatrix<float> rows = decode_in_steps<float>(
      p.model.tgt_vocab_size(), all,
      [&](std::span<const TokenId> ids) { return p.model.decode_cached(empty, ids, over_empty); });
  EXPECT_TRUE(over_empty[0].has_memory());
  EXPECT_EQ(over_empty[0].memory_rows(), 0);
  EXPECT_TRUE(rows.allFinite());
  EXPECT_LE(scaled_error(rows, p.model.decode(empty, p.tgt).cast<double>()), 2e-5);
  // Any other empty memory of the same width is the same (empty) memory.
  const RowMatrix<float> also_empty(0, p.model.d_model());
  EXPECT_NO_THROW((void)p.model.decode_cached(also_empty, none, over_empty));
}

// The layer on its own, with grouped-query cross-attention and biases (the
// CrossAttentionOps specialisation's grouping path): cached decoding over the
// projected memory equals the full pass, pre- and post-norm.
TEST(CrossCache, GroupedQueryCrossAttentionLayerMatchesTheFullPass) {
  const Index d = 16;
  const auto rnd = [](Index r, Index c, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<double> dist(0.0, 0.3);
    RowMatrix<double> m(r, c);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = dist(g);
    return m;
  };
  MultiHeadAttention<double> self_attn({.d_in = d, .n_heads = 4});
  self_attn.init_random(1);
  GroupedQueryAttention<double> cross({.d_in = d, .n_heads = 4, .n_kv_heads = 2, .d_kv_in = 12});
  cross.set_weights(rnd(d, d, 2), rnd(12, 8, 3), rnd(12, 8, 4), rnd(d, d, 5));
  cross.set_biases(rnd(1, d, 6), rnd(1, 8, 7), rnd(1, 8, 8), rnd(1, d, 9));
  Mlp<double, Relu> ffn(d, 32);
  ffn.set_weights(rnd(d, 32, 10), rnd(1, 32, 11), rnd(32, d, 12), rnd(1, d, 13));
  const LayerNorm<double> n(d);
  const DecoderLayer<double, MultiHeadAttention<double>, GroupedQueryAttention<double>,
                     LayerNorm<double>, Mlp<double, Relu>, PreNorm>
      pre(self_attn, cross, n, n, n, ffn);
  const DecoderLayer<double, MultiHeadAttention<double>, GroupedQueryAttention<double>,
                     LayerNorm<double>, Mlp<double, Relu>, PostNorm>
      post(self_attn, cross, n, n, n, ffn);
  const RowMatrix<double> x = rnd(6, d, 20), m = rnd(9, 12, 21);
  auto c1 = pre.make_cache();
  auto c2 = post.make_cache();
  pre.set_memory(m, c1);
  EXPECT_EQ(c1.memory().keys.cols(), 8);  // H_kv d_head, not H d_head
  RowMatrix<double> a(6, d), b(6, d);
  a.topRows(2) = pre.forward_cached(x.topRows(2), c1);
  b.topRows(2) = post.forward_cached(x.topRows(2), m, c2);
  for (Index i = 2; i < 6; ++i) {
    a.row(i) = pre.forward_cached(x.row(i), m, c1);
    b.row(i) = post.forward_cached(x.row(i), c2);
  }
  EXPECT_LE((a - pre.forward(x, m)).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_LE((b - post.forward(x, m)).cwiseAbs().maxCoeff(), 1e-13);
  auto none = pre.make_cache();
  EXPECT_THROW((void)pre.forward_cached(x.topRows(1), none), std::logic_error);
}

}  // namespace
}  // namespace kappa
