// Attention against golden data computed by PyTorch (float64), written by
// tests/reference/make_attention_golden.py into tests/data/attention/golden.txt.
#include <gtest/gtest.h>

#include "kappa/attention/attention.hpp"
#include "support/golden.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

class AttentionGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g = testing::read_golden(std::string(KAPPA_TEST_DATA_DIR) + "/attention/golden.txt");
  }
  static const RowMatrix<double>& m(const std::string& name) {
    const auto it = g.find(name);
    if (it == g.end()) throw std::runtime_error("golden matrix missing: " + name);
    return it->second;
  }
  template <class T>
  static void expect_close(const RowMatrix<T>& got, const std::string& name, double tol) {
    const RowMatrix<double> want = m(name);
    ASSERT_EQ(got.rows(), want.rows()) << name;
    ASSERT_EQ(got.cols(), want.cols()) << name;
    EXPECT_LE((got.template cast<double>() - want).cwiseAbs().maxCoeff(), tol) << name;
  }
  static inline std::map<std::string, RowMatrix<double>> g;
};

TEST_F(AttentionGolden, SoftmaxNoMask) {
  const auto d = attention_details(m("plain.q"), m("plain.k"), m("plain.v"));
  expect_close<double>(d.output, "plain.y", 1e-13);
  expect_close<double>(d.weights, "plain.w", 1e-14);
  const RowMatrix<float> y = attention(RowMatrix<float>(m("plain.q").cast<float>()),
                                       RowMatrix<float>(m("plain.k").cast<float>()),
                                       RowMatrix<float>(m("plain.v").cast<float>()));
  expect_close<float>(y, "plain.y", 2e-6);
}

TEST_F(AttentionGolden, CausalBottomRightAligned) {
  const auto d = attention_details(m("causal.q"), m("causal.k"), m("causal.v"), kernels::Softmax{},
                                   CausalMask{});
  expect_close<double>(d.output, "causal.y", 1e-13);
  expect_close<double>(d.weights, "causal.w", 1e-14);
}

TEST_F(AttentionGolden, SlidingWindow) {
  const auto d = attention_details(m("window.q"), m("window.k"), m("window.v"),
                                   kernels::Softmax{.scale = 0.7}, SlidingWindowMask{.window = 3});
  expect_close<double>(d.output, "window.y", 1e-13);
  expect_close<double>(d.weights, "window.w", 1e-14);
}

TEST_F(AttentionGolden, LinearKernel) {
  expect_close<double>(attention(m("linear.q"), m("linear.k"), m("linear.v"), kernels::Linear{}),
                       "linear.y", 1e-13);
}

TEST_F(AttentionGolden, LargeLogits) {
  ASSERT_GT(m("large.maxlogit")(0, 0), 1e4);
  const RowMatrix<double> y = attention(m("large.q"), m("large.k"), m("large.v"));
  ASSERT_TRUE(y.allFinite());
  expect_close<double>(y, "large.y", 1e-9);
}

}  // namespace
}  // namespace kappa
