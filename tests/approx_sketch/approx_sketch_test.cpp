// Whole-attention approximations (attention/nystrom.hpp, sketch.hpp,
// sampled.hpp): numpy golden data (tests/reference/make_approx_sketch_golden.py),
// exactness where theory gives it, convergence in m, the unbiasedness and
// variance stated for sampled attention, bad parameters, masks, and the
// multi-head layers with an approximation in their Kernel slot. The exact
// reference is the plain-loop attention of tests/support/reference.hpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/attention/kernels.hpp"
#include "kappa/attention/nystrom.hpp"
#include "kappa/attention/sampled.hpp"
#include "kappa/attention/sketch.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::approx::Landmarks;
using kappa::approx::Nystrom;
using kappa::approx::Proposal;
using kappa::approx::PseudoInverse;
using kappa::approx::SampledAttention;
using kappa::approx::SequenceSketch;
using kappa::approx::SketchKind;

static_assert(kappa::AttentionApproximation<Nystrom>);
static_assert(kappa::AttentionApproximation<SequenceSketch>);
static_assert(kappa::AttentionApproximation<SampledAttention>);
static_assert(!kappa::AttentionApproximation<kappa::kernels::Softmax>);
static_assert(kappa::check_heads_kernel<Nystrom>());
static_assert(kappa::check_heads_kernel<kappa::kernels::Softmax>());

/// Exact softmax attention by the plain-loop reference.
template <class T>
RowMatrix<T> exact(
    const RowMatrix<T>& q, const RowMatrix<T>& k, const RowMatrix<T>& v,
    const kappa::testing::Visibility& visible = [](Index, Index) { return true; }) {
  const double s = 1.0 / std::sqrt(static_cast<double>(q.cols()));
  return kappa::testing::reference_attention<T>(
      q, k, v, s, [](long double x) { return std::exp(x); }, true, visible);
}

template <class A, class B>
double rel_error(const A& got, const B& want) {
  return (got.template cast<double>() - want.template cast<double>()).norm() /
         want.template cast<double>().norm();
}

/// Q, K, V of n rows (d = 16, d_V = 8), entries uniform in [-2, 2].
template <class T>
struct Inputs {
  RowMatrix<T> q, k, v;
  explicit Inputs(Index n, unsigned seed = 1, Index d = 16, Index dv = 8)
      : q(kappa::testing::random_matrix<T>(n, d, seed, 2.0)),
        k(kappa::testing::random_matrix<T>(n, d, seed + 100, 2.0)),
        v(kappa::testing::random_matrix<T>(n, dv, seed + 200, 1.0)) {}
};

template <class P, class T>
RowMatrix<T> run(const P& p, const Inputs<T>& in) {
  return kappa::approx::approximate_attention(p, in.q, in.k, in.v);
}

/// Expects `f` to throw E with a message containing `part`.
template <class E, class F>
void expect_throw_with(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << part << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// ---- golden data (numpy, the papers' formulas) ---------------------------------

class ApproxGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    g = kappa::testing::read_golden(std::string(KAPPA_TEST_DATA_DIR) + "/approx_sketch/golden.txt");
  }
  template <class P>
  void expect_case(const P& p, const std::string& name, double tol) {
    const RowMatrix<double> y = kappa::approx::approximate_attention(p, g["q"], g["k"], g["v"]);
    EXPECT_LT(rel_error(y, g[name]), tol) << name << "\n" << y << "\nwant\n" << g[name];
  }
  std::map<std::string, RowMatrix<double>> g;
};

TEST_F(ApproxGolden, NystromSegmentMeansSvd) {
  expect_case(Nystrom(4), "nys_seg_svd", 1e-10);
}

TEST_F(ApproxGolden, NystromSegmentMeansIterative) {
  Nystrom p(4);
  p.pinv = PseudoInverse::kIterative;
  expect_case(p, "nys_seg_iter", 1e-10);
}

TEST_F(ApproxGolden, NystromSampledLandmarks) {
  expect_case(Nystrom(5, 11, Landmarks::kUniform), "nys_uniform", 1e-10);
  expect_case(Nystrom(5, 12, Landmarks::kKeyNorm), "nys_keynorm", 1e-10);
}

