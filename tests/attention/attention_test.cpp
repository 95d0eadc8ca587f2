// Tests for kappa/attention/attention.hpp: Y = Z^-1 A V against hand-computed
// cases, a plain-loop long-double reference, and its properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kappa/attention/attention.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;
using testing::random_matrix;
using testing::reference_attention;
using testing::Tolerance;

template <class T>
class AttentionTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AttentionTest, Scalars);

template <class T>
void expect_close(const RowMatrix<T>& got, const RowMatrix<T>& want, double rel_scale = 1.0) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  EXPECT_LE(
      max_scaled_error(got, want, rel_scale * Tolerance<T>::kRel, rel_scale * Tolerance<T>::kAbs),
      1.0)
      << "got\n"
      << got << "\nwant\n"
      << want;
}

// The paper's Figure 3 setting, by hand: three tokens, d = 2, linear kernel.
//   Q = K = V = [[1,0],[0,1],[1,1]]
//   A = Q K^T = [[1,0,1],[0,1,1],[1,1,2]],  Z = diag(2, 2, 4)
//   Y = Z^-1 A V = [[1, 1/2], [1/2, 1], [3/4, 3/4]]
TYPED_TEST(AttentionTest, Figure3LinearKernelByHand) {
  using T = TypeParam;
  RowMatrix<T> x(3, 2);
  x << 1, 0, 0, 1, 1, 1;
  const auto d = attention_details(x, x, x, kernels::Linear{});
  RowMatrix<T> a(3, 3), w(3, 3), y(3, 2);
  a << 1, 0, 1, 0, 1, 1, 1, 1, 2;
  w << 0.5, 0, 0.5, 0, 0.5, 0.5, 0.25, 0.25, 0.5;
  y << 1, 0.5, 0.5, 1, 0.75, 0.75;
  EXPECT_EQ(d.scores, a);
  EXPECT_EQ(d.normalizer, (Vector<T>(3) << 2, 2, 4).finished());
  EXPECT_EQ(d.weights, w);
  EXPECT_EQ(d.output, y);
  EXPECT_EQ(attention(x, x, x, kernels::Linear{}), y);
}

// Softmax by hand: scale 1, Q = [[1, 0]], K = [[1, 0], [0, 0]], V = [[1], [3]]:
// weights (e, 1) / (e + 1), Y = (e + 3) / (e + 1).
TYPED_TEST(AttentionTest, SoftmaxByHand) {
  using T = TypeParam;
  RowMatrix<T> q(1, 2), k(2, 2), v(2, 1);
  q << 1, 0;
  k << 1, 0, 0, 0;
  v << 1, 3;
  const double e = std::exp(1.0);
  const auto d = attention_details(q, k, v, kernels::Softmax{.scale = 1.0});
  EXPECT_NEAR(static_cast<double>(d.weights(0, 0)), e / (e + 1), 1e-7);
  EXPECT_NEAR(static_cast<double>(d.weights(0, 1)), 1 / (e + 1), 1e-7);
  EXPECT_NEAR(static_cast<double>(d.output(0, 0)), (e + 3) / (e + 1), 1e-6);
  // The reported A is shifted by the row max (1): A = (1, e^-1), Z = 1 + e^-1.
  EXPECT_EQ(d.row_shift(0), T(1));
  EXPECT_NEAR(static_cast<double>(d.scores(0, 1)), 1 / e, 1e-7);
  EXPECT_NEAR(static_cast<double>(d.normalizer(0)), 1 + 1 / e, 1e-6);
}

struct Shape {
  Index n_q, n_kv, d_qk, d_v;
};
const Shape kShapes[] = {{1, 1, 1, 1},    {4, 4, 8, 8},     {5, 7, 4, 3},      {7, 5, 6, 2},
                         {1, 33, 16, 16}, {130, 130, 8, 5}, {300, 257, 16, 12}};

