// Multi-head, grouped-query and multi-query attention against the plain-loop
// reference (tests/support/heads_reference.hpp), their properties, batches,
// weight layouts and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kappa/core/random.hpp"
#include "kappa/embed/rope.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/heads_reference.hpp"
#include "support/init_checks.hpp"
#include "support/test_position.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;
using namespace kappa::testing;

template <class T>
class HeadsTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(HeadsTest, Scalars);

template <class T>
void expect_close(const RowMatrix<T>& got, const RowMatrix<T>& want,
                  double rel = Tolerance<T>::kRel, double abs = Tolerance<T>::kAbs) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  EXPECT_LE(max_scaled_error(got, want, rel, abs), 1.0) << "got\n" << got << "\nwant\n" << want;
}

const Visibility kAll = [](Index, Index) { return true; };
const Visibility kCausal = [](Index i, Index j) { return j <= i; };

template <class Attn, class T>
void set_all(Attn& attn, const RefHeadsWeights<T>& w) {
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
}

// Sweep (H, H_kv): multi-head, grouped-query, multi-query; with and without
// biases; no mask and causal.
TYPED_TEST(HeadsTest, SelfAttentionMatchesReferenceForEveryGrouping) {
  using T = TypeParam;
  const Index d_in = 12, d_head = 4, n = 9;
  const std::vector<std::pair<Index, Index>> shapes{{4, 4}, {4, 2}, {4, 1}, {6, 3}};
  for (auto [h, h_kv] : shapes) {
    for (bool biases : {false, true}) {
      SCOPED_TRACE("H=" + std::to_string(h) + " H_kv=" + std::to_string(h_kv) +
                   " biases=" + std::to_string(biases));
      const auto w = random_heads_weights<T>(d_in, d_in, h, h_kv, d_head, d_head, d_in, biases,
                                             11 + static_cast<unsigned>(h * 10 + h_kv));
      kappa::GroupedQueryAttention<T> attn(
          {.d_in = d_in, .n_heads = h, .d_head = d_head, .n_kv_heads = h_kv});
      set_all(attn, w);
      const RowMatrix<T> x = random_matrix<T>(n, d_in, 5);
      const double s = 1.0 / std::sqrt(double(d_head));
      expect_close<T>(attn.forward(x),
                      reference_heads(x, x, w, h, h_kv, d_head, d_head, s, ref_exp, true, kAll));
      expect_close<T>(attn.forward(x, kappa::CausalMask{}),
                      reference_heads(x, x, w, h, h_kv, d_head, d_head, s, ref_exp, true, kCausal));
    }
  }
}

TYPED_TEST(HeadsTest, CrossAttentionWithDistinctWidthsMatchesReference) {
  using T = TypeParam;
  // d_in 10, d_kv_in 6, d_head 3, d_v 5, d_out 7; N_Q = 4, N_KV = 11.
  const Index h = 4, h_kv = 2, d_in = 10, d_kv_in = 6, d_head = 3, d_v = 5, d_out = 7;
  const auto w = random_heads_weights<T>(d_in, d_kv_in, h, h_kv, d_head, d_v, d_out, true, 3);
  kappa::GroupedQueryAttention<T> attn({.d_in = d_in,
                                        .n_heads = h,
                                        .d_head = d_head,
                                        .n_kv_heads = h_kv,
                                        .d_v = d_v,
                                        .d_kv_in = d_kv_in,
                                        .d_out = d_out});
  set_all(attn, w);
  const RowMatrix<T> xq = random_matrix<T>(4, d_in, 1), xkv = random_matrix<T>(11, d_kv_in, 2);
  const double s = 1.0 / std::sqrt(double(d_head));
  expect_close<T>(attn.forward_cross(xq, xkv),
                  reference_heads(xq, xkv, w, h, h_kv, d_head, d_v, s, ref_exp, true, kAll));
  // Bottom-right causal alignment: query i sees keys j <= i + N_KV - N_Q.
  const Visibility causal = [](Index i, Index j) { return j <= i + 7; };
  expect_close<T>(attn.forward_cross(xq, xkv, kappa::CausalMask{}),
                  reference_heads(xq, xkv, w, h, h_kv, d_head, d_v, s, ref_exp, true, causal));
}