TEST_F(ApproxGolden, SequenceSketches) {
  expect_case(SequenceSketch(5, 21, SketchKind::kGaussian), "sk_gauss", 1e-10);
  expect_case(SequenceSketch(5, 22, SketchKind::kSparseSign), "sk_sparse", 1e-10);
  expect_case(SequenceSketch(5, 23, SketchKind::kRandomPartition), "sk_part", 1e-10);
}

TEST_F(ApproxGolden, Sampled) {
  expect_case(SampledAttention(16, 31, Proposal::kNormBound), "samp_bound", 1e-10);
  expect_case(SampledAttention(16, 32, Proposal::kUniform), "samp_uniform", 1e-10);
}

// ---- exactness -----------------------------------------------------------------

template <class T>
class ApproxTyped : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ApproxTyped, Scalars);

// Every key a landmark: F = A~ = B = S and S S^+ S = S. In double only the
// SVD cutoff m eps deviates; in float A~ is rounded before its inverse
// amplifies the rounding of F and B by up to 1 / (m eps) along its small
// singular directions, so the float bound is looser.
TYPED_TEST(ApproxTyped, NystromExactWithEveryKeyALandmark) {
  using T = TypeParam;
  const Index n = 48;
  const Inputs<T> in(n, 3);
  const RowMatrix<T> want = exact(in.q, in.k, in.v);
  const double tol = std::is_same_v<T, double> ? 1e-9 : 2e-3;
  for (Landmarks sel : {Landmarks::kSegmentMeans, Landmarks::kUniform, Landmarks::kKeyNorm}) {
    EXPECT_LT(rel_error(run(Nystrom(n, 5, sel), in), want), tol) << static_cast<int>(sel);
  }
  Nystrom cod(n);
  cod.pinv = PseudoInverse::kCod;
  EXPECT_LT(rel_error(run(cod, in), want), tol);
}

// The partition sketch with m = N groups of one key each is attention itself.
TYPED_TEST(ApproxTyped, PartitionSketchExactAtFullSize) {
  using T = TypeParam;
  const Index n = 40;
  const Inputs<T> in(n, 4);
  const double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  EXPECT_LT(rel_error(run(SequenceSketch(n, 9, SketchKind::kRandomPartition), in),
                      exact(in.q, in.k, in.v)),
            tol);
}

// The paper's iteration converges to the SVD pseudo-inverse given enough
// steps on a well-conditioned A~ (few landmarks: segment means of 8 rows);
// the complete orthogonal decomposition gives the same solution.
TEST(ApproxNystrom, IterativeAndCodPseudoInversesAgreeWithSvd) {
  const Inputs<double> in(64, 5);
  Nystrom svd(8), iter(8);
  iter.pinv = PseudoInverse::kIterative;
  iter.iterations = 40;
  EXPECT_LT(rel_error(run(iter, in), run(svd, in)), 1e-9);
  Nystrom cod(8);
  cod.pinv = PseudoInverse::kCod;
  EXPECT_LT(rel_error(run(cod, in), run(svd, in)), 1e-9);
  iter.iterations = 1;  // one step is far from it
  EXPECT_GT(rel_error(run(iter, in), run(svd, in)), 1e-3);
}

// ---- convergence in m (fixed seeds) --------------------------------------------

double error_at(Index m, const Inputs<double>& in, const RowMatrix<double>& want, int method,
                int kind) {
  switch (method) {
    case 0: {
      Nystrom p(m, 7, static_cast<Landmarks>(kind));
      return rel_error(run(p, in), want);
    }
    case 1:
      return rel_error(run(SequenceSketch(m, 7, static_cast<SketchKind>(kind)), in), want);
    default:
      return rel_error(run(SampledAttention(m, 7, static_cast<Proposal>(kind)), in), want);
  }
}

TEST(ApproxConvergence, ErrorAtFullSizeBelowErrorAtAnEighth) {
  const Index n = 64;
  const Inputs<double> in(n, 6);
  const RowMatrix<double> want = exact(in.q, in.k, in.v);
  for (int method = 0; method < 3; ++method) {
    for (int kind = 0; kind < 3; ++kind) {
      const double e8 = error_at(n / 8, in, want, method, kind);
      const double e1 = error_at(n, in, want, method, kind);
      EXPECT_LT(e1, e8) << "method " << method << " kind " << kind << ": m = N/8 " << e8
                        << ", m = N " << e1;
    }
  }
}