template <class T, class K, class M>
void check_against_reference(const K& kernel, const M& mask, double scale,
                             const std::function<long double(long double)>& f, bool exponential,
                             const std::function<bool(Index, Index, Index, Index)>& visible,
                             double tol_scale = 1.0) {
  unsigned seed = 100;
  for (const Shape s : kShapes) {
    const RowMatrix<T> q = random_matrix<T>(s.n_q, s.d_qk, ++seed);
    const RowMatrix<T> k = random_matrix<T>(s.n_kv, s.d_qk, ++seed);
    const RowMatrix<T> v = random_matrix<T>(s.n_kv, s.d_v, ++seed);
    const double sc = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(s.d_qk));
    const RowMatrix<T> want =
        reference_attention<T>(q, k, v, sc, f, exponential,
                               [&](Index i, Index j) { return visible(i, j, s.n_q, s.n_kv); });
    SCOPED_TRACE(::testing::Message() << "N_Q=" << s.n_q << " N_KV=" << s.n_kv << " d_QK=" << s.d_qk
                                      << " d_V=" << s.d_v);
    expect_close<T>(attention(q, k, v, kernel, mask), want, tol_scale);
    expect_close<T>(attention_details(q, k, v, kernel, mask).output, want, tol_scale);
  }
}

const auto kAll = [](Index, Index, Index, Index) { return true; };
const auto kCausal = [](Index i, Index j, Index n_q, Index n_kv) { return j <= n_kv - n_q + i; };
const auto kExp = [](long double x) { return std::exp(x); };

TYPED_TEST(AttentionTest, SoftmaxMatchesReference) {
  check_against_reference<TypeParam>(kernels::Softmax{}, NoMask{}, -1, kExp, true, kAll);
  check_against_reference<TypeParam>(kernels::Softmax{}, CausalMask{}, -1, kExp, true, kCausal);
  check_against_reference<TypeParam>(kernels::Softmax{.scale = 0.3}, NoMask{}, 0.3, kExp, true,
                                     kAll);
}

TYPED_TEST(AttentionTest, SlidingWindowAndPaddingMatchReference) {
  check_against_reference<TypeParam>(kernels::Softmax{}, SlidingWindowMask{.window = 17}, -1, kExp,
                                     true, [](Index i, Index j, Index n_q, Index n_kv) {
                                       const Index p = n_kv - n_q + i;
                                       return j <= p && j > p - 17;
                                     });
  check_against_reference<TypeParam>(kernels::Softmax{}, KeyPaddingMask{Index{1}}, -1, kExp, true,
                                     [](Index, Index j, Index, Index) { return j < 1; });
}

TYPED_TEST(AttentionTest, LinearKernelMatchesReference) {
  // Positive inputs keep Z away from zero, so the comparison is well posed.
  using T = TypeParam;
  const auto id = [](long double x) { return x; };
  for (const Shape s : kShapes) {
    const RowMatrix<T> q = (random_matrix<T>(s.n_q, s.d_qk, 1).array() + T(1.5)).matrix();
    const RowMatrix<T> k = (random_matrix<T>(s.n_kv, s.d_qk, 2).array() + T(1.5)).matrix();
    const RowMatrix<T> v = random_matrix<T>(s.n_kv, s.d_v, 3);
    expect_close<T>(
        attention(q, k, v, kernels::Linear{}),
        reference_attention<T>(q, k, v, 1.0, id, false, [](Index, Index) { return true; }));
    expect_close<T>(attention(q, k, v, kernels::Linear{}, CausalMask{}),
                    reference_attention<T>(q, k, v, 1.0, id, false, [&](Index i, Index j) {
                      return kCausal(i, j, s.n_q, s.n_kv);
                    }));
  }
}

TYPED_TEST(AttentionTest, ReluAndPolynomialMatchReference) {
  const auto relu = [](long double x) { return x > 0 ? x : 0.0L; };
  // ReLU rows can have Z = 0 when every score is negative; the reference
  // gives a zero row then, like kappa.
  check_against_reference<TypeParam>(kernels::ReLU{}, NoMask{}, -1, relu, false, kAll, 4.0);
  const auto square1 = [](long double x) { return (x + 1) * (x + 1); };
  check_against_reference<TypeParam>(kernels::Polynomial(2, 1.0), CausalMask{}, -1, square1, false,
                                     kCausal);
}

