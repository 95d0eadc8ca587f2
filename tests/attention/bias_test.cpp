// Tests of kappa/attention/bias.hpp: additive score biases on every path
// (blocked, tiled, few-query decode, attention_details), against a plain-loop
// long-double reference and golden data from
// tests/reference/make_bias_golden.py (BLOOM's ALiBi, T5's relative position
// buckets, in PyTorch); per-head biases in multi-head attention; and the
// hidden-keys rule through MultiHeadAttention's forward and forward_cached.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/bias.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/golden.hpp"
#include "support/heads_reference.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;
using testing::random_matrix;

template <class T>
class BiasTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BiasTest, Scalars);

template <class T>
constexpr double kRel = std::is_same_v<T, float> ? 2e-5 : 1e-12;

/// Softmax attention with an additive bias by the definition, in long double:
/// x_ij = s q_i.k_j + bias(i, j) over visible keys; a row with no visible
/// key, or only -inf scores, is zero.
template <class T>
RowMatrix<T> ref_biased(const RowMatrix<T>& q, const RowMatrix<T>& k, const RowMatrix<T>& v,
                        double s, const std::function<long double(Index, Index)>& bias,
                        const std::function<bool(Index, Index)>& visible) {
  RowMatrix<T> y = RowMatrix<T>::Zero(q.rows(), v.cols());
  for (Index i = 0; i < q.rows(); ++i) {
    std::vector<long double> x(static_cast<std::size_t>(k.rows()),
                               -std::numeric_limits<long double>::infinity());
    long double m = -std::numeric_limits<long double>::infinity();
    for (Index j = 0; j < k.rows(); ++j) {
      if (!visible(i, j)) continue;
      long double dot = 0;
      for (Index c = 0; c < q.cols(); ++c) dot += (long double)q(i, c) * (long double)k(j, c);
      x[static_cast<std::size_t>(j)] = s * dot + bias(i, j);
      m = std::max(m, x[static_cast<std::size_t>(j)]);
    }
    if (!(m > -std::numeric_limits<long double>::infinity())) continue;
    long double z = 0;
    std::vector<long double> acc(static_cast<std::size_t>(v.cols()), 0);
    for (Index j = 0; j < k.rows(); ++j) {
      if (!visible(i, j)) continue;
      const long double a = std::exp(x[static_cast<std::size_t>(j)] - m);
      z += a;
      for (Index c = 0; c < v.cols(); ++c) acc[static_cast<std::size_t>(c)] += a * v(j, c);
    }
    for (Index c = 0; c < v.cols(); ++c)
      y(i, c) = static_cast<T>(acc[static_cast<std::size_t>(c)] / z);
  }
  return y;
}

const AttentionPath kPaths[] = {AttentionPath::kAuto, AttentionPath::kBlocked,
                                AttentionPath::kTiled};

template <class T, class M>
RowMatrix<T> run_path(AttentionPath path, const RowMatrix<T>& q, const RowMatrix<T>& k,
                      const RowMatrix<T>& v, const M& mask, double scale = -1) {
  RowMatrix<T> y(q.rows(), v.cols());
  AttentionWorkspace<T> ws;
  ws.path = path;
  kernels::Softmax sm{};
  if (scale > 0) sm.scale = scale;
  attention_into<T>(q, k, v, y, ws, sm, mask);
  return y;
}

