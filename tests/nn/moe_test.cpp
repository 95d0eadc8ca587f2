// Tests for kappa/nn/moe.hpp: the router by hand on small cases, and the
// whole mixture-of-experts feed-forward against a plain-loop reference that
// computes each token alone (its own softmax, selection and SwiGLU loops;
// nothing shared with the class but the weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kappa/nn/moe.hpp"

namespace kappa {
namespace {

// ---- the router by hand -------------------------------------------------------------

RowMatrix<double> one_row(const std::vector<double>& v) {
  RowMatrix<double> m(1, static_cast<Index>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) m(0, static_cast<Index>(i)) = v[i];
  return m;
}

TEST(Router, SoftmaxTopKRenormalized) {
  // softmax(log(0.1, 0.4, 0.2, 0.3)) = (0.1, 0.4, 0.2, 0.3); top-2 = {1, 3},
  // renormalised: 0.4 / 0.7, 0.3 / 0.7.
  const RouterConfig c{.n_experts = 4, .top_k = 2, .weights = TopKWeights::kRenormalized};
  const Routing r = route(c, one_row({std::log(0.1), std::log(0.4), std::log(0.2), std::log(0.3)}));
  EXPECT_EQ(r.experts, (std::vector<Index>{1, 3}));
  EXPECT_NEAR(r.weights[0], 0.4 / 0.7, 1e-15);
  EXPECT_NEAR(r.weights[1], 0.3 / 0.7, 1e-15);
  // As scored, times a scale: 2 x (0.4, 0.3).
  const RouterConfig s{.n_experts = 4, .top_k = 2, .scale = 2.0};
  const Routing q = route(s, one_row({std::log(0.1), std::log(0.4), std::log(0.2), std::log(0.3)}));
  EXPECT_NEAR(q.weights[0], 0.8, 1e-15);
  EXPECT_NEAR(q.weights[1], 0.6, 1e-15);
  // Ties go to the smaller index.
  const Routing t = route(RouterConfig{.n_experts = 3, .top_k = 1}, one_row({1.0, 1.0, 0.0}));
  EXPECT_EQ(t.experts[0], 0);
}

TEST(Router, GroupLimitedKeepsTheBestGroups) {
  // 6 experts in 3 groups of 2: probabilities (group by max)
  //   g0: 0.05 0.30 -> 0.30;  g1: 0.25 0.25 -> 0.25;  g2: 0.10 0.05 -> 0.10
  // topk_group 1 keeps g0 only: top-2 = {1, 0} although 2 and 3 beat 0.
  const std::vector<double> p = {0.05, 0.30, 0.25, 0.25, 0.10, 0.05};
  std::vector<double> l;
  for (double x : p) l.push_back(std::log(x));
  const RouterConfig c{.n_experts = 6,
                       .top_k = 2,
                       .selection = ExpertSelection::kGroupLimitedTopK,
                       .n_group = 3,
                       .topk_group = 1};
  const Routing r = route(c, one_row(l));
  EXPECT_EQ(r.experts, (std::vector<Index>{1, 0}));
  EXPECT_NEAR(r.weights[0], 0.30, 1e-15);
  EXPECT_NEAR(r.weights[1], 0.05, 1e-15);
  // Two groups kept: g0 and g1 -> {1, 2} (2 and 3 tie: the smaller index).
  RouterConfig c2 = c;
  c2.topk_group = 2;
  EXPECT_EQ(route(c2, one_row(l)).experts, (std::vector<Index>{1, 2}));
}

TEST(Router, BiasChangesTheChoiceNotTheWeights) {
  // Sigmoid scores; 4 experts in 2 groups; bias favours expert 3.
  const std::vector<double> logits = {2.0, 1.0, 0.0, -1.0};
  const auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  const RouterConfig c{.n_experts = 4,
                       .top_k = 1,
                       .score = RouterScore::kSigmoid,
                       .selection = ExpertSelection::kBiasedGroupTopK,
                       .n_group = 2,
                       .topk_group = 1,
                       .scale = 2.5};
  // Without bias: group scores 0.88+0.73 vs 0.5+0.27: group 0, expert 0.
  const Routing a = route(c, one_row(logits), {0, 0, 0, 0});
  EXPECT_EQ(a.experts[0], 0);
  EXPECT_NEAR(a.weights[0], 2.5 * sig(2.0), 1e-15);
  // Bias +2 on expert 3: group 1 scores 0.5 + 2.27 > 1.61; expert 3 chosen,
  // weighted by its score without the bias.
  const Routing b = route(c, one_row(logits), {0, 0, 0, 2.0});
  EXPECT_EQ(b.experts[0], 3);
  EXPECT_NEAR(b.weights[0], 2.5 * sig(-1.0), 1e-15);
}

TEST(Router, BadConfigsAreNamed) {
  const auto expect_bad = [](RouterConfig c, const char* needle) {
    try {
      c.validate();
      ADD_FAILURE() << "expected std::invalid_argument: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_bad({.n_experts = 0, .top_k = 1}, "n_experts");
  expect_bad({.n_experts = 4, .top_k = 5}, "top_k");
  expect_bad(
      {.n_experts = 6, .top_k = 2, .selection = ExpertSelection::kGroupLimitedTopK, .n_group = 4},
      "n_group");
  expect_bad({.n_experts = 8,
              .top_k = 3,
              .selection = ExpertSelection::kGroupLimitedTopK,
              .n_group = 4,
              .topk_group = 1},
             "top_k = 3");
  expect_bad({.n_experts = 4, .top_k = 1, .scale = 0.0}, "scale");
}

// ---- the whole layer against a per-token plain loop -----------------------------------

struct PlainExpert {
  RowMatrix<double> gate, up, down;  // (d, f), (d, f), (f, d)
};

std::vector<double> plain_swiglu(const PlainExpert& e, const std::vector<double>& x) {
  const Index d = e.gate.rows(), f = e.gate.cols();
  std::vector<double> h(static_cast<std::size_t>(f)), y(static_cast<std::size_t>(d), 0.0);
  for (Index j = 0; j < f; ++j) {
    double g = 0, u = 0;
    for (Index i = 0; i < d; ++i) {
      g += x[static_cast<std::size_t>(i)] * e.gate(i, j);
      u += x[static_cast<std::size_t>(i)] * e.up(i, j);
    }
    h[static_cast<std::size_t>(j)] = g / (1 + std::exp(-g)) * u;
  }
  for (Index i = 0; i < d; ++i)
    for (Index j = 0; j < f; ++j)
      y[static_cast<std::size_t>(i)] += h[static_cast<std::size_t>(j)] * e.down(j, i);
  return y;
}

RowMatrix<double> random_matrix(Index r, Index c, std::mt19937_64& g, double scale) {
  std::normal_distribution<double> n(0.0, scale);
  RowMatrix<double> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

struct Case {
  RouterConfig router;
  bool shared = false, shared_gate = false;
};

// F(x) = sum_k w_k E_k(x) + g(x) S(x), token by token, with the routing of
// the token computed here (softmax/sigmoid, groups, bias, renorm, scale).
void check_against_plain_loop(const Case& cs, std::uint64_t seed) {
  const Index d = 12, f = 8, n = 9, E = cs.router.n_experts, k = cs.router.top_k;
  std::mt19937_64 g(seed);
  const RowMatrix<double> w_r = random_matrix(d, E, g, 1.0);
  std::vector<PlainExpert> experts;
  for (Index e = 0; e < E; ++e)
    experts.push_back(
        {random_matrix(d, f, g, 0.3), random_matrix(d, f, g, 0.3), random_matrix(f, d, g, 0.3)});
  const PlainExpert shared{random_matrix(d, 2 * f, g, 0.3), random_matrix(d, 2 * f, g, 0.3),
                           random_matrix(2 * f, d, g, 0.3)};
  const RowVector<double> gate = random_matrix(1, d, g, 1.0);
  RowVector<double> bias = random_matrix(1, E, g, 0.5);
  const RowMatrix<double> x = random_matrix(n, d, g, 1.0);

  MixtureOfExperts<double> moe(d, f, cs.router);
  moe.set_router(w_r);
  for (Index e = 0; e < E; ++e) {
    const PlainExpert& p = experts[static_cast<std::size_t>(e)];
    moe.set_expert(e, p.gate, p.up, p.down);
  }
  if (cs.router.selection == ExpertSelection::kBiasedGroupTopK) moe.set_selection_bias(bias);
  if (cs.shared) {
    GatedMlp<double, Silu> s(d, 2 * f);
    s.set_weights(shared.gate, shared.up, shared.down);
    moe.set_shared(std::move(s), cs.shared_gate ? gate : RowVector<double>());
  }
  const RowMatrix<double> y = moe.forward(x);
  ASSERT_EQ(y.rows(), n);
  ASSERT_EQ(y.cols(), d);

  std::vector<int> used(static_cast<std::size_t>(E), 0);
  const Index gs = E / cs.router.n_group;
  for (Index t = 0; t < n; ++t) {
    std::vector<double> xt(x.row(t).data(), x.row(t).data() + d);
    std::vector<double> s(static_cast<std::size_t>(E));
    for (Index e = 0; e < E; ++e) {
      double l = 0;
      for (Index i = 0; i < d; ++i) l += xt[static_cast<std::size_t>(i)] * w_r(i, e);
      s[static_cast<std::size_t>(e)] = l;
    }
    if (cs.router.score == RouterScore::kSoftmax) {
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - m));
      for (double& v : s) v /= z;
    } else {
      for (double& v : s) v = 1 / (1 + std::exp(-v));
    }
    std::vector<double> c = s;
    if (cs.router.selection == ExpertSelection::kBiasedGroupTopK)
      for (Index e = 0; e < E; ++e) c[static_cast<std::size_t>(e)] += bias(e);
    if (cs.router.selection != ExpertSelection::kTopK) {
      std::vector<std::pair<double, Index>> groups;
      for (Index grp = 0; grp < cs.router.n_group; ++grp) {
        std::vector<double> m(c.begin() + grp * gs, c.begin() + (grp + 1) * gs);
        std::sort(m.rbegin(), m.rend());
        groups.emplace_back(
            cs.router.selection == ExpertSelection::kGroupLimitedTopK ? m[0] : m[0] + m[1], grp);
      }
      std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      for (Index e = 0; e < E; ++e) {
        bool kept = false;
        for (Index j = 0; j < cs.router.topk_group; ++j)
          kept = kept || groups[static_cast<std::size_t>(j)].second == e / gs;
        if (!kept) c[static_cast<std::size_t>(e)] = 0;
      }
    }
    std::vector<Index> idx(static_cast<std::size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](Index a, Index b) {
      return c[static_cast<std::size_t>(a)] > c[static_cast<std::size_t>(b)];
    });
    double sum = 0;
    for (Index j = 0; j < k; ++j)
      sum += s[static_cast<std::size_t>(idx[static_cast<std::size_t>(j)])];
    std::vector<double> want(static_cast<std::size_t>(d), 0.0);
    for (Index j = 0; j < k; ++j) {
      const Index e = idx[static_cast<std::size_t>(j)];
      ++used[static_cast<std::size_t>(e)];
      double w = s[static_cast<std::size_t>(e)];
      if (cs.router.weights == TopKWeights::kRenormalized) w /= sum + cs.router.renorm_epsilon;
      w *= cs.router.scale;
      const std::vector<double> ye = plain_swiglu(experts[static_cast<std::size_t>(e)], xt);
      for (Index i = 0; i < d; ++i)
        want[static_cast<std::size_t>(i)] += w * ye[static_cast<std::size_t>(i)];
    }
    if (cs.shared) {
      const std::vector<double> ys = plain_swiglu(shared, xt);
      double gv = 1;
      if (cs.shared_gate) {
        double a = 0;
        for (Index i = 0; i < d; ++i) a += xt[static_cast<std::size_t>(i)] * gate(i);
        gv = 1 / (1 + std::exp(-a));
      }
      for (Index i = 0; i < d; ++i)
        want[static_cast<std::size_t>(i)] += gv * ys[static_cast<std::size_t>(i)];
    }
    // One token alone takes the decode path (forward_one): the same result.
    const RowMatrix<double> y_one = moe.forward(x.row(t));
    for (Index i = 0; i < d; ++i) {
      EXPECT_NEAR(y(t, i), want[static_cast<std::size_t>(i)], 1e-12)
          << "token " << t << " col " << i;
      EXPECT_NEAR(y_one(0, i), want[static_cast<std::size_t>(i)], 1e-12)
          << "token " << t << " alone, col " << i;
    }
  }
  // The case must route tokens to several experts, or it proves little.
  EXPECT_GE(std::count_if(used.begin(), used.end(), [](int u) { return u > 0; }), 3);

  // float agrees with double to float rounding.
  MixtureOfExperts<float> mf(d, f, cs.router);
  mf.set_router(w_r.cast<float>());
  for (Index e = 0; e < E; ++e) {
    const PlainExpert& p = experts[static_cast<std::size_t>(e)];
    mf.set_expert(e, p.gate.cast<float>(), p.up.cast<float>(), p.down.cast<float>());
  }
  if (cs.router.selection == ExpertSelection::kBiasedGroupTopK)
    mf.set_selection_bias(bias.cast<float>());
  if (cs.shared) {
    GatedMlp<float, Silu> s(d, 2 * f);
    s.set_weights(shared.gate.cast<float>(), shared.up.cast<float>(), shared.down.cast<float>());
    mf.set_shared(std::move(s),
                  cs.shared_gate ? RowVector<float>(gate.cast<float>()) : RowVector<float>());
  }
  const RowMatrix<float> yf = mf.forward(x.cast<float>());
  EXPECT_LE((yf.cast<double>() - y).cwiseAbs().maxCoeff(), 1e-4);
}

TEST(MixtureOfExperts, MixtralRoutingMatchesThePlainLoop) {
  check_against_plain_loop(
      {.router = {.n_experts = 8, .top_k = 2, .weights = TopKWeights::kRenormalized}}, 1);
}

TEST(MixtureOfExperts, Qwen2MoeSharedExpertWithGate) {
  check_against_plain_loop(
      {.router = {.n_experts = 8, .top_k = 2}, .shared = true, .shared_gate = true}, 2);
}

TEST(MixtureOfExperts, DeepSeekV2GroupLimitedWithSharedExperts) {
  check_against_plain_loop({.router = {.n_experts = 8,
                                       .top_k = 3,
                                       .selection = ExpertSelection::kGroupLimitedTopK,
                                       .n_group = 4,
                                       .topk_group = 2,
                                       .scale = 2.0},
                            .shared = true},
                           3);
}

TEST(MixtureOfExperts, DeepSeekV3SigmoidBiasedGroups) {
  check_against_plain_loop({.router = {.n_experts = 8,
                                       .top_k = 2,
                                       .score = RouterScore::kSigmoid,
                                       .selection = ExpertSelection::kBiasedGroupTopK,
                                       .n_group = 4,
                                       .topk_group = 2,
                                       .weights = TopKWeights::kRenormalized,
                                       .renorm_epsilon = 1e-20,
                                       .scale = 2.5},
                            .shared = true},
                           4);
}

TEST(MixtureOfExperts, BytesShapesAndErrors) {
  const RouterConfig rc{.n_experts = 4, .top_k = 2};
  MixtureOfExperts<float> moe(6, 5, rc);
  const std::size_t expert = moe.expert(0).weight_bytes();  // 4 (6 x 10 + 5 x 6)
  EXPECT_EQ(expert, 4u * (6 * 10 + 5 * 6));
  EXPECT_EQ(moe.weight_bytes(), 4u * 6 * 4 + 4 * expert);
  EXPECT_EQ(moe.decode_bytes(), 4u * 6 * 4 + 2 * expert);  // router + k experts
  EXPECT_THROW((void)moe.forward(RowMatrix<float>::Zero(3, 7)), ShapeError);
  EXPECT_THROW(moe.set_router(RowMatrix<float>::Zero(6, 3)), ShapeError);
  EXPECT_THROW(moe.set_expert(4, RowMatrix<float>::Zero(6, 5), RowMatrix<float>::Zero(6, 5),
                              RowMatrix<float>::Zero(5, 6)),
               RangeError);
  // Zero weights: zero output, every row (no NaN from a flat router).
  EXPECT_EQ(moe.forward(RowMatrix<float>::Ones(3, 6)).cwiseAbs().maxCoeff(), 0.0f);
  // An empty input is an empty output.
  EXPECT_EQ(moe.forward(RowMatrix<float>(0, 6)).rows(), 0);
  // The biased selection without its bias is a logic error, named.
  MixtureOfExperts<float> v3(6, 5,
                             {.n_experts = 4,
                              .top_k = 1,
                              .score = RouterScore::kSigmoid,
                              .selection = ExpertSelection::kBiasedGroupTopK,
                              .n_group = 2});
  EXPECT_THROW((void)v3.forward(RowMatrix<float>::Ones(1, 6)), std::logic_error);
}

TEST(MixtureOfExperts, RangesOfExpertsSumToTheWholeMixture) {
  // Expert parallelism: mixtures holding disjoint ranges of the experts
  // (the shared expert in one of them) add up to the whole mixture, for a
  // prompt (gathered products) and a single token (the decode path).
  const RouterConfig rc{.n_experts = 8,
                        .top_k = 3,
                        .selection = ExpertSelection::kGroupLimitedTopK,
                        .n_group = 4,
                        .topk_group = 2,
                        .scale = 2.0};
  std::mt19937_64 g(11);
  const Index d = 6, f = 5;
  std::vector<GatedMlp<double, Silu>> experts;
  for (Index e = 0; e < 8; ++e) {
    experts.emplace_back(d, f);
    experts.back().init_random(static_cast<std::uint64_t>(100 + e));
  }
  GatedMlp<double, Silu> shared(d, 2 * f);
  shared.init_random(99);
  const RowMatrix<double> w_r = random_matrix(d, 8, g, 1.0);
  MixtureOfExperts<double> whole(experts, rc, w_r);
  whole.set_shared(shared);
  std::vector<MixtureOfExperts<double>> parts;
  for (const auto& [b0, b1] : std::vector<std::pair<Index, Index>>{{0, 3}, {3, 5}, {5, 8}}) {
    parts.emplace_back(
        std::vector<GatedMlp<double, Silu>>(experts.begin() + b0, experts.begin() + b1), rc, w_r,
        b0);
    EXPECT_EQ(parts.back().first_expert(), b0);
    EXPECT_EQ(parts.back().n_held(), b1 - b0);
    EXPECT_LT(parts.back().weight_bytes(), whole.weight_bytes());
  }
  parts[0].set_shared(shared);
  for (const Index n : {Index{5}, Index{1}}) {
    SCOPED_TRACE(std::to_string(n) + " tokens");
    const RowMatrix<double> x = random_matrix(n, d, g, 1.0);
    RowMatrix<double> sum = RowMatrix<double>::Zero(n, d);
    for (const auto& m : parts) sum += m.forward(x);
    const RowMatrix<double> want = whole.forward(x);
    EXPECT_LE((sum - want).cwiseAbs().maxCoeff(), 1e-13 * (1 + want.cwiseAbs().maxCoeff()));
    EXPECT_GT(want.cwiseAbs().maxCoeff(), 1e-3);  // not a trivially zero case
  }
  // The experts a part does not hold are named; a range outside the router's
  // experts is a shape error.
  EXPECT_EQ(&parts[1].expert(4), &parts[1].expert(4));
  try {
    (void)parts[1].expert(5);
    ADD_FAILURE() << "no exception";
  } catch (const RangeError& e) {
    EXPECT_NE(
        std::string(e.what()).find("expert 5 is not held (this mixture holds experts [3, 5) of 8)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(MixtureOfExperts<double>(std::vector<GatedMlp<double, Silu>>(3, experts[0]), rc, w_r,
                                        Index{6}),
               ShapeError);
  EXPECT_THROW(MixtureOfExperts<double>(std::vector<GatedMlp<double, Silu>>{}, rc, w_r, Index{0}),
               ShapeError);
  EXPECT_THROW(
      MixtureOfExperts<double>(std::vector<GatedMlp<double, Silu>>(3, experts[0]), rc, w_r),
      ShapeError);  // without a first expert: all 8 are expected
}

TEST(MixtureOfExperts, DenseOrSparseForwardsToWhatItHolds) {
  GatedMlp<double, Silu> dense(4, 3);
  dense.init_random(7);
  const DenseOrSparse<GatedMlp<double, Silu>, MixtureOfExperts<double>> a(dense);
  const RowMatrix<double> x = RowMatrix<double>::Ones(2, 4);
  EXPECT_FALSE(a.is_sparse());
  EXPECT_EQ(a.forward(x), dense.forward(x));
  EXPECT_EQ(a.decode_bytes(), dense.weight_bytes());
  const DenseOrSparse<GatedMlp<double, Silu>, MixtureOfExperts<double>> b(
      MixtureOfExperts<double>(4, 3, {.n_experts = 4, .top_k = 1}));
  EXPECT_TRUE(b.is_sparse());
  EXPECT_LT(b.decode_bytes(), b.weight_bytes());
}

}  // namespace
}  // namespace kappa
