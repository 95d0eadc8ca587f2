// Tests for kappa/attention/linear.hpp: the linear-time evaluation equals the
// quadratic one for a feature-map kernel, and so does the recurrent state.
#include <gtest/gtest.h>

#include "kappa/attention/linear.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using testing::max_scaled_error;
using testing::random_matrix;
using testing::Tolerance;

template <class T>
class LinearAttentionTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LinearAttentionTest, Scalars);

template <class T>
void expect_linear_close(const RowMatrix<T>& got, const RowMatrix<T>& want) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  EXPECT_LE(max_scaled_error(got, want, 20 * Tolerance<T>::kRel, 20 * Tolerance<T>::kAbs), 1.0);
}

TYPED_TEST(LinearAttentionTest, EqualsQuadraticWithoutMask) {
  using T = TypeParam;
  for (Index n_kv : {1, 7, 64, 200}) {
    const RowMatrix<T> q = random_matrix<T>(13, 8, 1), k = random_matrix<T>(n_kv, 8, 2);
    const RowMatrix<T> v = random_matrix<T>(n_kv, 5, 3);
    expect_linear_close<T>(linear_attention(q, k, v, kernels::EluPlusOne{}),
                           attention(q, k, v, kernels::EluPlusOne{}));
  }
}

TYPED_TEST(LinearAttentionTest, EqualsQuadraticCausalAnyOffset) {
  using T = TypeParam;
  // 300 keys; query counts that span several chunks of 64, fewer and more
  // queries than keys.
  const RowMatrix<T> k = random_matrix<T>(300, 6, 4), v = random_matrix<T>(300, 3, 5);
  for (Index n_q : {1, 10, 40, 130, 300, 355}) {
    const RowMatrix<T> q = random_matrix<T>(n_q, 6, 6);
    expect_linear_close<T>(linear_attention(q, k, v, kernels::EluPlusOne{}, CausalMask{}),
                           attention(q, k, v, kernels::EluPlusOne{}, CausalMask{}));
    expect_linear_close<T>(
        linear_attention(q, k, v, kernels::EluPlusOne{}, CausalMask{.offset = 3}),
        attention(q, k, v, kernels::EluPlusOne{}, CausalMask{.offset = 3}));
  }
}

// Decoding token by token through the constant-size state equals the causal
// forward pass over the whole sequence.
TYPED_TEST(LinearAttentionTest, RecurrentStateEqualsCausalForward) {
  using T = TypeParam;
  const Index n = 30;
  const RowMatrix<T> q = random_matrix<T>(n, 4, 7), k = random_matrix<T>(n, 4, 8);
  const RowMatrix<T> v = random_matrix<T>(n, 2, 9);
  const RowMatrix<T> full = attention(q, k, v, kernels::EluPlusOne{}, CausalMask{});
  LinearAttentionState<T, kernels::EluPlusOne> state;
  state.append(k.topRows(10), v.topRows(10));  // prefill 10 tokens
  RowMatrix<T> y(n, 2);
  y.topRows(10) = linear_attention(q.topRows(10), k.topRows(10), v.topRows(10),
                                   kernels::EluPlusOne{}, CausalMask{});
  for (Index t = 10; t < n; ++t) {
    state.append(k.row(t), v.row(t));
    y.row(t) = state.query(q.row(t));
  }
  EXPECT_EQ(state.length(), n);
  EXPECT_EQ(state.bytes(), sizeof(T) * 4 * (2 + 1));  // m (d_V + 1), m = d_QK = 4
  expect_linear_close<T>(y, full);
}

TEST(LinearAttentionErrors, ShapesAreChecked) {
  const RowMatrix<double> q(3, 4), k(5, 4), v(6, 2), v_ok(5, 2), k_bad(5, 3);
  EXPECT_THROW((void)linear_attention(q, k, v, kernels::EluPlusOne{}), ShapeError);
  LinearAttentionState<double, kernels::EluPlusOne> s;
  s.append(RowMatrix<double>::Zero(5, 4), v_ok);
  EXPECT_THROW(s.append(k_bad, v_ok), ShapeError);
  EXPECT_THROW((void)s.query(RowMatrix<double>::Zero(1, 3)), ShapeError);
}

}  // namespace
}  // namespace kappa