TYPED_TEST(BiasTest, BiasMatrixOnEveryPathEqualsReference) {
  using T = TypeParam;
  for (Index n_q : {1, 5, 140}) {
    const Index n_kv = 600, d = 8;
    SCOPED_TRACE("N_Q = " + std::to_string(n_q));
    const RowMatrix<T> q = random_matrix<T>(n_q, d, 1);
    const RowMatrix<T> k = random_matrix<T>(n_kv, d, 2);
    const RowMatrix<T> v = random_matrix<T>(n_kv, 4, 3);
    ScoreBias<T> b{random_matrix<T>(n_q, n_kv, 4, 3.0)};
    const double s = 1 / std::sqrt(8.0);
    const auto bias = [&](Index i, Index j) { return (long double)b.bias(i, j); };
    const auto all = [](Index, Index) { return true; };
    const CausalMask causal{};
    const auto cb = causal.bind(n_q, n_kv);
    const auto seen = [&](Index i, Index j) { return j < cb.range(i).end; };
    const RowMatrix<T> want = ref_biased<T>(q, k, v, s, bias, all);
    const RowMatrix<T> want_c = ref_biased<T>(q, k, v, s, bias, seen);
    for (AttentionPath p : kPaths) {
      SCOPED_TRACE("path " + std::to_string(static_cast<int>(p)));
      EXPECT_LE(max_scaled_error(run_path(p, q, k, v, b), want, kRel<T>, 1e-2 * kRel<T>), 1.0);
      EXPECT_LE(max_scaled_error(run_path(p, q, k, v, all_of(causal, b)), want_c, kRel<T>,
                                 1e-2 * kRel<T>),
                1.0);
    }
    const auto det = attention_details(q, k, v, kernels::Softmax{}, all_of(causal, b));
    EXPECT_LE(max_scaled_error(det.output, want_c, kRel<T>, 1e-2 * kRel<T>), 1.0);
    // The scores it reports are s q.k + B, shifted by the row maximum.
    const Index i = n_q - 1, j = n_kv / 2;
    const long double x = s * (long double)q.row(i).dot(k.row(j)) + b.bias(i, j);
    EXPECT_NEAR(static_cast<double>(std::log((long double)det.scores(i, j)) + det.row_shift(i)),
                static_cast<double>(x), 20 * kRel<T>);
  }
}

// A bias of -inf hides a key as a mask does; a row of -inf is a zero row.
TYPED_TEST(BiasTest, MinusInfinityBiasActsAsMask) {
  using T = TypeParam;
  const Index n_q = 130, n_kv = 300;
  const RowMatrix<T> q = random_matrix<T>(n_q, 4, 11);
  const RowMatrix<T> k = random_matrix<T>(n_kv, 4, 12);
  const RowMatrix<T> v = random_matrix<T>(n_kv, 3, 13);
  ScoreBias<T> b{RowMatrix<T>::Zero(n_q, n_kv)};
  BooleanMask bm;
  bm.allowed.setConstant(n_q, n_kv, true);
  for (Index i = 0; i < n_q; ++i)
    for (Index j = 0; j < n_kv; ++j)
      if ((i + 2 * j) % 7 == 0 || i == 5 || (i == 6 && j < 290)) {
        b.bias(i, j) = -std::numeric_limits<T>::infinity();
        bm.allowed(i, j) = false;
      }
  const RowMatrix<T> want = run_path(AttentionPath::kBlocked, q, k, v, bm);
  for (AttentionPath p : kPaths) {
    const RowMatrix<T> y = run_path(p, q, k, v, b);
    ASSERT_TRUE(y.allFinite());
    EXPECT_TRUE(y.row(5).isZero(0));
    EXPECT_LE(max_scaled_error(y, want, kRel<T>, 1e-2 * kRel<T>), 1.0);
  }
  // Decode shape (the few-query path): one query whose scores are all -inf.
  ScoreBias<T> one{RowMatrix<T>::Constant(1, n_kv, -std::numeric_limits<T>::infinity())};
  const RowMatrix<T> y1 = run_path(AttentionPath::kAuto, RowMatrix<T>(q.topRows(1)), k, v, one);
  EXPECT_TRUE(y1.isZero(0));
}