// Nystrom on unstructured inputs: exact at m = N, but for m < N the
// landmark softmaxes F, A~, B disagree and the exact pseudo-inverse amplifies
// that (error above 1, see nystrom.hpp); a larger relative cutoff trades the
// exactness for a smaller error there. The sampled estimator's error falls
// like 1/sqrt(S) (averaged over seeds).
TEST(ApproxConvergence, NystromCutoffAndSampledRate) {
  const Index n = 64;
  const Inputs<double> in(n, 8);
  const RowMatrix<double> want = exact(in.q, in.k, in.v);
  EXPECT_LT(rel_error(run(Nystrom(n), in), want), 1e-9);
  Nystrom cut(n / 4);
  cut.rcond = 1e-2;
  const double e_exact_pinv = rel_error(run(Nystrom(n / 4), in), want);
  const double e_cut = rel_error(run(cut, in), want);
  EXPECT_LT(e_cut, e_exact_pinv);
  EXPECT_LT(e_cut, 1.2);
  cut.landmarks = n;  // the cutoff costs exactness at m = N
  EXPECT_GT(rel_error(run(cut, in), want), 1e-6);
  auto mean_err = [&](Index s) {
    double sum = 0;
    for (std::uint64_t seed = 0; seed < 40; ++seed)
      sum += rel_error(run(SampledAttention(s, seed), in), want);
    return sum / 40;
  };
  const double e16 = mean_err(16), e256 = mean_err(256);
  // 16 times the samples: about 4 times less error (1/sqrt(S)); allow 2.5..6.5.
  EXPECT_GT(e16 / e256, 2.5) << e16 << " " << e256;
  EXPECT_LT(e16 / e256, 6.5) << e16 << " " << e256;
}

// ---- sampled attention: unbiased parts, the stated variance --------------------

TEST(ApproxSampled, NumeratorAndNormalizerAreUnbiasedWithTheStatedVariance) {
  const Index n = 24, samples = 8;
  const int seeds = 600;
  const Inputs<double> in(n, 9, 8, 4);
  const double s = 1.0 / std::sqrt(8.0);
  // Exact a_ij, z_i, n_i and the proposal p_j (kNormBound) in long double.
  const Index row = 3;  // one query row suffices for the statistics
  Eigen::Array<long double, Eigen::Dynamic, 1> a(n), p(n);
  long double z = 0, r_mean = 0, psum = 0;
  for (Index i = 0; i < n; ++i) r_mean += in.q.row(i).norm();
  r_mean /= n;
  for (Index j = 0; j < n; ++j) {
    a(j) = std::exp(static_cast<long double>(s * in.q.row(row).dot(in.k.row(j))));
    z += a(j);
    p(j) = std::exp(static_cast<long double>(s) * r_mean * in.k.row(j).norm());
    psum += p(j);
  }
  long double second = 0;  // sum_j a_j^2 / p_j
  for (Index j = 0; j < n; ++j) {
    p(j) /= psum;
    second += a(j) * a(j) / p(j);
  }
  const double var_z =
      static_cast<double>((second - z * z) / samples);  // the doc comment's formula
  long double n0 = 0;                                   // n_i, first column
  for (Index j = 0; j < n; ++j) n0 += a(j) * in.v(j, 0);

  double mz = 0, mz2 = 0, mn = 0, mn2 = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    const auto parts =
        SampledAttention(samples, static_cast<std::uint64_t>(seed)).parts<double>(in.q, in.k, in.v);
    const double e = std::exp(parts.shift(row));
    const double zh = parts.denominator(row) * e, nh = parts.numerator(row, 0) * e;
    mz += zh;
    mz2 += zh * zh;
    mn += nh;
    mn2 += nh * nh;
  }
  mz /= seeds;
  mn /= seeds;
  const double sd_z = std::sqrt(mz2 / seeds - mz * mz), sd_n = std::sqrt(mn2 / seeds - mn * mn);
  // Means within 4 standard errors of the exact values.
  EXPECT_LT(std::abs(mz - static_cast<double>(z)), 4 * sd_z / std::sqrt(seeds)) << mz << " " << z;
  EXPECT_LT(std::abs(mn - static_cast<double>(n0)), 4 * sd_n / std::sqrt(seeds)) << mn << " " << n0;
  // The empirical variance matches the formula (600 draws: within 25%).
  EXPECT_NEAR(sd_z * sd_z / var_z, 1.0, 0.25) << sd_z * sd_z << " vs " << var_z;
}