TYPED_TEST(AttentionTest, EluFeatureMapMatchesReference) {
  using T = TypeParam;
  for (const Shape s : kShapes) {
    const RowMatrix<T> q = random_matrix<T>(s.n_q, s.d_qk, 7);
    const RowMatrix<T> k = random_matrix<T>(s.n_kv, s.d_qk, 8);
    const RowMatrix<T> v = random_matrix<T>(s.n_kv, s.d_v, 9);
    // phi by its definition, elementwise, then the linear kernel on phi.
    const auto phi = [](const RowMatrix<T>& x) {
      RowMatrix<T> p(x.rows(), x.cols());
      for (Index i = 0; i < x.rows(); ++i)
        for (Index j = 0; j < x.cols(); ++j)
          p(i, j) =
              x(i, j) > 0 ? x(i, j) + 1 : static_cast<T>(std::exp(static_cast<double>(x(i, j))));
      return p;
    };
    const auto want = reference_attention<T>(
        phi(q), phi(k), v, 1.0, [](long double x) { return x; }, false,
        [&](Index i, Index j) { return kCausal(i, j, s.n_q, s.n_kv); });
    expect_close<T>(attention(q, k, v, kernels::EluPlusOne{}, CausalMask{}), want);
  }
}

TYPED_TEST(AttentionTest, WeightsRowsSumToOne) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(9, 5, 1, 3.0);
  const RowMatrix<T> k = random_matrix<T>(11, 5, 2, 3.0);
  const RowMatrix<T> v = random_matrix<T>(11, 2, 3);
  const auto check = [&](const auto& kernel, const auto& mask) {
    const auto d = attention_details(q, k, v, kernel, mask);
    for (Index i = 0; i < q.rows(); ++i)
      EXPECT_NEAR(static_cast<double>(d.weights.row(i).sum()), 1.0, 10 * Tolerance<T>::kRel);
    // Y = (Z^-1 A) V, from the reported pieces.
    expect_close<T>(d.output, RowMatrix<T>(d.weights * v));
  };
  check(kernels::Softmax{}, NoMask{});
  check(kernels::Softmax{}, CausalMask{});
  check(kernels::EluPlusOne{}, SlidingWindowMask{.window = 4});
  check(kernels::Polynomial(2, 0.0), NoMask{});
}

TYPED_TEST(AttentionTest, PermutingKeysAndValuesTogetherChangesNothing) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(6, 8, 11);
  const RowMatrix<T> k = random_matrix<T>(10, 8, 12);
  const RowMatrix<T> v = random_matrix<T>(10, 4, 13);
  std::vector<int> perm(10);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  const RowMatrix<T> kp = k(perm, Eigen::all), vp = v(perm, Eigen::all);  // row j: row perm[j]
  expect_close<T>(attention(q, kp, vp), attention(q, k, v));
  expect_close<T>(attention(q, kp, vp, kernels::Linear{}), attention(q, k, v, kernels::Linear{}),
                  100.0);
}

// Logits around 1e4: exp would overflow without the row-max shift.
TYPED_TEST(AttentionTest, HugeLogitsStayFiniteAndCorrect) {
  using T = TypeParam;
  RowMatrix<T> q = random_matrix<T>(4, 16, 21, 1.0) * T(100);
  RowMatrix<T> k = random_matrix<T>(9, 16, 22, 1.0) * T(100);
  const RowMatrix<T> v = random_matrix<T>(9, 3, 23);
  const double max_logit =
      (0.25 * (q.template cast<double>() * k.template cast<double>().transpose()))
          .cwiseAbs()
          .maxCoeff();
  ASSERT_GT(max_logit, 3000.0);
  const RowMatrix<T> y = attention(q, k, v);
  ASSERT_TRUE(y.allFinite());
  // Against the long-double reference; float's relative error in the logits
  // (~1e-7 of 1e4 ~ 1e-3) moves the weights, hence the looser float bound.
  const auto want =
      reference_attention<T>(q, k, v, 0.25, kExp, true, [](Index, Index) { return true; });
  expect_close<T>(y, want, std::is_same_v<T, float> ? 2000.0 : 1e4);
}