TEST(BiasErrors, ShapesHeadsAndSettingsAreChecked) {
  const RowMatrix<double> q = random_matrix<double>(3, 4, 1), k = random_matrix<double>(5, 4, 2);
  ScoreBias<double> b{RowMatrix<double>::Zero(3, 4)};
  EXPECT_THROW((void)attention(q, k, k, kernels::Softmax{}, b), ShapeError);
  EXPECT_THROW((void)alibi_slopes(0), RangeError);
  EXPECT_THROW((void)Alibi(4).head(4), RangeError);
  EXPECT_THROW((void)t5_relative_position_bucket(3, true, 2, 128), std::invalid_argument);
  EXPECT_THROW((void)t5_relative_position_bucket(3, false, 32, 16), std::invalid_argument);
  EXPECT_THROW((void)attention(q, k, k, kernels::Softmax{},
                               AlibiBias{std::numeric_limits<double>::quiet_NaN()}),
               std::invalid_argument);
}

// ---- golden data ---------------------------------------------------------------

class BiasGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g = testing::read_golden(std::string(KAPPA_TEST_DATA_DIR) + "/attention/bias_golden.txt");
  }
  static const RowMatrix<double>& m(const std::string& name) {
    const auto it = g.find(name);
    if (it == g.end()) throw std::runtime_error("golden matrix missing: " + name);
    return it->second;
  }
  static inline std::map<std::string, RowMatrix<double>> g;
};

TEST_F(BiasGolden, AlibiSlopesMatchBloom) {
  for (Index h : {1, 2, 3, 5, 6, 8, 12, 16, 20, 40, 112}) {
    const RowMatrix<double>& want = m("alibi.slopes." + std::to_string(h));
    const std::vector<double> got = alibi_slopes(h);
    ASSERT_EQ(static_cast<Index>(got.size()), want.cols()) << h;
    for (Index i = 0; i < h; ++i)
      EXPECT_NEAR(got[static_cast<std::size_t>(i)], want(0, i), 1e-14 * want(0, i))
          << h << " " << i;
  }
}

TEST_F(BiasGolden, AlibiAttentionMatchesBloomOnEveryPath) {
  const Alibi alibi(6);
  for (Index n_q : {11, 3, 1}) {
    const std::string c = "alibi.nq" + std::to_string(n_q);
    for (Index h = 0; h < 6; ++h) {
      SCOPED_TRACE(c + " head " + std::to_string(h));
      const std::string hs = std::to_string(h);
      const auto mask = all_of(CausalMask{}, alibi.head(h));
      for (AttentionPath p : kPaths) {
        const RowMatrix<double> y =
            run_path(p, m(c + ".q" + hs), m(c + ".k" + hs), m(c + ".v" + hs), mask);
        EXPECT_LE((y - m(c + ".y" + hs)).cwiseAbs().maxCoeff(), 1e-13);
        const RowMatrix<float> yf =
            run_path(p, RowMatrix<float>(m(c + ".q" + hs).cast<float>()),
                     RowMatrix<float>(m(c + ".k" + hs).cast<float>()),
                     RowMatrix<float>(m(c + ".v" + hs).cast<float>()), mask);
        EXPECT_LE((yf.cast<double>() - m(c + ".y" + hs)).cwiseAbs().maxCoeff(), 2e-6);
      }
    }
  }
}

TEST_F(BiasGolden, T5BucketsMatchHuggingFace) {
  const RowMatrix<double>& rel = m("t5.relative_positions");
  for (int bidi : {1, 0}) {
    for (auto [nb, md] : {std::pair<Index, Index>{32, 128}, {8, 20}, {10, 50}}) {
      const std::string name = "t5.buckets." + std::to_string(bidi) + "." + std::to_string(nb) +
                               "." + std::to_string(md);
      const RowMatrix<double>& want = m(name);
      for (Index t = 0; t < rel.cols(); ++t) {
        const auto r = static_cast<Index>(rel(0, t));
        ASSERT_EQ(t5_relative_position_bucket(r, bidi == 1, nb, md), static_cast<Index>(want(0, t)))
            << name << " at " << r;
      }
    }
    for (auto [nb, md] : {std::pair<Index, Index>{32, 128}, {64, 1000}}) {
      const std::string name =
          "t5.far." + std::to_string(bidi) + "." + std::to_string(nb) + "." + std::to_string(md);
      const RowMatrix<double>& want = m(name);
      for (Index t = 0; t < want.cols(); ++t) {
        const Index r = bidi == 1 ? t : -t;
        ASSERT_EQ(t5_relative_position_bucket(r, bidi == 1, nb, md), static_cast<Index>(want(0, t)))
            << name << " at " << r;
      }
    }
  }
}