// ---- bad parameters --------------------------------------------------------------

TEST(ApproxErrors, BadParametersThrowNamingTheValues) {
  const Inputs<double> in(16, 10);
  using IA = std::invalid_argument;
  expect_throw_with<IA>([&] { run(Nystrom(0), in); }, "m = 0");
  expect_throw_with<IA>([&] { run(Nystrom(17), in); }, "m = 17 landmarks exceed the N_KV = 16");
  expect_throw_with<IA>(
      [&] { kappa::approx::approximate_attention(Nystrom(9), in.q.topRows(8), in.k, in.v); },
      "exceed the N_Q = 8");
  Nystrom it(4);
  it.pinv = PseudoInverse::kIterative;
  it.iterations = 0;
  expect_throw_with<IA>([&] { run(it, in); }, "iterations = 0");
  Nystrom rc(4);
  rc.rcond = -1;
  expect_throw_with<IA>([&] { run(rc, in); }, "rcond");
  expect_throw_with<IA>([&] { run(SequenceSketch(0), in); }, "m = 0");
  expect_throw_with<IA>([&] { run(SequenceSketch(17), in); }, "m = 17 exceeds the N_KV = 16");
  expect_throw_with<IA>([&] { run(SampledAttention(0), in); }, "S = 0");
  SampledAttention sc(4);
  sc.scale = -2;
  expect_throw_with<IA>([&] { run(sc, in); }, "scale");
  // More samples than keys is fine (with replacement).
  EXPECT_NO_THROW(run(SampledAttention(40), in));
  // Shapes.
  EXPECT_THROW(kappa::approx::approximate_attention(Nystrom(4), in.q, in.k.leftCols(8), in.v),
               kappa::ShapeError);
}

// ---- masks -------------------------------------------------------------------------

TEST(ApproxMasks, KeyPaddingIsTheTruncatedSequence) {
  const Inputs<double> in(32, 11);
  const kappa::KeyPaddingMask pad(Index{20});
  const RowMatrix<double> k20 = in.k.topRows(20), v20 = in.v.topRows(20);
  auto padded = [&](const auto& p) {
    return kappa::approx::approximate_attention(p, in.q, in.k, in.v, pad);
  };
  auto truncated = [&](const auto& p) {
    return kappa::approx::approximate_attention(p, in.q, k20, v20);
  };
  for (const Nystrom& p : {Nystrom(6), Nystrom(6, 2, Landmarks::kKeyNorm)})
    EXPECT_EQ(padded(p), truncated(p));
  const SequenceSketch sk(6, 3);
  EXPECT_EQ(padded(sk), truncated(sk));
  expect_throw_with<std::invalid_argument>([&] { padded(Nystrom(21)); }, "N_KV = 20");
  // Per-row lengths that differ cannot share one compression.
  const kappa::KeyPaddingMask rows(std::vector<Index>(32, 20));
  EXPECT_NO_THROW(kappa::approx::approximate_attention(Nystrom(4), in.q, in.k, in.v, rows));
  std::vector<Index> lens(32, 20);
  lens[5] = 19;
  expect_throw_with<std::invalid_argument>(
      [&] {
        kappa::approx::approximate_attention(Nystrom(4), in.q, in.k, in.v,
                                             kappa::KeyPaddingMask(lens));
      },
      "different valid lengths");
}

// Sampled attention honours any mask: with many samples it approaches the
// masked exact attention; a row that sees no sampled key is zero.
TEST(ApproxMasks, SampledWithCausalAndPaddingMasks) {
  const Inputs<double> in(24, 12);
  const RowMatrix<double> want = exact(in.q, in.k, in.v, [](Index i, Index j) { return j <= i; });
  const RowMatrix<double> got = kappa::approx::approximate_attention(
      SampledAttention(20000, 1, Proposal::kUniform), in.q, in.k, in.v, kappa::CausalMask{});
  EXPECT_LT(rel_error(got, want), 0.03);
  // Padding to 0 keys for every row: zero output.
  const RowMatrix<double> none = kappa::approx::approximate_attention(
      SampledAttention(8), in.q, in.k, in.v, kappa::KeyPaddingMask(Index{0}));
  EXPECT_EQ(none.norm(), 0.0);
}