TYPED_TEST(AttentionTest, FullyMaskedRowsAreZeroNotNaN) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(4, 3, 31);
  const RowMatrix<T> k = random_matrix<T>(5, 3, 32);
  const RowMatrix<T> v = random_matrix<T>(5, 2, 33);
  const KeyPaddingMask pad(std::vector<Index>{0, 2, 0, 5});
  for (const RowMatrix<T>& y :
       {attention(q, k, v, kernels::Softmax{}, pad), attention(q, k, v, kernels::Linear{}, pad),
        attention(q, k, v, kernels::EluPlusOne{}, pad)}) {
    ASSERT_TRUE(y.allFinite());
    EXPECT_TRUE(y.row(0).isZero(0));
    EXPECT_TRUE(y.row(2).isZero(0));
    EXPECT_FALSE(y.row(1).isZero(0));
  }
  const auto d = attention_details(q, k, v, kernels::Softmax{}, pad);
  EXPECT_TRUE(d.weights.row(0).isZero(0));
  EXPECT_EQ(d.normalizer(0), T(0));
  ASSERT_TRUE(d.weights.allFinite() && d.scores.allFinite());
}

// The linear kernel's normalizer can be exactly zero: the row is zero, not NaN.
TYPED_TEST(AttentionTest, ZeroNormalizerGivesZeroRow) {
  using T = TypeParam;
  RowMatrix<T> q(2, 2), k(2, 2), v(2, 2);
  q << 1, 0, 0, 1;
  k << 1, 0, -1, 1;  // q_0 . (k_0 + k_1) = 0, q_1 . (k_0 + k_1) = 1
  v << 1, 2, 3, 4;
  const auto d = attention_details(q, k, v, kernels::Linear{});
  EXPECT_EQ(d.normalizer(0), T(0));
  EXPECT_TRUE(d.output.row(0).isZero(0));
  EXPECT_TRUE(d.weights.row(0).isZero(0));
  EXPECT_EQ(d.output.row(1), (RowVector<T>(2) << 3, 4).finished());  // weights (0, 1)
  EXPECT_EQ(attention(q, k, v, kernels::Linear{}), d.output);
}

TYPED_TEST(AttentionTest, EmptyShapes) {
  using T = TypeParam;
  const RowMatrix<T> q = random_matrix<T>(3, 4, 1);
  const RowMatrix<T> none(0, 4), v0(0, 2);
  const RowMatrix<T> y = attention(q, none, v0);
  EXPECT_EQ(y.rows(), 3);
  EXPECT_EQ(y.cols(), 2);
  EXPECT_TRUE(y.isZero(0));
  EXPECT_EQ(attention(none, q, random_matrix<T>(3, 2, 2)).rows(), 0);
}

// Head views: column blocks of a stacked row-major projection and Eigen maps
// go through without copies and give the same result as owning matrices.
TYPED_TEST(AttentionTest, BlocksAndMapsAreAccepted) {
  using T = TypeParam;
  const RowMatrix<T> qkv = random_matrix<T>(12, 3 * 8, 41);  // [Q | K | V]
  const auto q = qkv.middleCols(0, 8);
  const auto k = qkv.middleCols(8, 8);
  const auto v = qkv.middleCols(16, 8);
  const RowMatrix<T> want = attention(RowMatrix<T>(q), RowMatrix<T>(k), RowMatrix<T>(v));
  expect_close<T>(attention(q, k, v), want);
  // attention_into writes a head's block of a wider output in place.
  RowMatrix<T> out = RowMatrix<T>::Constant(12, 16, T(7));
  AttentionWorkspace<T> ws;
  attention_into<T>(q, k, v, out.middleCols(8, 8), ws);
  expect_close<T>(RowMatrix<T>(out.middleCols(8, 8)), want);
  EXPECT_TRUE((out.leftCols(8).array() == T(7)).all());  // neighbours untouched
  const Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>> qm(q.data(), 12, 8,
                                                                   Eigen::OuterStride<>(24));
  expect_close<T>(attention(qm, k, v), want);
  // A column-major input is accepted too (converted once).
  const Eigen::Matrix<T, -1, -1> qc = RowMatrix<T>(q);
  expect_close<T>(attention(qc, k, v), want);
}

