// Tests for kappa/nn (LayerNorm, activations, feed-forward) and
// kappa/transformer/layers.hpp against their definitions, computed by plain
// loops in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/nn/activations.hpp"
#include "kappa/nn/feed_forward.hpp"
#include "kappa/nn/layer_norm.hpp"
#include "kappa/transformer/layers.hpp"

namespace kappa {
namespace {

RowMatrix<double> random_matrix(Index r, Index c, unsigned seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> n(0.0, scale);
  RowMatrix<double> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

TEST(LayerNorm, MatchesTheDefinition) {
  const RowMatrix<double> x = random_matrix(5, 7, 1, 3.0);
  const RowVector<double> g = random_matrix(1, 7, 2), b = random_matrix(1, 7, 3);
  const LayerNorm<double> ln(g, b, 1e-5);
  const RowMatrix<double> y = ln(x);
  for (Index i = 0; i < 5; ++i) {
    long double mean = 0, var = 0;
    for (Index j = 0; j < 7; ++j) mean += x(i, j);
    mean /= 7;
    for (Index j = 0; j < 7; ++j) var += (x(i, j) - mean) * (x(i, j) - mean);
    var /= 7;
    for (Index j = 0; j < 7; ++j)
      EXPECT_NEAR(y(i, j),
                  static_cast<double>((x(i, j) - mean) / std::sqrt(var + 1e-5L) * g(j) + b(j)),
                  1e-13);
  }
  // Without a bias: b = 0.
  const RowMatrix<double> y0 = LayerNorm<double>(g, RowVector<double>(), 1e-5)(x);
  EXPECT_LT((y0 - LayerNorm<double>(g, RowVector<double>::Zero(7), 1e-5)(x)).norm(), 1e-15);
  // A large common offset does not cancel the variance.
  RowMatrix<float> big(1, 4);
  big << 1e4f + 1, 1e4f - 1, 1e4f + 1, 1e4f - 1;
  const RowMatrix<float> yb = LayerNorm<float>(4, 0.0)(big);
  EXPECT_NEAR(yb(0, 0), 1.0f, 1e-5f);
  EXPECT_NEAR(yb(0, 1), -1.0f, 1e-5f);
  // NaN stays NaN.
  RowMatrix<float> nan = RowMatrix<float>::Ones(1, 4);
  nan(0, 2) = NAN;
  EXPECT_TRUE(LayerNorm<float>(4)(nan).array().isNaN().all());
  EXPECT_THROW(LayerNorm<float>(RowVector<float>::Ones(4), RowVector<float>::Ones(3)), ShapeError);
  EXPECT_THROW(LayerNorm<float>(4, -1.0), std::invalid_argument);
}

TEST(Activations, MatchTheirDefinitions) {
  RowMatrix<double> x(1, 7);
  x << -20, -3, -0.5, 0, 0.5, 3, 20;
  RowMatrix<double> r = x, g = x, t = x, s = x;
  Relu::apply<double>(r);
  Gelu::apply<double>(g);
  GeluTanh::apply<double>(t);
  Silu::apply<double>(s);
  for (Index j = 0; j < 7; ++j) {
    const long double v = x(0, j);
    EXPECT_EQ(r(0, j), v > 0 ? v : 0.0);
    EXPECT_NEAR(g(0, j), static_cast<double>(0.5L * v * (1 + std::erf(v / std::sqrt(2.0L)))),
                1e-15);
    const long double c = std::sqrt(2.0L / 3.14159265358979323846L);
    EXPECT_NEAR(t(0, j),
                static_cast<double>(0.5L * v * (1 + std::tanh(c * (v + 0.044715L * v * v * v)))),
                1e-14);
    EXPECT_NEAR(s(0, j), static_cast<double>(v / (1 + std::exp(-v))), 1e-14);
  }
  // The two GELUs differ (by up to about 1e-3), so the choice matters.
  EXPECT_GT((g - t).cwiseAbs().maxCoeff(), 1e-5);
}

TEST(FeedForward, MlpAndSwiGluMatchPlainLoops) {
  const Index d = 6, f = 10, n = 4;
  const RowMatrix<double> x = random_matrix(n, d, 4);
  const RowMatrix<double> w1 = random_matrix(d, f, 5), w2 = random_matrix(f, d, 6),
                          w3 = random_matrix(d, f, 7);
  const RowVector<double> b1 = random_matrix(1, f, 8), b2 = random_matrix(1, d, 9);
  Mlp<double, Relu> mlp(d, f);
  mlp.set_weights(w1, b1, w2, b2);
  SwiGlu<double> glu(d, f);
  glu.set_weights(w1, w3, w2);
  const RowMatrix<double> y = mlp.forward(x), z = glu.forward(x);
  for (Index i = 0; i < n; ++i)
    for (Index o = 0; o < d; ++o) {
      long double acc = b2(o), acc2 = 0;
      for (Index k = 0; k < f; ++k) {
        long double h = b1(k), gate = 0, up = 0;
        for (Index j = 0; j < d; ++j) {
          h += x(i, j) * w1(j, k);
          gate += x(i, j) * w1(j, k);
          up += x(i, j) * w3(j, k);
        }
        acc += (h > 0 ? h : 0) * w2(k, o);
        acc2 += gate / (1 + std::exp(-gate)) * up * w2(k, o);
      }
      EXPECT_NEAR(y(i, o), static_cast<double>(acc), 1e-12);
      EXPECT_NEAR(z(i, o), static_cast<double>(acc2), 1e-12);
    }
  EXPECT_THROW(mlp.set_weights(w2, b1, w2, b2), ShapeError);
  EXPECT_THROW((void)mlp.forward(RowMatrix<double>::Zero(2, d + 1)), ShapeError);
}

// Pre-norm and post-norm residual placements, against their equations with
// the sub-layers evaluated separately.
TEST(DecoderOnlyLayer, PlacementsFollowTheirEquations) {
  const Index d = 8, n = 5;
  const RowMatrix<double> x = random_matrix(n, d, 10);
  MultiHeadAttention<double> attn({.d_in = d, .n_heads = 2});
  attn.set_weights(random_matrix(d, d, 11, 0.3), random_matrix(d, d, 12, 0.3),
                   random_matrix(d, d, 13, 0.3), random_matrix(d, d, 14, 0.3));
  Mlp<double, Gelu> ffn(d, 16);
  ffn.set_weights(random_matrix(d, 16, 15, 0.3), random_matrix(1, 16, 16),
                  random_matrix(16, d, 17, 0.3), random_matrix(1, d, 18));
  const LayerNorm<double> n1(random_matrix(1, d, 19), random_matrix(1, d, 20)),
      n2(random_matrix(1, d, 21), random_matrix(1, d, 22));
  const DecoderOnlyLayer<double, MultiHeadAttention<double>, LayerNorm<double>, Mlp<double, Gelu>,
                         PreNorm>
      pre(attn, n1, n2, ffn);
  const DecoderOnlyLayer<double, MultiHeadAttention<double>, LayerNorm<double>, Mlp<double, Gelu>,
                         PostNorm>
      post(attn, n1, n2, ffn);
  const RowMatrix<double> h_pre = x + attn.forward(n1(x), CausalMask{});
  const RowMatrix<double> y_pre = h_pre + ffn.forward(n2(h_pre));
  EXPECT_LT((pre.forward(x) - y_pre).cwiseAbs().maxCoeff(), 1e-13);
  const RowMatrix<double> h_post = n1(x + attn.forward(x, CausalMask{}));
  const RowMatrix<double> y_post = n2(h_post + ffn.forward(h_post));
  EXPECT_LT((post.forward(x) - y_post).cwiseAbs().maxCoeff(), 1e-13);
  // Cached decoding equals the full pass for both placements.
  auto c1 = pre.make_cache();
  auto c2 = post.make_cache();
  RowMatrix<double> a(n, d), b(n, d);
  a.topRows(2) = pre.forward_cached(x.topRows(2), c1);
  b.topRows(2) = post.forward_cached(x.topRows(2), c2);
  a.bottomRows(3) = pre.forward_cached(x.bottomRows(3), c1);
  b.bottomRows(3) = post.forward_cached(x.bottomRows(3), c2);
  EXPECT_LT((a - pre.forward(x)).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_LT((b - post.forward(x)).cwiseAbs().maxCoeff(), 1e-13);
  // A width the layer does not have is a ShapeError naming both shapes.
  EXPECT_THROW((void)pre.forward(RowMatrix<double>::Zero(2, d + 1)), ShapeError);
}

// The encoder-decoder's decoder layer on a packed batch of (target, memory)
// pairs equals each pair alone, and cached decoding equals the full pass.
TEST(DecoderLayer, BatchesAndCachedDecodingEqualTheFullPass) {
  const Index d = 8;
  const auto mha = [&](unsigned seed) {
    MultiHeadAttention<double> a({.d_in = d, .n_heads = 2});
    a.set_weights(random_matrix(d, d, seed, 0.3), random_matrix(d, d, seed + 1, 0.3),
                  random_matrix(d, d, seed + 2, 0.3), random_matrix(d, d, seed + 3, 0.3));
    return a;
  };
  Mlp<double, Relu> ffn(d, 16);
  ffn.set_weights(random_matrix(d, 16, 40, 0.3), random_matrix(1, 16, 41),
                  random_matrix(16, d, 42, 0.3), random_matrix(1, d, 43));
  const LayerNorm<double> n1(d), n2(random_matrix(1, d, 44), random_matrix(1, d, 45)), n3(d);
  const DecoderLayer<double, MultiHeadAttention<double>, MultiHeadAttention<double>,
                     LayerNorm<double>, Mlp<double, Relu>, PostNorm>
      layer(mha(50), mha(60), n1, n2, n3, ffn);
  const RowMatrix<double> x = random_matrix(7, d, 70), m = random_matrix(9, d, 71);
  // Target 0: rows 0..3 over memory rows 0..4; target 1: rows 4..6 over 5..8.
  const RowMatrix<double> packed =
      layer.forward(SequenceBatch<double>{x, {4, 3}}, SequenceBatch<double>{m, {5, 4}});
  EXPECT_LT((packed.topRows(4) - layer.forward(x.topRows(4), m.topRows(5))).cwiseAbs().maxCoeff(),
            1e-13);
  EXPECT_LT((packed.bottomRows(3) - layer.forward(x.bottomRows(3), m.bottomRows(4)))
                .cwiseAbs()
                .maxCoeff(),
            1e-13);
  auto cache = layer.make_cache();
  RowMatrix<double> rows(7, d);
  rows.topRows(2) = layer.forward_cached(x.topRows(2), m, cache);
  for (Index i = 2; i < 7; ++i) rows.row(i) = layer.forward_cached(x.row(i), m, cache);
  EXPECT_LT((rows - layer.forward(x, m)).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_THROW((void)layer.forward(SequenceBatch<double>{x, {4, 3}}, SequenceBatch<double>{m, {9}}),
               ShapeError);
}

// bfloat16 storage: the products equal the dense products with the rounded
// weights, on the decode (few rows) and prefill (many rows) paths, and the
// rounding is to nearest even.
TEST(WeightStorage, Bf16ProductsEqualDenseProductsOfTheRoundedWeights) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float_exact(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_float_exact(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_float_exact(float_to_bf16(NAN))));
  const RowMatrix<float> w = random_matrix(300, 200, 30).cast<float>();
  const WeightMatrix<float, Bf16Weights> wb(w);
  EXPECT_EQ(wb.bytes(), 2u * 300 * 200);
  const RowMatrix<float> rounded = wb.dense();
  EXPECT_LE((rounded - w).cwiseAbs().maxCoeff(), w.cwiseAbs().maxCoeff() / 256);
  for (Index n : {1, 3, 40}) {
    const RowMatrix<float> x = random_matrix(n, 300, 31).cast<float>();
    RowMatrix<float> y(n, 200), ref = x * rounded;
    wb.multiply(x, y);
    EXPECT_LE((y - ref).cwiseAbs().maxCoeff(), 1e-4f * ref.cwiseAbs().maxCoeff()) << n;
    const RowMatrix<float> xt = random_matrix(n, 200, 32).cast<float>();
    RowMatrix<float> z(n, 300), zref = xt * rounded.transpose();
    wb.multiply_transposed(xt, z);
    EXPECT_LE((z - zref).cwiseAbs().maxCoeff(), 1e-4f * zref.cwiseAbs().maxCoeff()) << n;
  }
  RowMatrix<float> bad(2, 5);
  EXPECT_THROW(wb.multiply(RowMatrix<float>::Zero(2, 7), bad), ShapeError);
}

// The decode loops take rows of W four at a time (the head) and eight at a
// time (X W), with tails, and prefill splits W's columns over the threads:
// odd shapes agree with the dense products on every thread count, and a
// decoded head output has the same bits whichever thread computes it (in
// builds with OpenMP; without it every count runs on one thread).
TEST(WeightStorage, Bf16DecodeTailsAndThreadCounts) {
  const RowMatrix<float> w = random_matrix(301, 403, 33).cast<float>();
  const WeightMatrix<float, Bf16Weights> wb(w);
  const RowMatrix<float> rounded = wb.dense();
  const int saved = num_threads();
  for (Index n : {2, 40}) {
    const RowMatrix<float> x = random_matrix(n, 301, 34).cast<float>();
    const RowMatrix<float> xt = random_matrix(n, 403, 35).cast<float>();
    const RowMatrix<float> ref = x * rounded, reft = xt * rounded.transpose();
    RowMatrix<float> first;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      RowMatrix<float> y(n, 403), z(n, 301);
      wb.multiply(x, y);
      wb.multiply_transposed(xt, z);
      EXPECT_LE((y - ref).cwiseAbs().maxCoeff(), 1e-5f * ref.cwiseAbs().maxCoeff())
          << n << " " << threads;
      EXPECT_LE((z - reft).cwiseAbs().maxCoeff(), 1e-5f * reft.cwiseAbs().maxCoeff())
          << n << " " << threads;
      if (n > 8) continue;
      if (threads == 1)
        first = z;
      else
        EXPECT_EQ(z, first) << threads;
    }
  }
  set_num_threads(saved);
}

// W viewed in bfloat16 values held elsewhere, as W^T (a GGUF projection) or
// as W (a GGUF head): the same values as the rounded copy, and both products
// against plain loops in double over the bf16 values (widened by definition:
// the 16 bits on top of a float's 32), decode (n = 1, 3) and prefill (n = 20)
// shapes, on 1 to 3 threads; decode is the same bits on every thread count.
TEST(WeightStorage, Bf16ViewsInBothOrientations) {
  const Index k = 301, m = 203;
  const RowMatrix<float> w = random_matrix(k, m, 36).cast<float>();
  auto wt_bits = std::make_shared<std::vector<std::uint16_t>>();  // W^T row-major
  auto w_bits = std::make_shared<std::vector<std::uint16_t>>();   // W row-major
  RowMatrix<double> wv(k, m);                                     // the bf16 values
  for (Index i = 0; i < k; ++i)
    for (Index j = 0; j < m; ++j) w_bits->push_back(float_to_bf16(w(i, j)));
  for (Index j = 0; j < m; ++j)
    for (Index i = 0; i < k; ++i) wt_bits->push_back(float_to_bf16(w(i, j)));
  for (Index i = 0; i < k; ++i)
    for (Index j = 0; j < m; ++j) {
      const std::uint32_t u =
          static_cast<std::uint32_t>((*w_bits)[static_cast<std::size_t>(i * m + j)]) << 16;
      float f;
      std::memcpy(&f, &u, sizeof f);
      wv(i, j) = f;
    }
  const WeightMatrix<float, Bf16Weights> owned(w);
  const WeightMatrix<float, Bf16Weights> as_wt(k, m, true, wt_bits->data(), wt_bits);
  const WeightMatrix<float, Bf16Weights> as_w(k, m, false, w_bits->data(), w_bits);
  EXPECT_TRUE(as_wt.stored_transposed());
  EXPECT_FALSE(as_w.stored_transposed());
  EXPECT_EQ(as_wt.rows(), k);
  EXPECT_EQ(as_wt.cols(), m);
  EXPECT_EQ(as_wt.bytes(), owned.bytes());
  EXPECT_EQ(as_wt.dense(), owned.dense());
  EXPECT_EQ(as_w.dense(), owned.dense());
  std::vector<float> row(static_cast<std::size_t>(m));
  as_w.row_into(7, row.data());
  for (Index j = 0; j < m; ++j) EXPECT_EQ(row[static_cast<std::size_t>(j)], wv(7, j));
  const int saved = num_threads();
  for (Index n : {1, 3, 20}) {
    const RowMatrix<float> x = random_matrix(n, k, 37).cast<float>();
    const RowMatrix<float> xt = random_matrix(n, m, 38).cast<float>();
    RowMatrix<double> ref = RowMatrix<double>::Zero(n, m), reft = RowMatrix<double>::Zero(n, k);
    for (Index r = 0; r < n; ++r)
      for (Index i = 0; i < k; ++i)
        for (Index j = 0; j < m; ++j) {
          ref(r, j) += static_cast<double>(x(r, i)) * wv(i, j);
          reft(r, i) += static_cast<double>(xt(r, j)) * wv(i, j);
        }
    const double tol = 1e-5 * std::max(ref.cwiseAbs().maxCoeff(), reft.cwiseAbs().maxCoeff());
    RowMatrix<float> first_y, first_z;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (const auto* wm : {&as_wt, &as_w}) {
        RowMatrix<float> y(n, m), z(n, k);
        wm->multiply(x, y);
        wm->multiply_transposed(xt, z);
        EXPECT_LE((y.cast<double>() - ref).cwiseAbs().maxCoeff(), tol)
            << n << " " << threads << " " << wm->stored_transposed();
        EXPECT_LE((z.cast<double>() - reft).cwiseAbs().maxCoeff(), tol)
            << n << " " << threads << " " << wm->stored_transposed();
        if (n > 8 || wm != &as_wt) continue;
        if (threads == 1) {
          first_y = y;
          first_z = z;
        } else {
          EXPECT_EQ(y, first_y) << threads;
          EXPECT_EQ(z, first_z) << threads;
        }
      }
    }
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace kappa