// ---- in the multi-head layers ------------------------------------------------------

template <class Attn>
Attn make_layer(kappa::HeadsConfig c, typename Attn::KernelType p) {
  Attn attn(c, std::move(p));
  attn.init_random(42);
  return attn;
}

TYPED_TEST(ApproxTyped, DropsIntoMultiHeadAttention) {
  using T = TypeParam;
  const Index n = 32;
  const kappa::HeadsConfig c{.d_in = 32, .n_heads = 4};
  const RowMatrix<T> x = kappa::testing::random_matrix<T>(n, 32, 13, 2.0);
  kappa::MultiHeadAttention<T> exact_layer(c);
  exact_layer.init_random(42);
  const RowMatrix<T> want = exact_layer.forward(x);
  const double tol = std::is_same_v<T, double> ? 1e-9 : 2e-3;
  // Exact cases: every key a landmark, a partition into single keys.
  const auto nys = make_layer<kappa::MultiHeadAttention<T, Nystrom>>(c, Nystrom(n));
  EXPECT_LT(rel_error(nys.forward(x), want), tol);
  const auto part = make_layer<kappa::MultiHeadAttention<T, SequenceSketch>>(
      c, SequenceSketch(n, 1, SketchKind::kRandomPartition));
  EXPECT_LT(rel_error(part.forward(x), want), tol);
  // Approximate ones run and approximate.
  const auto samp =
      make_layer<kappa::MultiHeadAttention<T, SampledAttention>>(c, SampledAttention(4096, 2));
  EXPECT_LT(rel_error(samp.forward(x), want), 0.1);
  const auto gauss = make_layer<kappa::MultiHeadAttention<T, SequenceSketch>>(c, SequenceSketch(8));
  EXPECT_TRUE(gauss.forward(x).allFinite());
  // A bad m surfaces as the method's exception, before any thread starts.
  const auto bad = make_layer<kappa::MultiHeadAttention<T, Nystrom>>(c, Nystrom(n + 1));
  expect_throw_with<std::invalid_argument>([&] { (void)bad.forward(x); }, "exceed");
}

// GQA and MQA: each query head attends through its kv head; with an exact
// configuration the layer equals the exact layer, and with a key padding mask
// the padded keys are ignored.
TEST(ApproxHeads, GroupedAndMultiQuery) {
  const Index n = 24;
  const kappa::HeadsConfig c{.d_in = 32, .n_heads = 4, .n_kv_heads = 2};
  const RowMatrix<double> x = kappa::testing::random_matrix<double>(n, 32, 14, 2.0);
  const auto gqa_nys = make_layer<kappa::GroupedQueryAttention<double, Nystrom>>(c, Nystrom(n));
  EXPECT_LT(rel_error(gqa_nys.forward(x),
                      [&] {
                        kappa::GroupedQueryAttention<double> e(c);
                        e.init_random(42);
                        return e.forward(x);
                      }()),
            1e-9);
  const kappa::KeyPaddingMask pad(Index{16});
  kappa::GroupedQueryAttention<double> exact_gqa(c);
  exact_gqa.init_random(42);
  const auto gqa_part = make_layer<kappa::GroupedQueryAttention<double, SequenceSketch>>(
      c, SequenceSketch(16, 3, SketchKind::kRandomPartition));
  EXPECT_LT(rel_error(gqa_part.forward(x, pad), exact_gqa.forward(x, pad)), 1e-9);

  const kappa::HeadsConfig cm{.d_in = 32, .n_heads = 4};
  kappa::MultiQueryAttention<double> mqa(cm);
  mqa.init_random(42);
  const auto mqa_samp =
      make_layer<kappa::MultiQueryAttention<double, SampledAttention>>(cm, SampledAttention(4096));
  EXPECT_LT(
      rel_error(mqa_samp.forward(x, kappa::CausalMask{}), mqa.forward(x, kappa::CausalMask{})),
      0.1);
}

}  // namespace