TYPED_TEST(AttentionTest, WorkspaceReuseGivesSameResult) {
  using T = TypeParam;
  AttentionWorkspace<T> ws;
  for (unsigned rep = 0; rep < 3; ++rep) {
    const Index n = 50 + 70 * rep;
    const RowMatrix<T> q = random_matrix<T>(n, 8, 50 + rep);
    const RowMatrix<T> v = random_matrix<T>(n, 3, 60 + rep);
    RowMatrix<T> y(n, 3);
    attention_into<T>(q, q, v, y, ws, kernels::Softmax{}, CausalMask{});
    expect_close<T>(y, attention(q, q, v, kernels::Softmax{}, CausalMask{}));
  }
}

// Decode-shaped calls (<= 16 queries, same keys) over more than kSplitKeys
// keys are computed in key chunks and recombined: equal to the reference,
// also with large logits (the chunks' maxima differ) and a linear kernel.
TYPED_TEST(AttentionTest, FewQueriesOverManyKeysSplitAndRecombine) {
  using T = TypeParam;
  const Index n_kv = 2 * kSplitKeys + 1234;
  const RowMatrix<T> k = random_matrix<T>(n_kv, 8, 91, 4.0);
  const RowMatrix<T> v = random_matrix<T>(n_kv, 5, 92);
  const auto all = [](Index, Index) { return true; };
  for (Index m : {Index{1}, Index{16}}) {
    const RowMatrix<T> q = random_matrix<T>(m, 8, 93, 4.0);
    expect_close<T>(attention(q, k, v),
                    reference_attention<T>(q, k, v, 1 / std::sqrt(8.0), kExp, true, all), 10.0);
    expect_close<T>(attention(q, k, v, kernels::Softmax{.scale = 3.0}),
                    reference_attention<T>(q, k, v, 3.0, kExp, true, all), 100.0);
    const RowMatrix<T> kp = (k.array() + T(5)).matrix(), qp = (q.array() + T(5)).matrix();
    expect_close<T>(attention(qp, kp, v, kernels::Linear{}),
                    reference_attention<T>(
                        qp, kp, v, 1.0, [](long double x) { return x; }, false, all),
                    10.0);
    // Causal with the default offset: every query row sees all keys here
    // only if m == 1; with 16 rows the ranges differ and the blocked path runs.
    expect_close<T>(attention(q, k, v, kernels::Softmax{}, CausalMask{}),
                    reference_attention<T>(q, k, v, 1 / std::sqrt(8.0), kExp, true,
                                           [&](Index i, Index j) { return j <= n_kv - m + i; }),
                    10.0);
  }
}

TEST(AttentionErrors, ShapeMismatchesNameBothShapes) {
  const RowMatrix<float> q(4, 8), k(5, 7), v(5, 3), v_bad(6, 3), k_ok(5, 8);
  const auto expect_msg = [](const auto& call, const std::string& a, const std::string& b) {
    try {
      call();
      FAIL() << "no throw";
    } catch (const ShapeError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(a), std::string::npos) << msg;
      EXPECT_NE(msg.find(b), std::string::npos) << msg;
    }
  };
  expect_msg([&] { (void)attention(q, k, v); }, "Q is (4 x 8)", "K is (5 x 7)");
  expect_msg([&] { (void)attention(q, k_ok, v_bad); }, "K is (5 x 8)", "V is (6 x 3)");
  expect_msg([&] { (void)attention_details(q, k, v); }, "(4 x 8)", "(5 x 7)");
  RowMatrix<float> y_bad(4, 4);
  AttentionWorkspace<float> ws;
  expect_msg([&] { attention_into<float>(q, k_ok, v, y_bad, ws); }, "Y is (4 x 4)", "(4 x 3)");
  BooleanMask m;
  m.allowed.resize(4, 4);
  expect_msg([&] { (void)attention(q, k_ok, v, kernels::Softmax{}, m); }, "(4 x 4)", "(4 x 5)");
}

}  // namespace
}  // namespace kappa