TEST_F(BiasGolden, T5AttentionMatchesHuggingFaceOnEveryPath) {
  T5RelativeBias<double> enc{m("t5.table"), true, 10};
  T5RelativeBias<double> dec{m("t5.table"), false, 10};
  T5RelativeBias<float> dec_f{RowMatrix<float>(m("t5.table").cast<float>()), false, 10};
  for (const std::string c : {"t5.enc", "t5.dec", "t5.dec1"}) {
    for (Index h = 0; h < 3; ++h) {
      SCOPED_TRACE(c + " head " + std::to_string(h));
      const std::string hs = std::to_string(h);
      const RowMatrix<double>&q = m(c + ".q" + hs), &k = m(c + ".k" + hs), &v = m(c + ".v" + hs);
      for (AttentionPath p : kPaths) {
        const RowMatrix<double> y =
            c == "t5.enc" ? run_path(p, q, k, v, enc.head(h), 1.0)
                          : run_path(p, q, k, v, all_of(CausalMask{}, dec.head(h)), 1.0);
        EXPECT_LE((y - m(c + ".y" + hs)).cwiseAbs().maxCoeff(), 1e-13);
        if (c != "t5.enc") {
          const RowMatrix<float> yf =
              run_path(p, RowMatrix<float>(q.cast<float>()), RowMatrix<float>(k.cast<float>()),
                       RowMatrix<float>(v.cast<float>()), all_of(CausalMask{}, dec_f.head(h)), 1.0);
          EXPECT_LE((yf.cast<double>() - m(c + ".y" + hs)).cwiseAbs().maxCoeff(), 2e-6);
        }
      }
    }
  }
}

// ---- multi-head attention: head h gets its own bias --------------------------

template <class T>
RowMatrix<T> ref_heads_biased(const RowMatrix<T>& x, const testing::RefHeadsWeights<T>& w,
                              Index n_heads, Index n_kv_heads, Index dh,
                              const std::function<long double(Index, Index, Index)>& bias) {
  const RowMatrix<T> q = testing::ref_affine(x, w.w_q, w.b_q);
  const RowMatrix<T> k = testing::ref_affine(x, w.w_k, w.b_k);
  const RowMatrix<T> v = testing::ref_affine(x, w.w_v, w.b_v);
  const Index grp = n_heads / n_kv_heads, n = x.rows();
  RowMatrix<T> y(n, n_heads * dh);
  for (Index h = 0; h < n_heads; ++h) {
    const Index g = h / grp;
    const RowMatrix<T> qh = q.middleCols(h * dh, dh), kg = k.middleCols(g * dh, dh),
                       vg = v.middleCols(g * dh, dh);
    y.middleCols(h * dh, dh) = ref_biased<T>(
        qh, kg, vg, 1 / std::sqrt(double(dh)), [&](Index i, Index j) { return bias(h, i, j); },
        [](Index i, Index j) { return j <= i; });
  }
  return testing::ref_affine(y, w.w_o, w.b_o);
}