TYPED_TEST(HeadsTest, LinearKernelMatchesReference) {
  using T = TypeParam;
  const Index h = 4, h_kv = 2, d = 8, dh = 2;
  // Positive inputs and weights keep every normalizer Z well away from zero.
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, false, 21, 0.5, 0.0);
  kappa::GroupedQueryAttention<T, kappa::kernels::Linear> attn(
      {.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  set_all(attn, w);
  RowMatrix<T> x = random_matrix<T>(6, d, 8, 0.5);
  x.array() += T(0.5);
  expect_close<T>(attn.forward(x, kappa::CausalMask{}),
                  reference_heads(x, x, w, h, h_kv, dh, dh, 1.0, ref_identity, false, kCausal));
}

// GQA does not repeat K and V; it must equal multi-head attention whose W^K,
// W^V repeat each kv head's columns G times (what repeat_kv does to K, V).
TYPED_TEST(HeadsTest, GroupedQueryEqualsMultiHeadWithRepeatedKeyValueWeights) {
  using T = TypeParam;
  const Index h = 6, h_kv = 2, d = 12, dh = 2, grp = h / h_kv;
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, true, 31);
  kappa::GroupedQueryAttention<T> gqa({.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  set_all(gqa, w);
  RefHeadsWeights<T> rep = w;
  rep.w_k.resize(d, h * dh);
  rep.w_v.resize(d, h * dh);
  rep.b_k.resize(h * dh);
  rep.b_v.resize(h * dh);
  for (Index hh = 0; hh < h; ++hh) {
    const Index g = hh / grp;
    rep.w_k.middleCols(hh * dh, dh) = w.w_k.middleCols(g * dh, dh);
    rep.w_v.middleCols(hh * dh, dh) = w.w_v.middleCols(g * dh, dh);
    rep.b_k.segment(hh * dh, dh) = w.b_k.segment(g * dh, dh);
    rep.b_v.segment(hh * dh, dh) = w.b_v.segment(g * dh, dh);
  }
  kappa::MultiHeadAttention<T> mha({.d_in = d, .n_heads = h, .d_head = dh});
  set_all(mha, rep);
  const RowMatrix<T> x = random_matrix<T>(10, d, 4);
  expect_close<T>(gqa.forward(x, kappa::CausalMask{}), mha.forward(x, kappa::CausalMask{}));
}

TYPED_TEST(HeadsTest, GroupingPoliciesAgreeWithGroupedQuery) {
  using T = TypeParam;
  const Index h = 4, d = 8, dh = 2;
  const RowMatrix<T> x = random_matrix<T>(7, d, 9);
  {
    const auto w = random_heads_weights<T>(d, d, h, h, dh, dh, d, true, 41);
    kappa::MultiHeadAttention<T> mha({.d_in = d, .n_heads = h, .d_head = dh});
    kappa::GroupedQueryAttention<T> gqa({.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h});
    set_all(mha, w);
    set_all(gqa, w);
    EXPECT_EQ(mha.n_kv_heads(), h);
    expect_close<T>(mha.forward(x, kappa::CausalMask{}), gqa.forward(x, kappa::CausalMask{}));
  }
  {
    const auto w = random_heads_weights<T>(d, d, h, 1, dh, dh, d, true, 42);
    kappa::MultiQueryAttention<T> mqa({.d_in = d, .n_heads = h, .d_head = dh});
    kappa::GroupedQueryAttention<T> gqa({.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = 1});
    set_all(mqa, w);
    set_all(gqa, w);
    EXPECT_EQ(mqa.n_kv_heads(), 1);
    EXPECT_EQ(mqa.group_size(), h);
    expect_close<T>(mqa.forward(x, kappa::CausalMask{}), gqa.forward(x, kappa::CausalMask{}));
  }
}

TYPED_TEST(HeadsTest, HeadWeightsAreTheReferenceWeightsAndRowsSumToOne) {
  using T = TypeParam;
  const Index h = 4, h_kv = 2, d = 8, dh = 2, n = 6;
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, true, 51);
  kappa::GroupedQueryAttention<T> attn({.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  set_all(attn, w);
  const RowMatrix<T> x = random_matrix<T>(n, d, 3);
  const auto got = attn.head_weights(x, x, kappa::CausalMask{});
  std::vector<RowMatrix<T>> want;
  reference_heads(x, x, w, h, h_kv, dh, dh, 1.0 / std::sqrt(double(dh)), ref_exp, true, kCausal, {},
                  &want);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(h));
  for (Index hh = 0; hh < h; ++hh) {
    const RowMatrix<T>& wh = got[static_cast<std::size_t>(hh)];
    expect_close<T>(wh, want[static_cast<std::size_t>(hh)]);
    for (Index i = 0; i < n; ++i) {
      EXPECT_NEAR(static_cast<double>(wh.row(i).sum()), 1.0, 10 * Tolerance<T>::kRel);
      for (Index j = i + 1; j < n; ++j) EXPECT_EQ(wh(i, j), T(0));
    }
  }
}

TYPED_TEST(HeadsTest, PositionalPolicyIsAppliedPerHeadFromPositionZero) {
  using T = TypeParam;
  const Index h = 4, h_kv = 2, d = 8, dh = 2;
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, true, 61);
  const FirstPairRotation rot{0.4};
  kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, FirstPairRotation> attn(
      {.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv}, rot);
  set_all(attn, w);
  const RowMatrix<T> x = random_matrix<T>(8, d, 6);
  const RowMatrix<T> want = reference_heads(x, x, w, h, h_kv, dh, dh, 1.0 / std::sqrt(double(dh)),
                                            ref_exp, true, kCausal, rot.reference<T>());
  expect_close<T>(attn.forward(x, kappa::CausalMask{}), want);
  // And the rotation matters: without it the result differs.
  kappa::GroupedQueryAttention<T> plain(
      {.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  set_all(plain, w);
  EXPECT_GT(max_scaled_error(plain.forward(x, kappa::CausalMask{}), want, Tolerance<T>::kRel,
                             Tolerance<T>::kAbs),
            100.0);
}

// ---- Batches -----------------------------------------------------------------

TYPED_TEST(HeadsTest, PackedBatchEqualsEachSequenceAlone) {
  using T = TypeParam;
  const Index h = 6, h_kv = 2, d = 12, dh = 2;
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, true, 71);
  kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, FirstPairRotation> attn(
      {.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  set_all(attn, w);
  const std::vector<Index> lengths{5, 0, 9, 1, 3};
  const RowMatrix<T> packed = random_matrix<T>(18, d, 12);
  const kappa::SequenceBatch<T> batch{packed, lengths};
  const RowMatrix<T> y = attn.forward(batch, kappa::CausalMask{});
  const RowMatrix<T> y_all = attn.forward(batch);
  ASSERT_EQ(y.rows(), 18);
  Index r = 0;
  for (Index len : lengths) {
    const RowMatrix<T> xs = packed.middleRows(r, len);
    expect_close<T>(y.middleRows(r, len), attn.forward(xs, kappa::CausalMask{}),
                    4 * Tolerance<T>::kRel);
    expect_close<T>(y_all.middleRows(r, len), attn.forward(xs), 4 * Tolerance<T>::kRel);
    r += len;
  }
}

TYPED_TEST(HeadsTest, PackedCrossBatchEqualsEachPairAlone) {
  using T = TypeParam;
  const Index h = 4, h_kv = 4, d = 8, d_kv = 5, dh = 2;
  const auto w = random_heads_weights<T>(d, d_kv, h, h_kv, dh, dh, d, true, 81);
  kappa::MultiHeadAttention<T> attn({.d_in = d, .n_heads = h, .d_head = dh, .d_kv_in = d_kv});
  set_all(attn, w);
  const RowMatrix<T> xq = random_matrix<T>(7, d, 1), xkv = random_matrix<T>(10, d_kv, 2);
  const std::vector<Index> lq{3, 4}, lkv{6, 4};
  const RowMatrix<T> y =
      attn.forward_cross(kappa::SequenceBatch<T>{xq, lq}, kappa::SequenceBatch<T>{xkv, lkv});
  expect_close<T>(y.topRows(3),
                  attn.forward_cross(RowMatrix<T>(xq.topRows(3)), RowMatrix<T>(xkv.topRows(6))),
                  4 * Tolerance<T>::kRel);
  expect_close<T>(
      y.bottomRows(4),
      attn.forward_cross(RowMatrix<T>(xq.bottomRows(4)), RowMatrix<T>(xkv.bottomRows(4))),
      4 * Tolerance<T>::kRel);
}

TEST(HeadsBatch, BadLengthsThrowShapeError) {
  kappa::MultiHeadAttention<double> attn({.d_in = 4, .n_heads = 2});
  const RowMatrix<double> x = RowMatrix<double>::Ones(5, 4);
  EXPECT_THROW(attn.forward(kappa::SequenceBatch<double>{x, {2, 2}}), kappa::ShapeError);
  EXPECT_THROW(attn.forward(kappa::SequenceBatch<double>{x, {6, -1}}), kappa::ShapeError);
  EXPECT_THROW(attn.forward_cross(kappa::SequenceBatch<double>{x, {5}},
                                  kappa::SequenceBatch<double>{x, {2, 3}}),
               kappa::ShapeError);
}

// ---- Weight layouts ---------------------------------------------------------------

TYPED_TEST(HeadsTest, HuggingFaceLayoutIsTheTransposedPaperLayout) {
  using T = TypeParam;
  const Index h = 4, h_kv = 2, d = 8, dh = 2;
  const auto w = random_heads_weights<T>(d, d, h, h_kv, dh, dh, d, false, 91);
  kappa::GroupedQueryAttention<T> a({.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  kappa::GroupedQueryAttention<T> b = a;
  a.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  b.set_weights_from_hf(w.w_q.transpose(), w.w_k.transpose(), w.w_v.transpose(), w.w_o.transpose());
  EXPECT_EQ(a.w_q(), b.w_q());
  EXPECT_EQ(a.w_k(), b.w_k());
  EXPECT_EQ(a.w_v(), b.w_v());
  EXPECT_EQ(a.w_o(), b.w_o());
}

TYPED_TEST(HeadsTest, TorchLayoutSplitsInProjIntoTransposedBlocks) {
  using T = TypeParam;
  const Index h = 2, e = 6;
  kappa::MultiHeadAttention<T> attn({.d_in = e, .n_heads = h});
  const RowMatrix<T> in_proj = random_matrix<T>(3 * e, e, 1), out_proj = random_matrix<T>(e, e, 2);
  const RowMatrix<T> in_bias = random_matrix<T>(1, 3 * e, 3), out_bias = random_matrix<T>(1, e, 4);
  attn.set_weights_from_torch_mha(in_proj, out_proj);
  attn.set_biases_from_torch_mha(in_bias, out_bias);
  EXPECT_EQ(attn.w_q(), RowMatrix<T>(in_proj.topRows(e).transpose()));
  EXPECT_EQ(attn.w_k(), RowMatrix<T>(in_proj.middleRows(e, e).transpose()));
  EXPECT_EQ(attn.w_v(), RowMatrix<T>(in_proj.bottomRows(e).transpose()));
  EXPECT_EQ(attn.w_o(), RowMatrix<T>(out_proj.transpose()));
  EXPECT_EQ(attn.b_k(), RowVector<T>(in_bias.middleCols(e, e)));
  EXPECT_EQ(attn.b_o(), RowVector<T>(out_bias));
}

// ---- Errors -------------------------------------------------------------------------

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(HeadsErrors, KvHeadsMustDivideHeads) {
  using Gqa = kappa::GroupedQueryAttention<float>;
  EXPECT_THROW(Gqa({.d_in = 8, .n_heads = 8, .n_kv_heads = 3}), std::invalid_argument);
  const std::string msg = message_of([] { Gqa({.d_in = 8, .n_heads = 8, .n_kv_heads = 3}); });
  EXPECT_NE(msg.find("n_kv_heads = 3 does not divide n_heads = 8"), std::string::npos) << msg;
  EXPECT_THROW(Gqa({.d_in = 8, .n_heads = 4, .n_kv_heads = 8}), std::invalid_argument);
  EXPECT_THROW(kappa::MultiHeadAttention<float>({.d_in = 8, .n_heads = 4, .n_kv_heads = 2}),
               std::invalid_argument);
  EXPECT_THROW(kappa::MultiQueryAttention<float>({.d_in = 8, .n_heads = 4, .n_kv_heads = 2}),
               std::invalid_argument);
  EXPECT_THROW(kappa::MultiHeadAttention<float>({.d_in = 10, .n_heads = 4}), std::invalid_argument);
  EXPECT_NO_THROW(Gqa({.d_in = 8, .n_heads = 8, .n_kv_heads = 2}));
}

TEST(HeadsErrors, WeightShapeErrorsNameExpectedAndActualShapes) {
  kappa::GroupedQueryAttention<double> attn(
      {.d_in = 8, .n_heads = 4, .d_head = 2, .n_kv_heads = 2});
  const RowMatrix<double> ok_q(8, 8), ok_kv(8, 4), ok_o(8, 8), bad(8, 5);
  EXPECT_THROW(attn.set_weights(ok_q, bad, ok_kv, ok_o), kappa::ShapeError);
  const std::string msg = message_of([&] { attn.set_weights(ok_q, bad, ok_kv, ok_o); });
  EXPECT_NE(msg.find("w_k is (8 x 5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(8 x 4)"), std::string::npos) << msg;
  const std::string hf = message_of([&] { attn.set_weights_from_hf(ok_q, ok_kv, ok_kv, ok_o); });
  EXPECT_NE(hf.find("k_proj.weight is (8 x 4) but the expected shape is (4 x 8)"),
            std::string::npos)
      << hf;
  EXPECT_THROW(attn.set_biases(RowVector<double>(8), RowVector<double>(3), {}, {}),
               kappa::ShapeError);
  // A GQA layer is not shaped like nn.MultiheadAttention.
  EXPECT_THROW(attn.set_weights_from_torch_mha(RowMatrix<double>(24, 8), ok_o), kappa::ShapeError);
  const std::string in = message_of([&] { attn.forward(RowMatrix<double>(3, 7)); });
  EXPECT_NE(in.find("(3 x 7)"), std::string::npos) << in;
  EXPECT_NE(in.find("8 columns"), std::string::npos) << in;
}

}  // namespace

namespace {

using kappa::Index;
using kappa::RowMatrix;
using namespace kappa::testing;

TYPED_TEST(HeadsTest, GroupedAttentionOnProjectedInputsMatchesPerHeadAttention) {
  using T = TypeParam;
  const Index h = 6, h_kv = 3, dh = 4, dv = 3, nq = 5, nkv = 8;
  const RowMatrix<T> q = random_matrix<T>(nq, h * dh, 1), k = random_matrix<T>(nkv, h_kv * dh, 2),
                     v = random_matrix<T>(nkv, h_kv * dv, 3);
  RowMatrix<T> y(nq, h * dv);
  kappa::grouped_attention_into<T>(q, k, v, y, h, h_kv, kappa::kernels::Softmax{},
                                   kappa::CausalMask{});
  for (Index hh = 0; hh < h; ++hh) {
    const Index g = hh / (h / h_kv);
    const RowMatrix<T> want =
        kappa::attention(q.middleCols(hh * dh, dh), k.middleCols(g * dh, dh),
                         v.middleCols(g * dv, dv), kappa::kernels::Softmax{}, kappa::CausalMask{});
    EXPECT_LE(max_scaled_error(RowMatrix<T>(y.middleCols(hh * dv, dv)), want, Tolerance<T>::kRel,
                               Tolerance<T>::kAbs),
              1.0);
  }
  RowMatrix<T> bad(nq, h * dv + 1);
  EXPECT_THROW(kappa::grouped_attention_into<T>(q, k, v, bad, h, h_kv), kappa::ShapeError);
  EXPECT_THROW(kappa::grouped_attention_into<T>(q, k, v, y, h, 4), std::invalid_argument);
  // The cache form: the same keys appended to a cache, the last query.
  kappa::KVCache<T> cache({.n_kv_heads = h_kv, .d_head = dh, .d_v = dv});
  cache.append(k, v);
  RowMatrix<T> y_last(1, h * dv);
  kappa::grouped_attention_into<T>(q.bottomRows(1), cache, y_last, h);
  RowMatrix<T> y_full(nq, h * dv);
  kappa::grouped_attention_into<T>(q, k, v, y_full, h, h_kv, kappa::kernels::Softmax{},
                                   kappa::CausalMask{});
  EXPECT_LE(max_scaled_error(y_last, RowMatrix<T>(y_full.bottomRows(1)), Tolerance<T>::kRel,
                             Tolerance<T>::kAbs),
            1.0);
}

}  // namespace

// ---- Construction and initialization -------------------------------------------

namespace {

using kappa::Index;
using kappa::RowMatrix;

using kappa::testing::expect_projection_init;

template <class T>
class HeadsInitTest : public ::testing::Test {};
TYPED_TEST_SUITE(HeadsInitTest, Scalars);

TYPED_TEST(HeadsInitTest, FreshLayerIsZeroAndInitRandomIsSeeded) {
  using T = TypeParam;
  using Gqa = kappa::GroupedQueryAttention<T>;
  const kappa::HeadsConfig c{.d_in = 64, .n_heads = 8, .d_head = 16, .n_kv_heads = 2, .d_v = 12};
  Gqa a(c), b(c), other(c);
  const RowMatrix<T> x = kappa::seeded_normal_matrix<T>(5, 64, 1, 1.0);
  EXPECT_TRUE(a.forward(x).isZero(0)) << "the documented zero start";
  a.set_biases(kappa::RowVector<T>::Ones(128), {}, {}, kappa::RowVector<T>::Ones(64));
  a.init_random(42);
  b.init_random(42);
  other.init_random(43);
  EXPECT_EQ(a.b_q().size(), 0) << "init_random removes the biases";
  EXPECT_EQ(a.b_o().size(), 0);
  EXPECT_EQ(a.w_q(), b.w_q());
  EXPECT_EQ(a.w_k(), b.w_k());
  EXPECT_EQ(a.w_v(), b.w_v());
  EXPECT_EQ(a.w_o(), b.w_o());
  EXPECT_GT((a.w_q() - other.w_q()).cwiseAbs().maxCoeff(), T(0.1));
  EXPECT_GT((a.w_o() - other.w_o()).cwiseAbs().maxCoeff(), T(0.1));
  expect_projection_init("W^Q", a.w_q(), 64);
  expect_projection_init("W^K", a.w_k(), 64);
  expect_projection_init("W^V", a.w_v(), 64);
  expect_projection_init("W^O", a.w_o(), 8 * 12);
  // The stream is specified: W^Q's first entry is a (2 u - 1) of the first
  // splitmix64 draw from the seed, whatever T.
  kappa::SeededNormal g(42);
  EXPECT_EQ(a.w_q()(0, 0), static_cast<T>(std::sqrt(3.0 / 64) * g.symmetric()));
}

// For one token attention returns V, so [Y_1 ... Y_H] repeats each V_g G
// times and E[Y_ij^2] = E[x^2] = 1 over the weights; over 256 single-token
// sequences the measured mean square lies in [0.5, 2]. A causal sequence
// averages values: smaller, but far from zero.
TYPED_TEST(HeadsInitTest, RandomlyInitializedLayerGivesOutputsOfOrderOne) {
  using T = TypeParam;
  const kappa::HeadsConfig c{.d_in = 64, .n_heads = 8, .d_head = 16, .n_kv_heads = 2};
  kappa::GroupedQueryAttention<T> attn(c);
  attn.init_random(7);
  const RowMatrix<T> x = kappa::seeded_normal_matrix<T>(256, 64, 2, 1.0);
  const kappa::SequenceBatch<T> singles{x, std::vector<Index>(256, 1)};
  const RowMatrix<T> y = attn.forward(singles);
  const double ms = y.template cast<double>().squaredNorm() / static_cast<double>(y.size());
  EXPECT_GE(ms, 0.5);
  EXPECT_LE(ms, 2.0);
  const RowMatrix<T> yc = attn.forward(x.topRows(32), kappa::CausalMask{});
  const double rms =
      std::sqrt(yc.template cast<double>().squaredNorm() / static_cast<double>(yc.size()));
  EXPECT_GT(rms, 0.05);
  EXPECT_LT(rms, 2.0);
}

// The rotary width comes from HeadsConfig: with no positional argument or with
// RopeOptions the layer builds Rope for d_head itself; a Rope passed as it is
// needs no placeholder kernel. All spellings give the same layer.
TYPED_TEST(HeadsInitTest, RopeWidthIsDerivedFromTheHeadWidth) {
  using T = TypeParam;
  using Attn = kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, kappa::Rope<T>>;
  const kappa::HeadsConfig c{.d_in = 32, .n_heads = 4, .d_head = 8, .n_kv_heads = 2};
  Attn derived(c);
  Attn with_base(c, kappa::RopeOptions{.base = 500000.0});
  Attn partial(c, kappa::RopeOptions{.base = 500000.0, .rotary_dim = 4});
  Attn given(c, kappa::Rope<T>(8, 500000.0));
  Attn given_with_kernel(c, kappa::kernels::Softmax{}, kappa::Rope<T>(8, 500000.0));
  EXPECT_EQ(derived.position().rotary_dim(), 8);
  EXPECT_EQ(derived.position().base(), 10000.0);
  EXPECT_EQ(with_base.position().rotary_dim(), 8);
  EXPECT_EQ(with_base.position().base(), 500000.0);
  EXPECT_EQ(partial.position().rotary_dim(), 4);
  for (Attn* a : {&derived, &with_base, &partial, &given, &given_with_kernel}) a->init_random(3);
  const RowMatrix<T> x = kappa::seeded_normal_matrix<T>(6, 32, 4, 1.0);
  const RowMatrix<T> y = with_base.forward(x, kappa::CausalMask{});
  EXPECT_EQ(given.forward(x, kappa::CausalMask{}), y);
  EXPECT_EQ(given_with_kernel.forward(x, kappa::CausalMask{}), y);
  // The base and the rotary width matter: the other layers differ.
  EXPECT_GT((derived.forward(x, kappa::CausalMask{}) - y).cwiseAbs().maxCoeff(), T(1e-3));
  EXPECT_GT((partial.forward(x, kappa::CausalMask{}) - y).cwiseAbs().maxCoeff(), T(1e-3));
}

TEST(HeadsErrors, RopeWiderThanTheHeadIsAShapeErrorAtConstruction) {
  using Attn = kappa::GroupedQueryAttention<float, kappa::kernels::Softmax, kappa::Rope<float>>;
  const kappa::HeadsConfig c{.d_in = 32, .n_heads = 4, .d_head = 8, .n_kv_heads = 2};
  std::string msg;
  try {
    Attn bad(c, kappa::Rope<float>(16));
  } catch (const kappa::ShapeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("d_R = 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d_head = 8"), std::string::npos) << msg;
  EXPECT_THROW(Attn(c, kappa::kernels::Softmax{}, kappa::Rope<float>(10)), kappa::ShapeError);
  msg.clear();
  try {
    Attn bad(c, kappa::RopeOptions{.rotary_dim = 12});
  } catch (const kappa::ShapeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("rotary_dim = 12"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d_head = 8"), std::string::npos) << msg;
  // An odd head width cannot take a whole-head RoPE.
  EXPECT_THROW(Attn({.d_in = 12, .n_heads = 4, .d_head = 3, .n_kv_heads = 2}), kappa::ShapeError);
  // Partial rotary (d_R < d_head, GPT-NeoX) and no rotation (d_R = 0) are fine.
  EXPECT_NO_THROW(Attn(c, kappa::Rope<float>(2)));
  EXPECT_NO_THROW(Attn(c, kappa::Rope<float>(0)));
}

}  // namespace

// ---- Hardening: extreme sizes are kappa errors, never UB or a crash ---------------

namespace {

using kappa::Index;
using kappa::RowMatrix;

constexpr Index kMax = std::numeric_limits<Index>::max();

TEST(HeadsHardening, BatchLengthsThatOverflowAreAShapeError) {
  kappa::MultiHeadAttention<float> attn({.d_in = 4, .n_heads = 2});
  const RowMatrix<float> empty(0, 4);
  // {INT64_MAX, INT64_MAX, 2} wraps to 0 rows, which an empty matrix "matches".
  const kappa::SequenceBatch<float> wrap{empty, {kMax, kMax, 2}};
  EXPECT_THROW((void)wrap.offsets(), kappa::ShapeError);
  EXPECT_THROW((void)attn.forward(wrap), kappa::ShapeError);
  EXPECT_THROW((void)attn.forward_cross(wrap, wrap), kappa::ShapeError);
  const RowMatrix<float> x = RowMatrix<float>::Ones(3, 4);
  const kappa::SequenceBatch<float> big{x, {kMax, 1}};
  std::string msg;
  try {
    (void)big.offsets();
  } catch (const kappa::ShapeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(std::to_string(kMax)), std::string::npos) << msg;
  EXPECT_NE(msg.find("(3 x 4)"), std::string::npos) << msg;
}

TEST(HeadsHardening, SizesWhoseProductsOverflowAreRejectedNamingTheValue) {
  constexpr Index kBig = Index{1} << 62;
  using Mha = kappa::MultiHeadAttention<float>;
  using Gqa = kappa::GroupedQueryAttention<float>;
  // d_head = 2^62: H d_head wraps to 0 without a check (an 8 x 0 W^Q).
  EXPECT_THROW(Mha({.d_in = 8, .n_heads = 8, .d_head = kBig}), kappa::RangeError);
  EXPECT_THROW(Mha({.d_in = 8, .n_heads = 2, .d_head = 4, .d_v = kBig}), kappa::RangeError);
  EXPECT_THROW(Mha({.d_in = kBig, .n_heads = 2, .d_head = 4}), kappa::RangeError);
  EXPECT_THROW(Mha({.d_in = 8, .n_heads = 2, .d_head = 4, .d_kv_in = kBig}), kappa::RangeError);
  EXPECT_THROW(Mha({.d_in = 8, .n_heads = 2, .d_head = 4, .d_out = kBig}), kappa::RangeError);
  EXPECT_THROW(Gqa({.d_in = 8, .n_heads = kBig, .d_head = 4, .n_kv_heads = 1}), kappa::RangeError);
  // Impossible but non-overflowing sizes: RangeError, not std::bad_alloc.
  EXPECT_THROW(Mha({.d_in = Index{1} << 30, .n_heads = 1, .d_head = Index{1} << 30}),
               kappa::RangeError);
  std::string msg;
  try {
    Mha({.d_in = 8, .n_heads = 8, .d_head = kBig});
  } catch (const kappa::RangeError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(std::to_string(kBig)), std::string::npos) << msg;
  // The free function on a cache: n_heads d_head overflowing.
  kappa::KVCache<float> cache({.n_kv_heads = 1, .d_head = 4});
  const RowMatrix<float> q(1, 4);
  RowMatrix<float> y(1, 4);
  EXPECT_THROW(kappa::grouped_attention_into<float>(q, cache, y, kBig), kappa::RangeError);
}

}  // namespace