TYPED_TEST(BiasTest, MultiHeadAlibiAndT5GiveEachHeadItsOwnBias) {
  using T = TypeParam;
  const Index d = 12, dh = 3, n = 9;
  for (Index h_kv : {6, 2}) {
    SCOPED_TRACE("n_kv_heads = " + std::to_string(h_kv));
    const auto w = testing::random_heads_weights<T>(d, d, 6, h_kv, dh, dh, d, true, 5);
    GroupedQueryAttention<T> attn({.d_in = d, .n_heads = 6, .d_head = dh, .n_kv_heads = h_kv});
    attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
    attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
    const RowMatrix<T> x = random_matrix<T>(n, d, 6, 2.0);
    const std::vector<double> slopes = alibi_slopes(6);
    const RowMatrix<T> y = attn.forward(x, all_of(CausalMask{}, Alibi(6)));
    const RowMatrix<T> want =
        ref_heads_biased<T>(x, w, 6, h_kv, dh, [&](Index h, Index i, Index j) {
          return -(long double)slopes[static_cast<std::size_t>(h)] * (long double)(i - j);
        });
    EXPECT_LE(max_scaled_error(y, want, 10 * kRel<T>, 1e-2 * kRel<T>), 1.0);

    T5RelativeBias<T> t5{random_matrix<T>(8, 6, 7, 2.0), false, 6};
    const RowMatrix<T> y5 = attn.forward(x, all_of(CausalMask{}, t5));
    const RowMatrix<T> want5 =
        ref_heads_biased<T>(x, w, 6, h_kv, dh, [&](Index h, Index i, Index j) {
          return (long double)t5.table(t5_relative_position_bucket(j - i, false, 8, 6), h);
        });
    EXPECT_LE(max_scaled_error(y5, want5, 10 * kRel<T>, 1e-2 * kRel<T>), 1.0);
    // The weights per head, too (attention_details with head h's bias).
    const auto wts = attn.head_weights(x, x, all_of(CausalMask{}, Alibi(6)));
    ASSERT_EQ(wts.size(), 6u);
    for (const auto& wh : wts) EXPECT_NEAR(static_cast<double>(wh.row(n - 1).sum()), 1.0, 1e-5);
    EXPECT_THROW((void)attn.forward(x, Alibi(4)), ShapeError);
  }
}

// A NaN (or inf) in V at a key that is later masked: forward() over the whole
// sequence and forward_cached() token by token agree on every row that
// cannot see it (before this rule, forward's block product spread 0 * NaN).
TYPED_TEST(BiasTest, ForwardAndForwardCachedAgreeWithNaNAtHiddenValues) {
  using T = TypeParam;
  const Index d = 8, n = 12, bad = 7;
  const auto w = testing::random_heads_weights<T>(d, d, 2, 2, 4, 4, d, false, 9);
  MultiHeadAttention<T> attn({.d_in = d, .n_heads = 2, .d_head = 4});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  RowMatrix<T> x = random_matrix<T>(n, d, 10);
  x(bad, 0) = std::numeric_limits<T>::quiet_NaN();  // Q, K and V of token 7 are NaN
  const RowMatrix<T> full = attn.forward(x, CausalMask{});
  KVCache<T> cache(attn.kv_cache_config());
  RowMatrix<T> inc(n, d);
  for (Index i = 0; i < n; ++i) inc.row(i) = attn.forward_cached(RowMatrix<T>(x.row(i)), cache);
  for (Index i = 0; i < n; ++i) {
    if (i < bad) {
      ASSERT_TRUE(full.row(i).allFinite()) << "row " << i << " cannot see token " << bad;
      EXPECT_LE((full.row(i) - inc.row(i)).cwiseAbs().maxCoeff(), 10 * kRel<T>) << "row " << i;
    } else {
      EXPECT_FALSE(full.row(i).allFinite()) << "row " << i;
      EXPECT_FALSE(inc.row(i).allFinite()) << "row " << i;
    }
  }
  // Padding: a batch row's padded tail holds NaN values but no row sees it.
  RowMatrix<T> xp = random_matrix<T>(n, d, 11);
  xp.bottomRows(3).setConstant(std::numeric_limits<T>::quiet_NaN());
  const RowMatrix<T> padded = attn.forward(xp, all_of(CausalMask{}, KeyPaddingMask{n - 3}));
  EXPECT_TRUE(padded.topRows(n - 3).allFinite());
  const RowMatrix<T> alone = attn.forward(RowMatrix<T>(xp.topRows(n - 3)), CausalMask{});
  EXPECT_LE(max_scaled_error(RowMatrix<T>(padded.topRows(n - 3)), alone, 10 * kRel<T>, kRel<T>),
            1.0);
}

}  // namespace
}  // namespace kappa
